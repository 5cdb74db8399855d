"""Sequence to sequence with the encoder-decoder Transformer (``DataInfo.task`` 'seq2seq'):
translation as Vaswani et al. 2017 train and evaluate it, and the copy/reverse smoke tasks.

Batches: ``inputs`` int32 ``[B, S]`` source ids + EOS (0 = pad), ``targets`` int32 ``[B, T]``
target ids + EOS (0 = pad), ``weights`` float32 ``[B, T]`` (1 on real target tokens). The
model is ``seqjax.models.EncoderDecoder`` fed ``shift_right(targets)``; the loss is
label-smoothed cross-entropy (§5.4, ``train.label_smoothing``, the paper's 0.1) normalised
per target token, with the unsmoothed negative log-likelihood kept for perplexity.
Evaluation adds corpus BLEU and chrF (sacreBLEU) of beam-search outputs over the split
(§6.1: beam 4, length penalty α = 0.6; ``config.eval.beam_size`` / ``length_penalty``).

Config (``seqjax/train/defaults.py``): ``model.attention`` is the encoder's self-attention
cycle (any mechanism), ``model.decoder_attention`` the decoder's (causal), ``model.num_layers``
/ ``model.decoder_layers`` the stacks, ``model.max_len`` >= both data lengths,
``model.norm_position``, ``model.share_embeddings`` / ``tie_embeddings``.

Legend: B batch, S source length, T target length, K beam, V vocabulary, E width.
"""

from __future__ import annotations

import math
import re

import jax
import jax.numpy as jnp

from seqjax.tasks import base, losses, registry

SUM_KEYS = ("loss_sum", "nll_sum", "correct_sum", "weight_sum")


class Seq2Seq(base.Task):
    """Encoder-decoder training, beam-search decoding and BLEU/chrF (module docstring)."""

    name = "seq2seq"
    sum_keys = SUM_KEYS
    unit = "tok"  # target token slots per second

    def describe_data(self, config, info) -> str:
        """Sentence pairs: source and target lengths, languages where the data name them."""
        d = config.data
        langs = ""
        if getattr(info, "source_lang", None) and getattr(info, "target_lang", None):
            langs = f" {info.source_lang}->{info.target_lang}"
        return (f"{d.name}{langs}, source {info.seq_len} / target {info.target_len} tokens, "
                f"batch {d.batch_size}; splits (pairs): {base.split_sizes(info)}")  # fmt: skip

    causal = False  # ``model.attention`` is the (bidirectional) encoder's
    family = "encoder_decoder"
    length_field = "data.max_source_len"
    generates = True

    def __init__(self, label_smoothing: float = 0.0, beam_size: int = 4, alpha: float = 0.6):
        self.label_smoothing = float(label_smoothing)
        self.beam_size = int(beam_size)
        self.alpha = float(alpha)

    def configure(self, config) -> Seq2Seq:
        ev = config.get("eval") or {}
        kind = PackedSeq2Seq if config.data.get("packing") else Seq2Seq
        return kind(
            label_smoothing=config.train.get("label_smoothing", 0.0) or 0.0,
            beam_size=ev.get("beam_size", 4) or 4,
            alpha=ev.get("length_penalty", 0.6),
        )

    # ---- config --------------------------------------------------------------------------

    def input_length(self, config) -> int:
        """The longer of the source and target rows (both must fit ``model.max_len``)."""
        d = config.data
        return max(int(d.max_source_len), int(d.max_target_len))

    def validate(self, config, bad) -> None:
        from seqjax.decoding import check_beam

        d, m, t = config.data, config.model, config.train
        if int(d.max_target_len) > m.max_len:
            bad("data.max_target_len", d.max_target_len, f"<= model.max_len={m.max_len}")
        eps = t.get("label_smoothing", 0.0)
        if not isinstance(eps, int | float) or not 0.0 <= eps < 1.0:
            bad("train.label_smoothing", eps, "a number in [0, 1) (Vaswani et al.: 0.1)")
        ev = config.get("eval") or {}
        try:
            check_beam(ev.get("beam_size", 4), ev.get("length_penalty", 0.6))
        except ValueError:
            bad("eval.beam_size / eval.length_penalty",
                (ev.get("beam_size"), ev.get("length_penalty")),
                "beam_size >= 1 and length_penalty >= 0 (Vaswani et al.: 4 and 0.6)")  # fmt: skip
        if m.get("kind", "transformer") != "transformer":
            bad("model.kind", m.kind, "'transformer' for a seq2seq data set (no memory model)")
        if d.get("packing"):  # seqjax.data.packing
            from seqjax.tasks import packing_checks

            packing_checks.model_problems(config, bad)
            if m.reversible:
                bad("data.packing", True, "False with model.reversible=True (the reversible "
                    "encoder-decoder takes no segment ids)")  # fmt: skip
        try:
            self.model_config(config, _ShapeInfo(config))
        except ValueError as e:  # the encoder-decoder's own checks (decoder mechanism, ...)
            msg = str(e)
            match = re.match(r"model\.(\w+)", msg)
            if "unknown option" not in msg and match:  # option names are reported elsewhere
                name = match.group(1)
                reason = msg[match.end() :].lstrip(":= ")
                bad(f"model.{name}", config.model.get(name), reason)
            elif "unknown option" not in msg:
                bad("model", "(the encoder-decoder)", msg)

    # ---- the model -----------------------------------------------------------------------

    def init_shapes(self, config, info) -> tuple:
        """Source ``[1, S]`` and decoder inputs ``[1, T]``."""
        del info
        return ((1, int(config.data.max_source_len)), (1, int(config.data.max_target_len)))

    # ---- batches, loss, metrics ----------------------------------------------------------

    def apply(self, model, params, batch, *, rng, train: bool, memory=None):
        from seqjax.models.encoder_decoder import shift_right

        del memory
        rngs = {"dropout": rng} if train else {}
        logits_BTV = model.apply(
            {"params": params}, batch["inputs"], shift_right(batch["targets"], start_id(model)),
            rngs=rngs, deterministic=not train,
        )  # fmt: skip
        return logits_BTV, None

    def sums(self, outputs, batch) -> dict:
        """Label-smoothed cross-entropy sums over the weighted target tokens."""
        return losses.smoothed_cross_entropy_sums(
            outputs, batch["targets"], batch["weights"], self.label_smoothing
        )

    def train_metrics(self, sums, total_weight) -> dict:
        """``loss`` (label-smoothed, what is minimised), ``nll`` and token ``accuracy``."""
        return {**super().train_metrics(sums, total_weight),
                "nll": sums["nll_sum"] / total_weight}  # fmt: skip

    def eval_summary(self, sums, config) -> dict:
        """Loss, per-token NLL and perplexity exp(NLL) (unsmoothed), accuracy, count."""
        out = super().eval_summary(sums, config)
        nll = float(sums["nll_sum"]) / max(float(sums["weight_sum"]), 1.0)
        out["nll"] = nll
        out["perplexity"] = math.exp(min(nll, 700.0))
        return out

    def tokens_per_step(self, config) -> int:
        return int(config.data.batch_size) * int(config.data.max_target_len)

    def flops_per_step(self, run) -> float:
        """PaLM-style ``6 N`` per token for each stack on its own length, plus attention
        (``12 L S^2 d`` encoder, ``12 L T^2 d + 12 L T S d`` decoder with cross-attention)."""
        cfg, d = run.model_cfg, run.config.data
        params = run.abstract["params"]
        own = getattr(run.model, "train_flops_per_step", None)  # a family's own count
        if own is not None:
            return own(params, batch_size=int(d.batch_size), seq_len=self.input_length(run.config))
        b, s, t = int(d.batch_size), int(d.max_source_len), int(d.max_target_len)

        def count(tree) -> int:
            return sum(int(x.size) for x in jax.tree.leaves(tree))

        enc, dec = count(params.get("encoder", {})), count(params.get("decoder", {}))
        out_proj = cfg.vocab_size * cfg.d_model  # tied or not, the logits matmul runs
        e = cfg.d_model
        per = 6.0 * (enc * s + (dec + out_proj) * t)
        per += 12.0 * e * (cfg.encoder_layers * s * s + cfg.decoder_layers * (t * t + t * s))
        return b * per

    # ---- decoding ------------------------------------------------------------------------

    def translate_fn(self, run, *, beam_size: int | None = None, alpha: float | None = None):
        """A jitted ``(params, source_BS) -> (tokens_BT, scores_B)``: the best beam-search
        hypothesis per example (Vaswani et al. §6.1), EOS and padding after it included."""
        from seqjax.tasks import seq2seq_decode

        return seq2seq_decode.make_translate_fn(
            run.model_cfg,
            beam_size=self.beam_size if beam_size is None else beam_size,
            alpha=self.alpha if alpha is None else alpha,
            max_len=int(run.config.data.max_target_len),
            eos_id=int(run.info.eos_id),
        )

    def translate(self, run, params, sources, *, beam_size=None, alpha=None) -> list[str]:
        """Detokenised translations of ``sources`` (strings), one beam search per batch."""
        from seqjax.tasks import seq2seq_decode

        fn = self.translate_fn(run, beam_size=beam_size, alpha=alpha)
        return seq2seq_decode.translate_strings(run, params, fn, sources)

    def decode_metrics(self, run, params, split: str, *, max_batches: int = 0) -> dict:
        """BLEU and chrF (sacreBLEU) of beam-search outputs over ``split`` (or its first
        ``max_batches`` batches), with sacreBLEU's signatures; with
        ``config.eval.bleu_length_edges`` (``python -m seqjax.evaluate --bleu_by_length``)
        also ``bleu_by_length``: BLEU per source-length bucket (Bahdanau et al. 2015, Fig. 2;
        ``text_metrics.bleu_by_length``)."""
        evaluation = run.config.get("eval") or {}
        if not evaluation.get("decode_metrics", True):
            return {}
        from seqjax.tasks import seq2seq_decode, text_metrics

        fn, edges = self.translate_fn(run), evaluation.get("bleu_length_edges")
        if not edges:
            return seq2seq_decode.split_scores(run, params, fn, split, max_batches=max_batches)
        triple = seq2seq_decode.split_translations(run, params, fn, split, max_batches=max_batches)
        sources, hyps, refs = triple
        out = text_metrics.corpus_scores(hyps, refs)
        out["bleu_by_length"] = text_metrics.bleu_by_length(sources, hyps, refs, list(edges))
        return out

    def check_sample_inputs(self, run, prompt: str, length: int) -> None:
        from seqjax.tasks import inputs

        del length
        n = len(run.info.encode(prompt)) + 1  # + EOS
        limit = int(run.config.data.max_source_len)
        if n > limit:
            raise inputs.InputError(
                f"the source has {n} tokens (EOS included), more than this model's "
                f"data.max_source_len={limit}; shorten it"
            )

    def sample(
        self, run, params, prompt: str, length: int, *, temperature=1.0, top_k=0, top_p=1.0,
        seed=0,
    ) -> str:  # fmt: skip
        """The beam-search translation of ``prompt`` (``length``, ``temperature``, ``top_k``,
        ``top_p`` unused: translation is a search, not a sample)."""
        del length, temperature, top_k, top_p, seed
        return self.translate(run, params, [prompt])[0]

    def describe_sample(self, prompt: str, text: str) -> str:
        return f"{prompt}\n=> {text}"


def start_id(model) -> int:
    """The decoder's first input: the model config's ``decoder_start_id`` (a checkpoint's
    ``decoder_start_token_id``), else seqjax's 0 (the pad id)."""
    return int(getattr(getattr(model, "cfg", None), "decoder_start_id", 0))


class _ShapeInfo:
    """The ``DataInfo`` fields ``model_config`` reads, before the data are prepared."""

    def __init__(self, config):
        self.vocab_size = max(int(config.data.get("vocab_size") or 0), 8)


class PackedSeq2Seq(Seq2Seq):
    """Sequence to sequence on packed rows (``config.data.packing``; ``seqjax.data.packing``):
    sources and targets packed in parallel, pair k being segment k on both sides; the
    encoder attends within a source, the decoder within a target, and cross-attention from a
    target to its own source only. The decoder inputs are the targets shifted right within
    each segment (0 at every example's start), so each pair's losses equal those of the pair
    alone."""

    batch_fields = {
        **Seq2Seq.batch_fields,
        "segment_ids": ("int32", 2),
        "positions": ("int32", 2),
        "target_segment_ids": ("int32", 2),
        "target_positions": ("int32", 2),
    }

    def apply(self, model, params, batch, *, rng, train: bool, memory=None):
        from seqjax.models.encoder_decoder import shift_right

        del memory
        rngs = {"dropout": rng} if train else {}
        seg_BT = batch["target_segment_ids"]
        start = start_id(model)  # at every example's start
        decoder_inputs_BT = jnp.where(shift_right(seg_BT) == seg_BT,
                                      shift_right(batch["targets"], start), start)  # fmt: skip
        packed = {k: batch[k] for k in ("segment_ids", "positions", "target_segment_ids",
                                        "target_positions")}  # fmt: skip
        logits_BTV = model.apply(
            {"params": params}, batch["inputs"], decoder_inputs_BT, rngs=rngs,
            deterministic=not train, packed=packed,
        )  # fmt: skip
        return logits_BTV, None

    def decode_metrics(self, run, params, split: str, *, max_batches: int = 0) -> dict:
        """BLEU/chrF as ``Seq2Seq``'s, decoding the split's pairs unpacked, one a row."""
        import dataclasses

        config = run.config.copy_and_resolve_references()
        with config.unlocked():
            config.data.packing = False
        run = dataclasses.replace(run, config=config)
        return super().decode_metrics(run, params, split, max_batches=max_batches)


TASK = registry.register(Seq2Seq())
