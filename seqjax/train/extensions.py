"""Mechanisms and tasks that live outside seqjax: imported, configured, recorded, restored.

An extension is a module of the user's (on ``PYTHONPATH``) that registers an attention
mechanism (``seqjax.attention.register``) or a task (``seqjax.tasks.register``) when
imported (``docs/extending.md``). A run names such modules in ``config.imports`` (a config
file's tuple, or ``--import MODULE`` on the command line, which joins it); they are imported
before the config is validated, recorded in ``config.json``, and imported again by
``seqjax.evaluate``, ``seqjax.sample`` and ``seqjax.translate`` before a checkpoint is
restored. ``run_info.json`` records which module registered each mechanism and the task the
run used (``provenance``), so a workdir whose extension is missing says which module to
put back instead of failing inside the restore.

Options of any registered mechanism are command-line flags
(``--config.model.attention_options.<mechanism>.<option>=V``) although the default config
has a block only for ``dense``: ``split_option_overrides`` takes them out of the argument
list before ``ml_collections`` sees them and ``apply_option_overrides`` adds the block after
the config is loaded; the mechanism's own ``options`` then validate the names.
"""

from __future__ import annotations

import ast
import importlib
import json

from seqjax.train import config_validation, paths

PREFIX = "--config.model.attention_options."


class ExtensionError(config_validation.ConfigError):
    """A module named by ``config.imports``/``--import`` is missing or registers nothing
    the run needs (the message names the module and the fix)."""


def import_modules(modules, *, field: str = "config.imports") -> None:
    """Imports each module (registering its mechanisms and tasks); one sentence if not."""
    for name in modules or ():
        try:
            importlib.import_module(name)
        except ImportError as e:
            raise ExtensionError(
                f"{field} names module {name!r}, which cannot be imported here ({e}); put the "
                "folder that holds it on PYTHONPATH (or pip install it)"
            ) from None


def imports_in_argv(argv: list[str]) -> list[str]:
    """The ``--import MODULE`` / ``--import=MODULE`` values of a command line (read before
    the flags are parsed: the modules must be imported before the config loads)."""
    out = []
    for i, arg in enumerate(argv[1:], start=1):
        if arg.startswith("--import="):
            out.append(arg.split("=", 1)[1])
        elif arg == "--import" and i + 1 < len(argv):
            out.append(argv[i + 1])
    return [m for m in out if m]


def _is_option_flag(arg: str) -> bool:
    from seqjax import attention

    if not arg.startswith(PREFIX):
        return False
    key = arg[len(PREFIX) :].split("=", 1)[0]
    parts = key.split(".")
    return len(parts) == 2 and parts[0] in attention.names()


def split_option_overrides(argv: list[str]) -> tuple[list[str], list[tuple[str, str, str]]]:
    """``(argv without them, [(mechanism, option, text)])`` for the option flags of every
    registered mechanism (``--config.model.attention_options.window.window=8``)."""
    rest, found = [argv[0]] if argv else [], []
    args = argv[1:]
    i = 0
    while i < len(args):
        arg = args[i]
        if _is_option_flag(arg):
            key, eq, text = arg[len(PREFIX) :].partition("=")
            if not eq and i + 1 < len(args):  # --config.model.attention_options.a.b VALUE
                i, text = i + 1, args[i + 1]
            name, option = key.split(".")
            found.append((name, option, text))
        else:
            rest.append(arg)
        i += 1
    return rest, found


def _parse(text: str, current):
    """``text`` as the type of ``current`` (the config's value), else a Python literal."""
    if isinstance(current, bool) or text.lower() in ("true", "false"):
        if text.lower() not in ("true", "false"):
            raise ValueError(f"{text!r} is not true/false")
        return text.lower() == "true"
    if isinstance(current, int | float | str) and current is not None:
        return type(current)(text)
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError):
        return text


def apply_option_overrides(config, overrides) -> None:
    """Sets ``config.model.attention_options.<mechanism>.<option>`` from the command line,
    adding the mechanism's block where the config has none; names are checked by the
    mechanism's ``options`` (``seqjax.attention.check_options``)."""
    import ml_collections

    from seqjax import attention

    for name, option, text in overrides:
        field = f"config.model.attention_options.{name}.{option}"
        opts = config.model.get("attention_options")
        block = dict(opts[name]) if opts is not None and name in opts else {}
        try:
            attention.check_options(name, {option: None})
            value = _parse(text, block.get(option))
        except ValueError as e:
            raise config_validation.ConfigError(f"--{field[len('config.') :]}: {e}") from None
        block[option] = value
        with config.unlocked():
            if opts is None:
                config.model.attention_options = ml_collections.ConfigDict()
            config.model.attention_options[name] = ml_collections.ConfigDict(block)


def add_imports(config, modules) -> None:
    """Adds ``--import`` modules to ``config.imports`` (recorded in ``config.json``)."""
    if not modules:
        return
    merged = tuple(dict.fromkeys([*(config.get("imports") or ()), *modules]))
    with config.unlocked():
        config.imports = merged


def mechanism_names(config, *, decoder: bool = True) -> list[str]:
    """The attention mechanisms a config's model uses (``attention``; with ``decoder``,
    an encoder-decoder's ``decoder_attention`` too)."""
    m = config.get("model") or {}  # a config.json without one: the restore reports it
    specs = [m.get("attention", "")]
    if decoder and m.get("decoder_attention"):
        specs.append(m["decoder_attention"])
    from seqjax.attention import registry as attention_registry

    names = [n for s in specs for n in attention_registry.parse(s)]
    return list(dict.fromkeys(names))


def provenance(config, task, model=None) -> dict:
    """``{'attention': {name: module}, 'task': {name: module}, 'imports': [...]}``: which
    module registered each mechanism the run's ``model`` uses and its task
    (``run_info.json``)."""
    from seqjax import attention

    mechs = {}
    decoder = bool(getattr(getattr(model, "cfg", None), "decoder_layers", None))
    for name in mechanism_names(config, decoder=decoder):
        if name in attention.names():
            mechs[name] = attention.spec(name).fn.__module__
    return {
        "attention": mechs,
        "task": {task.name: type(task).__module__},
        "imports": list(config.get("imports") or ()),
    }


def _recorded(workdir) -> dict:
    """The newest ``run_info.<n>.json``'s provenance (empty for older runs)."""
    work = paths.workdir_path(workdir)
    infos = []
    while (work / f"run_info.{len(infos)}.json").exists():  # as write_run_info numbers them
        infos.append(work / f"run_info.{len(infos)}.json")
    for path in reversed(infos):
        try:
            return json.loads(path.read_text()).get("extensions") or {}
        except (OSError, ValueError):
            continue
    return {}


def check_restorable(config, workdir, extra_imports=()) -> None:
    """Imports the run's ``config.imports`` and ``extra_imports`` (``--import``), then
    checks that every mechanism and the task the run used are registered; raises
    ``ExtensionError`` naming the module that registered a missing one."""
    from seqjax import attention, tasks

    import_modules(config.get("imports") or (), field=f"the run in {workdir} (config.imports)")
    import_modules(extra_imports, field="--import")
    recorded = _recorded(workdir)
    missing = []
    for name in mechanism_names(config):
        if name not in attention.names():
            module = (recorded.get("attention") or {}).get(name)
            missing.append(f"attention mechanism {name!r}" + _from(module))
    task_name = next(iter(recorded.get("task") or {}), None)
    if task_name and task_name not in tasks.names():
        missing.append(f"task {task_name!r}" + _from(recorded["task"][task_name]))
    if missing:
        raise ExtensionError(
            f"the run in {workdir} used {' and '.join(missing)}, not registered here; pass "
            "--import MODULE (the module that registers it, on PYTHONPATH)"
        )


def _from(module: str | None) -> str:
    return f" (registered by module {module!r})" if module else " (module not recorded)"


def prepare_training(config, workdir) -> None:
    """Before a training config is validated: imports ``config.imports`` and, on a resume,
    the imports the workdir's run recorded (added to ``config.imports``), then names an
    unregistered mechanism with the way to register it."""
    from seqjax import attention

    saved = paths.workdir_path(workdir) / "config.json"
    if saved.exists():
        try:
            before = json.loads(saved.read_text()).get("imports") or []
        except ValueError:
            before = []  # resume_check reports an unreadable config.json
        import_modules(before, field=f"the run in {workdir} (its config.json imports)")
        add_imports(config, before)
    import_modules(config.get("imports") or ())
    m = config.get("model") or {}
    for field in ("attention", "decoder_attention"):  # the field that names it, not another
        names = attention.registry.parse(m.get(field) or "")
        unknown = [n for n in dict.fromkeys(names) if n not in attention.names()]
        if unknown:
            break
    if unknown:
        raise ExtensionError(
            f"config.model.{field} names {', '.join(map(repr, unknown))}, which no imported "
            f"module registers; registered: {', '.join(attention.names())}. A mechanism of "
            "your own is registered by --import MODULE or config.imports (docs/extending.md)"
        )
