"""Config validation: every wrong or inconsistent field is reported before anything compiles.

``validate(config)`` collects all problems and raises one ``ConfigError`` whose lines each
name the field (``config.model.attention``, ``config.data.batch_size``, ...), the bad value
and what would be valid.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import numbers

import jax

from seqjax import attention as attention_lib
from seqjax import compile_cache, tasks
from seqjax.attention import registry as attention_registry
from seqjax.attention import ring
from seqjax.data import api as data_api
from seqjax.data import registry as data_registry
from seqjax.models import flops, memory
from seqjax.models import registry as model_registry
from seqjax.models.transformer import DTYPES, POOLINGS, POSITIONALS
from seqjax.train import optim, sharding


class ConfigError(ValueError):
    """A config field is wrong; the message names each bad field and the valid values."""


def input_length(config) -> int:
    """Tokens per example the model sees, as the data's task says (``seqjax.tasks``; LM:
    seq_len; classifier: max_len [+1 for CLS]); ``data.seq_len`` for an unknown data set."""
    task = tasks.for_data_config(config.data)
    return task.input_length(config) if task else int(config.data.seq_len)


def validate(config, *, num_devices: int | None = None, process_count: int | None = None):
    """Raises ``ConfigError`` listing every invalid field of ``config``.

    The checks run as stages (``STAGES``: model, data, mesh and batch, optimizer, train, model
    kind, option values), each composing the checks its plug-ins declare: the mechanisms'
    ``check_options``/``validate``, the data set's (``seqjax.data.registry``), the task's
    ``validate``, the optimizer's, the recurrent kind's.

    Args:
      config: the job's ``ml_collections.ConfigDict`` (model, data, optimizer, train, mesh).
      num_devices: devices available (default ``jax.device_count()``).
      process_count: processes (default ``jax.process_count()``).
    """
    errors: list[str] = []
    reported: set[tuple[str, str]] = set()

    def bad(field: str, value, valid: str) -> None:
        if (field, repr(value)) in reported:  # once (a task's model probe meets it again)
            return
        reported.add((field, repr(value)))
        errors.append(f"config.{field}={value!r} is invalid; valid: {valid}")

    task = tasks.for_data_config(config.data)  # None: an unknown data set (reported)
    ctx = _Context(
        config,
        num_devices=jax.device_count() if num_devices is None else num_devices,
        process_count=jax.process_count() if process_count is None else process_count,
        task=task,
        family=_family(config, task, bad),
    )
    if ctx.family is None:  # an unknown family: its fields cannot be checked
        raise ConfigError("invalid config:\n  - " + "\n  - ".join(errors))
    for stage in STAGES:
        if stage in COMMON_MODEL_STAGES and not ctx.family.common_checks:
            continue
        stage(ctx, bad, errors)
    if errors:
        raise ConfigError("invalid config:\n  - " + "\n  - ".join(errors))


@dataclasses.dataclass
class _Context:
    """What every stage reads: the config, the machine and the data's task."""

    config: object
    num_devices: int
    process_count: int
    task: object
    family: object = None  # seqjax.models.registry.Family

    @property
    def names(self) -> list[str]:
        """The mechanisms of ``model.attention`` (none for a family without the field)."""
        return attention_registry.parse(self.config.model.get("attention") or "")

    @property
    def options(self):
        return self.config.model.get("attention_options") or {}

    @property
    def known_data(self) -> bool:
        return data_registry.find(self.config.data.get("name")) is not None


def _family(config, task, bad):
    """The job's model family (``config.model.family``; "auto": the task's), or None after
    reporting an unknown name; a family that does not serve the data's task is reported."""
    default = task.family if task is not None else "transformer"
    name = model_registry.name_of(config, default)
    if name not in model_registry.names():
        bad("model.family", name, ", ".join([model_registry.AUTO, *model_registry.names()]))
        return None
    family = model_registry.get(name)
    if task is not None and not family.serves(task):
        serving = [f for f in model_registry.names() if model_registry.get(f).serves(task)]
        bad("model.family", name, f"a family that serves the {task.name!r} task of data.name="
            f"{config.data.get('name')!r}: {', '.join([model_registry.AUTO, *serving])} "
            f"({name!r} serves {', '.join(family.tasks)})")  # fmt: skip
    return family


def _family_stage(ctx, bad, errors) -> None:
    """The family's own checks (``Family.validate``)."""
    del errors
    if ctx.family.validate is not None:
        ctx.family.validate(ctx.config, bad)


def _model_stage(ctx, bad, errors) -> None:
    """The model block: mechanisms and their options, sizes, dtype, positions, pooling."""
    m, d = ctx.config.model, ctx.config.data
    valid_names = ", ".join(attention_lib.names())
    if not ctx.names:
        bad("model.attention", m.attention, f"a name or comma-separated cycle of: {valid_names}")
    unknown = [name for name in ctx.names if name not in attention_lib.names()]
    if unknown:
        listed = ", ".join(map(repr, dict.fromkeys(unknown)))
        bad("model.attention", m.attention, f"names from: {valid_names} (unknown {listed})")
    for key in ctx.options:
        if key not in attention_lib.names():
            bad(f"model.attention_options.{key}", "...", f"a mechanism name: {valid_names}")
            continue
        try:
            attention_lib.check_options(key, dict(ctx.options[key]))
        except ValueError as e:
            errors.append(f"config.model.attention_options.{key}: {e}")
    if m.dtype not in DTYPES:
        bad("model.dtype", m.dtype, ", ".join(DTYPES))
    if m.positional not in POSITIONALS:
        bad("model.positional", m.positional, ", ".join(POSITIONALS))
    errors.extend(_positional_and_adaptive_problems(m))
    if m.pooling not in POOLINGS:
        bad("model.pooling", m.pooling, ", ".join(POOLINGS))
    images = data_registry.names("images")
    if m.positional == "axial" and d.get("name") not in images:
        bad("model.positional", m.positional, f"'axial' only with image data ({images})")
    elif m.positional == "axial" and m.pooling == "cls" and d.get("image_task") != "generation":
        bad("model.pooling", m.pooling, "'mean' with model.positional='axial' (CLS is no pixel)")
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
    kernelized = [n for n in ctx.names if attention_registry.capable(n, "attention_dropout", False)]
    if kernelized and m.attention_dropout_rate:
        bad("model.attention_dropout_rate", m.attention_dropout_rate,
            f"0 with model.attention {kernelized[0]!r} (a kernelized attention has no "
            "attention matrix to drop)")  # fmt: skip


def _data_stage(ctx, bad, errors) -> None:
    """The data set's own checks (``seqjax.data``), then its input length vs the model."""
    m, d = ctx.config.model, ctx.config.data
    for field, value, valid in data_api.config_problems(d):
        bad(f"data.{field}", value, valid)
    if not ctx.known_data or ctx.task is None:
        return
    length = input_length(ctx.config)
    offset = _position_offset(m)
    if "max_len" in m and length > m.max_len - offset:
        bad(ctx.task.length_field, length,
            f"<= model.max_len={m.max_len} (or raise model.max_len)" if not offset else
            f"<= {m.max_len - offset}, the learned positions of model.max_len={m.max_len} rows "
            f"less model.layout.position_offset={offset} (an imported RoBERTa's)")  # fmt: skip
    if m.get("ff_chunk_size") and length % m.ff_chunk_size:
        bad("model.ff_chunk_size", m.ff_chunk_size, f"a divisor of the input length {length}")
    for name in ctx.names:
        if name not in attention_lib.names() or attention_lib.spec(name).validate is None:
            continue
        try:
            attention_lib.spec(name).validate(dict(ctx.options.get(name, {}) or {}), length)
        except ValueError as e:
            errors.append(f"config.model.attention_options.{name} with input length "
                          f"{length} (config.data.seq_len/max_len): {e}")  # fmt: skip


def _position_offset(m) -> int:
    """Learned-table rows before position 0 (``model.layout.position_offset``: RoBERTa's)."""
    layout = m.get("layout") or {}
    if m.get("positional") != "learned" or not hasattr(layout, "get"):
        return 0
    offset = layout.get("position_offset", 0)
    return offset if isinstance(offset, int) and offset > 0 else 0


def _mesh_stage(ctx, bad, errors) -> None:
    """Mesh axes against the devices, the batch against the data-parallel size and the
    processes, and which attention can run sequence-sharded (context parallelism)."""
    config, num_devices = ctx.config, ctx.num_devices
    m, d, o, t = config.model, config.data, config.optimizer, config.train
    try:
        dp_data, dp_fsdp, sp, tp = sharding.resolve_mesh_shape(config.mesh, num_devices)
        dp = dp_data * dp_fsdp
        if num_devices % (dp * sp * tp):
            bad("mesh", dict(config.mesh),
                f"axis sizes whose product divides the {num_devices} devices "
                f"({', '.join(str(k) for k in range(1, num_devices + 1) if num_devices % k == 0)})"
                f"; data={dp_data} x fsdp={dp_fsdp} x sequence={sp} x tensor={tp} = "
                f"{dp * sp * tp} would leave {num_devices - dp * sp * tp} idle "
                "(-1 = the rest)")  # fmt: skip
        elif not isinstance(d.batch_size, int) or d.batch_size < 1:
            pass  # reported by the data stage
        elif d.batch_size % dp:
            bad("data.batch_size", d.batch_size,
                f"a multiple of the data-parallel size mesh.data*mesh.fsdp = {dp}")  # fmt: skip
        elif (d.batch_size // dp) % o.grad_accum_steps:
            bad("optimizer.grad_accum_steps", o.grad_accum_steps,
                f"a divisor of the per-device batch {d.batch_size // dp}")  # fmt: skip
        if tp > 1 and m.get("num_heads") and m.num_heads % tp:
            bad("mesh.tensor", tp, f"a divisor of model.num_heads={m.num_heads}")
        if sp > 1:
            _sequence_parallel_problems(ctx, sp, tp, bad, errors)
    except ValueError as e:
        errors.append(str(e))
    if isinstance(d.batch_size, int) and d.batch_size % max(ctx.process_count, 1):
        bad("data.batch_size", d.batch_size, f"a multiple of the process count {ctx.process_count}")
    if t.eval_batch_size and t.eval_batch_size % max(ctx.process_count, 1):
        bad("train.eval_batch_size", t.eval_batch_size, "a multiple of the process count")


def _sequence_parallel_problems(ctx, sp: int, tp: int, bad, errors) -> None:
    m, names = ctx.config.model, ctx.names
    errors.extend(
        f"config.mesh.sequence={sp}: {why}"
        for why in filter(None, map(attention_registry.context_parallel_refusal, names))
    )
    length = input_length(ctx.config) if ctx.known_data else 0
    for name in dict.fromkeys(names):  # run as they are: the shards must split the length
        if attention_registry.capable(name, "context_parallel", "sharded") and length % sp:
            bad("mesh.sequence", sp, f"a divisor of the input length {length} ({name})")
    errors.extend(f"config.mesh.sequence={sp}: {why}" for why in
                  ring.sparse_config_problems(names, length=length, n=sp,
                                              positional=m.positional))  # fmt: skip
    for name in (nm for nm in names if attention_registry.capable(nm, "context_parallel", "ring")):
        impl = dict(ctx.options.get(name, {}) or {}).get("implementation", "auto")
        errors.extend(f"config.mesh.sequence={sp} with config.model.attention_options."
                      f"{name}.implementation={impl!r}: {why}"
                      for why in ring.config_problems(
                          impl, length=length, num_heads=m.num_heads, n=sp,
                          tensor=tp))  # fmt: skip


def _optimizer_stage(ctx, bad, errors) -> None:
    o, t = ctx.config.optimizer, ctx.config.train
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
    errors.extend(optim.validate_optimizer(ctx.config))


def _train_stage(ctx, bad, errors) -> None:
    """The train block, then what the data's task needs (``Task.validate``)."""
    config, t, m, d = ctx.config, ctx.config.train, ctx.config.model, ctx.config.data
    if not isinstance(t.num_steps, int) or t.num_steps < 1:
        bad("train.num_steps", t.num_steps, "a positive integer")
    for field in ("checkpoint_every", "eval_every", "eval_max_batches", "stop_after",
                  "sample_length"):  # fmt: skip
        if not isinstance(t[field], int) or t[field] < 0:
            bad(f"train.{field}", t[field], "an integer >= 0 (0 = off)")
    n_test = t.get("test_max_batches", 0)
    if isinstance(n_test, bool) or not isinstance(n_test, int) or n_test < 0:
        bad("train.test_max_batches", n_test, "an integer >= 0 (0 = the whole test split)")
    if not isinstance(t.log_every, int) or t.log_every < 1:
        bad("train.log_every", t.log_every, "a positive integer")
    if not isinstance(t.max_to_keep, int) or t.max_to_keep < 1:
        bad("train.max_to_keep", t.max_to_keep, "a positive integer")
    chunk = t.get("xent_chunk")  # every task, whether or not its loss reads it (LM: again)
    if chunk is not None and (not _is_int(chunk) or chunk < 0):
        bad("train.xent_chunk", chunk, "None (auto), 0 (plain logits) or tokens per chunk > 0")
    cache_problem = compile_cache.setting_problem(t.get("compilation_cache", "auto"))
    if cache_problem:
        bad("train.compilation_cache", t.get("compilation_cache"), cache_problem)
    try:
        flops.parse_profile_steps(t.get("profile_steps", ""))
    except ValueError as e:
        errors.append(str(e))
    if ctx.task is not None:
        ctx.task.validate(config, bad)  # what the data's task needs (LM: the sample length)
    if d.get("objective") == "span_corruption" and (config.get("eval") or {}).get(
        "decode_metrics", True
    ):  # span-corrupted text has no reference translations to score
        bad("eval.decode_metrics", True, "False with data.objective='span_corruption'")
    pairs = data_registry.names("pairs")
    if m.get("towers", 1) != 1 and ctx.known_data and d.name not in pairs:
        bad("model.towers", m.towers, f"1 for {d.name!r}, one input a row (2: a pair data set, "
            f"{', '.join(pairs)})")  # fmt: skip


def _kind_stage(ctx, bad, errors) -> None:
    """``model.kind``/``mem_len`` and what a recurrent kind requires: contiguous token
    streams of its data set (``DataSet.streams``) and its own ``validate``, declared beside
    the model (``seqjax.models.memory``)."""
    config = ctx.config
    kinds = memory.kinds()
    kind = memory.kind(config)
    mem_len = config.model.get("mem_len", 0)
    if kind not in kinds:
        bad("model.kind", kind, ", ".join(kinds))
        return
    if not isinstance(mem_len, int) or mem_len < 0:
        bad("model.mem_len", mem_len, "an integer >= 0")
    rec = kinds[kind]
    if rec is None:
        if mem_len:
            recurrent = " or ".join(f'"{k}"' for k, r in kinds.items() if r)
            bad("model.mem_len", mem_len, f"0 unless model.kind={recurrent}")
        return
    streams = [n for n in data_registry.names() if data_registry.get(n).streams]
    if config.data.name not in streams:
        bad("data.name", config.data.name,
            f"a language-modelling corpus for {kind}: {', '.join(streams)}")  # fmt: skip
    rec.validate(config, bad)


def _is_int(x) -> bool:
    return isinstance(x, numbers.Integral) and not isinstance(x, bool)


def _values_stage(ctx, bad, errors: list) -> None:
    """Sizes, seeds and numbers that must be positive or finite, and every attention
    option's *value* (traced abstractly, so nothing compiles)."""
    config = ctx.config
    m, o = config.model, config.optimizer
    if not _is_int(config.get("seed")) or not 0 <= config.seed < 2**32:
        bad("seed", config.get("seed"), "an integer 0 <= seed < 2**32")
    lr = o.get("learning_rate")
    if isinstance(lr, numbers.Real) and lr > 0 and not math.isfinite(lr):
        bad("optimizer.learning_rate", lr, "a finite number > 0")
    t = config.train
    if not _is_int(t.get("eval_batch_size")) or t.eval_batch_size < 0:
        bad("train.eval_batch_size", t.get("eval_batch_size"), "an integer >= 0 (0 = batch_size)")
    ev = config.get("eval") or {}
    if not isinstance(ev.get("pictures", True), bool):
        bad("eval.pictures", ev.get("pictures"), "True or False (pictures at each evaluation)")
    n = ev.get("num_pictures", 8)
    if not _is_int(n) or not 1 <= n <= 64:
        bad("eval.num_pictures", n, "an integer 1..64 (images in an evaluation's picture)")
    temp = t.get("sample_temperature")
    if not isinstance(temp, numbers.Real) or not math.isfinite(temp) or temp < 0:
        bad("train.sample_temperature", temp, "a finite number >= 0 (0 = greedy)")
    task = ctx.task
    if errors or not ctx.known_data or task is None:
        return  # option values are probed only on an otherwise valid config
    options = m.get("attention_options") or {}
    length = input_length(config)
    heads = m.num_heads
    head_dim = m.head_dim or m.d_model // heads
    causal = task.causal
    for name in dict.fromkeys(attention_registry.parse(m.attention)):
        mech = attention_lib.spec(name)
        if mech.module_params or mech.model_params or mech.shared_qk:
            continue  # those check their option values with their own validate hook
        opts = dict(options.get(name, {}) or {})
        q = jax.ShapeDtypeStruct((1, length, heads, head_dim), DTYPES[m.dtype])
        try:
            jax.eval_shape(functools.partial(mech.fn, causal=causal, **opts), q, q, q)
        except (ValueError, TypeError, NotImplementedError) as e:
            errors.append(f"config.model.attention_options.{name}={opts}: {e}")


def _positional_and_adaptive_problems(m) -> list[str]:
    """A score-bias ``model.positional`` on a mechanism that cannot add it, and
    ``model.adaptive.cutoffs`` that do not increase (the vocabulary bound is checked when the
    data's vocabulary is known)."""
    from seqjax.attention import score_mod
    from seqjax.models import adaptive
    from seqjax.models.transformer import attention_cycle

    problems = []
    try:
        cycle = attention_cycle(m.attention, m.get("attention_options"))
        score_mod.check_supported(m.positional, cycle)
    except ValueError as e:  # unknown names are reported above
        if "positional" in str(e):
            problems.append(f"config.{e}")
    a = m.get("adaptive")
    if a is not None and a.get("enabled", False):
        try:
            adaptive.check_cutoffs(tuple(a.cutoffs), 2**31, a.div_val)
        except ValueError as e:
            problems.append(f"config.{e}")
    return problems


# The stages of ``validate``, in the order their messages are listed.
STAGES = (
    _family_stage,
    _model_stage,
    _data_stage,
    _mesh_stage,
    _optimizer_stage,
    _train_stage,
    _kind_stage,
    _values_stage,
)
# Stages that read the shared Transformer fields of ``config.model``: run only for a family
# that has them (``Family.common_checks``).
COMMON_MODEL_STAGES = (_model_stage, _values_stage)
