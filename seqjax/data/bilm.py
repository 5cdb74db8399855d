"""ELMo's bidirectional LM as a pre-training objective (``config.data.objective = 'bilm'``;
Peters et al. 2018 §3.1): the LM batches of a corpus (windows of ``data.seq_len``) or of
the example texts of ``imdb_bytes``/``listops`` (one right-padded document of
``data.max_len`` per row, as ``objective='lm'``), for the task ``bilm``
(``seqjax.tasks.bilm``), which trains a forward and a backward LM on the same ``inputs``.

Batches: ``inputs``, ``targets`` (the next tokens) and ``weights`` ``[B, T]`` as the LM's,
but the last column of ``weights`` is 0: both LMs predict the same ``T - 1`` tokens of
``inputs`` (the forward LM ``x_1..x_{T-1}``, the backward LM ``x_0..x_{T-2}``, its targets
taken from ``inputs`` by the task), so the token past the window is nobody's target and
``sum(weights)`` counts the predictions of each LM.
"""

from __future__ import annotations

import copy
import dataclasses

import numpy as np

from seqjax.data import packing, pipeline, registry


def is_texts(cfg) -> bool:
    """Whether the objective reads example texts (padded rows) rather than corpus windows."""
    return cfg.get("name") in registry.names("texts")


def make_bilm(cfg, split, process_index, process_count, train, base_make, base_info):
    """The LM batches of ``config.data`` without its objective (``api.make`` with 'bilm')."""
    if is_texts(cfg):  # one document per row: the 'lm' objective's rows
        lm_cfg = copy.deepcopy(cfg)
        lm_cfg.objective = "lm"
        it = packing.make(lm_cfg, split, process_index, process_count, train, base_make)
    else:
        it = base_make(packing.base_data(cfg), split=split, process_index=process_index,
                       process_count=process_count, train=train)  # fmt: skip
    spec = {**it.spec, "objective": "bilm"}
    it.close()
    return pipeline.DataIterator(
        _LastTargetOff(it.maker), it.num_steps, spec, num_workers=int(cfg.num_workers),
        prefetch=int(cfg.prefetch),
    )  # fmt: skip


class _LastTargetOff:
    """The LM batches with the weight of each row's last target set to 0."""

    def __init__(self, maker):
        self.maker = maker

    def __getattr__(self, name):  # rows(), tokens(), ... of the wrapped maker
        return getattr(self.maker, name)

    def __call__(self, step):
        batch = dict(self.maker(step))
        weights = np.array(batch["weights"], np.float32)
        weights[:, -1] = 0.0
        batch["weights"] = weights
        return batch


def bilm_info(cfg, base_info):
    """The text data set's info, task 'bilm'."""
    return dataclasses.replace(base_info(packing.base_data(cfg)), task="bilm", num_classes=None)


registry.register_objective(registry.Objective("bilm", "bilm", bilm_info, make_bilm))
