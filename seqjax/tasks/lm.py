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

Legend: B batch, T window length.
"""

from __future__ import annotations

import math

from seqjax.tasks import base, registry


class LanguageModel(base.Task):
    name = "lm"
    generates = True

    def input_length(self, config) -> int:
        """``data.seq_len``; ``data.max_len`` for the example texts (``objective='lm'``)."""
        if config.data.get("objective") == "lm":
            from seqjax.data import api as data_api

            return data_api.max_len(config.data)
        return int(config.data.seq_len)

    def configure(self, config):
        """With ``config.data.packing`` (example texts): the packed rows' task."""
        return PACKED if config.data.get("packing") else self

    def validate(self, config, bad) -> None:
        from seqjax.models import memory
        from seqjax.tasks import packing_checks

        packing_checks.model_problems(config, bad)

        m, t = config.model, config.train
        recurrent = memory.kinds().get(memory.kind(config)) is not None
        if not recurrent and t.sample_length and t.sample_length > m.max_len:
            bad("train.sample_length", t.sample_length, f"<= model.max_len={m.max_len}")

    def model_config(self, config, info):
        from seqjax.models import from_config

        return from_config.transformer_config(config, info, causal=True, num_classes=0)

    def make_model(self, model_cfg, *, decode: bool = False):
        from seqjax.models.transformer import TransformerLM

        return TransformerLM(model_cfg, decode=decode)

    def build_model(self, config, model_cfg):
        """A recurrent kind's model (Transformer-XL, with its memory), else ``TransformerLM``."""
        from seqjax.models import memory

        rec = memory.recurrence(config)
        return rec.train_model(model_cfg, config) if rec else self.make_model(model_cfg)

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
        from seqjax.models import flops

        m = run.config.model
        relative = any(name == "relative" for name, _ in run.model_cfg.attention)
        return flops.train_flops_per_step(
            run.model_cfg, run.abstract["params"], batch_size=run.config.data.batch_size,
            seq_len=self.input_length(run.config), tied_output=run.model_cfg.tie_embeddings,
            mem_len=int(m.get("mem_len") or 0) if run.recurrence else 0, relative=relative,
        )  # fmt: skip

    def check_sample_inputs(self, run, prompt: str, length: int) -> None:
        from seqjax.tasks import inputs

        n_prompt = len(run.info.encode(prompt))
        inputs.check_window(
            n_prompt, length, int(run.model_cfg.max_len), run.recurrence is not None
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

    def apply(self, model, params, batch, *, rng, train: bool, memory=None):
        del memory
        rngs = {"dropout": rng} if train else {}
        out = model.apply(
            {"params": params}, batch["inputs"], segment_ids=batch["segment_ids"],
            positions_BT=batch["positions"], rngs=rngs, deterministic=not train,
        )  # fmt: skip
        return out, None


TASK = registry.register(LanguageModel())
PACKED = PackedLanguageModel()  # not registered: ``TASK.configure`` returns it
