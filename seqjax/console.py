"""What the console shows: seqjax's own lines, the libraries' warnings, and complete --help.

A run should read as: the run header, the progress, the evaluations, the result. Orbax
logs ~40 INFO lines per checkpoint, JAX an INFO line per backend it cannot load (TPU on
every CPU machine), TFDS progress bars while it prepares data: ``quiet_libraries`` keeps
INFO lines only from seqjax's own files, and WARNING+ from everyone else.

Results (the test line, the sample, evaluate's JSON, translations) go to stdout; the
header, logs and progress to stderr (``run_header``, ``format_metrics``,
``logs_above_bar``: in a terminal, log lines are printed above the tqdm bar, not through it).
"""

from __future__ import annotations

import contextlib
import inspect
import logging as std_logging
import numbers
import os
import sys

import tqdm
from absl import flags
from absl import logging as absl_logging

# Sums the metrics are divided by, not metrics: integers on the console, TensorBoard's
# ``bookkeeping/`` prefix (metrics.jsonl keeps them with the metrics, for exactness tests).
BOOKKEEPING = ("count", "weight_sum")

_PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__)) + os.sep
# Library warnings that are not a problem of the run (TFDS says it on every config).
_NOISE = ("Using custom data configuration",)


class QuietLibraries(std_logging.Filter):
    """INFO from files under ``seqjax/`` (this package); WARNING+ from libraries.

    Note: ``absl.logging.WARNING`` is absl's verbosity (-1), not the record level; the
    record levels are the standard library's.
    """

    def filter(self, record: std_logging.LogRecord) -> bool:
        if record.pathname.startswith(_PACKAGE_DIR):
            return True
        if record.levelno < std_logging.WARNING:
            return False
        return not any(n in str(record.msg) for n in _NOISE)


def quiet_libraries() -> None:
    """Installs ``QuietLibraries`` on absl's handler and turns TFDS progress bars off."""
    handler = absl_logging.get_absl_handler()
    if not any(isinstance(f, QuietLibraries) for f in handler.filters):
        handler.addFilter(QuietLibraries())
    try:
        import tensorflow_datasets as tfds

        tfds.disable_progress_bar()
    except ImportError:  # pragma: no cover - tfds is a dependency
        pass


def quiet_tool() -> None:
    """``quiet_libraries`` for evaluate/sample/translate, whose stdout is the result: only
    warnings and errors on stderr (no build or restore INFO lines, seqjax's included)."""
    quiet_libraries()
    absl_logging.set_verbosity(absl_logging.WARNING)


def show_flags_in_help(module_name: str) -> None:
    """Makes ``--help`` list ``module_name``'s flags when run as a console script.

    absl's ``--help`` shows the flags of the module named by ``sys.argv[0]``; for
    ``seqjax-train`` that is the script file, not ``seqjax.main`` where they are defined.
    """
    fv = flags.FLAGS
    for flag in fv.flags_by_module_dict().get(module_name, []):
        fv.register_key_flag_for_module(sys.argv[0], flag)
    main = sys.modules.get("__main__")
    module = sys.modules.get(module_name)
    if main is not None and module is not None and not main.__doc__:
        main.__doc__ = module.__doc__  # the usage text absl prints above the flags


def format_metrics(res: dict) -> str:
    """``loss=2.3000, accuracy=0.3351, count=1734``: numbers only, counts as integers."""
    parts = []
    for k, v in res.items():
        if isinstance(v, bool) or not isinstance(v, numbers.Real):
            continue
        if k in BOOKKEEPING or k.endswith("_count") or isinstance(v, numbers.Integral):
            parts.append(f"{k}={int(round(float(v)))}")
        else:
            parts.append(f"{k}={float(v):.4f}")
    return ", ".join(parts)


def _per_layer(spec: str, num_layers: int, options: dict, resolved=None) -> str:
    """``window(window=8) x 2`` or ``0: lsh, 1: dense, 2: lsh`` (the per-layer cycle): each
    mechanism with the options it runs with (``mechanism_options``) and, where
    ``implementation=auto``, what that resolved to (``resolved(name, options)``)."""
    from seqjax.attention import registry as attention_registry

    cycle = attention_registry.parse(spec)

    def show(name):
        opts = mechanism_options(name, options.get(name) or {})
        inner = ", ".join(f"{k}={v}" for k, v in sorted(opts.items()))
        engine = resolved(name, opts) if opts.get("implementation") == "auto" and resolved else None
        if engine:
            inner = inner.replace("implementation=auto", f"implementation=auto -> {engine}")
        return f"{name}({inner})" if inner else name

    layers = [show(cycle[i % len(cycle)]) for i in range(num_layers)] if cycle else []
    if len(set(layers)) == 1:
        return f"{layers[0]} x {num_layers} layers"
    return ", ".join(f"{i}: {name}" for i, name in enumerate(layers))


def mechanism_options(name: str, given: dict) -> dict:
    """The options ``name`` runs with: those the config gives or, when it gives none, the
    mechanism's defaults for its declared options (Performer's ``num_features``, ``redraw``,
    ``seed``...; values that are None or arrays are left out); the default
    ``implementation`` is always shown."""
    from seqjax import attention

    if name not in attention.names():
        return dict(given)
    mech = attention.spec(name)
    params = inspect.signature(mech.fn).parameters
    out = {}
    for option in mech.options if not given else ("implementation",):
        p = params.get(option)
        if option in mech.options and p is not None:
            if isinstance(p.default, (bool, int, float, str)):
                out[option] = p.default
    return {**out, **given}


def auto_resolver(config, run):
    """``resolved(name, options) -> str | None``: what ``implementation="auto"`` runs on
    this backend for the model's compute dtype and one ``[1, max_len, heads, head_dim]``
    input (``attention.resolve_auto``: traced, nothing compiles); None when the mechanism
    does not say."""
    import jax

    from seqjax.attention import registry
    from seqjax.models import dtype as model_dtype

    m = config.model
    d = int(m.get("head_dim") or 0) or int(m.d_model) // int(m.num_heads)
    compute = model_dtype.EXPLICIT[model_dtype.resolve(m.get("dtype", "float32"))]
    x = jax.ShapeDtypeStruct((1, int(m.max_len), int(m.num_heads), d), compute)
    causal = bool(getattr(getattr(run.model, "cfg", None), "causal", False))
    rate = float(m.get("attention_dropout_rate") or 0.0)
    key = jax.random.key(0) if rate else None

    def resolved(name: str, opts: dict) -> str | None:
        return registry.resolve_auto(
            name, x, x, x, causal=causal, dropout_rate=rate, dropout_rng=key, **opts
        )  # fmt: skip

    resolved.context = f"{jax.default_backend()}, {x.dtype}, q/k/v {list(x.shape)}"
    return resolved


def _overrides(argv) -> list[str]:
    """``--config.a.b=v`` / ``--config.a.b v`` as typed: ``a.b=v``."""
    out = []
    for i, arg in enumerate(argv[1:], start=1):
        if arg.startswith("--config.") and "=" in arg:
            out.append(arg[len("--config.") :])
        elif arg.startswith("--config.") and i + 1 < len(argv):
            out.append(f"{arg[len('--config.') :]}={argv[i + 1]}")
    return out


def config_arg(argv: list[str]) -> str | None:
    """The value of ``--config`` (``--config=v`` or ``--config v``) in ``argv``, or None."""
    for i, arg in enumerate(argv[1:], start=1):
        if arg.startswith("--config="):
            return arg.split("=", 1)[1]
        if arg == "--config" and i + 1 < len(argv):
            return argv[i + 1]
    return None


# The command line as typed (``set_command_line``): ``seqjax.main`` takes the mechanisms'
# option flags out of ``sys.argv`` before absl parses it, and the header counts them too.
_COMMAND_LINE: list[str] | None = None


def set_command_line(argv: list[str]) -> None:
    global _COMMAND_LINE
    _COMMAND_LINE = list(argv)


def typed_fields(argv: list[str] | None = None) -> set[str]:
    """The config fields typed on the command line (``--config.model.d_model=64`` gives
    ``model.d_model``), of ``argv`` or the recorded command line."""
    argv = (_COMMAND_LINE or []) if argv is None else argv
    return {a.split("=", 1)[0][len("--config.") :] for a in argv[1:] if a.startswith("--config.")}


def _output_layer(m, info) -> str:
    """The model's output layer: a classifier head, an adaptive softmax with its cutoffs, or
    a (tied) softmax over the vocabulary."""
    classes = getattr(info, "num_classes", None)
    if classes:
        return f"{m.pooling}-pooled classifier ({classes} classes)"
    a = m.get("adaptive")
    if a is not None and a.get("enabled", False):
        return f"adaptive softmax (cutoffs {list(a.cutoffs)}, div_val {a.div_val})"
    return "tied softmax" if m.get("tie_embeddings", True) else "softmax"


def run_header(config, run, workdir, *, start_step: int, num_params: int, argv=None) -> str:
    """The lines printed once when a run starts (stderr): config and variant, overrides,
    task, mechanism per layer, parameters, data and split sizes, steps, mesh, workdir.

    ``run`` is the built job (``seqjax.train.setup.Run``): its task, model, data info, mesh
    and ``provenance`` (the module that registered each mechanism and the task, and the
    run's ``config.imports``), all computed by the trainer and only printed here.
    """
    from seqjax.models import dtype as model_dtype
    from seqjax.models import from_config

    argv = (_COMMAND_LINE or sys.argv) if argv is None else argv
    config_file = config_arg(argv) or "(in-process config)"
    overrides = _overrides(argv)
    m, t = config.model, config.train
    cfg = getattr(run.model, "cfg", None)
    mechanisms = hasattr(cfg, "attention") or hasattr(cfg, "encoder_attention")
    if "attention" not in m or (cfg is not None and not mechanisms):  # another family
        return _family_header(config, run, workdir, start_step, num_params, config_file, overrides)
    options = from_config.attention_options(config)
    resolved = auto_resolver(config, run)
    layers = _per_layer(m.attention, int(m.num_layers), options, resolved)
    dec_layers = getattr(getattr(run.model, "cfg", None), "decoder_layers", None)
    if dec_layers:  # an encoder-decoder (EncoderDecoderConfig)
        dec = _per_layer(m.decoder_attention, int(dec_layers), options, resolved)
        layers += f"; decoder {dec}"
    if "implementation=auto -> " in layers:  # what auto was resolved for
        layers += f" (auto resolved for {resolved.context})"
    prov = run.provenance
    outside = {n: mod for n, mod in prov["attention"].items() if not mod.startswith("seqjax.")}
    start = "from scratch" if not start_step else f"resumed at step {start_step}"
    if not start_step and config.get("init_from"):
        start = f"encoder from init_from={config.init_from}"
    evals = f"validation every {t.eval_every}" if t.eval_every else "no validation"
    saves = f"checkpoint every {t.checkpoint_every}" if t.checkpoint_every else "saved at the end"
    tests = ""
    if t.get("final_eval", True) and t.get("test_max_batches", 0):
        n, bs = int(t.test_max_batches), int(t.get("eval_batch_size") or config.data.batch_size)
        tests = (f"; test on its first {n} batches of {bs} ({n * bs} inputs at most; "
                 "train.test_max_batches), not the whole split")  # fmt: skip
    mesh = " x ".join(f"{k}={v}" for k, v in dict(run.mesh.shape).items())
    rows = [
        ("config", config_file + "".join(f" + {o}" for o in overrides)),
        ("task", f"{run.task.name} ({type(run.task).__module__})"),
        ("attention", layers),
        (
            "model",
            f"{m.get('kind', 'transformer')}, d_model {m.d_model}, {m.num_heads} heads, "
            f"max_len {m.max_len}, positions {m.positional}, {_output_layer(m, run.info)}, "
            f"{num_params:,} parameters, compute {model_dtype.describe(m.dtype)}",
        ),
        ("data", run.task.describe_data(config, run.info)),
        ("steps", f"{t.num_steps:,} ({start}); {evals}, {saves}{tests}"),
        ("mesh", f"{mesh} ({run.mesh.devices.size} devices)"),
        ("workdir", str(workdir)),
    ]
    if prov["imports"] or outside:
        mods = ", ".join(prov["imports"]) or "-"
        regs = ", ".join(f"{n} from {mod}" for n, mod in outside.items())
        rows.append(("imports", mods + (f" ({regs})" if regs else "")))
    return "\n".join(["seqjax run"] + [f"  {k:<10} {v}" for k, v in rows])


def _family_header(config, run, workdir, start_step, num_params, config_file, overrides):
    """The header of a model family without the Transformer's fields: its config's fields."""
    import dataclasses

    t, cfg = config.train, getattr(run.model, "cfg", None)
    fields = dataclasses.asdict(cfg) if dataclasses.is_dataclass(cfg) else {}
    shown = ", ".join(f"{k} {v}" for k, v in fields.items() if k != "vocab_size")
    start = "from scratch" if not start_step else f"resumed at step {start_step}"
    mesh = " x ".join(f"{k}={v}" for k, v in dict(run.mesh.shape).items())
    rows = [
        ("config", config_file + "".join(f" + {o}" for o in overrides)),
        ("task", f"{run.task.name} ({type(run.task).__module__})"),
        ("model", f"{config.model.get('family')}: {shown}, {num_params:,} parameters"),
        ("data", run.task.describe_data(config, run.info)),
        ("steps", f"{t.num_steps:,} ({start})"),
        ("mesh", f"{mesh} ({run.mesh.devices.size} devices)"),
        ("workdir", str(workdir)),
    ]
    return "\n".join(["seqjax run"] + [f"  {k:<10} {v}" for k, v in rows])


class _LineLogger:
    """A stdout stand-in that logs each complete line (INFO) instead of printing it."""

    def __init__(self):
        self._pending = ""

    def write(self, text: str) -> int:
        self._pending += text
        *lines, self._pending = self._pending.split("\n")
        for line in lines:
            if line.strip():
                absl_logging.info("%s", line.strip())
        return len(text)

    def flush(self) -> None:
        pass


@contextlib.contextmanager
def library_prints_to_log():
    """Lines libraries ``print`` to stdout (TFDS's "Downloading and preparing dataset"
    banners) become log lines: stdout stays for results (evaluate's JSON, the test line);
    a training run shows them as INFO, the tools (``quiet_tool``) hide them."""
    logger = _LineLogger()
    with contextlib.redirect_stdout(logger):
        try:
            yield
        finally:
            logger.write("\n")


class _AboveBar:
    """A stream whose lines are printed with ``tqdm.write`` (above an active bar)."""

    def __init__(self, stream):
        self.stream = stream

    def write(self, text: str) -> None:
        text = text.rstrip("\n")
        if text:
            tqdm.tqdm.write(text, file=self.stream)

    def flush(self) -> None:
        self.stream.flush()


@contextlib.contextmanager
def logs_above_bar(progress):
    """While ``progress`` shows a terminal bar, absl's handler (which every ``logging``
    line of seqjax reaches) writes through ``tqdm.write``, so a log line never cuts the bar."""
    handler = absl_logging.get_absl_handler().python_handler
    if progress.plain or not progress.enabled:
        yield
        return
    old = handler.stream
    handler.stream = _AboveBar(progress.stream)
    try:
        yield
    finally:
        handler.stream = old
