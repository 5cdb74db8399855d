"""Feature-based transfer (Devlin et al. 2019 §5.3, Table 7: BERT's activations as features
for CoNLL-2003 NER, the concatenation of the last four layers 96.1 F1 against 96.6 fine-tuned;
Peters et al. 2018, ELMo eq. 1): a pre-trained encoder whose parameters stay frozen and a
head over its per-layer hidden states.

Legend: B batch, T sequence length, E model width, L layers combined, C classes.

* ``combine``: the last ``L`` hidden states summed, concatenated (``[B, T, L E]``) or
  scalar-mixed (``ScalarMix``: ``γ Σ_j softmax(s)_j h_j``, ELMo eq. 1).
* ``FeatureTagger``: ``transformer.Encoder`` (its parameters under ``encoder/``, loaded with
  ``config.init_from`` or ``seqjax.convert``) + ``combine`` + a per-token ``Dense(C)``.
* ``freeze``: an optax transformation that leaves the named top-level subtrees unchanged
  (``optax.multi_transform`` with ``optax.set_to_zero``), so only the head trains.
"""

from __future__ import annotations

import flax.linen as nn
import jax.numpy as jnp
import optax

from seqjax.models import layers
from seqjax.models.transformer import Encoder, TransformerConfig

COMBINES = ("sum", "concat", "scalar_mix")


class ScalarMix(nn.Module):
    """ELMo's task-specific weighting (Peters et al. 2018, eq. 1): ``γ Σ_j s_j h_j`` with
    ``s = softmax(w)``; ``w`` starts at 0 (the mean) and ``γ`` at 1."""

    @nn.compact
    def __call__(self, hidden):
        w_L = self.param("weights", nn.initializers.zeros, (len(hidden),))
        gamma = self.param("gamma", nn.initializers.ones, ())
        s_L = nn.softmax(w_L)
        return gamma * sum(s_L[j] * h.astype(jnp.float32) for j, h in enumerate(hidden))


def combine(hidden, how: str, last: int, mix: ScalarMix | None = None):
    """The last ``last`` of ``hidden`` (a sequence of ``[B, T, E]``) combined by ``how``."""
    if how not in COMBINES:
        raise ValueError(f"combine={how!r} is not one of {COMBINES}")
    if not 1 <= last <= len(hidden):
        raise ValueError(f"last={last} must be in 1..{len(hidden)} (the hidden states there are)")
    chosen = [h.astype(jnp.float32) for h in hidden[-last:]]
    if how == "sum":
        return sum(chosen)
    if how == "concat":
        return jnp.concatenate(chosen, axis=-1)
    return (mix or ScalarMix())(chosen)


class FeatureTagger(nn.Module):
    """Tokens ``[B, T]`` -> per-token logits ``[B, T, C]`` from the combined hidden states of
    a bidirectional encoder (``features=True``: the combined features instead)."""

    cfg: TransformerConfig
    num_classes: int
    how: str = "concat"
    last: int = 4

    @nn.compact
    def __call__(self, tokens_BT, *, mask_BT=None, token_types_BT=None, deterministic=True,
                 features: bool = False):  # fmt: skip
        _, _, hidden = Encoder(self.cfg, causal=False, return_hidden=True, name="encoder")(
            tokens_BT, mask_BS=mask_BT, token_types_BT=token_types_BT, deterministic=deterministic
        )
        mix = ScalarMix(name="scalar_mix") if self.how == "scalar_mix" else None
        x_BTF = combine(hidden, self.how, self.last, mix)
        if features:
            return x_BTF
        return nn.Dense(self.num_classes, kernel_init=layers.dense_init(), name="head")(x_BTF)


def freeze(tx: optax.GradientTransformation, params, frozen=("encoder",)):
    """``tx`` on every parameter but the top-level subtrees ``frozen``, whose updates are 0
    (their optimizer state is not kept)."""
    missing = [k for k in frozen if k not in params]
    if missing:
        raise ValueError(f"frozen={tuple(frozen)}: the parameters have no {missing[0]!r} subtree; "
                         f"valid: {sorted(params)}")  # fmt: skip
    labels = {k: ("frozen" if k in frozen else "train") for k in params}
    labels = {k: _fill(params[k], v) for k, v in labels.items()}
    return optax.multi_transform({"train": tx, "frozen": optax.set_to_zero()}, labels)


def _fill(tree, label):
    import jax

    return jax.tree.map(lambda _: label, tree)
