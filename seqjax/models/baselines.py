"""The text-classification baselines before attention, one family (``baselines``) for the
classification task, picked by ``BaselineConfig.architecture``:

* ``bow``: bag of words, each word a vector of class scores, summed, plus a bias (the
  log-linear model of Neubig's lecture 2).
* ``cbow``: continuous bag of words, embeddings summed, then one linear layer.
* ``deep_cbow``: the summed embeddings through ``num_layers`` tanh layers.
* ``dan``: the Deep Averaging Network (Iyyer et al. 2015, §3): the embeddings *averaged*,
  ``num_layers`` ReLU layers, a softmax; training drops whole words with probability
  ``word_dropout`` before the average (§3.1).
* ``cnn``: Kim 2014's CNN: convolutions of widths ``filter_widths`` (3, 4, 5) with
  ``num_filters`` maps each, ReLU, max over time (over the windows inside the text),
  concatenated, dropout, one linear layer (Kim §2).

Rows are right-padded with ``pad_id``; the padding never counts (sums and averages over the
real tokens, convolution windows that start inside the text).

Legend: B batch, T time, E embedding width, F filters, C classes.
"""

from __future__ import annotations

import dataclasses

import flax.linen as nn
import jax
import jax.numpy as jnp

ARCHITECTURES = ("bow", "cbow", "deep_cbow", "dan", "cnn")


@dataclasses.dataclass(frozen=True)
class BaselineConfig:
    """The ``baselines`` family's hyper-parameters (module docstring).

    Attributes:
      vocab_size, num_classes, pad_id: from the data.
      architecture: one of ``ARCHITECTURES``.
      embed_dim: E (``bow``: the class count, set by the model).
      hidden_dim: width of the deep layers (``deep_cbow``, ``dan``).
      num_layers: deep layers (``deep_cbow``, ``dan``; Iyyer et al.: 3 on IMDB... 2 here).
      word_dropout: ``dan``: the probability of dropping a word while training (Iyyer: 0.3).
      dropout_rate: dropout before the output layer (Kim: 0.5).
      filter_widths: ``cnn``: convolution widths (Kim: 3, 4, 5).
      num_filters: ``cnn``: feature maps per width (Kim: 100).
    """

    vocab_size: int = 0
    num_classes: int = 0
    pad_id: int | None = None
    architecture: str = "dan"
    embed_dim: int = 128
    hidden_dim: int = 128
    num_layers: int = 2
    word_dropout: float = 0.3
    dropout_rate: float = 0.0
    filter_widths: tuple[int, ...] = (3, 4, 5)
    num_filters: int = 100


class BaselineClassifier(nn.Module):
    """``apply(variables, tokens_BT, deterministic=...)`` -> logits ``[B, C]``."""

    cfg: BaselineConfig

    def train_flops_per_step(self, params, *, batch_size: int, seq_len: int) -> float:
        """``6 N`` per example, N the parameters that multiply (the table is a lookup),
        times T for the CNN's convolutions."""
        n = sum(int(x.size) for x in jax.tree.leaves(params))
        n -= sum(int(x.size) for x in jax.tree.leaves(params.get("embed", {})))
        per = seq_len if self.cfg.architecture == "cnn" else 1
        return 6.0 * n * batch_size * per

    @nn.compact
    def __call__(self, tokens_BT, *, deterministic=True):
        c = self.cfg
        pad = 0 if c.pad_id is None else c.pad_id
        valid_BT = tokens_BT != pad
        width = c.num_classes if c.architecture == "bow" else c.embed_dim
        x_BTE = nn.Embed(c.vocab_size, width, name="embed")(tokens_BT)
        x_BTE = x_BTE * valid_BT[..., None]
        if c.architecture == "cnn":
            return self._cnn(x_BTE, valid_BT, deterministic)
        if c.architecture == "dan" and not deterministic and c.word_dropout > 0:
            rng = self.make_rng("dropout")
            keep_BT = jax.random.bernoulli(rng, 1.0 - c.word_dropout, tokens_BT.shape)
            valid_BT = valid_BT & keep_BT
            x_BTE = x_BTE * keep_BT[..., None]
        z_BE = x_BTE.sum(1)
        if c.architecture == "bow":
            bias = self.param("bias", nn.initializers.zeros, (c.num_classes,))
            return (z_BE + bias[None]).astype(jnp.float32)
        if c.architecture == "dan":  # the average over the (kept) words
            z_BE = z_BE / jnp.maximum(valid_BT.sum(1, keepdims=True), 1)
        if c.architecture in ("deep_cbow", "dan"):
            act = jnp.tanh if c.architecture == "deep_cbow" else nn.relu
            for i in range(c.num_layers):
                z_BE = act(nn.Dense(c.hidden_dim, name=f"layer_{i}")(z_BE))
        z_BE = nn.Dropout(c.dropout_rate)(z_BE, deterministic=deterministic)
        return nn.Dense(c.num_classes, name="head")(z_BE).astype(jnp.float32)

    def _cnn(self, x_BTE, valid_BT, deterministic):
        c = self.cfg
        t = x_BTE.shape[1]
        lengths_B = valid_BT.sum(1)
        pooled = []
        for w in c.filter_widths:
            if w > t:
                raise ValueError(f"filter width {w} exceeds the input length {t}")
            conv = nn.Conv(c.num_filters, (w,), padding="VALID", name=f"conv_{w}")
            h_BWF = nn.relu(conv(x_BTE))  # windows starting at 0 .. T - w
            starts = jnp.arange(t - w + 1)[None]
            # a window counts when it starts inside the text (the first one always)
            inside_BW = (starts <= jnp.maximum(lengths_B[:, None] - w, 0))[..., None]
            pooled.append(jnp.where(inside_BW, h_BWF, -jnp.inf).max(1))
        z_BF = jnp.concatenate(pooled, -1)
        z_BF = nn.Dropout(c.dropout_rate)(z_BF, deterministic=deterministic)
        return nn.Dense(c.num_classes, name="head")(z_BF).astype(jnp.float32)
