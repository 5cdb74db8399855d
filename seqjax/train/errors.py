"""How the command-line tools end: one sentence and an exit status, a traceback only for bugs.

``report(e, workdir)`` prints an exception the user can fix (bad config, data, workdir, a
resume with another config, a full disk) as ``error: <message>`` and returns exit status 2
(3 for a non-finite loss); any other exception is a bug in seqjax: its traceback is printed
with a line that says so, and the status is 1.
"""

from __future__ import annotations

import errno
import os
import re
import sys
import traceback
from pathlib import Path

from seqjax import console
from seqjax.train import paths

BUG_LINE = (
    "this is a bug in seqjax, not a problem with your input: please report it with the "
    "traceback above and the command line"
)


def _user_error_types() -> tuple[type, ...]:
    from seqjax.data import sources
    from seqjax.tasks import inputs
    from seqjax.train import checkpoint, config_validation, workdir

    return (
        config_validation.ConfigError,
        inputs.InputError,
        workdir.WorkdirError,
        checkpoint.CheckpointError,
        sources.DataError,
        sources.SourceMissingError,
        sources.ChecksumMismatchError,
    )


def _chain(e: BaseException):
    seen = set()
    while e is not None and id(e) not in seen:
        seen.add(id(e))
        yield e
        e = e.__cause__ or e.__context__


def newest_checkpoint(workdir: str | None) -> int | None:
    """Newest finalized checkpoint step on disk (a folder named by its step), or None."""
    if not workdir:
        return None
    from etils import epath

    d = epath.Path(workdir) / "checkpoints"
    try:
        steps = [int(p.name) for p in d.iterdir() if p.is_dir() and p.name.isdigit()]
    except OSError:
        return None
    return max(steps) if steps else None


def _kept(workdir: str | None) -> str:
    step = newest_checkpoint(workdir)
    if step is None:
        return "no checkpoint was saved yet"
    return f"the newest complete checkpoint is step {step} in {workdir}/checkpoints"


def disk_full_message(e: BaseException, workdir: str | None) -> str | None:
    """A sentence when ``e`` (or its cause) is ``No space left on device`` / over quota."""
    for x in _chain(e):
        if isinstance(x, OSError) and x.errno in (errno.ENOSPC, errno.EDQUOT):
            where = f" while writing {x.filename}" if x.filename else ""
            return (
                f"the disk is full{where} ({x.strerror}); {_kept(workdir)}. Free space, "
                "then rerun the same command to resume"
            )
        if "No space left on device" in str(x):
            return (
                f"the disk is full (No space left on device); {_kept(workdir)}. Free space, "
                "then rerun the same command to resume"
            )
    return None


# A file system that turned read-only (a remounted or failing volume) or a workdir whose
# permissions changed under the run.
_UNWRITABLE = (errno.EROFS, errno.EACCES, errno.EPERM)
# ``... local file "PATH": Failed to open: "PATH2": Read-only file system [os_error_code='30']``
_TENSORSTORE_OS_ERROR = re.compile(r'"([^"]+)"[^"]*: ([^:\[\]"]+) \[os_error_code=\'(\d+)\'\]')


def _inside(path, workdir: str | None) -> bool:
    if not workdir or not path:
        return False
    try:
        p, w = os.path.realpath(os.fsdecode(path)), os.path.realpath(workdir)
    except (TypeError, ValueError):
        return False
    return p == w or p.startswith(w.rstrip(os.sep) + os.sep)


def unwritable_message(e: BaseException, workdir: str | None) -> str | None:
    """A sentence when ``e`` (or its cause) is a write into ``workdir`` refused by the file
    system: read-only (``EROFS``, anywhere) or not permitted (``EACCES``/``EPERM`` on a path
    inside the workdir)."""
    for x in _chain(e):
        if isinstance(x, OSError) and x.errno in _UNWRITABLE:
            code, strerror, filename = x.errno, x.strerror, x.filename
        else:  # TensorStore's errors (Orbax's array writes) carry the OS error as text
            found = _TENSORSTORE_OS_ERROR.search(str(x))
            if not found or int(found.group(3)) not in _UNWRITABLE:
                continue
            filename, strerror, code = found.group(1), found.group(2), int(found.group(3))
        if code != errno.EROFS and not _inside(filename, workdir):
            continue
        where = f" ({strerror}: {filename})" if filename else f" ({strerror})"
        return (
            f"the workdir {workdir} cannot be written any more{where}; {_kept(workdir)}. "
            "Make the workdir writable again, then rerun the same command to resume"
        )
    return None


def message(e: BaseException, workdir: str | None = None) -> tuple[str, int] | None:
    """``(sentence, exit status)`` for an error the user can fix, None for a bug."""
    from seqjax.train import loop

    if isinstance(e, loop.NonFiniteLossError):
        return str(e), 3
    if isinstance(e, _user_error_types()):
        return str(e), 2
    full = disk_full_message(e, workdir) or unwritable_message(e, workdir)
    if full:
        return full, 2
    return None


def report(e: BaseException, workdir: str | None = None) -> int:
    """Prints ``e`` for the user (or its traceback and ``BUG_LINE``); returns the status."""
    known = message(e, workdir)
    if known is not None:
        print(f"error: {known[0]}", file=sys.stderr, flush=True)
        return known[1]
    traceback.print_exception(e, file=sys.stderr)
    print(f"error: {BUG_LINE}", file=sys.stderr, flush=True)
    return 1


def run_cli(fn, argv, workdir: str | None) -> None:
    """``fn(argv)`` for a command-line tool: user errors end in one sentence (exit 2),
    Ctrl-C in exit 130, bugs in a traceback with ``BUG_LINE`` (exit 1)."""
    try:
        fn(argv)
    except KeyboardInterrupt:
        print("error: interrupted (Ctrl-C)", file=sys.stderr)
        sys.exit(130)
    except Exception as e:
        sys.exit(report(e, workdir))


def interrupted_message(workdir: str | None) -> str:
    return f"interrupted (Ctrl-C); {_kept(workdir)}: rerun the same command to resume from it"


def config_file_problem(argv: list[str]) -> str | None:
    """A sentence when ``--config=path[:variant]`` names a missing file or a bad variant.

    The config file is loaded and ``get_config(variant)`` called once here, so that an
    unknown variant or a missing file ends in one line instead of a flag-parsing traceback.
    """
    value = console.config_arg(argv)
    if not value:
        return None
    path, _, variant = value.partition(":")
    if not os.path.exists(path):
        return f"--config file {path} does not exist (give a path like configs/char_lm.py)"
    if os.path.isdir(path):
        return f"--config={path} is a folder; give a config file like configs/char_lm.py"
    try:
        module = paths.load_file(path, "_seqjax_config_check")
    except SyntaxError as e:
        return f"--config file {path} has a syntax error at line {e.lineno}: {e.msg}"
    if not hasattr(module, "get_config"):
        return f"--config file {path} defines no get_config() function"
    try:
        config = module.get_config(*([variant] if variant else []))
    except (ValueError, KeyError, TypeError) as e:
        return f"--config={value}: {e}"
    from seqjax.train import extensions

    try:  # the config's own extensions register their mechanisms before the overrides
        extensions.import_modules(config.get("imports") or (), field=f"--config={value} imports")
    except extensions.ExtensionError as e:
        return str(e)
    return _unknown_override(config, argv)


def _unknown_override(config, argv: list[str]) -> str | None:
    """A sentence for ``--config.a.b=v`` naming a field the config does not have."""
    from seqjax.train import extensions

    for arg in argv[1:]:
        if not arg.startswith("--config.") or extensions._is_option_flag(arg):
            continue  # a registered mechanism's options: added by extensions, checked there
        key = arg[len("--config.") :].split("=", 1)[0]
        node, walked = config, "config"
        for part in key.split("."):
            fields = list(node.keys()) if hasattr(node, "keys") else None
            if fields is None or part not in fields:
                valid = ", ".join(sorted(fields)) if fields else "none (not a block)"
                return f"--config.{key}: {walked} has no field {part!r}; its fields: {valid}"
            node, walked = node[part], f"{walked}.{part}"
    return None


def parse_flags(argv: list[str]) -> list[str]:
    """``absl.app``'s flag parsing, ending with one line and exit status 2 on a bad flag."""
    from absl import app, flags

    try:
        return flags.FLAGS(argv)
    except flags.Error as e:
        print(f"error: {e}", file=sys.stderr)
        print(f"(see python -m {_module(argv)} --helpshort for the flags)", file=sys.stderr)
        sys.exit(2)
    except app.UsageError as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(2)


def _module(argv: list[str]) -> str:
    name = Path(argv[0]).stem if argv else "seqjax.main"
    return f"seqjax.{name}" if name in ("main", "evaluate", "sample", "translate") else name
