"""seqjax input pipelines: TFDS builders (array_record) read through grain, no TensorFlow.

    cfg = seqjax.data.default_config()          # the `config.data` block
    info = seqjax.data.info(cfg)                # vocab size, task, fingerprint, encode/decode
    it = seqjax.data.make(cfg, split="train")   # batches of numpy arrays; get_state/set_state

Translation (task 'seq2seq'; batches `inputs` [b, S], `targets`/`weights` [b, T]):

    cfg.name, cfg.vocab = "translation_jsonl", "sentencepiece"
    cfg.path = "../shared/data/software_l10n/en-de.jsonl.gz"
    info = seqjax.data.info(cfg)   # info.vocab_file: the SentencePiece model of this data
    refs = seqjax.data.references(cfg, "validation")   # row g of make(..., train=False)
    sacrebleu.corpus_bleu([info.decode(ids) for ids in predictions], [refs])

Data sets register themselves (`registry.py`: `DataSet`, `names()`; a new data set is one
module, `docs/extending.md`). Files: `config.py` (every field), `api.py` (make/info),
`pipeline.py` (grain batch makers and the
checkpointable iterator), `store.py` (prepare/read with TFDS), `corpora.py` (LM corpus builders),
`classification.py` + `listops.py` (LRA tasks), `sources.py` (files, checksums, errors),
`vocab.py` (bytes/chars), `subword.py` (SentencePiece), `translation.py` + `wmt14.py`
(translation builders), `seq2seq.py` (translation and copy/reverse batches).

The heavy modules (TFDS, grain) load on first use of `make`/`info`, so worker processes that
only need e.g. the ListOps generator start quickly.
"""

import importlib

from seqjax.data.config import default_config

_LAZY = {
    "names": "registry",
    "register": "registry",
    "DataSet": "registry",
    "SPLITS": "api",
    "DataInfo": "api",
    "info": "api",
    "make": "api",
    "references": "api",
    "DataIterator": "pipeline",
    "ChecksumMismatchError": "sources",
    "SourceMissingError": "sources",
}

__all__ = ["DATASETS", "default_config", *_LAZY]


def _datasets() -> tuple[str, ...]:
    return importlib.import_module("seqjax.data.registry").names()


def __getattr__(name):
    if name == "DATASETS":  # every registered data set (imports the shipped ones)
        return _datasets()
    if name in _LAZY:
        return getattr(importlib.import_module(f"seqjax.data.{_LAZY[name]}"), name)
    raise AttributeError(f"module 'seqjax.data' has no attribute {name!r}")


def __dir__():
    return sorted(__all__)
