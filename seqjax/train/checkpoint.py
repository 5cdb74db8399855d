"""Orbax checkpoints: train state + data-iterator state + config, asynchronous, atomic.

Layout: ``<workdir>/checkpoints/<step>/{state,data,config}``. Orbax writes a step into a
temporary directory and renames it only once every item is complete, and
``CheckpointManager.latest_step()`` lists only such finalized steps, so a process killed
mid-save leaves no checkpoint that a restart could pick (``tests/train/test_train_resume.py``
checks this with ``kill -9``).
"""

from __future__ import annotations

import datetime
import logging
import os

import jax
import orbax.checkpoint as ocp
from etils import epath

from seqjax.train import paths


class CheckpointError(RuntimeError):
    """No checkpoint in the workdir restores (the message lists each one and why)."""


def _reason(e: BaseException) -> str:
    """``Type: first line`` of the innermost cause of an exception: TensorStore's own error
    (``OUT_OF_RANGE: Error reading "params..." ...``), not Orbax's wrapper around it, whose
    message runs for pages (``Encountered error while reading array index ...``)."""
    seen = {id(e)}
    # ``raise ... from None`` ends the chain (json's JSONDecodeError hides a StopIteration: 0).
    while (inner := e.__cause__ or (None if e.__suppress_context__ else e.__context__)) is not None:
        if id(inner) in seen:
            break
        seen.add(id(inner))
        e = inner
    lines = str(e).strip().splitlines()
    return f"{type(e).__name__}: {lines[0][:300] if lines else ''}".rstrip(": ")


def reason(step_dir, e: BaseException) -> str:
    """Why the checkpoint in ``step_dir`` did not restore: an emptied file of it, named
    (an empty ``data/metadata`` otherwise reads as a JSON error of no file), else
    ``_reason(e)``."""
    empty = []
    for parent, _, names in os.walk(os.fspath(step_dir)):  # local folders (gs://: none)
        for name in names:
            path = os.path.join(parent, name)
            if os.path.isfile(path) and os.path.getsize(path) == 0:
                empty.append(path)
    empty.sort()
    if empty:
        return f"{empty[0]} is empty (0 bytes)"
    return _reason(e)


TMP_SUFFIX = ".orbax-checkpoint-tmp"


def remove_partial_saves(workdir: str) -> list[str]:
    """Deletes ``checkpoints/<step>.orbax-checkpoint-tmp*`` folders: saves a stopped job
    (full disk, ``kill -9``) never finalized. Only for the job that holds the workdir's
    lock (a running job's save in flight looks the same). Returns the names removed."""
    d = paths.workdir_path(workdir) / "checkpoints"
    try:
        partial = [p for p in d.iterdir() if TMP_SUFFIX in p.name]
    except OSError:
        return []
    for p in partial:
        p.rmtree() if p.is_dir() else p.unlink()
        logging.info("checkpoint: removed %s (a save that never finished)", p)
    return sorted(p.name for p in partial)


class Checkpointer:
    """The workdir's ``CheckpointManager`` with the three items seqjax saves.

    Args:
      workdir: the job's working directory.
      max_to_keep: newest checkpoints kept (older ones are deleted after a new one is final).
      async_save: write in a background thread while training continues.
    """

    def __init__(self, workdir: str, *, max_to_keep: int, async_save: bool = True):
        self.directory = paths.workdir_path(workdir) / "checkpoints"  # Orbax: absolute
        options = ocp.CheckpointManagerOptions(
            max_to_keep=max_to_keep,
            create=True,
            enable_async_checkpointing=async_save,
            cleanup_tmp_directories=True,  # remove leftovers of a save that was killed
        )
        self.manager = ocp.CheckpointManager(
            self.directory, options=options, item_names=("state", "data", "config")
        )

    def latest_step(self) -> int | None:
        """Newest complete (finalized) checkpoint, or None."""
        return self.manager.latest_step()

    def save(self, step: int, state, data_state: dict, config_dict: dict) -> None:
        """Starts saving ``step`` (returns before the write ends when async)."""
        self.manager.save(
            step,
            args=ocp.args.Composite(
                state=ocp.args.StandardSave(state),
                data=ocp.args.JsonSave(data_state),
                config=ocp.args.JsonSave(config_dict),
            ),
            force=True,
        )
        logging.info("checkpoint: saving step %d to %s", step, self.directory)

    def restore(self, step: int, abstract_state):
        """Restores ``(state, data_state)``; arrays land with ``abstract_state``'s shardings."""
        out = self.manager.restore(
            step,
            args=ocp.args.Composite(
                state=ocp.args.StandardRestore(abstract_state),
                data=ocp.args.JsonRestore(),
            ),
        )
        return out["state"], out["data"]

    def restore_newest(self, abstract_state):
        """Restores the newest checkpoint that restores: ``(step, state, data_state)``.

        A damaged newest checkpoint (a truncated array file, an emptied ``data/metadata``,
        a deleted ``state/``) no longer blocks the resume: it is skipped with a warning
        that says why, and once an older one has restored, every skipped one is moved
        aside to ``<workdir>/damaged_checkpoints/`` (never deleted). When none restores,
        nothing is moved and ``CheckpointError`` lists each step and its error (a config
        that changed the model's shape fails every checkpoint alike).

        Returns:
          ``(None, None, None)`` when the workdir has no complete checkpoint.
        """
        skipped: list[tuple[int, str]] = []
        for step in sorted(self.manager.all_steps(), reverse=True):
            try:
                state, data_state = self.restore(step, abstract_state)
            except Exception as e:  # any failure to read means the step is unusable
                why = reason(self.directory / str(step), e)
                logging.warning("checkpoint: step %d in %s does not restore (%s)",
                                step, self.directory, why)  # fmt: skip
                skipped.append((step, why))
                continue
            for bad, why in skipped if jax.process_index() == 0 else ():
                where = self.move_aside(bad)
                logging.warning("checkpoint: skipped step %d (%s); moved it to %s and resumed "
                                "from step %d", bad, why, where, step)  # fmt: skip
            if skipped:
                if jax.process_count() > 1:  # the others reload after process 0 moved them
                    from jax.experimental import multihost_utils

                    multihost_utils.sync_global_devices("seqjax_checkpoint_move_aside")
                self.manager.reload()
            return step, state, data_state
        if skipped:
            lines = "\n  - ".join(f"step {s}: {why}" for s, why in skipped)
            raise CheckpointError(
                f"no checkpoint in {self.directory} restores:\n  - {lines}\n"
                "If the config changed the model, use a new --workdir (or the old config); "
                "otherwise move the damaged step folders away and rerun."
            )
        return None, None, None

    def move_aside(self, step: int) -> epath.Path:
        """Moves ``checkpoints/<step>`` to ``damaged_checkpoints/<step>.<utc time>``."""
        src = self.directory / str(step)
        stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y%m%dT%H%M%S")
        dest_dir = self.directory.parent / "damaged_checkpoints"
        dest_dir.mkdir(parents=True, exist_ok=True)
        dest = dest_dir / f"{step}.{stamp}"
        n = 0
        while dest.exists():
            n += 1
            dest = dest_dir / f"{step}.{stamp}.{n}"
        src.rename(dest)
        return dest

    def wait(self) -> None:
        """Blocks until any asynchronous save is finalized."""
        self.manager.wait_until_finished()

    def close(self) -> None:
        self.manager.close()
