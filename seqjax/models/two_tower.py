"""Two-tower (dual-encoder) pair classifier: LRA Retrieval's model (Tay et al. 2020, §2.4).

One bidirectional ``Encoder`` (shared parameters) encodes both documents; each is pooled to
one vector (``cfg.pooling``: "cls", a learned vector prepended, or "mean" over non-pad
positions) and the two are combined as the LRA reference's ``classifier_head_dual``:

    interaction "nli":    h = [u, v, u * v, u - v]     (Conneau et al. 2017's NLI features)
    interaction "concat": h = [u, v]
    logits = W3 relu(W2 relu(W1 h))                  (widths mlp_dim, mlp_dim // 2, C)

"The two documents are encoded separately and do not interact before the head" is the point
of the task (§2.4: a test of compressed representations), so attention never crosses
documents. Legend: B batch, T tokens per document (+1 with CLS), E model width, C classes,
F = 4E or 2E features after the interaction, M the head's MLP width.
"""

from __future__ import annotations

import flax.linen as nn
import jax.numpy as jnp

from seqjax.models.layers import dense_init
from seqjax.models.transformer import Encoder, TransformerConfig

INTERACTIONS = ("nli", "concat")


def combine(u_BE, v_BE, interaction: str):
    """The head's input features ``[B, F]`` of two pooled documents (``INTERACTIONS``)."""
    if interaction == "nli":
        return jnp.concatenate([u_BE, v_BE, u_BE * v_BE, u_BE - v_BE], axis=-1)
    if interaction == "concat":
        return jnp.concatenate([u_BE, v_BE], axis=-1)
    raise ValueError(
        f"config.model.pair_interaction={interaction!r} is invalid; valid: "
        + ", ".join(repr(i) for i in INTERACTIONS)
    )


def _dense(features: int, axes: tuple, name: str) -> nn.Dense:
    return nn.Dense(
        features,
        kernel_init=nn.with_logical_partitioning(dense_init(), axes),
        bias_init=nn.with_logical_partitioning(nn.initializers.zeros, (axes[1],)),
        name=name,
    )


class TwoTowerClassifier(nn.Module):
    """Tokens ``[B, T]`` and ``[B, T]`` -> logits ``[B, C]``; ``cfg.pad_id`` tokens are
    masked out of attention and of mean pooling.

    Attributes:
      cfg: the shared encoder's config (``num_classes``, ``pooling``, ``pad_id`` used here).
      interaction: "nli" or "concat" (``combine``).
      mlp_dim: M, the head's first width (LRA: the model's MLP width); 0 = 4 E.
    """

    cfg: TransformerConfig
    interaction: str = "nli"
    mlp_dim: int = 0

    def setup(self):
        cfg = self.cfg
        if self.interaction not in INTERACTIONS:
            combine(None, None, self.interaction)  # raises naming the field
        self.encoder = Encoder(cfg, causal=False)
        if cfg.pooling == "cls":
            self.cls = self.param(
                "cls",
                nn.with_logical_partitioning(nn.initializers.normal(0.02), ("embed",)),
                (cfg.d_model,),
            )
        m = self.mlp_dim or 4 * cfg.d_model
        self.mlp = _dense(m, ("embed", "mlp"), "mlp")
        self.mlp2 = _dense(m // 2, ("mlp", "kv"), "mlp2")  # "kv": not sharded (small)
        self.logits = _dense(cfg.num_classes, ("kv", None), "logits")

    def encode(self, tokens_BT, *, deterministic=True):
        """One document's pooled vector ``[B, E]`` (float32) from the shared encoder."""
        cfg = self.cfg
        b = tokens_BT.shape[0]
        if cfg.pad_id is not None:
            keep_BT = tokens_BT != cfg.pad_id
        else:
            keep_BT = jnp.ones(tokens_BT.shape, bool)
        prefix = None
        if cfg.pooling == "cls":
            prefix = jnp.broadcast_to(self.cls, (b, 1, cfg.d_model))
            keep_BT = jnp.concatenate([jnp.ones((b, 1), bool), keep_BT], axis=1)
        x_BTE, _ = self.encoder(
            tokens_BT, mask_BS=keep_BT, deterministic=deterministic, prefix_BPE=prefix
        )
        x_BTE = x_BTE.astype(jnp.float32)
        if cfg.pooling == "cls":
            return x_BTE[:, 0]
        w_BT = keep_BT.astype(jnp.float32)
        return (x_BTE * w_BT[..., None]).sum(1) / jnp.maximum(w_BT.sum(1), 1.0)[:, None]

    def __call__(self, tokens_BT, tokens2_BT, *, deterministic=True):
        u_BE = self.encode(tokens_BT, deterministic=deterministic)
        v_BE = self.encode(tokens2_BT, deterministic=deterministic)
        h_BF = combine(u_BE, v_BE, self.interaction)
        h_BM = nn.relu(self.mlp(h_BF))
        h_BM = nn.relu(self.mlp2(h_BM))
        return self.logits(h_BM)
