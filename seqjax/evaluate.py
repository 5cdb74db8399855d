"""Evaluation over a full split: loss, bits per character/byte, perplexity, accuracy.

    python -m seqjax.evaluate --workdir DIR --split test

restores the newest complete checkpoint of a training workdir and prints one JSON line.
The same ``evaluate`` function runs inside the training loop (validation during training,
test at the end).
"""

from __future__ import annotations

import copy
import json

import jax
import jax.numpy as jnp
from absl import app, flags
from tqdm import tqdm

from seqjax import data as data_lib
from seqjax.train import metrics as metrics_lib
from seqjax.train import sharding
from seqjax.train import step as step_lib


class Evaluator:
    """A jitted eval step bound to a built run (``seqjax.train.setup.Run``)."""

    def __init__(self, run):
        self.run = run
        fn = step_lib.make_eval_step(run.model, run.task)
        self._step = step_lib.jit_eval_step(fn, run.shardings["params"], run.mesh)

    def __call__(self, params, split: str, *, max_batches: int = 0, show: bool = True) -> dict:
        """Evaluates ``params`` on ``split``.

        Args:
          params: the model parameters (sharded like the train state's).
          split: 'train', 'validation' or 'test'.
          max_batches: stop after this many batches (0 = the whole split, exactly once).
          show: a tqdm bar on process 0.

        Returns:
          ``{'loss', 'accuracy', 'count', ['bits_per_char'|'bits_per_byte', 'perplexity']}``.
        """
        config = self.run.config
        data_cfg = copy.deepcopy(config.data)
        if config.train.eval_batch_size:
            data_cfg.batch_size = config.train.eval_batch_size
        it = data_lib.make(
            data_cfg,
            split=split,
            process_index=jax.process_index(),
            process_count=jax.process_count(),
            train=False,
        )
        total = it.num_steps if not max_batches else min(max_batches, it.num_steps)
        sums = None
        bar = tqdm(
            total=total,
            desc=f"eval {split}",
            leave=False,
            disable=not show or jax.process_index() != 0,
            dynamic_ncols=True,
        )
        with sharding.rules_and_mesh(self.run.mesh):
            for i, local in enumerate(it):
                if i >= total:
                    break
                out = self._step(params, sharding.global_batch(local, self.run.mesh))
                sums = out if sums is None else jax.tree.map(jnp.add, sums, out)
                bar.update(1)
        bar.close()
        sums = jax.device_get(sums)
        return metrics_lib.eval_summary(sums, self.run.task, config.data.get("vocab"))


def evaluate(run, params, split: str, *, max_batches: int = 0) -> dict:
    """One-off ``Evaluator(run)(params, split)``."""
    return Evaluator(run)(params, split, max_batches=max_batches)


def main(argv):
    del argv
    from seqjax.train import setup

    f = flags.FLAGS
    run, state, step = setup.restore_latest(f.workdir)
    result = evaluate(run, state["params"], f.split, max_batches=f.max_batches)
    print(json.dumps({"step": step, "split": f.split, **result}))


def cli():
    """``python -m seqjax.evaluate --workdir DIR --split test [--max_batches N]``."""
    flags.DEFINE_string("workdir", None, "Training workdir with checkpoints.")
    flags.DEFINE_enum("split", "test", list(data_lib.SPLITS), "Split to evaluate.")
    flags.DEFINE_integer("max_batches", 0, "Stop after this many batches (0 = all).")
    flags.mark_flag_as_required("workdir")
    app.run(main)


if __name__ == "__main__":
    cli()
