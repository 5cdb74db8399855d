"""Reversible residual layers (Kitaev et al. 2020, §3; Gomez et al. 2017, RevNet).

Each layer maps a pair of streams ``(x1, x2) -> (y1, y2)``:

    y1 = x1 + F(x2),   F = Dropout(Attention(Norm(.)))
    y2 = x2 + G(y1),   G = Dropout(FeedForward(Norm(.)))   (Reformer eq. in §3)

and is inverted exactly by ``x2 = y2 - G(y1)``, ``x1 = y1 - F(x2)``. The whole stack is one
``jax.custom_vjp``: the forward pass keeps only the last layer's ``(y1, y2)``; the backward
pass walks the layers in reverse, recomputing each layer's inputs from its outputs and taking
the layer's VJP. Activation memory therefore does not grow with depth (tested by comparing
compiled peak memory at 2, 6 and 12 layers).

Streams: the input is duplicated, ``x1 = x2 = x``, and the output is the mean
``(y1 + y2) / 2``, which the encoder's final LayerNorm then normalizes (trax duplicates and
concatenates the streams to width 2E before its final LayerNorm; the mean keeps width E so
the model's head is unchanged).

Any registered attention mechanism works (chosen per layer by ``cfg.attention``); the
feed-forward is applied in chunks of ``cfg.ff_chunk_size`` positions (§3, "Chunking").

Randomness is recomputed identically: each layer's F and G run in a nested ``apply`` with
explicit RNG keys drawn once in this module's scope (streams ``"dropout"`` and ``"lsh"``),
and the backward pass passes the very same keys, so dropout masks and LSH rotations match
the forward pass. Without an ``"lsh"`` stream the rotations of layer i come from the
``"dropout"`` stream when present, else from ``lsh.fallback_key(seed, path of layer i's
attention)`` with the configured ``attention_options.lsh.seed`` (deterministic evaluation),
as in the non-reversible layers.

Decoding: at inference a reversible layer is two ordinary residual sublayers, so with
``decode=True`` the stack runs them in order with KV-cached attention (no custom VJP);
one token at a time then equals the full forward pass.

Encoder-decoder (Kitaev et al. 2020, §5, the Reformer's translation model): with
``cross=True`` each layer's F also attends to a context (the encoder's output ``[B, S, E]``,
padding mask ``[B, S]``): ``F(x) = A(x) + C(x + A(x), context)``, A the causal
self-attention half and C the cross-attention sublayer. F stays a function of ``x2`` (and
the fixed context), so the layer inverts as before; the context's gradient is summed over
the layers by the custom VJP (it travels with the layers' shared parameters).

Legend: B batch, T sequence length, E model width.
"""

from __future__ import annotations

import functools
from typing import Any

import flax.linen as nn
import jax

from seqjax.attention import lsh
from seqjax.models import layers


class AttentionHalf(nn.Module):
    """F(x) = Dropout(Attention(Norm(x))): the first half of a reversible layer, the shared
    ``layers.attention_sublayer``; with ``cross`` also the cross-attention to a context
    (``F(x) = A(x) + C(x + A(x), context)``, see module docstring; parameters ``ln_cross``,
    ``cross_attn``)."""

    cfg: Any
    layer: int
    causal: bool
    decode: bool = False
    cross: bool = False
    cross_attention: tuple = ("dense", ())

    @nn.compact
    def __call__(
        self,
        x_BTE,
        mask_BS,
        segment_ids,
        deterministic: bool,
        extra=None,
        context_BSE=None,
        context_mask_BS=None,
    ):
        h_BTE = layers.attention_sublayer(
            self.cfg,
            self.layer,
            x_BTE,
            causal=self.causal,
            decode=self.decode,
            mask_BS=mask_BS,
            segment_ids=segment_ids,
            deterministic=deterministic,
            extra=extra,
            norm_name="ln",
        )
        if self.cross:
            h_BTE = h_BTE + layers.attention_sublayer(
                self.cfg,
                self.layer,
                x_BTE + h_BTE,
                causal=False,
                decode=self.decode,
                context_BSE=context_BSE,
                attention=self.cross_attention,
                mask_BS=context_mask_BS,
                deterministic=deterministic,
                norm_name="ln_cross",
                name="cross_attn",
            )
        return h_BTE.astype(x_BTE.dtype)


class FeedForwardHalf(nn.Module):
    """G(x) = Dropout(Mlp(Norm(x))): the second half, the shared
    ``layers.feed_forward_sublayer`` (chunked along T by ``cfg.ff_chunk_size``)."""

    cfg: Any

    @nn.compact
    def __call__(self, x_BTE, deterministic: bool):
        h_BTE = layers.feed_forward_sublayer(
            self.cfg, x_BTE, deterministic=deterministic, norm_name="ln"
        )
        return h_BTE.astype(x_BTE.dtype)


class ReversibleStack(nn.Module):
    """``cfg.num_layers`` reversible layers with a memory-saving ``custom_vjp``.

    Attributes:
      cfg: the ``TransformerConfig`` (attention cycle, widths, dropout, ``ff_chunk_size``).
      causal: decoder attention.
      recompute: True (default) uses the custom VJP that recomputes inputs from outputs;
        False differentiates the same function with plain autodiff (stores activations);
        used by tests to check the custom VJP's gradients.
      decode: KV-cache decoding, one token per call (plain forward, see module docstring).
      cross: each layer also attends to ``context_BSE`` (encoder-decoder, module docstring)
        with ``cross_attention`` (``(mechanism, options)``).
    """

    cfg: Any
    causal: bool
    recompute: bool = True
    decode: bool = False
    cross: bool = False
    cross_attention: tuple = ("dense", ())

    @nn.compact
    def __call__(
        self,
        x_BTE,
        *,
        mask_BS=None,
        segment_ids=None,
        deterministic=True,
        context_BSE=None,
        context_mask_BS=None,
    ):
        """Applies the stack to ``x_BTE`` ``[B, T, E]``; returns ``(y1 + y2) / 2``.

        ``context_BSE`` / ``context_mask_BS`` (``cross=True`` only): the encoder's output
        ``[B, S, E]`` and its padding mask ``[B, S]`` (True = real).
        """
        cfg = self.cfg
        n = cfg.num_layers
        if self.cross != (context_BSE is not None):
            raise ValueError("ReversibleStack: pass context_BSE exactly when cross=True")
        half = functools.partial(
            AttentionHalf, cross=self.cross, cross_attention=self.cross_attention
        )
        f_mods = [half(cfg, i, self.causal, self.decode, name=f"attn_{i}") for i in range(n)]
        g_mods = [FeedForwardHalf(cfg, name=f"ff_{i}") for i in range(n)]
        shared = layers.shared_attention_params(self, self.cfg)
        extras = [shared.get(cfg.layer_attention(i), {}) for i in range(n)]
        if self.cross:  # the context is differentiated like the shared parameters
            extras = [(e, context_BSE) for e in extras]

        def unpack(extra):
            """``(shared parameters, context)`` of one layer's extra inputs."""
            return extra if self.cross else (extra, None)

        # Initialization creates the parameters (and caches) with a plain forward pass;
        # decoding is inference, where the layers are ordinary sublayers with KV caches.
        if self.is_initializing() or self.decode:
            y1, y2 = _forward(
                lambda i, x: f_mods[i](
                    x, mask_BS, segment_ids, deterministic, *unpack(extras[i]), context_mask_BS
                ),
                lambda i, x: g_mods[i](x, deterministic),
                n,
                x_BTE,
            )
            return (y1 + y2) / 2

        params = self.variables["params"]
        p_f = [params[f"attn_{i}"] for i in range(n)]
        p_g = [params[f"ff_{i}"] for i in range(n)]
        rngs = [self._layer_rngs(i, deterministic) for i in range(n)]

        def f(i, p, extra, x, rng):
            return half(cfg, i, self.causal).apply(
                {"params": p},
                x,
                mask_BS,
                segment_ids,
                deterministic,
                *unpack(extra),
                context_mask_BS,
                rngs=rng["f"],
            )

        def g(p, x, rng):
            return FeedForwardHalf(cfg).apply({"params": p}, x, deterministic, rngs=rng["g"])

        # Plain autodiff of the same forward is the reference for the custom VJP (tests).
        plain = functools.partial(_explicit_forward, f, g, n)
        run = _reversible(f, g, n) if self.recompute else plain
        y1, y2 = run(p_f, p_g, extras, x_BTE, rngs)
        return (y1 + y2) / 2

    def _layer_rngs(self, i: int, deterministic: bool) -> dict:
        """Explicit keys for layer i's F and G (reused verbatim by the backward pass)."""
        f, g = {}, {}
        if not deterministic and self.has_rng("dropout"):
            f["dropout"], g["dropout"] = self.make_rng("dropout"), self.make_rng("dropout")
        if self.has_rng("lsh"):
            f["lsh"] = self.make_rng("lsh")
        elif self.has_rng("dropout"):
            f["lsh"] = self.make_rng("dropout")
        else:  # the configured seed and the layer's own path, as lsh._module_params does
            seed = int(dict(self.cfg.layer_attention(i)[1]).get("seed", 0))
            f["lsh"] = lsh.fallback_key(seed, (*self.path, f"attn_{i}", "attn"))
        return {"f": f, "g": g}


def _forward(f, g, n: int, x_BTE):
    """The reversible forward pass (Gomez et al. 2017, §3.1; Kitaev et al. 2020, §3):
    ``x1 = x2 = x``, then for each layer i ``y1 = x1 + F_i(x2)``, ``y2 = x2 + G_i(y1)``.

    ``f(i, x)`` and ``g(i, x)`` are layer i's halves; the initialization/decoding pass, the
    plain-autodiff reference and the custom VJP's forward all run this one loop.

    Returns:
      ``(y1, y2)`` of the last layer.
    """
    x1, x2 = x_BTE, x_BTE
    for i in range(n):
        x1 = x1 + f(i, x2)
        x2 = x2 + g(i, x1)
    return x1, x2


def _explicit_forward(f, g, n: int, p_f, p_g, extras, x_BTE, rngs):
    """``_forward`` with explicit per-layer parameters, shared extras and keys."""
    return _forward(
        lambda i, x: f(i, p_f[i], extras[i], x, rngs[i]),
        lambda i, x: g(p_g[i], x, rngs[i]),
        n,
        x_BTE,
    )


def _reversible(f, g, n: int):
    """The stack as a ``jax.custom_vjp`` that recomputes inputs from outputs.

    ``f(i, params, extra, x, rng)`` and ``g(params, x, rng)`` are pure functions of
    explicit parameters and keys; ``extras`` are parameters shared between layers (their
    gradients are summed over the layers using them). The backward pass inverts each layer,
    ``x2 = y2 - G(y1)``, ``x1 = y1 - F(x2)`` (Gomez et al. 2017, §3.1), taking the VJPs of
    G and F on the way.
    """
    forward = functools.partial(_explicit_forward, f, g, n)

    @jax.custom_vjp
    def run(p_f, p_g, extras, x_BTE, rngs):
        return forward(p_f, p_g, extras, x_BTE, rngs)

    def run_fwd(p_f, p_g, extras, x_BTE, rngs):
        y1, y2 = forward(p_f, p_g, extras, x_BTE, rngs)
        # Only the outputs (and the parameters/keys, which exist anyway) are kept.
        return (y1, y2), (p_f, p_g, extras, rngs, y1, y2)

    def run_bwd(res, cotangents):
        p_f, p_g, extras, rngs, y1, y2 = res
        dy1, dy2 = cotangents
        y1 = jax.lax.stop_gradient(y1)
        y2 = jax.lax.stop_gradient(y2)
        dp_f, dp_g, dextras = [None] * n, [None] * n, [None] * n
        for i in reversed(range(n)):
            # y2 = x2 + G(y1): recompute x2, push dy2 through G into y1.
            g_out, g_vjp = jax.vjp(lambda p, y, i=i: g(p, y, rngs[i]), p_g[i], y1)
            dp_g[i], dy1_g = g_vjp(dy2)
            x2 = y2 - g_out
            dy1 = dy1 + dy1_g
            # y1 = x1 + F(x2): recompute x1, push dy1 through F into x2.
            f_out, f_vjp = jax.vjp(
                lambda p, e, x, i=i: f(i, p, e, x, rngs[i]), p_f[i], extras[i], x2
            )
            dp_f[i], dextras[i], dx2_f = f_vjp(dy1)
            x1 = y1 - f_out
            dy2 = dy2 + dx2_f
            y1, y2 = x1, x2
        # The input feeds both streams: its cotangent is the sum of theirs.
        return dp_f, dp_g, dextras, (dy1 + dy2).astype(y1.dtype), None

    run.defvjp(run_fwd, run_bwd)
    return run
