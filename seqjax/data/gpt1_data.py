"""``config.data.objective='gpt1_finetune'``: a labelled text or pair data set read by GPT-1's
fine-tuning task (``seqjax.tasks.gpt1_finetune``: the input transforms, the last-token
classifier and the auxiliary LM loss, Radford et al. 2018 §3.2-3.3). The batches are the data
set's own (``imdb_bytes``/``listops``: ``inputs``; ``l10n_pairs``/``aan``: ``inputs``,
``inputs2``); the task adds the start, delimiter and extract tokens, ids V, V + 1, V + 2 past
the data's vocabulary V."""

from __future__ import annotations

import dataclasses

from seqjax.data import packing, registry

OBJECTIVE = "gpt1_finetune"


def readable() -> tuple[str, ...]:
    """The data sets the objective reads: labelled example texts and document pairs."""
    return registry.names("texts") + registry.names("pairs")


def info(cfg, base_info):
    return dataclasses.replace(base_info(packing.base_data(cfg)), task=OBJECTIVE)


def make(cfg, split, process_index, process_count, train, base_make, base_info):
    del base_info
    return base_make(packing.base_data(cfg), split=split, process_index=process_index,
                     process_count=process_count, train=train)  # fmt: skip


def problems(cfg) -> list[tuple[str, object, str]]:
    if cfg.get("objective") != OBJECTIVE or cfg.get("name") in readable():
        return []
    return [("objective", OBJECTIVE, f"'' for this data set; {OBJECTIVE!r} reads labelled texts "
             f"or pairs ({', '.join(readable())})")]  # fmt: skip


registry.register_objective(registry.Objective(OBJECTIVE, OBJECTIVE, info, make))
