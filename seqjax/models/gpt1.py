"""GPT-1 (Radford et al. 2018, "Improving Language Understanding by Generative Pre-Training"):
a post-LN Transformer decoder with learned positions, fine-tuned with its input transforms
and the auxiliary LM loss.

Legend: B batch, C choices (or 1), T sequence length, E model width, V vocabulary.

* The network (§3.1, §4.1): ``TransformerLM`` with ``norm_position="post"`` (LayerNorm after
  each residual sum, no final norm), GELU's tanh form, learned positions, biases, a tied
  output layer (``gpt1_config``).
* ``DoubleHeadsLM``: the LM logits and, for each sequence, a linear classifier on the hidden
  state of its extract token (``mc_index``) — the "causal classifier that pools the last
  token" of §3.2 (one logit per choice for multiple choice, Fig. 1 right).
* The input transforms (§3.3, Fig. 1): ``[start] a [delim] b [extract]`` for entailment (and
  both orders for similarity), one sequence per answer for multiple choice
  (``pair_input``, ``choice_inputs``).
* The fine-tuning objective (eq. 5): ``L3 = L2 + λ L1`` with λ = 0.5 (§4.1):
  ``finetune_loss``.
"""

from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from seqjax.models import layers
from seqjax.models.transformer import Encoder, TransformerConfig

AUX_LM_WEIGHT = 0.5  # λ, §4.1


def gpt1_config(**sizes) -> TransformerConfig:
    """A ``TransformerConfig`` with GPT-1's layout (``sizes``: vocab_size, num_layers, ...)."""
    layout = dict(positional="learned", causal=True, norm_position="post", norm_eps=1e-5,
                  activation="gelu_tanh", attention_bias=True, embed_scale=False,
                  tie_embeddings=True)  # fmt: skip
    return TransformerConfig(**{**layout, **sizes})


class DoubleHeadsLM(nn.Module):
    """``(tokens [B, C, T], mc_index [B, C]) -> (LM logits [B, C, T, V], choice logits
    [B, C])`` (float32)."""

    cfg: TransformerConfig

    @nn.compact
    def __call__(self, tokens_BCT, mc_index_BC, *, mask_BCT=None, deterministic=True):
        cfg = self.cfg
        b, c, t = tokens_BCT.shape
        flat = tokens_BCT.reshape(b * c, t)
        mask = None if mask_BCT is None else mask_BCT.reshape(b * c, t)
        x_NTE, embed = Encoder(cfg, causal=True, name="encoder")(
            flat, mask_BS=mask, deterministic=deterministic
        )
        x_NTE = x_NTE.astype(jnp.float32)
        lm_NTV = embed.attend(x_NTE)
        x_NE = jnp.take_along_axis(x_NTE, mc_index_BC.reshape(b * c, 1, 1), axis=1)[:, 0]
        x_NE = nn.Dropout(cfg.dropout_rate)(x_NE, deterministic=deterministic)
        mc_N1 = nn.Dense(1, kernel_init=layers.dense_init(), name="mc_head")(x_NE)
        return lm_NTV.reshape(b, c, t, -1).astype(jnp.float32), mc_N1.reshape(b, c)


def finetune_loss(lm_BCTV, mc_BC, tokens_BCT, weights_BCT, labels_B, lam=AUX_LM_WEIGHT):
    """Radford et al. 2018 eq. 5: the choice cross-entropy ``L2`` plus ``λ`` times the LM
    loss ``L1`` of each sequence's next tokens (``weights_BCT``: 1 where the token at t + 1
    is a real token to predict). Returns ``(loss, {"clf", "lm"})``."""
    clf = -jnp.mean(jnp.take_along_axis(jax.nn.log_softmax(mc_BC), labels_B[:, None], 1))
    log_p = jax.nn.log_softmax(lm_BCTV[:, :, :-1], axis=-1)
    nll = -jnp.take_along_axis(log_p, tokens_BCT[:, :, 1:, None], axis=-1)[..., 0]
    w = weights_BCT[:, :, 1:].astype(jnp.float32)
    lm = jnp.sum(nll * w) / jnp.maximum(w.sum(), 1.0)
    return clf + lam * lm, {"clf": clf, "lm": lm}


def pair_input(a, b, *, start: int, delim: int, extract: int):
    """``[start] a [delim] b [extract]`` (§3.3, entailment; similarity uses both orders)."""
    return np.array([start, *a, delim, *b, extract], np.int32)


def choice_inputs(context, answers, *, start: int, delim: int, extract: int, pad: int, length=0):
    """One ``[start] context [delim] answer [extract]`` per answer (§3.3, multiple choice),
    right-padded with ``pad`` to ``length`` (0: the longest): ``(tokens [C, T], mc_index [C],
    mask [C, T])``."""
    rows = [pair_input(context, a, start=start, delim=delim, extract=extract) for a in answers]
    t = max(length, max(len(r) for r in rows))
    tokens = np.full((len(rows), t), pad, np.int32)
    mask = np.zeros((len(rows), t), bool)
    for i, r in enumerate(rows):
        if len(r) > t:
            raise ValueError(f"length={length} is shorter than a {len(r)}-token input")
        tokens[i, : len(r)], mask[i, : len(r)] = r, True
    return tokens, mask.sum(1).astype(np.int32) - 1, mask


class CausalClassifier(nn.Module):
    """GPT-1's fine-tuning model for classification and entailment (§3.2, eq. 3; Hugging
    Face ``OpenAIGPTForSequenceClassification``'s ``score`` on the last token, plus the tied LM
    head of the auxiliary loss): ``(tokens [B, T], last [B]) -> (LM logits [B, T, V], class
    logits [B, K])``; the classifier ``W_y`` (no bias) reads the hidden state at ``last``, the
    extract token."""

    cfg: TransformerConfig

    @nn.compact
    def __call__(self, tokens_BT, last_B, *, mask_BT=None, deterministic=True):
        cfg = self.cfg
        x_BTE, embed = Encoder(cfg, causal=True, name="encoder")(
            tokens_BT, mask_BS=mask_BT, deterministic=deterministic
        )
        x_BTE = x_BTE.astype(jnp.float32)
        lm_BTV = embed.attend(x_BTE)
        x_BE = jnp.take_along_axis(x_BTE, last_B[:, None, None], axis=1)[:, 0]
        x_BE = nn.Dropout(cfg.dropout_rate)(x_BE, deterministic=deterministic)
        score = nn.Dense(cfg.num_classes, use_bias=False, kernel_init=layers.dense_init(),
                         name="score")  # fmt: skip
        return lm_BTV.astype(jnp.float32), score(x_BE).astype(jnp.float32)
