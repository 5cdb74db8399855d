"""Adaptive input embeddings and the (projected) adaptive softmax, as Transformer-XL uses
them for word-level vocabularies.

* Adaptive softmax (Grave et al. 2017, §4, eq. 5-6): the vocabulary is split by frequency
  at the ``cutoffs`` into a head (the shortlist ``[0, c_1)`` plus one logit per tail
  cluster) and tail clusters ``[c_i, c_{i+1})``. ``log p(w) = log p_head(w)`` for a
  shortlist word and ``log p_head(cluster_i) + log p_i(w)`` for a word of cluster i: an
  exact, normalised distribution over the whole vocabulary.
* Adaptive input (Baevski & Auli 2019, §3): cluster i embeds its words in
  ``d / div_val^i`` dimensions and projects them to the model width; the output layer of
  cluster i reuses that table and that projection when tied (Transformer-XL's
  ``AdaptiveEmbedding`` / ``ProjectedAdaptiveLogSoftmax`` with ``tie_weight`` and
  ``tie_projs``: one matrix ``P_i [E, d_i]`` maps embeddings up (``e P_i^T``) and hidden
  states down (``h P_i``)). With ``div_val = 1`` and ``d_i = E`` there is no projection.

With no cutoffs both reduce to a plain embedding and a full softmax (tested equal).

Legend: B batch, T length, E model width (d_proj), V vocabulary, K clusters (tails), d_i
cluster i's embedding width, n_i its number of words, C head size ``c_1 + K``.
"""

from __future__ import annotations

from collections.abc import Sequence

import flax.linen as nn
import jax
import jax.numpy as jnp


def check_cutoffs(cutoffs: Sequence[int], vocab_size: int, div_val: float = 1) -> None:
    """Raises ``ValueError`` naming ``model.adaptive`` unless ``0 < c_1 < c_2 < ... <
    vocab_size`` and ``div_val >= 1``."""
    cutoffs = list(cutoffs)
    if any(not isinstance(c, int) for c in cutoffs) or cutoffs != sorted(set(cutoffs)):
        raise ValueError(
            f"model.adaptive.cutoffs={cutoffs} must be strictly increasing integers, "
            f"each in 1..{vocab_size - 1} (vocab_size={vocab_size})"
        )
    if cutoffs and (cutoffs[0] < 1 or cutoffs[-1] >= vocab_size):
        raise ValueError(
            f"model.adaptive.cutoffs={cutoffs} must lie in 1..{vocab_size - 1}: beyond the "
            f"vocabulary (vocab_size={vocab_size}) a cluster would be empty"
        )
    if not div_val >= 1:
        raise ValueError(f"model.adaptive.div_val={div_val} must be >= 1")


def cluster_bounds(cutoffs: Sequence[int], vocab_size: int) -> list[tuple[int, int]]:
    """``[(0, c_1), (c_1, c_2), ..., (c_K, V)]``: the head shortlist then each tail."""
    edges = [0, *cutoffs, vocab_size]
    return list(zip(edges[:-1], edges[1:], strict=True))


def cluster_width(d_embed: int, div_val: float, i: int) -> int:
    """``d_i = d_embed / div_val^i`` (Baevski & Auli 2019, §3; at least 1)."""
    return max(1, int(d_embed // (div_val**i)))


class AdaptiveSoftmax(nn.Module):
    """Adaptive input embedding and projected adaptive log-softmax sharing their tables.

    Attributes:
      vocab_size: V; cutoffs: the cluster boundaries; div_val: width divisor per cluster.
      d_model: E (the model width, Transformer-XL's d_proj); d_embed: width of cluster 0
        (0 = E).
      tie_weights: output tables are the embedding tables (Transformer-XL ``tie_weight``).
      tie_projs: output projections are the embedding projections (``tie_projs``).
    """

    vocab_size: int
    cutoffs: tuple[int, ...] = ()
    div_val: float = 1
    d_model: int = 128
    d_embed: int = 0
    tie_weights: bool = True
    tie_projs: bool = True

    def setup(self):
        check_cutoffs(self.cutoffs, self.vocab_size, self.div_val)
        d0 = self.d_embed or self.d_model
        self.bounds = cluster_bounds(self.cutoffs, self.vocab_size)
        tables, projs, out_tables, out_projs, biases = [], [], [], [], []
        for i, (lo, hi) in enumerate(self.bounds):
            d_i = cluster_width(d0, self.div_val, i)
            tables.append(
                self.param(
                    f"embed_{i}",
                    nn.with_logical_partitioning(
                        nn.initializers.normal(stddev=d_i**-0.5), ("vocab", "embed")
                    ),
                    (hi - lo, d_i),
                )
            )
            proj_init = nn.with_logical_partitioning(
                nn.initializers.variance_scaling(1.0, "fan_in", "truncated_normal", in_axis=1),
                ("embed", None),
            )
            needs_proj = d_i != self.d_model
            projs.append(
                self.param(f"proj_{i}", proj_init, (self.d_model, d_i)) if needs_proj else None
            )
            if self.tie_weights:
                out_tables.append(tables[-1])
            else:
                out_tables.append(
                    self.param(
                        f"out_embed_{i}",
                        nn.with_logical_partitioning(
                            nn.initializers.normal(stddev=d_i**-0.5), ("vocab", "embed")
                        ),
                        (hi - lo, d_i),
                    )
                )
            if self.tie_projs or not needs_proj:
                out_projs.append(projs[-1])
            else:
                out_projs.append(self.param(f"out_proj_{i}", proj_init, (self.d_model, d_i)))
            biases.append(
                self.param(
                    f"bias_{i}",
                    nn.with_logical_partitioning(nn.initializers.zeros, ("vocab",)),
                    (hi - lo,),
                )
            )
        self.tables, self.projs = tables, projs
        self.out_tables, self.out_projs, self.biases = out_tables, out_projs, biases
        k = len(self.cutoffs)
        if k:
            self.cluster_weight = self.param(
                "cluster_weight",
                nn.with_logical_partitioning(nn.initializers.zeros, (None, "embed")),
                (k, cluster_width(d0, self.div_val, 0)),
            )
            self.cluster_bias = self.param(
                "cluster_bias", nn.with_logical_partitioning(nn.initializers.zeros, (None,)), (k,)
            )

    def embed(self, tokens_BT):
        """Adaptive input: ``[B, T]`` -> ``[B, T, E]`` float32, scaled by sqrt(E) (as
        Transformer-XL's ``emb_scale`` and ``layers.token_embedding``)."""
        out_BTE = jnp.zeros((*tokens_BT.shape, self.d_model), jnp.float32)
        for (lo, hi), table, proj in zip(self.bounds, self.tables, self.projs, strict=True):
            inside_BT = (tokens_BT >= lo) & (tokens_BT < hi)
            e_BTd = table[jnp.clip(tokens_BT - lo, 0, hi - lo - 1)]
            if proj is not None:
                e_BTd = jnp.einsum("btd,ed->bte", e_BTd, proj)
            out_BTE = out_BTE + jnp.where(inside_BT[..., None], e_BTd, 0.0)
        return out_BTE * jnp.sqrt(float(self.d_model))

    def _logits(self, h_BTE, i: int):
        """Cluster i's output logits ``[B, T, n_i]`` (``h P_i W_i^T + b_i``)."""
        proj = self.out_projs[i]
        h_BTd = h_BTE if proj is None else jnp.einsum("bte,ed->btd", h_BTE, proj)
        return jnp.einsum("btd,nd->btn", h_BTd, self.out_tables[i]) + self.biases[i][None, None]

    def log_probs(self, h_BTE):
        """Exact normalised log-probabilities over the vocabulary, float32 ``[B, T, V]``
        (Grave et al. 2017, eq. 5-6)."""
        h_BTE = h_BTE.astype(jnp.float32)
        head_BTn = self._logits(h_BTE, 0)
        if not self.cutoffs:
            return jax.nn.log_softmax(head_BTn, -1)
        proj = self.out_projs[0]
        h0 = h_BTE if proj is None else jnp.einsum("bte,ed->btd", h_BTE, proj)
        cluster_BTK = (
            jnp.einsum("btd,kd->btk", h0, self.cluster_weight) + self.cluster_bias[None, None]
        )
        head_BTC = jax.nn.log_softmax(jnp.concatenate([head_BTn, cluster_BTK], -1), -1)
        c0 = self.cutoffs[0]
        parts = [head_BTC[..., :c0]]
        for i in range(1, len(self.bounds)):
            tail_BTn = jax.nn.log_softmax(self._logits(h_BTE, i), -1)
            parts.append(head_BTC[..., c0 + i - 1 : c0 + i] + tail_BTn)
        return jnp.concatenate(parts, -1)

    def __call__(self, h_BTE):
        return self.log_probs(h_BTE)


def output_parameter_count(vocab_size: int, d_model: int, cutoffs=(), div_val: float = 1) -> int:
    """Parameters of the output layer (tables, projections, biases, cluster logits) with
    untied weights: the memory the study compares with the full softmax's ``V (E + 1)``."""
    total = 0
    for i, (lo, hi) in enumerate(cluster_bounds(cutoffs, vocab_size)):
        d_i = cluster_width(d_model, div_val, i)
        total += (hi - lo) * (d_i + 1) + (d_model * d_i if d_i != d_model else 0)
    return total + len(cutoffs) * (cluster_width(d_model, div_val, 0) + 1)
