"""GPT-Neo as a Hugging Face architecture: a decoder LM whose layers alternate dense
("global") and locally banded ("local") attention <-> ``TransformerLM`` (Black et al. 2021,
EleutherAI's GPT-Neo: GPT-3's alternating dense and locally banded sparse layers, Brown et al.
2020 §2.1, after the Sparse Transformer, Child et al. 2019).

Why the ``transformer`` family and not a new one: GPT-Neo is GPT-2 (pre-LN blocks, learned
positions, tanh-GELU, tied output layer; Radford et al. 2019 §2.3) with four differences, each
already an option of ``TransformerConfig``:

* the per-layer attention type is the attention cycle ``TransformerConfig.attention``
  (``config.json`` ``attention_types`` ``[[["global", "local"], 12]]`` expands to one entry
  per layer): "global" is ``dense``; "local" is ``flex`` with the ``sliding_window`` pattern
  (seqjax's block-sparse engines: Pallas kernels on GPU, the plain-JAX block-sparse engine
  elsewhere; only the band's blocks are computed, not a dense mask);
* the window: GPT-Neo's local mask keeps key j for query i iff ``0 <= i - j < window_size``
  (``window_size`` counts the query itself), seqjax's ``sliding_window`` with the causal
  flag keeps ``0 <= i - j <= window``, so ``window = window_size - 1``; ``window_size = 1``
  (the query alone) is ``local`` with ``block_len = 1``;
* no 1/sqrt(D) on the logits (``attention_scale = 1.0``);
* no biases on the Q/K/V projections, one on the output projection
  (``attention_qkv_bias = False``), and ``torch.nn.Linear`` weights (``[out, in]``) where
  GPT-2 has ``Conv1D`` (``[in, out]``).

Read: ``GPTNeoForCausalLM`` and ``GPTNeoModel`` (a bare decoder: the output layer is the tied
token table).
"""

from __future__ import annotations

from seqjax.attention import registry as attention_registry
from seqjax.convert import encoders, registry
from seqjax.convert import mapping as m
from seqjax.models.transformer import TransformerConfig

GLOBAL, LOCAL = "global", "local"
GLOBAL_MECHANISM = "dense"  # a "global" layer (or the always-causal dense mechanism)


def local_attention(window_size: int) -> tuple[str, tuple]:
    """The seqjax attention of a GPT-Neo "local" layer of ``window_size`` (module docstring)."""
    if window_size == 1:
        return ("local", (("block_len", 1),))
    return ("flex", (("pattern", "sliding_window"), ("window", int(window_size) - 1)))


def attention_layers(hf: dict) -> list[str]:
    """GPT-Neo's per-layer types: ``attention_layers`` if present, else ``attention_types``
    (``[[types, repeats], ...]``) expanded, as ``GPTNeoConfig`` does."""
    if hf.get("attention_layers"):
        return list(hf["attention_layers"])
    types = hf.get("attention_types") or [[[GLOBAL, LOCAL], 12]]
    return [t for kinds, repeats in types for _ in range(repeats) for t in kinds]


def gpt_neo_config(hf: dict, max_len: int | None = None) -> TransformerConfig:
    """The ``TransformerConfig`` of a GPT-Neo ``config.json`` (``max_len`` unused: the learned
    position table keeps all its rows)."""
    n = hf.get("num_layers", 24)
    layers = attention_layers(hf)
    if len(layers) != n or any(t not in (GLOBAL, LOCAL) for t in layers):
        raise ValueError(
            f"config.json attention_types={hf.get('attention_types')!r} must expand to "
            f"num_layers={n} entries, each one of ['global', 'local']"
        )
    window = hf.get("window_size", 256)
    if LOCAL in layers and (isinstance(window, bool) or not isinstance(window, int) or window < 1):
        raise ValueError(f"config.json window_size={window!r} must be a positive integer")
    kinds = {GLOBAL: ("dense", ()), LOCAL: local_attention(window) if LOCAL in layers else None}
    e = hf.get("hidden_size", 2048)
    return TransformerConfig(
        vocab_size=hf["vocab_size"],
        num_layers=n,
        num_heads=hf.get("num_heads", 16),
        d_model=e,
        d_ff=hf.get("intermediate_size") or 4 * e,
        max_len=hf.get("max_position_embeddings", 2048),
        attention=tuple(kinds[t] for t in layers),
        positional="learned",
        tie_embeddings=hf.get("tie_word_embeddings", True),
        causal=True,
        norm_eps=hf.get("layer_norm_epsilon", 1e-5),
        activation=encoders.activation(
            hf.get("activation_function", "gelu_new"), "activation_function"
        ),
        attention_bias=True,
        attention_qkv_bias=False,
        attention_scale=1.0,
        embed_scale=False,
    )


def layer_types(cfg: TransformerConfig) -> tuple[list[str], int]:
    """GPT-Neo's per-layer types and window of ``cfg``'s attention cycle; a one-sentence
    ``ValueError`` for a mechanism GPT-Neo has no layer for."""
    types, windows = [], set()
    for i in range(cfg.num_layers):
        name, options = cfg.layer_attention(i)
        opts = dict(options)
        if name == GLOBAL_MECHANISM or attention_registry.capable(name, "always_causal"):
            types.append(GLOBAL)
            continue
        if name == "flex" and opts.get("pattern") == "sliding_window":
            windows.add(int(opts.get("window", 0)) + 1)
        elif name == "local" and opts.get("block_len") == 1:
            windows.add(1)
        else:
            raise ValueError(
                f"model.attention layer {i} is {name!r} with {opts}, which the gpt_neo layout "
                "cannot express; valid: 'dense' (global) or flex pattern 'sliding_window' (local)"
            )
        types.append(LOCAL)
    if len(windows) > 1:
        raise ValueError(
            f"model.attention has local layers with windows {sorted(windows)}; the gpt_neo "
            "layout has one window_size for every local layer"
        )
    return types, (windows.pop() if windows else 256)


def compress(types: list[str]) -> list:
    """``attention_types`` for a per-layer list: its shortest repeating period."""
    n = len(types)
    for p in range(1, n + 1):
        if n % p == 0 and types == types[:p] * (n // p):
            return [[types[:p], n // p]]
    return [[types, 1]]  # unreachable (p = n always repeats)


def gpt_neo_hf_config(cfg: TransformerConfig) -> dict:
    """The ``config.json`` of a GPT-Neo-layout ``TransformerConfig``."""
    types, window = layer_types(cfg)
    return {
        "architectures": ["GPTNeoForCausalLM"],
        "model_type": "gpt_neo",
        "vocab_size": cfg.vocab_size,
        "hidden_size": cfg.d_model,
        "num_layers": cfg.num_layers,
        "num_heads": cfg.num_heads,
        "intermediate_size": cfg.dim_ff,
        "max_position_embeddings": cfg.max_len,
        "attention_types": compress(types),
        "window_size": window,
        "activation_function": encoders.SX_ACTIVATIONS[cfg.activation],
        "layer_norm_epsilon": cfg.norm_eps,
        "tie_word_embeddings": cfg.tie_embeddings,
        "resid_dropout": cfg.dropout_rate,
        "embed_dropout": cfg.dropout_rate,
        "attention_dropout": cfg.attention_dropout_rate,
        "bos_token_id": cfg.vocab_size - 1,
        "eos_token_id": cfg.vocab_size - 1,
    }


def _ln(sx, hf):
    return [m.copy((*sx, "scale"), hf + ".weight"), m.copy((*sx, "bias"), hf + ".bias")]


def _linear(sx, hf):
    return [m.linear((*sx, "kernel"), hf + ".weight"), m.copy((*sx, "bias"), hf + ".bias")]


def gpt_neo_rules(cfg: TransformerConfig, prefix: str = "transformer.") -> list:
    """The rules of a GPT-Neo LM (``torch.nn.Linear`` projections: ``[out, in]``)."""
    p, h, enc = prefix, cfg.num_heads, ("encoder",)
    rules = [
        m.copy((*enc, "embed", "embedding"), p + "wte.weight"),
        m.copy((*enc, "pos_embed"), p + "wpe.weight"),
    ]
    for i in range(cfg.num_layers):
        lay, b = f"{p}h.{i}.", (*enc, f"block_{i}", "attn")
        rules += [
            *_ln(b[:-1] + ("ln_attn",), lay + "ln_1"),
            *[
                m.heads_in(
                    (*b, q, "kernel"),
                    f"{lay}attn.attention.{q[0]}_proj.weight",
                    h,
                    torch_linear=True,
                )  # fmt: skip
                for q in ("query", "key", "value")
            ],
            m.heads_out(
                (*b, "out", "kernel"), lay + "attn.attention.out_proj.weight", h, torch_linear=True
            ),  # fmt: skip
            m.copy((*b, "out", "bias"), lay + "attn.attention.out_proj.bias"),
            *_ln(b[:-1] + ("ln_mlp",), lay + "ln_2"),
            *_linear(b[:-1] + ("mlp", "core", "up"), lay + "mlp.c_fc"),
            *_linear(b[:-1] + ("mlp", "core", "down"), lay + "mlp.c_proj"),
        ]
    rules += _ln((*enc, "ln_final"), p + "ln_f")
    if not cfg.tie_embeddings:
        rules.append(m.linear(("head", "kernel"), "lm_head.weight"))
    return rules


GPT_NEO = registry.register(
    registry.Architecture(
        name="gpt_neo",
        architectures=("GPTNeoForCausalLM", "GPTNeoModel"),
        model_type="gpt_neo",
        config=gpt_neo_config,
        hf_config=gpt_neo_hf_config,
        rules=lambda cfg, prefix=None, tensors=None: gpt_neo_rules(
            cfg, "transformer." if prefix is None else prefix
        ),
        make_model=encoders.make_model,
        prefix_anchor="wte.weight",
        optional=("head",),
        family="transformer",
    )
)
