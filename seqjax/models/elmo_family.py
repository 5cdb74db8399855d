"""ELMo as a trainable model family (``config.model.family = "elmo"``; Peters et al. 2018),
built from the parts in ``seqjax.models.elmo``:

* ``ELMoLM`` (task ``bilm``, ``config.data.objective = 'bilm'``; §3.1): the character-CNN
  token encoder and the forward and backward stacks of projected LSTMs (``encoder/``), and
  one softmax shared by the two LMs (``softmax/``); it returns the two LMs' logits and the
  task trains them as separate LMs, ``loss = ½ (NLL_forward + NLL_backward)``.
* ``ELMoClassifier`` (task ``classification``; §3.3, feature-based transfer): the same
  ``encoder/`` (loaded from the pre-training run with ``config.init_from``), the
  task-weighted scalar mix of its ``L + 1`` layers (eq. 1: ``γ Σ_j softmax(s)_j h_j``), the
  mean over each row's real tokens, one hidden ReLU layer and the classes. With
  ``model.freeze_bilm`` (default) the biLM is frozen: its layers pass ``stop_gradient`` and
  the family's ``frozen`` makes the optimizer leave ``encoder/`` unchanged
  (added to ``optimizer.freeze`` by ``train.setup``: no update, no weight decay).

Both read each token's characters: the family asks the data for ``token_chars`` ``[B, T,
L]`` (``Family.token_chars = 50``, AllenNLP's ``ELMoCharacterMapper``;
``seqjax.data.token_chars``), which the task passes as ``token_chars_BTL``. The word
vocabulary matters only to the softmax, so a classifier's data may have another one.

Legend: B batch, T tokens, L characters per token, P projection, V vocabulary, C classes.
"""

from __future__ import annotations

import dataclasses

import flax.linen as nn
import jax
import jax.numpy as jnp

from seqjax.models import registry
from seqjax.models.elmo import BiLM, ScalarMix

CHAR_VOCAB = 262  # seqjax.data.token_chars.NUM_CHARS (models sit below data: not imported)


@dataclasses.dataclass(frozen=True)
class ELMoConfig:
    """ELMo's hyper-parameters (defaults: a small biLM; ELMo's own is 4096 cells, 512
    projection, filters up to width 7 with 2048 maps in all, 2 highway layers)."""

    vocab_size: int = 0  # the data's (the softmax)
    num_classes: int = 0  # the classifier's (0: the biLM)
    pad_id: int | None = None  # the data's padding id (None: no padding)
    token_chars: int = 50  # L, characters per token (config.data.token_chars)
    char_dim: int = 16
    filters: tuple = ((1, 32), (2, 32), (3, 64), (4, 128))  # (width, maps) of the char CNN
    num_highway: int = 2
    num_layers: int = 2
    hidden_dim: int = 512  # H, LSTM cells
    proj_dim: int = 128  # P, projection and token width
    classifier_hidden: int = 128
    freeze_bilm: bool = True  # feature-based transfer (False: fine-tune the biLM too)


def _lengths(cfg: ELMoConfig, inputs_BT):
    if cfg.pad_id is None:
        return jnp.full(inputs_BT.shape[:1], inputs_BT.shape[1], jnp.int32)
    return jnp.maximum((inputs_BT != cfg.pad_id).sum(-1), 1).astype(jnp.int32)


def _chars(cfg: ELMoConfig, inputs_BT, token_chars_BTL):
    if token_chars_BTL is None:  # model.init's dummy inputs
        return jnp.zeros((*inputs_BT.shape, cfg.token_chars), jnp.int32)
    return token_chars_BTL


def _bilm(cfg: ELMoConfig) -> BiLM:
    return BiLM(CHAR_VOCAB, cfg.vocab_size, cfg.num_layers, cfg.hidden_dim, cfg.proj_dim,
                cfg.char_dim, tuple(cfg.filters), cfg.num_highway, lm_head=False,
                name="encoder")  # fmt: skip


def _flops(params, batch_size: int, seq_len: int) -> float:
    """``6 N`` per token (Kaplan et al. 2020), N every parameter but the character table."""
    n = sum(int(x.size) for x in jax.tree.leaves(params))
    table = params.get("encoder", {}).get("token_encoder", {}).get("char_embed", {})
    n -= sum(int(x.size) for x in jax.tree.leaves(table))
    return 6.0 * n * batch_size * seq_len


class ELMoLM(nn.Module):
    """``apply(v, inputs_BT, token_chars_BTL)`` -> ``(forward [B, T, V], backward [B, T,
    V])`` logits: the forward ones at t predict token t+1, the backward ones token t-1."""

    cfg: ELMoConfig

    def train_flops_per_step(self, params, *, batch_size: int, seq_len: int) -> float:
        return _flops(params, batch_size, seq_len)

    @nn.compact
    def __call__(self, inputs_BT, token_chars_BTL=None, *, deterministic=True):
        del deterministic  # no dropout
        c = self.cfg
        layers, _, _ = _bilm(c)(_chars(c, inputs_BT, token_chars_BTL), _lengths(c, inputs_BT))
        fwd_BTP, bwd_BTP = jnp.split(layers[-1], 2, axis=-1)
        softmax = nn.Dense(c.vocab_size, name="softmax")  # shared by the two LMs
        return softmax(fwd_BTP).astype(jnp.float32), softmax(bwd_BTP).astype(jnp.float32)


class ELMoClassifier(nn.Module):
    """``apply(v, inputs_BT, token_chars_BTL)`` -> logits ``[B, C]`` (module docstring)."""

    cfg: ELMoConfig

    def train_flops_per_step(self, params, *, batch_size: int, seq_len: int) -> float:
        return _flops(params, batch_size, seq_len)

    @nn.compact
    def __call__(self, inputs_BT, token_chars_BTL=None, *, deterministic=True):
        del deterministic
        c = self.cfg
        lengths_B = _lengths(c, inputs_BT)
        layers, _, _ = _bilm(c)(_chars(c, inputs_BT, token_chars_BTL), lengths_B)
        if c.freeze_bilm:
            layers = [jax.lax.stop_gradient(h) for h in layers]
        mixed_BTD = ScalarMix(len(layers), name="mix")(layers)
        keep_BT1 = (jnp.arange(inputs_BT.shape[1])[None] < lengths_B[:, None])[..., None]
        pooled_BD = (mixed_BTD * keep_BT1).sum(1) / lengths_B[:, None]
        hidden = nn.relu(nn.Dense(c.classifier_hidden, name="hidden")(pooled_BD))
        return nn.Dense(c.num_classes, name="head")(hidden).astype(jnp.float32)


def _config(config, info, needs) -> ELMoConfig:
    filters = tuple(tuple(int(v) for v in f) for f in config.model.get("filters", ()))
    chars = int(config.data.get("token_chars") or ELMoConfig.token_chars)
    return registry.dataclass_from_block(
        ELMoConfig, config.model, vocab_size=int(info.vocab_size),
        num_classes=int(needs.num_classes), pad_id=info.pad_id, token_chars=chars,
        **({"filters": filters} if filters else {}),
    )  # fmt: skip


def _lm(cfg, *, task, decode=False):
    del task
    if decode:
        raise ValueError("the ELMo biLM has no decoding mode (it is not a sampler)")
    return ELMoLM(cfg)


def _classifier(cfg, *, task, decode=False):
    del task
    if decode:
        raise ValueError("the classifier has no decoding mode")
    return ELMoClassifier(cfg)


def _frozen(model_cfg) -> tuple[str, ...]:
    """The classifier's biLM when ``freeze_bilm`` (feature-based transfer)."""
    return ("encoder",) if model_cfg.num_classes and model_cfg.freeze_bilm else ()


def _is_int(x, low: int) -> bool:
    return isinstance(x, int) and not isinstance(x, bool) and x >= low


def _validate(config, bad) -> None:
    m = config.model
    for field, low in (("num_layers", 1), ("hidden_dim", 1), ("proj_dim", 1), ("char_dim", 1),
                       ("num_highway", 0), ("classifier_hidden", 1)):  # fmt: skip
        if not _is_int(m.get(field), low):
            bad(f"model.{field}", m.get(field), f"an integer >= {low}")
    filters = m.get("filters")
    ok = bool(filters) and all(
        len(f) == 2 and _is_int(f[0], 1) and _is_int(f[1], 1) for f in filters or ()
    )
    if not ok:
        bad("model.filters", filters, "a non-empty tuple of (width, maps) integer pairs >= 1")
    chars = config.data.get("token_chars") or 0
    if ok and chars and chars < max(f[0] for f in filters):
        bad("data.token_chars", chars, f">= the widest filter ({max(f[0] for f in filters)})")
    if not isinstance(m.get("freeze_bilm"), bool):
        bad("model.freeze_bilm", m.get("freeze_bilm"), "True (feature-based) or False")
    if config.data.get("packing"):
        bad("data.packing", True, 'False with model.family="elmo"')


ELMO = registry.register(
    registry.Family(
        name="elmo",
        doc="ELMo: char-CNN + biLM of projected LSTMs (pre-training), scalar-mix features",
        config_class=ELMoConfig,
        build_config=_config,
        modules={"bilm": _lm, "classification": _classifier},
        validate=_validate,
        from_data=("vocab_size", "num_classes", "pad_id", "token_chars"),
        common_checks=False,
        token_chars=ELMoConfig.token_chars,
        frozen=_frozen,
    )
)
