"""``config.data.objective='distill'``: BERT's masked-LM batches (``seqjax.data.objectives``,
the same masking and fields as ``objective='mlm'``) read by the distillation task
(``seqjax.tasks.distill``: a frozen teacher and a student on the same masked rows; Sanh et al.
2019 §2 train DistilBERT on the masked-LM data of its teacher).

With a Hugging Face tokenizer as the vocabulary (``data.vocab='hf:<folder>'``, set by
``init_from=hf:<folder>``) the teacher was trained with the tokenizer's own ``[MASK]``: the
masked positions carry that id and no row is appended past the tokenizer's vocabulary, so the
teacher's token table loads as it is. (The 10 % random replacements are drawn as for
``'mlm'``, from the ids below the appended position, i.e. the whole tokenizer vocabulary.)
"""

from __future__ import annotations

import dataclasses

import numpy as np

from seqjax.data import hf_vocab, objectives, pipeline, registry


def _tokenizer_mask_id(cfg) -> int | None:
    vocab = cfg.get("vocab")
    if not hf_vocab.is_hf(vocab):
        return None
    mask = hf_vocab.HFVocab(vocab[len(hf_vocab.PREFIX) :]).mask_id
    return None if mask is None else int(mask)


def distill_info(cfg, base_info):
    """The masked-LM info with task 'distill' (a tokenizer's own [MASK]: nothing appended)."""
    info = dataclasses.replace(objectives.mlm_info(cfg, base_info), task="distill",
                               num_classes=None)  # fmt: skip
    mask = _tokenizer_mask_id(cfg)
    if mask is not None:
        info = dataclasses.replace(info, vocab_size=info.vocab_size - 1, mask_id=mask)
    return info


class _TokenizerMask:
    """Wraps a masked-LM maker: the appended [MASK] id -> the tokenizer's [MASK] id."""

    def __init__(self, base, appended: int, mask: int):
        self.base, self.appended, self.mask = base, appended, mask

    def rows(self, step):
        return self.base.rows(step)

    def __call__(self, step: int) -> dict:
        batch = dict(self.base(step))
        x = np.asarray(batch["inputs"])
        batch["inputs"] = np.where(x == self.appended, self.mask, x).astype(x.dtype)
        return batch


def make_distill(cfg, split, process_index, process_count, train, base_make, base_info):
    """``objective='mlm'``'s batches (with the tokenizer's [MASK], where it has one)."""
    it = objectives.make_mlm(cfg, split, process_index, process_count, train, base_make,
                             base_info)  # fmt: skip
    mask = _tokenizer_mask_id(cfg)
    if mask is None:
        return it
    appended = int(objectives.mlm_info(cfg, base_info).mask_id)
    maker, num_steps, spec = it.maker, it.num_steps, it.spec
    it.close()
    return pipeline.DataIterator(_TokenizerMask(maker, appended, mask), num_steps,
                                 {**spec, "tokenizer_mask": mask},
                                 num_workers=int(cfg.num_workers),
                                 prefetch=int(cfg.prefetch))  # fmt: skip


registry.register_objective(registry.Objective("distill", "distill", distill_info, make_distill))
