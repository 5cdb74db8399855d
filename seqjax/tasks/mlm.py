"""Masked language modelling (``DataInfo.task`` 'mlm'): BERT pre-training of a bidirectional
encoder (Devlin et al. 2019, §3.1 "Task #1: Masked LM"; Liu et al. 2019, RoBERTa §4.1:
masks drawn afresh for every batch; Wang et al. 2020, Linformer §5).

Chosen with ``config.data.objective='mlm'`` on a text data set (pystdlib, text_file, enwik8,
text8 windows of ``data.seq_len``; imdb_bytes, listops texts of ``data.max_len``); the
masking is ``seqjax.data.objectives``. Batches: ``inputs`` int32 ``[B, T]`` (masked),
``targets`` int32 ``[B, T]`` (original tokens), ``weights`` float32 ``[B, T]`` (1 at the
chosen positions only, so the loss is the mean cross-entropy over them). The model is
``TransformerLM`` with ``causal=False`` (bidirectional self-attention; padding id 0 of
padded data hidden as keys) and BERT's output head (``model.mlm_head_transform``, default
True: dense -> GELU -> LayerNorm -> the tied output layer over the vocabulary + [MASK] plus
a bias; ``seqjax.models.transformer.MLMHead``). Its parameters
live under ``encoder`` like the classifier's, so ``config.init_from`` fine-tunes them
(``seqjax.train.init_from``). Evaluation: masked-LM loss, perplexity ``exp(loss)`` and
accuracy over the masked positions.

Legend: B batch, T input length, V vocabulary (+ [MASK]).
"""

from __future__ import annotations

import math

from seqjax.data import registry as data_registry
from seqjax.tasks import base, registry


class MaskedLanguageModel(base.Task):
    name = "mlm"
    causal = False
    objective = "mlm"

    def input_length(self, config) -> int:
        """``data.seq_len`` (LM corpora) or ``data.max_len`` (classification texts)."""
        from seqjax.data import api as data_api

        if data_registry.get(config.data.name).kind in ("texts", "images"):
            return data_api.max_len(config.data)
        return int(config.data.seq_len)

    def describe_data(self, config, info) -> str:
        """Masked rows of a corpus (token splits) or of example texts (example splits)."""
        d = config.data
        what = "tokens" if data_registry.get(d.name).kind == "corpus" else "examples"
        return (f"{d.name}, masked LM (p {d.mlm_probability}) on rows of "
                f"{self.input_length(config)} tokens, batch {d.batch_size}; splits ({what}): "
                f"{base.split_sizes(info)}")  # fmt: skip

    def configure(self, config):
        """With ``config.data.packing``: the packed batches' task (``segment_ids``,
        ``positions``)."""
        return PACKED if config.data.get("packing") else self

    def validate(self, config, bad) -> None:
        """A bidirectional encoder only (no recurrent, decoder-only, model kind); packing
        only with mechanisms that honour segments (``packing_checks.model_problems``)."""
        from seqjax.models import memory
        from seqjax.tasks import packing_checks

        kind = memory.kind(config)
        if memory.kinds().get(kind) is not None:
            bad("model.kind", kind,
                "'transformer' with data.objective='mlm' (masked LM needs a bidirectional "
                "encoder; a recurrent kind is a causal decoder)")  # fmt: skip
        from seqjax.attention import registry as attention_registry

        names = attention_registry.parse(config.model.attention)
        causal = [n for n in names if attention_registry.capable(n, "always_causal")]
        if causal:
            bad("model.attention", config.model.attention,
                f"bidirectional mechanisms with data.objective='mlm' ({causal[0]!r} always "
                "hides the right context a masked token is predicted from)")  # fmt: skip
        packing_checks.model_problems(config, bad)  # mechanisms that cannot honour segments
        head = config.model.get("mlm_head_transform", True)
        adaptive = (config.model.get("adaptive") or {}).get("enabled", False)
        if not isinstance(head, bool):
            bad("model.mlm_head_transform", head, "True (BERT's dense-GELU-LayerNorm head) or "
                "False (the encoder's output straight into the output layer)")  # fmt: skip
        elif head and adaptive:
            bad("model.mlm_head_transform", head, "False with model.adaptive.enabled=True (the "
                "adaptive softmax is its own output layer)")  # fmt: skip

    def needs(self, config, info):
        """The bidirectional encoder, with BERT's head transform unless
        ``model.mlm_head_transform=False`` (``seqjax.models.transformer.MLMHead``)."""
        from seqjax.models.registry import Needs

        return Needs(self.name, causal=False, masked_lm=True)

    def apply(self, model, params, batch, *, rng, train: bool, memory=None):
        """Bidirectional logits ``[B, T, V]``; padding (id ``pad_id``) is hidden as keys."""
        del memory
        rngs = {"dropout": rng} if train else {}
        tokens_BT = batch["inputs"]
        if "segment_ids" in batch:  # packed: a query sees its own example only (pads: 0)
            kwargs = {"segment_ids": batch["segment_ids"], "positions_BT": batch["positions"]}
        else:
            pad = model.cfg.pad_id
            kwargs = {"mask_BT": None if pad is None else tokens_BT != pad}
        out = model.apply({"params": params}, tokens_BT, rngs=rngs, deterministic=not train,
                          **kwargs)  # fmt: skip
        return out, None

    def eval_summary(self, sums, config) -> dict:
        """Masked-LM loss, accuracy on the masked positions, perplexity = exp(loss)."""
        out = super().eval_summary(sums, config)
        out["perplexity"] = math.exp(min(out["loss"], 700.0))
        return out

    def flops_per_step(self, run) -> float:
        from seqjax.models import flops

        return flops.train_flops_per_step(
            run.model_cfg, run.abstract["params"], batch_size=run.config.data.batch_size,
            seq_len=self.input_length(run.config), tied_output=run.model_cfg.tie_embeddings,
        )  # fmt: skip


class PackedMaskedLanguageModel(MaskedLanguageModel):
    """The masked LM on packed rows (``config.data.packing``; ``seqjax.data.packing``):
    ``segment_ids`` (0 = padding) keep examples apart, ``positions`` restart per example."""

    batch_fields = {
        **MaskedLanguageModel.batch_fields,
        "segment_ids": ("int32", 2),
        "positions": ("int32", 2),
    }


TASK = registry.register(MaskedLanguageModel())
PACKED = PackedMaskedLanguageModel()  # not registered: ``TASK.configure`` returns it
