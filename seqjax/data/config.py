"""The `config.data` block: every field of the input pipeline, with its default and meaning.

Used as `config.data = seqjax.data.default_config()` in a config file, then overridden on the
command line (the block works with `lock_config=True`), e.g.

    --config.data.name=text_file --config.data.path=../shared/data/tinyshakespeare/input.txt
    --config.data.vocab=chars --config.data.seq_len=512 --config.data.lm_batching=stream
"""

from __future__ import annotations

import os

import ml_collections
from ml_collections import config_dict

DATASETS = ("pystdlib", "text_file", "enwik8", "text8", "listops", "imdb_bytes", "duplication")
LM_DATASETS = ("pystdlib", "text_file", "enwik8", "text8", "duplication")
CLASSIFICATION_DATASETS = ("listops", "imdb_bytes")


def _env(name: str):
    value = os.environ.get(name)
    return value if value else config_dict.placeholder(str)


def default_config() -> ml_collections.ConfigDict:
    """Returns the default `config.data` (pystdlib bytes, 64 x 256 random windows)."""
    c = ml_collections.ConfigDict()
    # Data set: one of DATASETS. 'pystdlib' (this Python's stdlib source, no download),
    # 'text_file' (files in `path`), 'enwik8'/'text8' (zips in `manual_dir` or downloaded),
    # 'listops'/'imdb_bytes' (LRA classification), 'duplication' (Reformer's copy task).
    c.name = "pystdlib"
    # text_file: the input file(s), comma-separated; concatenated as bytes in this order.
    c.path = config_dict.placeholder(str)
    # Folder with source archives (enwik8.zip, text8.zip, aclImdb_v1[_labeled].tar.gz), directly
    # or in a '<dataset>/' sub-folder (TFDS manual_dir). Default: env SEQJAX_DATA_DIR.
    c.manual_dir = _env("SEQJAX_DATA_DIR")
    # Where TFDS writes the prepared array_record files (built on first use, then reused).
    # None: env SEQJAX_TFDS_DIR, else ~/seqjax_data/tfds.
    c.data_dir = _env("SEQJAX_TFDS_DIR")
    # Whether a source missing from manual_dir may be downloaded with TFDS's download manager.
    c.download = True
    # Refuse known source files whose sha256 differs from the published one unless True.
    c.accept_checksum_mismatch = False
    # LM token vocabulary: 'bytes' (256 ids) or 'chars' (the training split's characters, e.g.
    # 65 for tiny shakespeare, 27 for text8; plus <unk> if other splits have new characters).
    c.vocab = "bytes"
    # LM and duplication: tokens per row T (batches are [batch, seq_len]). Duplication: the
    # whole `0 w 0 w` sequence, so |w| = seq_len / 2 - 1 (Reformer Table 2: 1024, |w| = 511).
    c.seq_len = 256
    # GLOBAL batch size; each of the process_count processes gets batch_size // process_count.
    c.batch_size = 64
    # LM batching: 'random' (windows at random offsets; ordinary LM training) or 'stream'
    # (Transformer-XL: row r continues its own contiguous stream from one step to the next).
    c.lm_batching = "random"
    # Seed of window offsets, example order, duplication symbols and the ListOps generator.
    c.seed = 0
    # Classification: pad/truncate inputs to this length. None: 4096 for imdb_bytes (LRA Text
    # 4K; use 1024 for the 1K config), 2048 for listops (LRA lengths are < 2000).
    c.max_len = config_dict.placeholder(int)
    # ListOps (Tay et al. 2020, LRA §2.2.1 and Appendix): split sizes (LRA: 96k / 2k / 2k).
    c.listops_train_size = 96_000
    c.listops_validation_size = 2_000
    c.listops_test_size = 2_000
    # ListOps trees kept when listops_min_length < length < listops_max_length (LRA: 500, 2000).
    c.listops_min_length = 500
    c.listops_max_length = 2_000
    # ListOps tree depth limit and maximum operator arguments (LRA: 10 and 10).
    c.listops_max_depth = 10
    c.listops_max_args = 10
    # Processes generating ListOps (0: one per CPU core); the data do not depend on it.
    c.listops_num_procs = 0
    # Duplication: number of symbols including the separator 0 (w uses 1..dup_vocab_size-1).
    c.dup_vocab_size = 128
    # Duplication: sequences in the validation and test sets (training is endless).
    c.dup_eval_size = 1_024
    # grain worker processes (0: batches are made in this process); batches do not depend on it.
    c.num_workers = 0
    # Batches prepared ahead of the training loop (grain prefetch buffer).
    c.prefetch = 4
    return c
