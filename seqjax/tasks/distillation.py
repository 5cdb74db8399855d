"""Knowledge distillation of a masked LM (DistilBERT, Sanh et al. 2019, §2-3): the student's
loss and its initialisation from the teacher.

Legend: B batch, T sequence length, V vocabulary, E model width.

The loss (Sanh et al. 2019 §2 "Training loss"; Hinton et al. 2015 eq. 2's T² scaling), as
Hugging Face's ``examples/research_projects/distillation/distiller.py`` computes it::

    L = α_ce · T² · KL(softmax(t/T) ‖ softmax(s/T))      averaged over the selected positions
      + α_mlm · CE(s, labels)                            averaged over the masked positions
      + α_cos · (1 − cos(h_s, h_t))                      averaged over the real positions

with the KL term over the real (attention-mask) positions, or only the masked ones with
``restrict_ce_to_mask``; ``h`` the last hidden states. DistilBERT used α_ce = 5, α_mlm = 2,
α_cos = 1, T = 2 (the released training command).

The student (§3): the teacher's architecture with every other layer removed, initialised
from the teacher by taking one layer in two (``student_from_teacher``).
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np

from seqjax.models.distill_pair import alternate_layers


def distillation_loss(
    s_logits_BTV,
    t_logits_BTV,
    *,
    labels_BT,
    label_weights_BT,
    attention_mask_BT,
    s_hidden_BTE=None,
    t_hidden_BTE=None,
    temperature: float = 2.0,
    alpha_ce: float = 5.0,
    alpha_mlm: float = 2.0,
    alpha_cos: float = 1.0,
    restrict_ce_to_mask: bool = False,
) -> tuple[jax.Array, dict]:
    """The distillation loss (module docstring) and its parts ``{"ce", "mlm", "cos"}``.

    ``label_weights_BT``: 1 at the masked-LM positions (``labels_BT`` there), 0 elsewhere;
    ``attention_mask_BT``: 1 at real tokens. The teacher's logits and hidden states are
    treated as constants (``stop_gradient``).
    """
    if temperature <= 0:
        raise ValueError(f"temperature={temperature} must be > 0")
    t_logits_BTV = jax.lax.stop_gradient(t_logits_BTV).astype(jnp.float32)
    s_logits_BTV = s_logits_BTV.astype(jnp.float32)
    sel_BT = (label_weights_BT if restrict_ce_to_mask else attention_mask_BT).astype(jnp.float32)
    log_p_s = jax.nn.log_softmax(s_logits_BTV / temperature, axis=-1)
    log_p_t = jax.nn.log_softmax(t_logits_BTV / temperature, axis=-1)
    kl_BT = jnp.sum(jnp.exp(log_p_t) * (log_p_t - log_p_s), axis=-1)
    ce = jnp.sum(kl_BT * sel_BT) / jnp.maximum(sel_BT.sum(), 1.0) * temperature**2
    parts = {"ce": ce}
    loss = alpha_ce * ce
    if alpha_mlm > 0.0:
        w_BT = label_weights_BT.astype(jnp.float32)
        log_q = jax.nn.log_softmax(s_logits_BTV, axis=-1)
        nll_BT = -jnp.take_along_axis(log_q, labels_BT[..., None], axis=-1)[..., 0]
        parts["mlm"] = jnp.sum(nll_BT * w_BT) / jnp.maximum(w_BT.sum(), 1.0)
        loss = loss + alpha_mlm * parts["mlm"]
    if alpha_cos > 0.0:
        if s_hidden_BTE is None or t_hidden_BTE is None:
            raise ValueError("alpha_cos > 0 needs s_hidden_BTE and t_hidden_BTE")
        s_h = s_hidden_BTE.astype(jnp.float32)
        t_h = jax.lax.stop_gradient(t_hidden_BTE).astype(jnp.float32)
        eps = 1e-12  # torch's cosine_embedding_loss
        cos_BT = jnp.sum(s_h * t_h, -1) / jnp.sqrt(
            (jnp.sum(s_h * s_h, -1) + eps) * (jnp.sum(t_h * t_h, -1) + eps)
        )
        m_BT = attention_mask_BT.astype(jnp.float32)
        parts["cos"] = jnp.sum((1.0 - cos_BT) * m_BT) / jnp.maximum(m_BT.sum(), 1.0)
        loss = loss + alpha_cos * parts["cos"]
    return loss, parts


def student_from_teacher(teacher_cfg, teacher_params: dict, layers=None, *, fold_token_type=False):
    """A ``TransformerLM`` student's config and parameters from a teacher's: blocks
    ``layers`` (default ``alternate_layers``) become the student's blocks 0, 1, ...; the
    embeddings, final norm and heads are copied. ``fold_token_type``: drop the segment table
    by adding its row 0 to the position table (exact for inputs of segment 0: DistilBERT
    has no token types), as DistilBERT's student has none.
    """
    layers = alternate_layers(teacher_cfg.num_layers) if layers is None else tuple(layers)
    bad = [i for i in layers if not 0 <= i < teacher_cfg.num_layers]
    if not layers or bad:
        raise ValueError(
            f"layers={layers} must name teacher layers in [0, {teacher_cfg.num_layers})"
        )
    cfg = dataclasses.replace(teacher_cfg, num_layers=len(layers))
    enc = {k: v for k, v in teacher_params["encoder"].items() if not k.startswith("block_")}
    enc.update(
        {f"block_{j}": teacher_params["encoder"][f"block_{i}"] for j, i in enumerate(layers)}
    )
    if fold_token_type and teacher_cfg.type_vocab_size:
        types = np.asarray(enc.pop("type_embed"))
        enc["pos_embed"] = np.asarray(enc["pos_embed"]) + types[0][None, :]
        cfg = dataclasses.replace(cfg, type_vocab_size=0)
    params = {**{k: v for k, v in teacher_params.items() if k != "encoder"}, "encoder": enc}
    params.pop("pair_head", None)  # DistilBERT has no pooler / next-sentence head
    if "pair_head" in teacher_params:
        cfg = dataclasses.replace(cfg, pair_head=False)
    return cfg, params
