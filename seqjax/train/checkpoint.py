"""Orbax checkpoints: train state + data-iterator state + config, asynchronous, atomic.

Layout: ``<workdir>/checkpoints/<step>/{state,data,config}``. Orbax writes a step into a
temporary directory and renames it only once every item is complete, and
``CheckpointManager.latest_step()`` lists only such finalized steps, so a process killed
mid-save leaves no checkpoint that a restart could pick (``tests/train/test_kill.py``
checks this with ``kill -9``).
"""

from __future__ import annotations

import logging

import orbax.checkpoint as ocp

from seqjax.train import paths


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

    def restore_config(self, step: int) -> dict:
        """The config saved with ``step`` (a plain dict)."""
        return self.manager.restore(step, args=ocp.args.Composite(config=ocp.args.JsonRestore()))[
            "config"
        ]

    def wait(self) -> None:
        """Blocks until any asynchronous save is finalized."""
        self.manager.wait_until_finished()

    def close(self) -> None:
        self.manager.close()
