"""Knowledge distillation of a masked LM (``DataInfo.task`` 'distill'; DistilBERT, Sanh et al.
2019, §2-3): a frozen teacher and its half-depth student on the same masked rows.

Chosen with ``config.data.objective='distill'`` (BERT's masked-LM batches,
``seqjax.data.distill_data``). ``config.model`` describes the **teacher** (BERT's layout
after ``--config.init_from=hf:<folder>``, or a seqjax masked-LM run's model); the model is
``seqjax.models.distill_pair.DistillPair``: parameters ``teacher/`` and ``student/``, the
student initialised from the teacher's blocks ``config.distill.student_layers`` (default one
in two). The teacher is loaded by ``config.init_from`` (a seqjax masked-LM workdir or a
Hugging Face ``BertForMaskedLM``/``BertForPreTraining`` folder) into ``teacher/`` whole (its
masked-LM head too: ``init_from_subtree``), then the student is copied from it again
(``after_init_from``); without ``init_from`` the teacher is the random initialisation (the
smoke). The teacher's parameters live in the train state but never change:
``config.optimizer.freeze`` must list ``teacher`` (``seqjax.train.optim``: their updates are
zero, no optimizer state), and the loss treats the teacher's outputs as constants.

Loss per batch: ``seqjax.tasks.distillation.distillation_loss`` (HF ``distiller.py``'s
formula) with ``config.distill`` ``temperature``, ``alpha_ce``, ``alpha_mlm``, ``alpha_cos``,
``restrict_ce_to_mask``; the attention mask is the real (non-pad) tokens. The step's loss is
exactly that value (``loss_sum`` = loss x masked positions, divided back by the loop); its
parts are logged as ``kl``, ``mlm``, ``cos``; accuracy is the student's on the masked positions.
With gradient accumulation each micro-batch's mean is weighted by its masked positions.

Legend: B batch, T input length, V vocabulary (+ [MASK]), E model width.
"""

from __future__ import annotations

import dataclasses

import jax.numpy as jnp

from seqjax.tasks import distillation, losses, registry
from seqjax.tasks.mlm import MaskedLanguageModel

FIELDS = {"temperature": 2.0, "alpha_ce": 5.0, "alpha_mlm": 2.0, "alpha_cos": 1.0,
          "restrict_ce_to_mask": False, "student_layers": ()}  # fmt: skip


def default_config():
    """``config.distill``: DistilBERT's released command (T = 2, α_ce 5, α_mlm 2, α_cos 1)."""
    import ml_collections

    return ml_collections.ConfigDict(dict(FIELDS))


@dataclasses.dataclass
class Options:
    temperature: float = 2.0
    alpha_ce: float = 5.0
    alpha_mlm: float = 2.0
    alpha_cos: float = 1.0
    restrict_ce_to_mask: bool = False
    student_layers: tuple[int, ...] = ()


class Distillation(MaskedLanguageModel):
    name = "distill"
    objective = "distill"
    sum_keys = ("loss_sum", "correct_sum", "weight_sum", "kl_sum", "mlm_sum", "cos_sum")
    init_from_subtree = "teacher"  # config.init_from loads the whole teacher there

    def __init__(self, options: Options | None = None):
        self.options = options or Options()

    def configure(self, config):
        """This task with ``config.distill`` (defaults: ``FIELDS``)."""
        block = config.get("distill") or {}
        values = {k: block.get(k, v) for k, v in FIELDS.items()}
        values["student_layers"] = tuple(int(i) for i in values["student_layers"] or ())
        return Distillation(Options(**values))

    def validate(self, config, bad) -> None:
        """The masked LM's checks, ``config.distill``'s values and the frozen teacher."""
        super().validate(config, bad)
        block = config.get("distill") or {}
        unknown = sorted(set(block) - set(FIELDS))
        if unknown:
            bad(f"distill.{unknown[0]}", block[unknown[0]], f"one of {', '.join(FIELDS)}")
        t = block.get("temperature", 2.0)
        if not isinstance(t, (int, float)) or isinstance(t, bool) or t <= 0:
            bad("distill.temperature", t, "a number > 0 (DistilBERT: 2)")
        for field in ("alpha_ce", "alpha_mlm", "alpha_cos"):
            a = block.get(field, FIELDS[field])
            if not isinstance(a, (int, float)) or isinstance(a, bool) or a < 0:
                bad(f"distill.{field}", a, "a number >= 0")
        layers = tuple(block.get("student_layers", ()) or ())
        n = int(config.model.get("num_layers", 0) or 0)
        if any(not isinstance(i, int) or not 0 <= i < n for i in layers):
            bad("distill.student_layers", layers, f"teacher layer indices in [0, {n}) "
                "(empty: one in two, DistilBERT's 0, 2, 4, ...)")  # fmt: skip
        if "teacher" not in tuple(config.optimizer.get("freeze", ()) or ()):
            bad("optimizer.freeze", config.optimizer.get("freeze"),
                "a list including 'teacher' (the teacher receives no updates)")  # fmt: skip
        if config.model.get("mlm_head_transform", True) is not True:
            bad("model.mlm_head_transform", config.model.get("mlm_head_transform"),
                "True (teacher and student have BERT's masked-LM head)")  # fmt: skip

    def needs(self, config, info):
        """The masked LM's bidirectional encoder (the teacher's config)."""
        from seqjax.models.registry import Needs

        return Needs("mlm", causal=False, masked_lm=True)

    def make_model(self, model_cfg, *, decode: bool = False):
        from seqjax.models.distill_pair import DistillPair

        if decode:
            raise ValueError("the distillation pair has no decoding mode")
        return DistillPair(model_cfg, layers=self.options.student_layers)

    def after_init_from(self, model, params):
        """``params`` with the student copied again from the loaded teacher."""
        from seqjax.models import distill_pair

        return distill_pair.copy_student(params, model.cfg, model.student_layers)

    def apply(self, model, params, batch, *, rng, train: bool, memory=None):
        """The pair's outputs (``DistillPair``); padding (id ``pad_id``) hidden as keys."""
        del memory
        rngs = {"dropout": rng} if train else {}
        tokens_BT = batch["inputs"]
        pad = model.cfg.pad_id
        mask_BT = None if pad is None else tokens_BT != pad
        out = model.apply({"params": params}, tokens_BT, mask_BT=mask_BT, rngs=rngs,
                          deterministic=not train)  # fmt: skip
        out["mask_BT"] = jnp.ones(tokens_BT.shape, bool) if mask_BT is None else mask_BT
        return out, None

    def sums(self, outputs, batch) -> dict:
        """``distillation_loss`` times the masked positions (so the loop's division gives the
        loss itself), its parts likewise, and the student's masked-LM accuracy."""
        o = self.options
        w_BT = batch["weights"].astype(jnp.float32)
        loss, parts = distillation.distillation_loss(
            outputs["s_logits"], outputs["t_logits"], labels_BT=batch["targets"],
            label_weights_BT=w_BT, attention_mask_BT=outputs["mask_BT"],
            s_hidden_BTE=outputs["s_hidden"], t_hidden_BTE=outputs["t_hidden"],
            temperature=o.temperature, alpha_ce=o.alpha_ce, alpha_mlm=o.alpha_mlm,
            alpha_cos=o.alpha_cos, restrict_ce_to_mask=o.restrict_ce_to_mask,
        )  # fmt: skip
        plain = losses.cross_entropy_sums(outputs["s_logits"], batch["targets"], w_BT)
        n = w_BT.sum()
        zero = jnp.zeros((), jnp.float32)
        return {
            "loss_sum": loss * n,
            "correct_sum": plain["correct_sum"],
            "weight_sum": n,
            "kl_sum": parts["ce"] * n,
            "mlm_sum": parts.get("mlm", zero) * n,
            "cos_sum": parts.get("cos", zero) * n,
        }

    def train_metrics(self, sums, total_weight) -> dict:
        out = super().train_metrics(sums, total_weight)
        for part in ("kl", "mlm", "cos"):
            out[part] = sums[f"{part}_sum"] / total_weight
        return out

    def eval_summary(self, sums, config) -> dict:
        """Distillation loss and its parts, the student's masked-LM accuracy and perplexity
        ``exp(mlm)`` (its own masked-LM cross-entropy)."""
        import math

        w = max(float(sums["weight_sum"]), 1.0)
        out = {k[: -len("_sum")]: float(sums[k]) / w for k in ("loss_sum", "kl_sum", "mlm_sum",
                                                               "cos_sum")}  # fmt: skip
        out["accuracy"] = float(sums["correct_sum"]) / w
        out["perplexity"] = math.exp(min(out["mlm"], 700.0))
        out["count"] = float(w)
        return out

    def describe_data(self, config, info) -> str:
        o = self.options
        return (super().describe_data(config, info) + f"; distillation T={o.temperature}, "
                f"alpha ce/mlm/cos {o.alpha_ce}/{o.alpha_mlm}/{o.alpha_cos}")  # fmt: skip


TASK = registry.register(Distillation())
