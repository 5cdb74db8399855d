"""Config validation: every wrong or inconsistent field is reported before anything compiles.

``validate(config)`` collects all problems and raises one ``ConfigError`` whose lines each
name the field (``config.model.attention``, ``config.data.batch_size``, ...), the bad value
and what would be valid.
"""

from __future__ import annotations

import functools
import math
import numbers

import jax
import jax.numpy as jnp

from seqjax import attention as attention_lib
from seqjax.data.config import CLASSIFICATION_DATASETS, DATASETS, LM_DATASETS
from seqjax.models.transformer import DTYPES, POOLINGS, POSITIONALS
from seqjax.train import flops, optim, sharding

# Input length of the classification sets when config.data.max_len is None (seqjax.data.api).
CLASSIFICATION_DEFAULT_LEN = {"imdb_bytes": 4096, "listops": 2048}


class ConfigError(ValueError):
    """A config field is wrong; the message names each bad field and the valid values."""


def _mechanism_names(spec: str) -> list[str]:
    return [n.strip() for n in str(spec).split(",") if n.strip()]


def input_length(config) -> int:
    """Tokens per example the model sees (LM: seq_len; classifier: max_len [+1 for CLS])."""
    d = config.data
    if d.name in CLASSIFICATION_DATASETS:
        n = int(d.max_len) if d.max_len else CLASSIFICATION_DEFAULT_LEN[d.name]
        return n + (1 if config.model.pooling == "cls" else 0)
    return int(d.seq_len)


def validate(config, *, num_devices: int | None = None, process_count: int | None = None):
    """Raises ``ConfigError`` listing every invalid field of ``config``.

    Args:
      config: the job's ``ml_collections.ConfigDict`` (model, data, optimizer, train, mesh).
      num_devices: devices available (default ``jax.device_count()``).
      process_count: processes (default ``jax.process_count()``).
    """
    num_devices = jax.device_count() if num_devices is None else num_devices
    process_count = jax.process_count() if process_count is None else process_count
    errors: list[str] = []

    def bad(field: str, value, valid: str) -> None:
        errors.append(f"config.{field}={value!r} is invalid; valid: {valid}")

    m, d, o, t = config.model, config.data, config.optimizer, config.train
    valid_names = ", ".join(attention_lib.names())

    # ---- model
    names = _mechanism_names(m.attention)
    if not names:
        bad("model.attention", m.attention, f"a name or comma-separated cycle of: {valid_names}")
    for name in names:
        if name not in attention_lib.names():
            bad("model.attention", m.attention, f"names from: {valid_names} (unknown {name!r})")
    options = m.get("attention_options") or {}
    for key in options:
        if key not in attention_lib.names():
            bad(f"model.attention_options.{key}", "...", f"a mechanism name: {valid_names}")
            continue
        try:
            attention_lib.check_options(key, dict(options[key]))
        except ValueError as e:
            errors.append(f"config.model.attention_options.{key}: {e}")
    if m.dtype not in DTYPES:
        bad("model.dtype", m.dtype, ", ".join(DTYPES))
    if m.positional not in POSITIONALS:
        bad("model.positional", m.positional, ", ".join(POSITIONALS))
    if m.pooling not in POOLINGS:
        bad("model.pooling", m.pooling, ", ".join(POOLINGS))
    for field in ("num_layers", "num_heads", "d_model", "max_len"):
        if not isinstance(m[field], int) or m[field] < 1:
            bad(f"model.{field}", m[field], "a positive integer")
    for field in ("head_dim", "d_ff", "ff_chunk_size"):
        if not isinstance(m[field], int) or m[field] < 0:
            bad(f"model.{field}", m[field], "an integer >= 0 (0 = default)")
    if not m.head_dim and m.num_heads >= 1 and m.d_model % m.num_heads:
        bad("model.d_model", m.d_model, f"a multiple of model.num_heads={m.num_heads}")
    for field in ("dropout_rate", "attention_dropout_rate"):
        if not 0.0 <= m[field] < 1.0:
            bad(f"model.{field}", m[field], "0 <= rate < 1")

    # ---- data vs model
    if d.name not in DATASETS:
        bad("data.name", d.name, ", ".join(DATASETS))
    else:
        length = input_length(config)
        if length > m.max_len:
            field = "data.max_len" if d.name in CLASSIFICATION_DATASETS else "data.seq_len"
            bad(field, length, f"<= model.max_len={m.max_len} (or raise model.max_len)")
        if m.ff_chunk_size and length % m.ff_chunk_size:
            bad("model.ff_chunk_size", m.ff_chunk_size, f"a divisor of the input length {length}")
        for name in names:
            if name not in attention_lib.names() or attention_lib.spec(name).validate is None:
                continue
            mech = attention_lib.spec(name)
            opts = dict(options.get(name, {}) or {})
            try:
                mech.validate(opts, length)
            except ValueError as e:
                errors.append(f"config.model.attention_options.{name} with input length "
                              f"{length} (config.data.seq_len/max_len): {e}")  # fmt: skip

    # ---- mesh and batch
    try:
        dp_data, dp_fsdp, tp = sharding.resolve_mesh_shape(config.mesh, num_devices)
        dp = dp_data * dp_fsdp
        if num_devices % (dp * tp):
            bad("mesh", dict(config.mesh),
                f"axis sizes whose product divides the {num_devices} devices "
                f"({', '.join(str(k) for k in range(1, num_devices + 1) if num_devices % k == 0)})"
                f"; data={dp_data} x fsdp={dp_fsdp} x tensor={tp} = {dp * tp} would leave "
                f"{num_devices - dp * tp} idle (-1 = the rest)")  # fmt: skip
        elif not isinstance(d.batch_size, int) or d.batch_size < 1:
            pass  # reported below
        elif d.batch_size % dp:
            bad("data.batch_size", d.batch_size,
                f"a multiple of the data-parallel size mesh.data*mesh.fsdp = {dp}")  # fmt: skip
        elif (d.batch_size // dp) % o.grad_accum_steps:
            bad("optimizer.grad_accum_steps", o.grad_accum_steps,
                f"a divisor of the per-device batch {d.batch_size // dp}")  # fmt: skip
        if tp > 1 and m.num_heads % tp:
            bad("mesh.tensor", tp, f"a divisor of model.num_heads={m.num_heads}")
    except ValueError as e:
        errors.append(str(e))
    if isinstance(d.batch_size, int) and d.batch_size % max(process_count, 1):
        bad("data.batch_size", d.batch_size, f"a multiple of the process count {process_count}")
    if t.eval_batch_size and t.eval_batch_size % max(process_count, 1):
        bad("train.eval_batch_size", t.eval_batch_size, "a multiple of the process count")

    # ---- optimizer
    if not isinstance(o.grad_accum_steps, int) or o.grad_accum_steps < 1:
        bad("optimizer.grad_accum_steps", o.grad_accum_steps, "a positive integer")
    if not o.learning_rate > 0:
        bad("optimizer.learning_rate", o.learning_rate, "> 0")
    if not 0 <= o.warmup_steps <= t.num_steps:
        bad(
            "optimizer.warmup_steps",
            o.warmup_steps,
            f"0 <= warmup <= train.num_steps={t.num_steps}",
        )
    for field in ("b1", "b2"):
        if not 0.0 <= o[field] < 1.0:
            bad(f"optimizer.{field}", o[field], "0 <= beta < 1")
    for field in ("weight_decay", "grad_clip_norm", "eps"):
        if o[field] < 0:
            bad(f"optimizer.{field}", o[field], ">= 0 (grad_clip_norm 0 = no clipping)")
    if not 0.0 <= o.min_lr_ratio <= 1.0:
        bad("optimizer.min_lr_ratio", o.min_lr_ratio, "0 <= ratio <= 1")
    errors.extend(optim.validate_optimizer(config))

    # ---- train
    if not isinstance(t.num_steps, int) or t.num_steps < 1:
        bad("train.num_steps", t.num_steps, "a positive integer")
    for field in (
        "checkpoint_every",
        "eval_every",
        "eval_max_batches",
        "stop_after",
        "sample_length",
    ):
        if not isinstance(t[field], int) or t[field] < 0:
            bad(f"train.{field}", t[field], "an integer >= 0 (0 = off)")
    if not isinstance(t.log_every, int) or t.log_every < 1:
        bad("train.log_every", t.log_every, "a positive integer")
    if not isinstance(t.max_to_keep, int) or t.max_to_keep < 1:
        bad("train.max_to_keep", t.max_to_keep, "a positive integer")
    try:
        flops.parse_profile_steps(t.get("profile_steps", ""))
    except ValueError as e:
        errors.append(str(e))
    xl = m.get("kind", "transformer") == "transformer_xl"
    if (
        not xl
        and t.sample_length
        and d.name not in CLASSIFICATION_DATASETS
        and t.sample_length > m.max_len
    ):
        bad("train.sample_length", t.sample_length, f"<= model.max_len={m.max_len}")

    # ---- Transformer-XL
    _validate_xl(config, bad)
    _validate_values(config, bad, errors)

    if errors:
        raise ConfigError("invalid config:\n  - " + "\n  - ".join(errors))


KINDS = ("transformer", "transformer_xl")


def _validate_xl(config, bad) -> None:
    """``model.kind``/``mem_len`` and, for Transformer-XL, what segment recurrence needs:
    contiguous streams, relative attention without absolute positions, one update per batch
    (the memory moves on with every batch), and valid evaluation lengths (``config.eval``)."""
    m, d, o = config.model, config.data, config.optimizer
    kind = m.get("kind", "transformer")
    mem_len = m.get("mem_len", 0)
    if kind not in KINDS:
        bad("model.kind", kind, ", ".join(KINDS))
        return
    if not isinstance(mem_len, int) or mem_len < 0:
        bad("model.mem_len", mem_len, "an integer >= 0")
    if kind != "transformer_xl":
        if mem_len:
            bad("model.mem_len", mem_len, '0 unless model.kind="transformer_xl"')
        return
    if d.name not in LM_DATASETS or d.name == "duplication":
        valid = ", ".join(n for n in LM_DATASETS if n != "duplication")
        bad("data.name", d.name, f"a language-modelling corpus for Transformer-XL: {valid}")
    if d.get("lm_batching") != "stream":
        bad("data.lm_batching", d.get("lm_batching"),
            '"stream" for model.kind="transformer_xl" (each row continues its text)')  # fmt: skip
    if _mechanism_names(m.attention) != ["relative"]:
        bad("model.attention", m.attention, '"relative" for model.kind="transformer_xl"')
    if m.positional != "none":
        bad("model.positional", m.positional,
            '"none" for model.kind="transformer_xl" (relative positions only)')  # fmt: skip
    if o.grad_accum_steps != 1:
        bad("optimizer.grad_accum_steps", o.grad_accum_steps,
            '1 for model.kind="transformer_xl" (the memory moves on with every batch)')  # fmt: skip
    if m.reversible or m.remat:
        bad("model.reversible/remat", (m.reversible, m.remat),
            'False for model.kind="transformer_xl" (not supported by TransformerXL)')  # fmt: skip
    rel = (m.get("attention_options") or {}).get("relative") or {}
    if "mem_len" in rel and rel["mem_len"] != mem_len:
        bad("model.attention_options.relative.mem_len", rel["mem_len"],
            f"unset or equal to model.mem_len={mem_len} (it is set from it)")  # fmt: skip
    if rel.get("same_length") and not mem_len:
        bad("model.attention_options.relative.same_length", True, "False when model.mem_len=0")
    ev = config.get("eval") or {}
    for field, low in (("tgt_len", 1), ("mem_len", 0)):
        value = ev.get(field)
        if value is not None and (not isinstance(value, int) or value < low):
            bad(f"eval.{field}", value, f"None (as in training) or an integer >= {low}")
    clamp = ev.get("clamp_len")
    if clamp is not None and not isinstance(clamp, int):
        bad("eval.clamp_len", clamp, "None, -1 (no clamping) or a positive integer")
    same = ev.get("same_length")
    same = rel.get("same_length", False) if same is None else same
    eval_mem = mem_len if ev.get("mem_len") is None else ev.get("mem_len")
    if same and not eval_mem:
        bad("eval.same_length", same, "False when the evaluation memory length is 0")


def _is_int(x) -> bool:
    return isinstance(x, numbers.Integral) and not isinstance(x, bool)


def _validate_values(config, bad, errors: list) -> None:
    """Sizes, seeds and numbers that must be positive or finite, and every attention
    option's *value* (traced abstractly, so nothing compiles)."""
    d, m, o = config.data, config.model, config.optimizer
    for field in ("batch_size", "seq_len"):
        if not _is_int(d.get(field)) or d.get(field) < 1:
            bad(f"data.{field}", d.get(field), "a positive integer")
    if d.get("max_len") is not None and (not _is_int(d.max_len) or d.max_len < 0):
        bad("data.max_len", d.max_len, "None/0 (the data set's default) or a positive integer")
    if not _is_int(d.get("seed")) or not 0 <= d.seed < 2**32:
        bad("data.seed", d.get("seed"), "an integer 0 <= seed < 2**32")
    if not _is_int(config.get("seed")) or not 0 <= config.seed < 2**32:
        bad("seed", config.get("seed"), "an integer 0 <= seed < 2**32")
    if d.get("vocab") not in ("bytes", "chars"):
        bad("data.vocab", d.get("vocab"), "'bytes' or 'chars'")
    if d.get("lm_batching") not in ("random", "stream"):
        bad("data.lm_batching", d.get("lm_batching"), "'random' or 'stream'")
    lr = o.get("learning_rate")
    if isinstance(lr, numbers.Real) and lr > 0 and not math.isfinite(lr):
        bad("optimizer.learning_rate", lr, "a finite number > 0")
    t = config.train
    if not _is_int(t.get("eval_batch_size")) or t.eval_batch_size < 0:
        bad("train.eval_batch_size", t.get("eval_batch_size"), "an integer >= 0 (0 = batch_size)")
    temp = t.get("sample_temperature")
    if not isinstance(temp, numbers.Real) or not math.isfinite(temp) or temp < 0:
        bad("train.sample_temperature", temp, "a finite number >= 0 (0 = greedy)")
    if errors or d.name not in DATASETS:
        return  # option values are probed only on an otherwise valid config
    options = m.get("attention_options") or {}
    length = input_length(config)
    heads = m.num_heads
    head_dim = m.head_dim or m.d_model // heads
    causal = d.name in LM_DATASETS
    for name in dict.fromkeys(_mechanism_names(m.attention)):
        mech = attention_lib.spec(name)
        if mech.module_params or mech.model_params or mech.shared_qk:
            continue  # those check their option values with their own validate hook
        opts = dict(options.get(name, {}) or {})
        q = jax.ShapeDtypeStruct((1, length, heads, head_dim), jnp.float32)
        try:
            jax.eval_shape(functools.partial(mech.fn, causal=causal, **opts), q, q, q)
        except (ValueError, TypeError, NotImplementedError) as e:
            errors.append(f"config.model.attention_options.{name}={opts}: {e}")
