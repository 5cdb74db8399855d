"""Document-pair classification with a two-tower model (``DataInfo.task``
'pair_classification'): LRA Retrieval (Tay et al. 2020, §2.4) and its offline stand-in.

Batches: ``inputs``, ``inputs2`` int32 ``[B, T]`` (the two documents, 0 = pad), ``targets``
int32 ``[B]``, ``weights`` float32 ``[B]`` (0 for rows that pad the last batch). The model is
``seqjax.models.two_tower.TwoTowerClassifier``: one encoder on both documents, pooled
(``config.model.pooling``), combined by ``config.model.pair_interaction`` and an MLP whose
first width is ``config.model.d_ff`` (LRA's ``mlp_dim``). Evaluation reports accuracy;
throughput counts pairs.

With ``config.model.towers=1`` the pair is read by one encoder instead, BERT's **cross-encoder**
(Devlin et al. 2019, §4.1 and Fig. 4 (a): MNLI, QQP, ...): ``[CLS] A [SEP] B [SEP]`` with
segment ids (0 for ``[CLS] A [SEP]``, 1 for ``B [SEP]``) and a classifier on the pooled [CLS]
(``seqjax.models.token_heads.CrossEncoder``; Hugging Face ``BertForSequenceClassification``
with ``token_type_ids``, whose loss is the mean cross-entropy). ``join_pair`` builds the joint
row on the device from the same batches; ``[CLS]`` and ``[SEP]`` are the ids V and V + 1 past
the data's vocabulary V.

Legend: B batch, T = ``data.max_len`` bytes per document (+1 for CLS inside the model); the
cross-encoder: L = ``data.max_len`` tokens a text, T = 2 L + 3.
"""

from __future__ import annotations

import dataclasses

import jax.numpy as jnp

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
        """This task with ``config.model.pair_interaction``; ``model.towers=1``: the
        cross-encoder (``CrossEncoderTask``)."""
        if config.model.get("towers", 2) == 1:
            return CROSS
        task = PairClassification()
        task.interaction = str(config.model.get("pair_interaction", "nli"))
        return task

    def validate(self, config, bad) -> None:
        from seqjax.models.two_tower import INTERACTIONS

        m = config.model
        if m.get("towers", 2) not in (1, 2):
            bad("model.towers", m.get("towers"), f"2 (two towers) or 1 (a cross-encoder of "
                f"[CLS] A [SEP] B [SEP]) for the pair data set {config.data.name!r}")  # fmt: skip
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


def join_pair(a_BL, b_BL, *, cls: int, sep: int, pad: int = 0):
    """``([CLS] A [SEP] B [SEP] pad..., segment ids)``, both int32 ``[B, 2 L + 3]``, of two
    right-padded batches (``pad`` ends each text's real tokens)."""
    b, length = a_BL.shape
    t = 2 * length + 3
    la_B1 = (a_BL != pad).sum(1, keepdims=True)
    lb_B1 = (b_BL != pad).sum(1, keepdims=True)
    i_1T = jnp.arange(t)[None, :]
    from_a = jnp.take_along_axis(a_BL, jnp.clip(i_1T - 1, 0, length - 1).repeat(b, 0), axis=1)
    from_b = jnp.take_along_axis(b_BL, jnp.clip(i_1T - la_B1 - 2, 0, length - 1), axis=1)
    end_b = la_B1 + lb_B1 + 2
    tokens = jnp.where(i_1T == 0, cls, pad)
    tokens = jnp.where((i_1T >= 1) & (i_1T <= la_B1), from_a, tokens)
    tokens = jnp.where((i_1T == la_B1 + 1) | (i_1T == end_b), sep, tokens)
    tokens = jnp.where((i_1T >= la_B1 + 2) & (i_1T < end_b), from_b, tokens)
    types = ((i_1T >= la_B1 + 2) & (i_1T <= end_b)).astype(jnp.int32)
    return tokens.astype(jnp.int32), types


class CrossEncoderTask(PairClassification):
    """The sentence-pair cross-encoder (module docstring)."""

    name = "cross_encoder"

    def configure(self, config):
        return self

    def input_length(self, config) -> int:
        from seqjax.data import api as data_api

        return 2 * data_api.max_len(config.data) + 3

    def model_config(self, config, info):
        """The pair data's config with ``[CLS]`` and ``[SEP]`` appended to the vocabulary."""
        cfg = super().model_config(config, info)
        return dataclasses.replace(cfg, vocab_size=int(info.vocab_size) + 2)

    def init_shapes(self, config, info) -> tuple:
        return ((1, self.input_length(config)),)

    def apply(self, model, params, batch, *, rng, train: bool, memory=None):
        """``(logits [B, C], None)`` of the joint rows."""
        del memory
        v = model.cfg.vocab_size - 2
        tokens_BT, types_BT = join_pair(batch["inputs"], batch["inputs2"], cls=v, sep=v + 1)
        rngs = {"dropout": rng} if train else {}
        logits = model.apply(
            {"params": params}, tokens_BT, mask_BT=tokens_BT != 0, token_types_BT=types_BT,
            rngs=rngs, deterministic=not train,
        )  # fmt: skip
        return logits, None

    def flops_per_step(self, run) -> float:
        from seqjax.models import flops

        return flops.train_flops_per_step(
            run.model_cfg, run.abstract["params"], batch_size=run.config.data.batch_size,
            seq_len=self.input_length(run.config), tied_output=False,
        )  # fmt: skip


CROSS = CrossEncoderTask()  # not registered: ``TASK.configure`` returns it (towers=1)
