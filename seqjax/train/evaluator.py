"""Evaluation over a full split: the task's summary (loss, accuracy; bits per
character/byte and perplexity for LMs), then its optional decoding metrics.

``Evaluator(run)(params, split)`` runs inside the training loop (validation during training,
test at the end) and behind ``python -m seqjax.evaluate``.

Recurrent models (``seqjax.models.memory``) are evaluated as Dai et al. 2019 evaluate
Transformer-XL (§4, enwik8: tgt_len 80, mem_len 2100, clamp_len 820, same_length): the
split is read as ``eval_batch_size`` contiguous streams (``lm_batching='stream'``) in
segments of ``config.eval.tgt_len`` tokens, the memory (``config.eval.mem_len``, emptied at
the start of every evaluation) carried from segment to segment, and every target token
counted exactly once.

The task (``seqjax.tasks``) gives the sums of a batch, the summary of a split's sums
(``eval_summary``) and, after the loss pass, metrics that need decoding the whole split
(``decode_metrics``, e.g. BLEU over beam-search outputs; none for the LM and the classifier).
"""

from __future__ import annotations

import copy
import sys

import jax
from tqdm import tqdm

from seqjax import data as data_lib
from seqjax.train import sharding
from seqjax.train import step as step_lib


class Evaluator:
    """A jitted eval step bound to a built run (``seqjax.train.setup.Run``).

    A recurrent model (``run.recurrence``) is evaluated by a second module built with the
    evaluation lengths of ``run.recurrence.eval_lengths(run.config)`` (``self.lengths``);
    the trained parameters fit it. The jitted programs are built once, here.
    """

    def __init__(self, run):
        self.run = run
        rec = run.recurrence
        self.lengths = rec.eval_lengths(run.config) if rec else None
        self.model = rec.eval_model(run.model_cfg, self.lengths) if rec else run.model
        replicated = jax.sharding.NamedSharding(run.mesh, jax.sharding.PartitionSpec())
        memory_sh = sharding.batch_sharding(run.mesh) if rec else None
        self._step = step_lib.jit_eval_step(
            step_lib.make_eval_step(self.model, run.task),
            run.shardings["params"],
            memory_sh,
            run.mesh,
        )
        # Zeros made by one jitted program on every process, like each step after it.
        self._zero_sums = jax.jit(run.task.zero_sums, out_shardings=replicated)
        # A recurrent model's memory at the start of a split: empty, sharded like a batch.
        self._empty_memory = (
            jax.jit(self.model.init_memory, static_argnums=0, out_shardings=memory_sh)
            if rec
            else lambda batch: None
        )

    def __call__(self, params, split: str, *, max_batches: int = 0, show: bool = True) -> dict:
        """Evaluates ``params`` on ``split``.

        Args:
          params: the model parameters (sharded like the train state's).
          split: 'train', 'validation' or 'test'.
          max_batches: stop after this many batches (0 = the whole split, exactly once).
          show: a tqdm bar on process 0.

        Returns:
          the task's ``eval_summary`` (LM: ``{'loss', 'accuracy', 'count',
          'bits_per_char'|'bits_per_byte', 'perplexity'}``; classifier: the first three),
          then its ``decode_metrics``.
        """
        config = self.run.config
        data_cfg = copy.deepcopy(config.data)
        if config.train.eval_batch_size:
            data_cfg.batch_size = config.train.eval_batch_size
        if self.lengths is not None:  # recurrent: one pass of contiguous streams
            data_cfg.seq_len = self.lengths["tgt_len"]
            data_cfg.lm_batching = "stream"
        memory = self._empty_memory(int(data_cfg.batch_size))  # reset for every split
        it = data_lib.make(
            data_cfg,
            split=split,
            process_index=jax.process_index(),
            process_count=jax.process_count(),
            train=False,
        )
        total = it.num_steps if not max_batches else min(max_batches, it.num_steps)
        done = 0
        sums = self._zero_sums()
        bar = tqdm(
            total=total,
            desc=f"eval {split}",
            leave=False,
            # No bar in logs (not a terminal): the result line says it all.
            disable=not show or jax.process_index() != 0 or not sys.stderr.isatty(),
            dynamic_ncols=True,
        )
        try:
            with sharding.rules_and_mesh(self.run.mesh):
                for i, local in enumerate(it):
                    if i >= total:
                        break
                    with jax.transfer_guard_host_to_device("allow"):  # on purpose
                        batch = sharding.global_batch(local, self.run.mesh)
                    sums, memory = sharding.settle(self._step(params, sums, memory, batch))
                    done += 1
                    bar.update(1)
        finally:
            bar.close()
            it.close()  # grain's threads and worker processes
        # What this evaluation covered (``train.test_max_batches`` may cut a split short).
        self.last_batches = {"evaluated_batches": done, "split_batches": it.num_steps}
        sums = jax.device_get(sums)
        task = self.run.task
        summary = task.eval_summary(sums, config)
        summary.update(task.decode_metrics(self.run, params, split, max_batches=max_batches))
        return summary
