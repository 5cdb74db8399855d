"""Masked LM plus a sentence-pair head (``DataInfo.task`` 'mlm_pair'): ALBERT's pre-training
loss (Lan et al. 2020, §4.1: masked LM with n-gram masking + sentence-order prediction),
chosen by ``config.data.objective='sop'`` (``seqjax.data.sop``); the model family is
``albert`` (``AlbertLM(outputs='pretraining')``: MLM logits and the pair head's logits).

Batches: ``inputs`` / ``targets`` / ``weights`` ``[B, T]`` as the mlm task's (1 at the masked
positions), ``token_types [B, T]`` (segment A 0, B 1), ``pair_labels [B]`` (1 = swapped)
and ``pair_weights [B]`` (0 for rows that pad the last evaluation batch). The loss is
``mean MLM cross-entropy + mean pair cross-entropy``, as the reference's ``total_loss =
masked_lm_loss + sentence_order_loss`` (``run_pretraining.py``): the sums carry the pair
term scaled by the batch's masked-token count so that ``loss_sum / weight_sum`` is that
total for a batch (with several micro-batches: their masked-token-weighted mean).

Legend: B batch, T ``data.seq_len``, V vocabulary.
"""

from __future__ import annotations

import math

import jax.numpy as jnp

from seqjax.tasks import losses, registry
from seqjax.tasks.mlm import MaskedLanguageModel

SUM_KEYS = ("loss_sum", "correct_sum", "weight_sum", "mlm_loss_sum", "pair_loss_sum",
            "pair_correct_sum", "pair_weight_sum")  # fmt: skip


class MaskedLMWithPair(MaskedLanguageModel):
    name = "mlm_pair"
    objective = "sop"
    family = "albert"
    sum_keys = SUM_KEYS
    batch_fields = {
        **MaskedLanguageModel.batch_fields,
        "token_types": ("int32", 2),
        "pair_labels": ("int32", 1),
        "pair_weights": ("float32", 1),
    }

    def configure(self, config):
        return self

    def describe_data(self, config, info) -> str:
        d = config.data
        return (f"{d.name}, sentence-order pairs with n-gram masking (n <= {d.sop_ngram}, "
                f"p {d.mlm_probability}) in rows of {d.seq_len} tokens, "
                f"batch {d.batch_size}")  # fmt: skip

    def needs(self, config, info):
        from seqjax.models.registry import Needs

        return Needs(self.name, causal=False, masked_lm=True)

    def apply(self, model, params, batch, *, rng, train: bool, memory=None):
        """``((MLM logits [B, T, V], pair logits [B, 2]), None)``; padding hidden as keys."""
        del memory
        rngs = {"dropout": rng} if train else {}
        tokens_BT = batch["inputs"]
        out = model.apply(
            {"params": params}, tokens_BT, mask_BT=tokens_BT != 0,
            token_types_BT=batch["token_types"], outputs="pretraining", rngs=rngs,
            deterministic=not train,
        )  # fmt: skip
        return out, None

    def sums(self, outputs, batch) -> dict:
        logits_BTV, pair_BC = outputs
        mlm = losses.cross_entropy_sums(logits_BTV, batch["targets"], batch["weights"])
        pair = losses.cross_entropy_sums(pair_BC, batch["pair_labels"], batch["pair_weights"])
        pair_mean = pair["loss_sum"] / jnp.maximum(pair["weight_sum"], 1.0)
        return {
            "loss_sum": mlm["loss_sum"] + pair_mean * mlm["weight_sum"],
            "correct_sum": mlm["correct_sum"],
            "weight_sum": mlm["weight_sum"],
            "mlm_loss_sum": mlm["loss_sum"],
            "pair_loss_sum": pair["loss_sum"],
            "pair_correct_sum": pair["correct_sum"],
            "pair_weight_sum": pair["weight_sum"],
        }

    def train_metrics(self, sums, total_weight) -> dict:
        """``loss`` (MLM + pair), ``mlm_loss``, ``accuracy`` (masked tokens), ``sop_loss``
        and ``sop_accuracy``."""
        pw = jnp.maximum(sums["pair_weight_sum"], 1.0)
        return {**super().train_metrics(sums, total_weight),
                "mlm_loss": sums["mlm_loss_sum"] / total_weight,
                "sop_loss": sums["pair_loss_sum"] / pw,
                "sop_accuracy": sums["pair_correct_sum"] / pw}  # fmt: skip

    def eval_summary(self, sums, config) -> dict:
        """MLM loss, perplexity and accuracy over the masked tokens, SOP loss and accuracy
        over the pairs, and their total ``loss``."""
        w = max(float(sums["weight_sum"]), 1.0)
        pw = max(float(sums["pair_weight_sum"]), 1.0)
        mlm, sop = float(sums["mlm_loss_sum"]) / w, float(sums["pair_loss_sum"]) / pw
        return {"loss": mlm + sop, "mlm_loss": mlm, "perplexity": math.exp(min(mlm, 700.0)),
                "accuracy": float(sums["correct_sum"]) / w, "sop_loss": sop,
                "sop_accuracy": float(sums["pair_correct_sum"]) / pw, "count": w}  # fmt: skip


TASK = registry.register(MaskedLMWithPair())
