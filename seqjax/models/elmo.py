"""ELMo's parts (Peters et al. 2018): the character-CNN word encoder with highway layers,
the bidirectional LM of projected LSTMs, and the task-weighted scalar mix of its layers.

* ``Highway`` (Srivastava et al. 2015): per layer ``y = g ⊙ x + (1 - g) ⊙ relu(A x)``,
  ``g = σ(B x)``, ``A`` and ``B`` one ``Dense`` of width 2D (the gate's half of the bias
  starts at 1, carrying the input), as AllenNLP's ``Highway``.
* ``CharCNN`` (Kim et al. 2016; ELMo §3.4 / AllenNLP's ``_ElmoCharacterEncoder``): each
  token's characters embedded, one convolution per ``(width, maps)``, the max over the
  character positions, ReLU, concatenated, ``num_highway`` highway layers, a linear
  projection to the token width.
* ``ProjectedLSTMCell``: the LSTM with a projection of its output (Sak et al. 2014; ELMo's
  LSTMs, ``torch.nn.LSTM(proj_size=P)``): gates from ``[x; r_{t-1}]``, ``c_t = f c + i g``,
  ``r_t = W_hr (o ⊙ tanh(c_t))`` ``[P]`` is both the output and the recurrent state. Flax has
  no projected cell, so this one is written out as a ``nn.RNNCellBase`` (run by ``nn.RNN``),
  with Flax's gate layout (``i{i,f,g,o}`` / ``h{i,f,g,o}``, one bias per gate).
* ``BiLM`` (§3.1): the token encodings, then a forward and a backward stack of projected
  LSTMs with their own parameters (the two LMs are trained separately, sharing only the
  token encoder and the softmax), a residual connection from the second layer on; its
  layers ``[x_k; x_k], [→h_k,1; ←h_k,1], ...`` for the mix, and the two LMs' logits.
* ``ScalarMix`` (eq. 1): ``γ Σ_j softmax(s)_j h_j``.

Legend: B batch, T tokens, L characters per token, C character embedding width, F maps,
D token width, H LSTM cells, P projection, V vocabulary, K layers mixed.
"""

from __future__ import annotations

import functools

import flax.linen as nn
import jax
import jax.numpy as jnp


class Highway(nn.Module):
    """``num_layers`` highway layers of width ``dim`` (module docstring)."""

    dim: int
    num_layers: int = 1

    @nn.compact
    def __call__(self, x):
        def bias_init(key, shape, dtype=jnp.float32):
            del key
            return jnp.concatenate([jnp.zeros(shape[0] // 2), jnp.ones(shape[0] // 2)]).astype(
                dtype
            )

        for i in range(self.num_layers):
            proj = nn.Dense(2 * self.dim, bias_init=bias_init, name=f"layer_{i}")(x)
            nonlinear, gate = jnp.split(proj, 2, axis=-1)
            gate = jax.nn.sigmoid(gate)
            x = gate * x + (1.0 - gate) * nn.relu(nonlinear)
        return x


class CharCNN(nn.Module):
    """``chars_BTL`` (character ids, 0 = padding) -> token vectors ``[B, T, D]``."""

    num_chars: int
    char_dim: int = 16
    filters: tuple[tuple[int, int], ...] = ((1, 32), (2, 32), (3, 64))
    num_highway: int = 2
    out_dim: int = 128

    @nn.compact
    def __call__(self, chars_BTL):
        b, t, length = chars_BTL.shape
        x_NLC = nn.Embed(self.num_chars, self.char_dim, name="char_embed")(
            chars_BTL.reshape(b * t, length)
        )
        pooled = []
        for i, (width, maps) in enumerate(self.filters):
            h_NWF = nn.Conv(maps, (width,), padding="VALID", name=f"conv_{i}")(x_NLC)
            pooled.append(nn.relu(h_NWF.max(axis=1)))
        z_NF = jnp.concatenate(pooled, -1)
        z_NF = Highway(z_NF.shape[-1], self.num_highway, name="highway")(z_NF)
        return nn.Dense(self.out_dim, name="projection")(z_NF).reshape(b, t, self.out_dim)


class ProjectedLSTMCell(nn.RNNCellBase):
    """The LSTM with a projected output (module docstring); carry ``(c [H], r [P])``."""

    features: int  # H
    proj_features: int  # P

    @nn.compact
    def __call__(self, carry, inputs):
        c, r = carry
        dense_i = functools.partial(nn.Dense, self.features, use_bias=False)
        dense_h = functools.partial(nn.Dense, self.features, use_bias=True)
        i = jax.nn.sigmoid(dense_i(name="ii")(inputs) + dense_h(name="hi")(r))
        f = jax.nn.sigmoid(dense_i(name="if")(inputs) + dense_h(name="hf")(r))
        g = jnp.tanh(dense_i(name="ig")(inputs) + dense_h(name="hg")(r))
        o = jax.nn.sigmoid(dense_i(name="io")(inputs) + dense_h(name="ho")(r))
        new_c = f * c + i * g
        new_r = nn.Dense(self.proj_features, use_bias=False, name="hr")(o * jnp.tanh(new_c))
        return (new_c, new_r), new_r

    @nn.nowrap
    def initialize_carry(self, rng, input_shape):
        del rng
        batch = input_shape[:-1]
        return (jnp.zeros((*batch, self.features)), jnp.zeros((*batch, self.proj_features)))

    @property
    def num_feature_axes(self) -> int:
        return 1


class ScalarMix(nn.Module):
    """``γ Σ_j softmax(s)_j h_j`` over ``K`` layers (Peters et al. eq. 1), ``s`` starting at
    zeros and ``γ`` at one (AllenNLP's ``ScalarMix`` without its layer norm)."""

    num_layers: int

    @nn.compact
    def __call__(self, layers):
        if len(layers) != self.num_layers:
            raise ValueError(f"ScalarMix of {self.num_layers} layers got {len(layers)}")
        s_K = self.param("scalars", nn.initializers.zeros, (self.num_layers,))
        gamma = self.param("gamma", nn.initializers.ones, ())
        w_K = jax.nn.softmax(s_K)
        return gamma * sum(w_K[k] * h for k, h in enumerate(layers))


class BiLM(nn.Module):
    """The bidirectional LM (module docstring): ``chars_BTL`` -> ``(layers, fwd_logits,
    bwd_logits)``; ``layers`` are ``num_layers + 1`` arrays ``[B, T, 2P]``; the forward
    logits at t predict token t+1, the backward ones token t-1. ``lengths_B``: each row's
    real tokens (the backward LM starts at the last one). ``lm_head=False``: no softmax
    (the logits are None; a module that owns the softmax itself, or feature extraction)."""

    num_chars: int
    vocab_size: int
    num_layers: int = 2
    hidden_dim: int = 512  # H
    proj_dim: int = 128  # P, also the token width
    char_dim: int = 16
    filters: tuple[tuple[int, int], ...] = ((1, 32), (2, 32), (3, 64))
    num_highway: int = 2
    lm_head: bool = True

    @nn.compact
    def __call__(self, chars_BTL, lengths_B=None):
        x_BTP = CharCNN(self.num_chars, self.char_dim, self.filters, self.num_highway,
                        self.proj_dim, name="token_encoder")(chars_BTL)  # fmt: skip
        layers = [jnp.concatenate([x_BTP, x_BTP], -1)]
        fwd, bwd = x_BTP, x_BTP
        for k in range(self.num_layers):
            cell_f = ProjectedLSTMCell(self.hidden_dim, self.proj_dim, name=f"forward_l{k}")
            cell_b = ProjectedLSTMCell(self.hidden_dim, self.proj_dim, name=f"backward_l{k}")
            new_f = nn.RNN(cell_f)(fwd, seq_lengths=lengths_B)
            new_b = nn.RNN(cell_b, reverse=True, keep_order=True)(bwd, seq_lengths=lengths_B)
            fwd, bwd = (new_f + fwd, new_b + bwd) if k > 0 else (new_f, new_b)  # residual
            layers.append(jnp.concatenate([fwd, bwd], -1))
        if not self.lm_head:
            return layers, None, None
        softmax = nn.Dense(self.vocab_size, name="softmax")  # shared by the two LMs
        return layers, softmax(fwd).astype(jnp.float32), softmax(bwd).astype(jnp.float32)


class ELMoFeatureClassifier(nn.Module):
    """Feature-based transfer (Peters et al. §3.3): the biLM's layers under
    ``stop_gradient`` (frozen: only the mix and the classifier learn), the task's scalar mix
    (eq. 1), the mean over each row's tokens, one hidden ReLU layer and the classes.

    ``apply(variables, chars_BTL, lengths_B)`` -> logits ``[B, C]``; ``variables['params']
    ['bilm']`` are the trained biLM's parameters (the rest starts fresh)."""

    bilm: BiLM
    num_classes: int
    hidden_dim: int = 128

    @nn.compact
    def __call__(self, chars_BTL, lengths_B):
        layers, _, _ = self.bilm(chars_BTL, lengths_B)
        layers = [jax.lax.stop_gradient(h) for h in layers]
        mixed_BTD = ScalarMix(len(layers), name="mix")(layers)
        keep_BT1 = (jnp.arange(chars_BTL.shape[1])[None] < lengths_B[:, None])[..., None]
        pooled_BD = (mixed_BTD * keep_BT1).sum(1) / jnp.maximum(lengths_B, 1)[:, None]
        hidden = nn.relu(nn.Dense(self.hidden_dim, name="hidden")(pooled_BD))
        return nn.Dense(self.num_classes, name="head")(hidden).astype(jnp.float32)
