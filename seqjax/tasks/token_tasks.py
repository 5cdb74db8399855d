"""BERT's per-token fine-tuning tasks (Devlin et al. 2019, §4.2 and Fig. 4 (c), (d)) on
``seqjax.models.token_heads.TokenHeadEncoder`` (a bidirectional encoder and one linear layer
per token; Hugging Face ``BertForQuestionAnswering`` / ``BertForTokenClassification`` import
into it, ``seqjax.convert.bert_heads``):

* ``qa`` (extractive question answering): batches ``inputs``/``token_types`` int32 ``[B, T]``
  (``[CLS] question [SEP] context [SEP]``, segment ids 0 then 1), ``start``/``end`` int32
  ``[B]`` (the answer's first and last input positions), ``weights`` float32 ``[B]``. The head
  gives a start and an end logit per token; the loss is ``(CE(start) + CE(end)) / 2`` over the
  tokens, averaged over the examples, as ``BertForQuestionAnswering``'s
  (``total_loss = (start_loss + end_loss) / 2``); padding is hidden as keys (not as answer
  candidates, as in Hugging Face). Accuracy is exact match: both argmaxes right.
* ``tagging`` (token classification): ``inputs``, ``targets`` int32 and ``weights`` float32
  ``[B, T]``; weight 0 where Hugging Face's label is ``-100`` (padding, a word's continuation
  tokens); the loss is the mean cross-entropy over the labelled tokens, as
  ``BertForTokenClassification``'s.

The data: ``seqjax.data.finetune_data`` (``data.objective='span_qa'`` / ``'word_tags'``).

Legend: B batch, T input length, C tags.
"""

from __future__ import annotations

import jax.numpy as jnp
import optax

from seqjax.tasks import base, losses, registry


class _TokenHead(base.Task):
    causal = False

    def needs(self, config, info):
        """A bidirectional encoder with ``info.num_classes`` outputs a token."""
        from seqjax.models.registry import Needs

        return Needs(self.name, causal=False, num_classes=int(info.num_classes))

    def validate(self, config, bad) -> None:
        """An encoder (not a recurrent kind)."""
        from seqjax.models import memory

        kind = memory.kind(config)
        if memory.kinds().get(kind) is not None:
            bad("model.kind", kind, f"'transformer' for the {self.name!r} task (a bidirectional "
                "encoder)")  # fmt: skip

    def _logits(self, model, params, batch, *, rng, train: bool):
        rngs = {"dropout": rng} if train else {}
        tokens_BT = batch["inputs"]
        pad = model.cfg.pad_id
        return model.apply(
            {"params": params}, tokens_BT, mask_BT=None if pad is None else tokens_BT != pad,
            token_types_BT=batch.get("token_types"), rngs=rngs, deterministic=not train,
        )  # fmt: skip


class QuestionAnswering(_TokenHead):
    name = "qa"
    batch_fields = {
        "inputs": ("int32", 2),
        "token_types": ("int32", 2),
        "start": ("int32", 1),
        "end": ("int32", 1),
        "weights": ("float32", 1),
    }
    unit = "ex"

    def input_length(self, config) -> int:
        from seqjax.data import finetune_data

        return finetune_data.qa_length(config.data)

    def validate(self, config, bad) -> None:
        super().validate(config, bad)
        types = (config.model.get("layout") or {}).get("type_vocab_size", 0)
        if not types or types < 2:
            bad("model.layout.type_vocab_size", types, ">= 2 (the question and context "
                "segments; BERT: 2)")  # fmt: skip

    def apply(self, model, params, batch, *, rng, train: bool, memory=None):
        """Start and end logits ``[B, T, 2]``."""
        del memory
        return self._logits(model, params, batch, rng=rng, train=train), None

    def sums(self, outputs, batch) -> dict:
        """``(CE(start) + CE(end)) / 2`` per example, weighted; exact-match accuracy."""
        from seqjax.models.token_heads import start_end

        s_BT, e_BT = start_end(outputs.astype(jnp.float32))
        w_B = batch["weights"].astype(jnp.float32)
        ce_s = optax.softmax_cross_entropy_with_integer_labels(s_BT, batch["start"])
        ce_e = optax.softmax_cross_entropy_with_integer_labels(e_BT, batch["end"])
        exact = (jnp.argmax(s_BT, -1) == batch["start"]) & (jnp.argmax(e_BT, -1) == batch["end"])
        return {"loss_sum": (0.5 * (ce_s + ce_e) * w_B).sum(),
                "correct_sum": (exact.astype(jnp.float32) * w_B).sum(),
                "weight_sum": w_B.sum()}  # fmt: skip

    def tokens_per_step(self, config) -> int:
        return int(config.data.batch_size)

    def describe_data(self, config, info) -> str:
        d = config.data
        return (f"{d.name}, extractive QA ([CLS] question [SEP] context [SEP], "
                f"{self.input_length(config)} tokens), batch {d.batch_size}; splits (tokens): "
                f"{base.split_sizes(info)}")  # fmt: skip


class Tagging(_TokenHead):
    name = "tagging"

    def apply(self, model, params, batch, *, rng, train: bool, memory=None):
        """Per-token tag logits ``[B, T, C]``."""
        del memory
        return self._logits(model, params, batch, rng=rng, train=train), None

    def sums(self, outputs, batch) -> dict:
        """Weighted per-token cross-entropy (weight 0 = Hugging Face's ``-100``)."""
        return losses.cross_entropy_sums(outputs, batch["targets"], batch["weights"])

    def describe_data(self, config, info) -> str:
        d = config.data
        return (f"{d.name}, token tagging ({info.num_classes} tags) on windows of "
                f"{self.input_length(config)} tokens, batch {d.batch_size}; splits (tokens): "
                f"{base.split_sizes(info)}")  # fmt: skip


QA = registry.register(QuestionAnswering())
TAGGING = registry.register(Tagging())
