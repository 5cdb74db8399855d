"""Permutation language modelling (``DataInfo.task`` 'plm'): XLNet pre-training (Yang et al.
2019, eq. 5 with partial prediction, §2.3): maximise ``sum_k log p(x_{z_k} | x_{z_<k})`` over
the last tokens of a sampled factorization order ``z``, computed in one pass by the query
stream of two-stream attention.

Chosen with ``config.data.objective='plm'`` over a corpus (``seqjax.data.plm``). Batches:
``inputs`` int32 ``[B, T]`` (the original tokens), ``perm_mask`` bool ``[B, T, T]`` (True =
may not attend), ``target_mapping`` float32 ``[B, P, T]``, ``targets`` int32 ``[B, P]``,
``weights`` float32 ``[B, P]``. The model (family ``xlnet``, ``seqjax.models.xlnet``) returns
the query stream's logits ``[B, P, V]``; the loss is their weighted cross-entropy.
Evaluation: loss, accuracy and perplexity ``exp(loss)`` of the predicted tokens.
Generation (``python -m seqjax.sample``): XLNet as a left-to-right LM, each new token last in
the order (``seqjax.models.xlnet_generate``; ``config.model.generate_order``).

Legend: B batch, T window length, P predicted positions, V vocabulary.
"""

from __future__ import annotations

import math

from seqjax.tasks import base, registry


class PermutationLanguageModel(base.Task):
    name = "plm"
    causal = False
    objective = "plm"
    family = "xlnet"
    generates = True
    batch_fields = {
        "inputs": ("int32", 2),
        "perm_mask": ("bool", 3),
        "target_mapping": ("float32", 3),
        "targets": ("int32", 2),
        "weights": ("float32", 2),
    }

    def configure(self, config):
        """With ``config.data.plm_ranks``: the task whose batches carry the order as ranks."""
        return RANKS if config.data.get("plm_ranks", False) else self

    def order(self, batch) -> dict:
        """The model's factorization-order arguments from a batch."""
        return {"perm_mask_BTT": batch["perm_mask"]}

    def input_length(self, config) -> int:
        from seqjax.data import plm

        return plm.length(config.data)

    def describe_data(self, config, info) -> str:
        from seqjax.data import plm

        d, o = config.data, plm.options(config.data)
        return (f"{d.name}, permutation LM on rows of {plm.length(d)} tokens ({o['num_predict']} "
                f"predicted, reuse_len {o['reuse_len']}), batch {d.batch_size}; splits "
                f"(tokens): {base.split_sizes(info)}")  # fmt: skip

    def needs(self, config, info):
        from seqjax.models.registry import Needs

        return Needs(self.name, causal=False)

    def apply(self, model, params, batch, *, rng, train: bool, memory=None):
        """The query stream's logits ``[B, P, V]`` (padding keys hidden by the model's
        ``pad_id``), and the new memory of a model with memory across batches."""
        rngs = {"dropout": rng} if train else {}
        args = () if memory is None else (memory,)  # model.kind="xlnet": seqjax.models.xlnet_memory
        out = model.apply(
            {"params": params}, batch["inputs"], *args, **self.order(batch),
            target_mapping_BPT=batch["target_mapping"], rngs=rngs, deterministic=not train,
        )  # fmt: skip
        return out if memory is not None else (out, None)

    def eval_summary(self, sums, config) -> dict:
        out = super().eval_summary(sums, config)
        out["perplexity"] = math.exp(min(out["loss"], 700.0))
        return out

    def flops_per_step(self, run) -> float:
        """About ``6 N (T + P)`` per row (Kaplan et al. 2020's ``6 N`` per token, the content
        stream's T positions and the query stream's P; attention scores left out)."""
        import jax
        import numpy as np

        n = sum(int(np.prod(x.shape)) for x in jax.tree.leaves(run.abstract["params"]))
        from seqjax.data import plm

        d = run.config.data
        return 6.0 * n * int(d.batch_size) * (plm.length(d) + plm.options(d)["num_predict"])

    def check_sample_inputs(self, run, prompt: str, length: int) -> None:
        from seqjax.tasks import inputs

        if not run.info.encode(prompt or "\n").size:
            raise inputs.InputError(f"prompt {prompt!r} encodes to no token")

    def sample(
        self, run, params, prompt: str, length: int, *, temperature=1.0, top_k=0, top_p=1.0,
        seed=0,
    ) -> str:  # fmt: skip
        from seqjax.models import xlnet_generate

        ids = run.info.encode(prompt or "\n")
        out = xlnet_generate.generate(
            run.model, params, ids, length, order=run.model.cfg.generate_order,
            temperature=temperature, top_k=top_k, top_p=top_p, seed=seed,
        )  # fmt: skip
        return run.info.decode(out)

    def tokens_per_step(self, config) -> int:
        from seqjax.data import plm

        return int(config.data.batch_size) * plm.options(config.data)["num_predict"]


class RankPermutationLanguageModel(PermutationLanguageModel):
    """The permutation LM with the order as ranks (``data.plm_ranks``): ``q_rank`` and
    ``k_rank`` int32 ``[B, T]`` in place of ``perm_mask`` (``XLNet(perm_ranks=...)``)."""

    batch_fields = {
        **{k: v for k, v in PermutationLanguageModel.batch_fields.items() if k != "perm_mask"},
        "q_rank": ("int32", 2),
        "k_rank": ("int32", 2),
    }

    def order(self, batch) -> dict:
        return {"perm_ranks": (batch["q_rank"], batch["k_rank"])}


TASK = registry.register(PermutationLanguageModel())
RANKS = RankPermutationLanguageModel()  # not registered: ``TASK.configure`` returns it
