"""``config.data.objective='distill'``: BERT's masked-LM batches (``seqjax.data.objectives``,
the same masking and fields as ``objective='mlm'``) read by the distillation task
(``seqjax.tasks.distill``: a frozen teacher and a student on the same masked rows; Sanh et al.
2019 §2 train DistilBERT on the masked-LM data of its teacher)."""

from __future__ import annotations

import dataclasses

from seqjax.data import objectives, registry


def distill_info(cfg, base_info):
    """The masked-LM info (``[MASK]`` appended) with task 'distill'."""
    return dataclasses.replace(
        objectives.mlm_info(cfg, base_info), task="distill", num_classes=None
    )


registry.register_objective(
    registry.Objective("distill", "distill", distill_info, objectives.make_mlm)
)
