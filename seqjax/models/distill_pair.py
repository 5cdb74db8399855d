"""The teacher-student pair that distillation trains (DistilBERT, Sanh et al. 2019, §2-3).

Legend: B batch, T sequence length, V vocabulary, E model width.

``DistillPair(cfg, layers)`` holds two masked LMs side by side: ``teacher`` (config ``cfg``,
BERT's layout) and ``student`` (``student_config``: the teacher with only the blocks
``layers``, by default one in two, no pooler/next-sentence head and, where the teacher has
learned positions and segment ids, no segment table: DistilBERT "removed the token-type
embeddings and the pooler", §3). Each half is ``MaskedLM``, whose parameters have the paths of
``TransformerLM``'s masked LM (``encoder/...``, ``mlm_head/...``), so a masked-LM checkpoint
loads into ``teacher/`` as it is. The teacher always runs deterministically (no dropout).

The student starts from the teacher (§3 "we initialize the student from the teacher by
taking one layer out of two"): ``init`` copies the teacher's embeddings, heads and blocks
``layers`` into the student (``copy_student``), so even a randomly initialised pair starts
that way; a loaded teacher is copied again by the distillation task after loading.
"""

from __future__ import annotations

import dataclasses

import flax.linen as nn
import jax
import jax.numpy as jnp
from flax.core import meta

from seqjax.models.heads import MLMHead
from seqjax.models.transformer import Encoder, TransformerConfig


def alternate_layers(num_layers: int) -> tuple[int, ...]:
    """One layer in two, from the first: 0, 2, 4, ... (Sanh et al. 2019 §3)."""
    return tuple(range(0, num_layers, 2))


def folds_token_types(cfg: TransformerConfig) -> bool:
    """Whether the student drops the teacher's segment table (added to its learned positions:
    exact for inputs that are all segment 0, as masked-LM rows are)."""
    return bool(cfg.type_vocab_size) and cfg.positional == "learned"


def student_config(cfg: TransformerConfig, layers) -> TransformerConfig:
    """The student's config: the teacher's with ``len(layers)`` blocks, no pair head and
    (``folds_token_types``) no segment table."""
    bad = [i for i in layers if not 0 <= i < cfg.num_layers]
    if not layers or bad:
        raise ValueError(
            f"config.distill.student_layers={tuple(layers)} must name teacher layers in "
            f"[0, {cfg.num_layers}) (model.num_layers={cfg.num_layers}); default: one in two"
        )
    types = 0 if folds_token_types(cfg) else cfg.type_vocab_size
    return dataclasses.replace(cfg, num_layers=len(layers), pair_head=False,
                               type_vocab_size=types)  # fmt: skip


def copy_student(params, teacher_cfg: TransformerConfig, layers):
    """``params`` (``{"teacher", "student"}``, plain or logically boxed) with the student's
    parameters taken from the teacher's: blocks ``layers`` -> student blocks 0, 1, ...; the
    embeddings, final norm and masked-LM head copied; a folded segment table's row 0 added to
    the position table. The arrays are copies (no buffer appears twice in a donated state)."""
    teacher, student = params["teacher"], params["student"]
    t_enc = teacher["encoder"]
    enc = {k: v for k, v in t_enc.items() if not k.startswith("block_") and k != "type_embed"}
    enc.update({f"block_{j}": t_enc[f"block_{i}"] for j, i in enumerate(layers)})
    if folds_token_types(teacher_cfg):
        types = t_enc["type_embed"]
        types_2E = types.unbox() if isinstance(types, meta.AxisMetadata) else types
        enc["pos_embed"] = jax.tree.map(lambda p: p + types_2E[0][None, :], t_enc["pos_embed"])
    elif "type_embed" in t_enc:
        enc["type_embed"] = t_enc["type_embed"]
    new = {**{k: v for k, v in teacher.items() if k not in ("encoder", "pair_head")},
           "encoder": enc}  # fmt: skip

    def layout(tree):
        return jax.tree.structure(tree), [jnp.shape(x) for x in jax.tree.leaves(tree)]

    if layout(new) != layout(student):
        raise ValueError("the student's parameters do not match the teacher's selected layers")
    return {**params, "student": jax.tree.map(jnp.copy, new)}


class MaskedLM(nn.Module):
    """``TransformerLM``'s masked LM with BERT's head, also returning the last hidden states:
    tokens ``[B, T]`` -> ``(float32 logits [B, T, V], hidden [B, T, E])``."""

    cfg: TransformerConfig

    @nn.compact
    def __call__(self, tokens_BT, *, mask_BT=None, deterministic=True):
        x_BTE, embed = Encoder(self.cfg, causal=False, name="encoder")(
            tokens_BT, mask_BS=mask_BT, deterministic=deterministic
        )
        return MLMHead(self.cfg, name="mlm_head")(x_BTE, embed), x_BTE


class DistillPair(nn.Module):
    """The teacher (``cfg``) and the student (``student_config(cfg, layers)``) on the same
    tokens: ``{"t_logits", "t_hidden", "s_logits", "s_hidden"}`` (module docstring)."""

    cfg: TransformerConfig
    layers: tuple[int, ...] = ()

    @property
    def student_layers(self) -> tuple[int, ...]:
        return tuple(self.layers) or alternate_layers(self.cfg.num_layers)

    @nn.compact
    def __call__(self, tokens_BT, *, mask_BT=None, deterministic=True):
        teacher_cfg = dataclasses.replace(self.cfg, pair_head=False)
        t_logits, t_hidden = MaskedLM(teacher_cfg, name="teacher")(
            tokens_BT, mask_BT=mask_BT, deterministic=True
        )
        s_cfg = student_config(self.cfg, self.student_layers)
        s_logits, s_hidden = MaskedLM(s_cfg, name="student")(
            tokens_BT, mask_BT=mask_BT, deterministic=deterministic
        )
        return {"t_logits": t_logits, "t_hidden": t_hidden, "s_logits": s_logits,
                "s_hidden": s_hidden}  # fmt: skip

    @nn.nowrap
    def init(self, rngs, *args, **kwargs):
        """Flax's ``init``, then the student copied from the teacher (``copy_student``)."""
        variables = super().init(rngs, *args, **kwargs)
        params = copy_student(variables["params"], self.cfg, self.student_layers)
        return {**variables, "params": params}
