"""Decoder language modelling: next-token prediction on token windows (``DataInfo.task``
'lm'); Vaswani et al. 2017 decoder-only, as trained by Radford et al. 2018 / Al-Rfou et
al. 2019 for characters.

Batches: ``inputs`` int32 ``[B, T]``, ``targets`` int32 ``[B, T]`` (the inputs shifted by
one), ``weights`` float32 ``[B, T]``. ``config.data.objective='lm'`` reads the example texts
of imdb_bytes/listops instead (one document per row of ``data.max_len``, or packed with
``data.packing``: ``segment_ids``/``positions`` too; ``seqjax.data.packing``). The model
is ``TransformerLM`` (causal), or a recurrent model (``seqjax.models.memory``:
Transformer-XL) when ``config.model.kind`` says so. Evaluation reports bits per character
(``data.vocab='chars'``) or per byte and perplexity; the task generates text
(``seqjax.tasks.sampling``).

The loss (``train.xent_chunk``): the plain form materializes the float32 logits
``[B, T, V]``; with a chunk size the task takes the final hidden states and the output
embedding instead and computes the cross-entropy chunk by chunk
(``seqjax.models.chunked_xent``; equal values and gradients, no ``[B, T, V]`` array).
``None`` (default): chunks of ``AUTO_CHUNK`` tokens where a batch's float32 logits would
reach ``AUTO_BYTES`` (a GPT-2-sized vocabulary) on a one-device run, else the plain form
(on a mesh, the chunks' weight-gradient reductions are not measured yet: set the chunk
explicitly there); ``0``: always plain.

Legend: B batch, T window length, V vocabulary, E model width.
"""

from __future__ import annotations

import copy
import math

import jax
import jax.numpy as jnp

from seqjax.tasks import base, registry

AUTO_CHUNK = 1024  # tokens per chunk of the cross-entropy when train.xent_chunk is None
AUTO_BYTES = 2**28  # ... and a batch's float32 logits would take at least this (256 MiB)


class LanguageModel(base.Task):
    name = "lm"
    generates = True
    xent_chunk: int | None = None  # train.xent_chunk (module docstring)

    def __init__(self, xent_chunk: int | None = None):
        self.xent_chunk = xent_chunk

    def input_length(self, config) -> int:
        """``data.seq_len``; ``data.max_len`` for the example texts (``objective='lm'``)."""
        if config.data.get("objective") == "lm":
            from seqjax.data import api as data_api

            return data_api.max_len(config.data)
        return int(config.data.seq_len)

    def describe_data(self, config, info) -> str:
        """Token windows of a corpus, or (``objective='lm'``) one example text per row."""
        if config.data.get("objective") != "lm":
            return super().describe_data(config, info)
        d = config.data
        return (f"{d.name}, LM of example texts of {self.input_length(config)} tokens, batch "
                f"{d.batch_size}; splits (examples): {base.split_sizes(info)}")  # fmt: skip

    def configure(self, config):
        """With ``config.data.packing`` (example texts): the packed rows' task; with
        ``config.train.xent_chunk`` set: a task that uses that chunk size."""
        task = PACKED if config.data.get("packing") else self
        train = getattr(config, "train", None)
        chunk = None if train is None else train.get("xent_chunk")
        if chunk is None:
            return task
        task = copy.copy(task)  # any subclass, its other state kept
        task.xent_chunk = int(chunk)
        return task

    def validate(self, config, bad) -> None:
        from seqjax.models import memory
        from seqjax.tasks import packing_checks

        packing_checks.model_problems(config, bad)

        m, t = config.model, config.train
        recurrent = memory.kinds().get(memory.kind(config)) is not None
        max_len = m.get("max_len")  # None: a family without a position limit
        if not recurrent and t.sample_length and max_len and t.sample_length > max_len:
            bad("train.sample_length", t.sample_length, f"<= model.max_len={m.max_len}")
        chunk = t.get("xent_chunk")
        if chunk is not None and (isinstance(chunk, bool) or not isinstance(chunk, int)
                                  or chunk < 0):  # fmt: skip
            bad("train.xent_chunk", chunk, "None (auto), 0 (plain logits) or tokens per chunk > 0")
        adaptive = (m.get("adaptive") or {}).get("enabled", False)
        if isinstance(chunk, int) and chunk > 0 and (recurrent or adaptive):
            bad("train.xent_chunk", chunk, "None or 0 with model.adaptive or a recurrent "
                "model.kind (their outputs are not one softmax layer)")  # fmt: skip

    def apply_kwargs(self, batch) -> dict:
        """Keyword inputs of the model besides the tokens (packed rows: segments)."""
        del batch
        return {}

    def output_layer(self, model, params, batch):
        """``(w, layout, chunk)`` of the chunked cross-entropy for this batch, or None for
        the plain form: a ``TransformerLM`` with one softmax layer (not adaptive, no MLM
        head), ``w`` its tied token table ``[V, E]`` (layout 've') or head kernel ``[E, V]``
        ('ev'), ``chunk`` from ``xent_chunk`` (None: ``AUTO_CHUNK`` at ``AUTO_BYTES``)."""
        import flax.linen as nn

        from seqjax.models.transformer import TransformerLM

        cfg = getattr(model, "cfg", None)
        if (not isinstance(model, TransformerLM) or model.decode or cfg.adaptive
                or cfg.mlm_head_transform or self.xent_chunk == 0):  # fmt: skip
            return None
        if cfg.tie_embeddings:
            w, layout = params["encoder"]["embed"]["embedding"], "ve"
        else:
            w, layout = params["head"]["kernel"], "ev"
        w, chunk = nn.unbox(w), self.xent_chunk  # nn.unbox: params straight from model.init
        if chunk is None:  # one device only: a mesh's per-chunk reductions are unmeasured
            logits_bytes = 4 * batch["targets"].size * cfg.vocab_size
            big = logits_bytes >= AUTO_BYTES and jax.device_count() == 1
            chunk = AUTO_CHUNK if big else 0
        return (w, layout, chunk) if chunk else None

    def batch_sums(self, model, params, batch, *, rng, train: bool, memory=None):
        """The plain form, or (``output_layer``) the chunked cross-entropy of the final
        hidden states: the model's ``encoder/ln_final`` output, captured; its unused
        logits are removed by XLA's dead-code elimination under ``jit``."""
        head = None if memory is not None else self.output_layer(model, params, batch)
        if head is None:
            return super().batch_sums(model, params, batch, rng=rng, train=train, memory=memory)
        from seqjax.models import chunked_xent

        w, layout, chunk = head
        rngs = {"dropout": rng} if train else {}
        _, state = model.apply(
            {"params": params}, batch["inputs"], **self.apply_kwargs(batch), rngs=rngs,
            deterministic=not train, mutable=["intermediates"],
            capture_intermediates=lambda mdl, method: method == "__call__"
            and mdl.path == ("encoder", "ln_final"),
        )  # fmt: skip
        (h_BTE,) = state["intermediates"]["encoder"]["ln_final"]["__call__"]
        sums = chunked_xent.chunked_cross_entropy_sums(
            h_BTE.astype(jnp.float32), w, batch["targets"], batch["weights"], chunk=chunk,
            layout=layout,
        )  # fmt: skip
        return sums, None

    def eval_summary(self, sums, config) -> dict:
        """Adds bits per character/byte (loss / ln 2) and perplexity (exp loss)."""
        from seqjax.tasks.losses import bits

        out = super().eval_summary(sums, config)
        loss = out["loss"]
        vocab = config.data.get("vocab")
        out["bits_per_char" if vocab == "chars" else "bits_per_byte"] = bits(loss)
        out["perplexity"] = math.exp(min(loss, 700.0))
        if vocab == "words":  # per word (<eos> counted, as Transformer-XL), not per byte
            out.pop("bits_per_byte")
            out["word_perplexity"] = out["perplexity"]
        return out

    def flops_per_step(self, run) -> float:
        """PaLM's ``6 N T + 12 L T^2 d`` per window; a tied token table is the logits matmul."""
        from seqjax.attention import registry as attention_registry
        from seqjax.models import flops

        m = run.config.model
        cycle = getattr(run.model_cfg, "attention", ())  # none: a family without attention
        relative = any(  # Transformer-XL's relative scores over [memory; segment]
            attention_registry.spec(name).memory_model is not None for name, _ in cycle
        )
        tied = bool(getattr(run.model_cfg, "tie_embeddings", False))
        return flops.train_flops_per_step(
            run.model_cfg, run.abstract["params"], batch_size=run.config.data.batch_size,
            seq_len=self.input_length(run.config), tied_output=tied,
            mem_len=int(m.get("mem_len") or 0) if run.recurrence else 0, relative=relative,
        )  # fmt: skip

    def check_sample_inputs(self, run, prompt: str, length: int) -> None:
        from seqjax.tasks import inputs

        n_prompt = len(run.info.encode(prompt))
        max_len = getattr(run.model_cfg, "max_len", None)  # None: a family without one
        inputs.check_window(
            n_prompt, length, int(max_len or n_prompt + length), run.recurrence is not None
        )

    def sample(
        self, run, params, prompt: str, length: int, *, temperature=1.0, top_k=0, top_p=1.0,
        seed=0,
    ) -> str:  # fmt: skip
        from seqjax.tasks import sampling

        return sampling.sample_text(
            run, params, prompt, length, temperature=temperature, top_k=top_k, top_p=top_p,
            seed=seed,
        )  # fmt: skip


class PackedLanguageModel(LanguageModel):
    """The LM on packed documents (``objective='lm'``, ``data.packing``;
    ``seqjax.data.packing``): ``segment_ids`` keep documents apart (no query sees another
    document), ``positions`` restart per document, ``weights`` 0 on padding."""

    batch_fields = {
        **LanguageModel.batch_fields,
        "segment_ids": ("int32", 2),
        "positions": ("int32", 2),
    }

    def apply_kwargs(self, batch) -> dict:
        return {"segment_ids": batch["segment_ids"], "positions_BT": batch["positions"]}

    def apply(self, model, params, batch, *, rng, train: bool, memory=None):
        del memory
        rngs = {"dropout": rng} if train else {}
        out = model.apply(
            {"params": params}, batch["inputs"], **self.apply_kwargs(batch), rngs=rngs,
            deterministic=not train,
        )  # fmt: skip
        return out, None


TASK = registry.register(LanguageModel())
PACKED = PackedLanguageModel()  # not registered: ``TASK.configure`` returns it
