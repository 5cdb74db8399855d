"""Checks of the evaluate/sample/translate command lines: the workdir and its checkpoints.

Each raises ``seqjax.tasks.inputs.InputError`` with one sentence naming the flag and what
would be valid; the tools turn it into ``error: ...`` and exit status 2
(``seqjax.train.errors``). The prompt and sampling flags are checked by
``seqjax.tasks.inputs``.
"""

from __future__ import annotations

import sys

from etils import epath

from seqjax.tasks.inputs import InputError
from seqjax.train import paths


def checkpoint_steps(workdir: str) -> list[int]:
    d = paths.workdir_path(workdir) / "checkpoints"
    if not d.is_dir():
        return []
    return sorted(int(p.name) for p in d.iterdir() if p.is_dir() and p.name.isdigit())


def checkpoint_step(workdir: str, step: int | None) -> int:
    """The checkpoint step to restore (``step`` or the newest); checks the workdir first."""
    work = epath.Path(workdir).expanduser()
    if not work.exists():
        raise InputError(f"--workdir={workdir} does not exist")
    if not work.is_dir():
        raise InputError(f"--workdir={workdir} is a file; give a training job's workdir")
    if not (work / "config.json").exists():
        raise InputError(
            f"--workdir={workdir} is not a seqjax training workdir (it has no config.json); "
            "give the --workdir of a python -m seqjax.main run"
        )
    steps = checkpoint_steps(str(work))
    if not steps:
        raise InputError(
            f"--workdir={workdir} has no complete checkpoint yet ({work / 'checkpoints'} is "
            "empty or missing); wait for the first save (config.train.checkpoint_every) or "
            "the end of training"
        )
    if step is None:
        return steps[-1]
    if step not in steps:
        raise InputError(
            f"--step={step}: there is no such checkpoint in {work / 'checkpoints'}; "
            f"available steps: {', '.join(map(str, steps))}"
        )
    return step


IMPORT_HELP = (
    "A module to import before restoring (repeatable): one that registers the run's attention "
    "mechanism or task (docs/extending.md); the run's own config.imports are imported anyway."
)


def restore(restore_fn, workdir: str, step: int | None, imports=()):
    """``restore_fn(step)`` for ``--step`` (or the newest checkpoint, falling back to older
    ones with a warning when the newest is damaged; nothing is moved: a training job may
    be using the workdir).

    First the run's extensions (``config.imports``) and ``imports`` (``--import``) are
    imported and the mechanisms and task it used are checked to be registered: a missing
    one is named with its module (``seqjax.train.extensions``), not blamed on a checkpoint.
    """
    chosen = checkpoint_step(workdir, step)
    from seqjax.train import extensions, setup

    extensions.check_restorable(setup.load_config(workdir), workdir, imports)
    steps = [chosen] if step is not None else list(reversed(checkpoint_steps(workdir)))
    failures = []
    for s in steps:
        try:
            out = restore_fn(s)
        except Exception as e:  # a damaged step: try the next older one
            from seqjax.train import checkpoint

            if not failures:  # a config that cannot build fails every step alike: say so
                _check_saved_config(workdir)
            step_dir = paths.workdir_path(workdir) / "checkpoints" / str(s)
            failures.append(f"step {s}: {checkpoint.reason(step_dir, e)}")
            continue
        for line in failures:
            print(f"warning: skipped checkpoint {line}", file=sys.stderr, flush=True)
        return out
    raise InputError(
        f"no checkpoint in {paths.workdir_path(workdir) / 'checkpoints'} restores: "
        + "; ".join(failures)
    )


def _check_saved_config(workdir: str) -> None:
    """``InputError`` naming ``config.json``'s invalid fields and their valid values (a file
    edited by hand: ``model.dtype='float33'``), checked as the tools restore it (one
    device). Called only once a restore has failed: a saved config that builds is never
    refused here."""
    import ml_collections

    from seqjax.train import config_validation, setup

    config = setup.load_config(workdir)
    config.mesh = ml_collections.ConfigDict({"data": 1, "fsdp": 1, "tensor": 1})
    try:
        config_validation.validate(config, num_devices=1, process_count=1)
    except config_validation.ConfigError as e:
        problems = str(e).split(":", 1)[1].strip()
        raise InputError(
            f"{paths.workdir_path(workdir) / 'config.json'} (the run's config) is invalid, "
            f"so no checkpoint can be restored with it: {problems}"
        ) from None
    except Exception:  # noqa: BLE001 - a check that cannot run leaves the checkpoints' reasons
        return
