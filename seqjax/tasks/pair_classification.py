"""Document-pair classification with a two-tower model (``DataInfo.task``
'pair_classification'): LRA Retrieval (Tay et al. 2020, §2.4) and its offline stand-in.

Batches: ``inputs``, ``inputs2`` int32 ``[B, T]`` (the two documents, 0 = pad), ``targets``
int32 ``[B]``, ``weights`` float32 ``[B]`` (0 for rows that pad the last batch). The model is
``seqjax.models.two_tower.TwoTowerClassifier``: one encoder on both documents, pooled
(``config.model.pooling``), combined by ``config.model.pair_interaction`` and an MLP whose
first width is ``config.model.d_ff`` (LRA's ``mlp_dim``). Evaluation reports accuracy;
throughput counts pairs.

Legend: B batch, T = ``data.max_len`` bytes per document (+1 for CLS inside the model).
"""

from __future__ import annotations

from seqjax.tasks import base, registry


class PairClassification(base.Task):
    name = "pair_classification"
    batch_fields = {
        "inputs": ("int32", 2),
        "inputs2": ("int32", 2),
        "targets": ("int32", 1),
        "weights": ("float32", 1),
    }
    unit = "ex"

    def describe_data(self, config, info) -> str:
        """Document pairs, each document ``max_len`` bytes."""
        d = config.data
        return (f"{d.name}, pairs of {info.seq_len}-token documents, batch {d.batch_size}; "
                f"splits (pairs): {base.split_sizes(info)}")  # fmt: skip

    causal = False
    length_field = "data.max_len"
    interaction: str = "nli"

    def configure(self, config):
        """This task with ``config.model.pair_interaction``."""
        task = PairClassification()
        task.interaction = str(config.model.get("pair_interaction", "nli"))
        return task

    def validate(self, config, bad) -> None:
        from seqjax.models.two_tower import INTERACTIONS

        m = config.model
        if m.get("towers", 2) != 2:
            bad("model.towers", m.get("towers"), f"2 for the pair data set {config.data.name!r}")
        if m.get("pair_interaction", "nli") not in INTERACTIONS:
            bad("model.pair_interaction", m.get("pair_interaction"),
                ", ".join(repr(i) for i in INTERACTIONS))  # fmt: skip

    def input_length(self, config) -> int:
        """``data.max_len`` (the data set's default when None) + 1 with CLS pooling."""
        from seqjax.data import api as data_api

        return data_api.max_len(config.data) + (1 if config.model.pooling == "cls" else 0)

    def needs(self, config, info):
        """Bidirectional towers with ``info.num_classes`` outputs (the family's pair module
        reads this task's ``interaction``)."""
        from seqjax.models.registry import Needs

        return Needs(self.name, causal=False, num_classes=int(info.num_classes))

    def init_shapes(self, config, info) -> tuple:
        """Both documents' padded tokens ``[1, max_len]``."""
        from seqjax.data import api as data_api

        shape = (1, data_api.max_len(config.data))
        return (shape, shape)

    def apply(self, model, params, batch, *, rng, train: bool, memory=None):
        """``(logits [B, C], None)`` of the two documents (dropout on when ``train``)."""
        del memory
        rngs = {"dropout": rng} if train else {}
        logits = model.apply(
            {"params": params}, batch["inputs"], batch["inputs2"],
            rngs=rngs, deterministic=not train,
        )  # fmt: skip
        return logits, None

    def tokens_per_step(self, config) -> int:
        """Pairs per step (the progress line shows ex/s)."""
        return int(config.data.batch_size)

    def flops_per_step(self, run) -> float:
        """Both towers: the encoder's FLOPs on ``2 B`` documents of the input length."""
        from seqjax.models import flops

        return flops.train_flops_per_step(
            run.model_cfg, run.abstract["params"], batch_size=2 * run.config.data.batch_size,
            seq_len=self.input_length(run.config), tied_output=False,
        )  # fmt: skip


TASK = registry.register(PairClassification())
