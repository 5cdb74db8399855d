"""GPT-1's supervised fine-tuning (Radford et al. 2018, §3.2-3.3; ``DataInfo.task``
'gpt1_finetune', chosen with ``config.data.objective='gpt1_finetune'``,
``seqjax.data.gpt1_data``):

* the **input transforms** (§3.3, Fig. 1): classification ``[start] text [extract]``;
  entailment ``[start] premise [delim] hypothesis [extract]`` (the paper's ``$`` delimiter),
  from a pair data set's ``inputs``/``inputs2``. start, delim, extract are the ids V, V + 1,
  V + 2 past the data's vocabulary V (right-padded texts, pad id 0, are packed together on
  the device: ``transform``);
* the **causal classifier that pools the last token** (eq. 3): ``seqjax.models.gpt1.
  CausalClassifier``, a linear ``W_y`` on the decoder's hidden state at the extract token
  (Hugging Face ``OpenAIGPTForSequenceClassification``'s ``score`` on the last non-pad token);
* the **auxiliary LM loss** (eq. 5): ``L3 = L2 + λ L1`` with λ = ``config.gpt1.lm_weight``
  (0.5, §4.1), ``L1`` the mean next-token cross-entropy over the real tokens of the transformed
  rows (Hugging Face ``OpenAIGPTLMHeadModel(labels=...)`` with ``-100`` on padding), ``L2``
  the mean class cross-entropy: ``seqjax.models.gpt1.finetune_loss``'s formula with one
  sequence per example. The logged ``clf`` and ``lm`` are ``L2`` and ``L1``.

Legend: B batch, L = ``data.max_len`` tokens a text, T input length (L + 2, or 2 L + 3 for
pairs), V vocabulary, K classes.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import optax

from seqjax.models.gpt1 import AUX_LM_WEIGHT
from seqjax.tasks import pair_classification, registry
from seqjax.tasks.classification import Classification

PAD = 0


def default_config():
    """``config.gpt1``: λ of the auxiliary LM loss (§4.1: 0.5)."""
    import ml_collections

    return ml_collections.ConfigDict({"lm_weight": AUX_LM_WEIGHT})


def transform(a_BL, b_BL=None, *, vocab_size: int):
    """``(tokens [B, T], last [B])``: ``[start] a [extract]`` or ``[start] a [delim] b
    [extract]`` (module docstring) and the extract token's position."""
    start, delim, extract = vocab_size, vocab_size + 1, vocab_size + 2
    la_B = (a_BL != PAD).sum(1)
    if b_BL is not None:
        tokens_BT, _ = pair_classification.join_pair(a_BL, b_BL, cls=start, sep=delim, pad=PAD)
        last_B = la_B + (b_BL != PAD).sum(1) + 2
    else:
        b, length = a_BL.shape
        i_1T = jnp.arange(length + 2)[None, :]
        from_a = jnp.take_along_axis(a_BL, jnp.clip(i_1T - 1, 0, length - 1).repeat(b, 0), 1)
        tokens_BT = jnp.where((i_1T >= 1) & (i_1T <= la_B[:, None]), from_a, PAD)
        tokens_BT = jnp.where(i_1T == 0, start, tokens_BT)
        last_B = la_B + 1
    t = tokens_BT.shape[1]
    tokens_BT = jnp.where(jnp.arange(t)[None, :] == last_B[:, None], extract, tokens_BT)
    return tokens_BT.astype(jnp.int32), last_B.astype(jnp.int32)


class GPT1Finetune(Classification):
    name = "gpt1_finetune"
    causal = True
    sum_keys = ("loss_sum", "correct_sum", "weight_sum", "clf_sum", "lm_sum")
    pairs = False
    lm_weight = AUX_LM_WEIGHT

    def configure(self, config):
        """The pair form on a pair data set; λ from ``config.gpt1.lm_weight``."""
        from seqjax.data import registry as data_registry

        task = GPT1FinetunePairs() if data_registry.get(config.data.name).kind == "pairs" else (
            GPT1Finetune())  # fmt: skip
        task.lm_weight = float((config.get("gpt1") or {}).get("lm_weight", AUX_LM_WEIGHT))
        return task

    def validate(self, config, bad) -> None:
        lam = (config.get("gpt1") or {}).get("lm_weight", AUX_LM_WEIGHT)
        if not isinstance(lam, (int, float)) or isinstance(lam, bool) or lam < 0:
            bad("gpt1.lm_weight", lam, "a number >= 0 (GPT-1: 0.5; 0 = no auxiliary LM loss)")
        if config.data.get("packing"):
            bad("data.packing", True, "False with data.objective='gpt1_finetune'")

    def input_length(self, config) -> int:
        from seqjax.data import api as data_api

        n = data_api.max_len(config.data)
        return 2 * n + 3 if self.pairs else n + 2

    def needs(self, config, info):
        """A causal decoder with ``info.num_classes`` outputs."""
        from seqjax.models.registry import Needs

        return Needs(self.name, causal=True, num_classes=int(info.num_classes))

    def model_config(self, config, info):
        """The data's config with the start, delimiter and extract tokens appended."""
        cfg = super().model_config(config, info)
        return dataclasses.replace(cfg, vocab_size=int(info.vocab_size) + 3)

    def init_shapes(self, config, info) -> tuple:
        return ((1, self.input_length(config)), (1,))

    def apply(self, model, params, batch, *, rng, train: bool, memory=None):
        """``((LM logits, class logits, tokens), None)`` of the transformed rows."""
        del memory
        tokens_BT, last_B = transform(batch["inputs"], batch.get("inputs2"),
                                      vocab_size=model.cfg.vocab_size - 3)  # fmt: skip
        rngs = {"dropout": rng} if train else {}
        lm_BTV, logits_BK = model.apply({"params": params}, tokens_BT, last_B,
                                        mask_BT=tokens_BT != PAD, rngs=rngs,
                                        deterministic=not train)  # fmt: skip
        return (lm_BTV, logits_BK, tokens_BT), None

    def sums(self, outputs, batch) -> dict:
        """``L2 + λ L1`` times the examples (the loop divides back); ``clf``/``lm`` parts."""
        lm_BTV, logits_BK, tokens_BT = outputs
        w_B = batch["weights"].astype(jnp.float32)
        ce_B = optax.softmax_cross_entropy_with_integer_labels(logits_BK, batch["targets"])
        log_p = jax.nn.log_softmax(lm_BTV[:, :-1], axis=-1)
        nll_BT = -jnp.take_along_axis(log_p, tokens_BT[:, 1:, None], axis=-1)[..., 0]
        w_BT = (tokens_BT[:, 1:] != PAD) * w_B[:, None]
        lm = jnp.sum(nll_BT * w_BT) / jnp.maximum(w_BT.sum(), 1.0)
        n = w_B.sum()
        clf_sum = jnp.sum(ce_B * w_B)
        correct = (jnp.argmax(logits_BK, -1) == batch["targets"]).astype(jnp.float32)
        return {"loss_sum": clf_sum + self.lm_weight * lm * n,
                "correct_sum": jnp.sum(correct * w_B), "weight_sum": n,
                "clf_sum": clf_sum, "lm_sum": lm * n}  # fmt: skip

    def train_metrics(self, sums, total_weight) -> dict:
        out = super().train_metrics(sums, total_weight)
        out["clf"] = sums["clf_sum"] / total_weight
        out["lm"] = sums["lm_sum"] / total_weight
        return out

    def eval_summary(self, sums, config) -> dict:
        out = super().eval_summary(sums, config)
        w = max(float(sums["weight_sum"]), 1.0)
        out["clf"], out["lm"] = float(sums["clf_sum"]) / w, float(sums["lm_sum"]) / w
        return out

    def flops_per_step(self, run) -> float:
        from seqjax.models import flops

        return flops.train_flops_per_step(
            run.model_cfg, run.abstract["params"], batch_size=run.config.data.batch_size,
            seq_len=self.input_length(run.config), tied_output=True,
        )  # fmt: skip


class GPT1FinetunePairs(GPT1Finetune):
    """Entailment: ``[start] premise [delim] hypothesis [extract]`` of a pair data set."""

    pairs = True
    batch_fields = {**pair_classification.PairClassification.batch_fields}


TASK = registry.register(GPT1Finetune())
