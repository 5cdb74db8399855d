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

# The data sets are registered by their modules (``seqjax.data.registry``; ``names()``). The
# fields of the shipped ones are declared below; a data set of your own adds its fields with
# ``DataSet.fields`` (``default_config`` includes them once its module is imported).


def _env(name: str):
    value = os.environ.get(name)
    return value if value else config_dict.placeholder(str)


def default_config() -> ml_collections.ConfigDict:
    """Returns the default `config.data` (pystdlib bytes, 64 x 256 random windows)."""
    c = ml_collections.ConfigDict()
    # Data set: one of seqjax.data.names() (the registry). 'pystdlib' (this Python's stdlib
    # source, no download),
    # 'text_file' (files in `path`), 'enwik8'/'text8' (zips in `manual_dir` or downloaded),
    # 'listops'/'imdb_bytes' (LRA classification), 'duplication' (Reformer's copy task);
    # seq2seq: 'translation_jsonl' (pairs in the JSONL file `path`, e.g. software_l10n),
    # 'wmt14_ende' (WMT14 En-De: newstest2013 validation, newstest2014 test), 'copy'/'reverse'
    # (generated: target = the source or the source reversed).
    c.name = "pystdlib"
    # text_file: the input file(s), comma-separated; concatenated as bytes in this order.
    # translation_jsonl: the JSONL file (gzipped or not), one {"en": ..., "de": ...} a line.
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
    # 65 for tiny shakespeare, 27 for text8; plus <unk> if other splits have new characters) or
    # 'sentencepiece' (subwords trained on the training split and stored with the prepared data;
    # ids 0 pad, 1 unk, 2 BOS, 3 EOS). Translation data sets need 'sentencepiece'.
    # imdb_bytes: 'bytes' (LRA Text, byte + 1) or 'sentencepiece' (the train reviews' subwords;
    # seqjax/data/classification.py); the other classification sets: 'bytes' only.
    c.vocab = "bytes"
    # vocab='sentencepiece': 'bpe' (Sennrich et al. 2016) or 'unigram' (Kudo 2018).
    c.spm_model_type = "bpe"
    # vocab='sentencepiece': number of ids, including the 4 special ids and the 256 byte pieces
    # that spell characters the model lacks (so decode(encode(s)) == s always).
    c.vocab_size = 8000
    # vocab='words' (Transformer-XL; seqjax/data/words.py): keep words seen at least this often
    # in the training split, and at most words_max_size ids including <eos>, <unk> (0: all).
    c.words_min_count = 1
    c.words_max_size = 0
    # vocab='sentencepiece': share of the characters that get their own piece (1.0: all).
    c.spm_character_coverage = 1.0
    # vocab='sentencepiece': most training sentences (lines) used; more are sub-sampled (a fixed
    # seed: the vocabulary does not depend on config.data.seed).
    c.spm_input_sentence_size = 1_000_000
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
    # Pair data sets (aan: LRA Retrieval, the release's new_aan_pairs.*.tsv in manual_dir;
    # l10n_pairs: a stand-in, English/German message pairs from the JSONL file `path`, true or
    # mismatched): each document is padded/cut to max_len bytes (None: aan 4000, l10n_pairs 128).
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
    # Duplication, copy, reverse: sequences in the validation and test sets (training is endless).
    c.dup_eval_size = 1_024
    # Seq2seq: source ids + EOS per row (`inputs` [batch, max_source_len]). Longer pairs are left
    # out of training and cut (first max_source_len-1 ids + EOS) for evaluation.
    c.max_source_len = 128
    # Seq2seq: target ids + EOS per row (`targets`, `weights` [batch, max_target_len]).
    c.max_target_len = 128
    # Translation: the source language field, and the target one (None: the file's one other
    # language field, e.g. 'de' in software_l10n/en-de.jsonl.gz; wmt14_ende: en->de or de->en).
    c.source_lang = "en"
    c.target_lang = config_dict.placeholder(str)
    # translation_jsonl: share of the source strings (by sha256) in validation, and again in test.
    c.heldout_fraction = 0.01
    # copy/reverse: number of ids including the 4 special ones (symbols 4..copy_vocab_size-1).
    c.copy_vocab_size = 32
    # Images (fashion_mnist, cifar10): 'classification' (one token per 8-bit pixel, LRA Image) or
    # 'generation' (raster-order sub-pixels, loss in bits/dim; the 'image_generation' task).
    c.image_task = "classification"
    # Pathfinder/Path-X (pathfinder32, pathx; seqjax.data.pathfinder): dashes per target contour
    # (the difficulty; LRA: 14, the hardest; 9 and 6 are Linsley et al.'s easier sets), the split
    # sizes (LRA: 160k / 20k / 20k) and the generating processes (0: one per core; the images
    # do not depend on it).
    c.pathfinder_contour_length = 14
    c.pathfinder_train_size = 160_000
    c.pathfinder_validation_size = 20_000
    c.pathfinder_test_size = 20_000
    c.pathfinder_num_procs = 0
    # grain worker processes (0: batches are made in this process); batches do not depend on it.
    c.num_workers = 0
    # Batches prepared ahead of the training loop (grain prefetch buffer).
    c.prefetch = 4
    # Pre-training objective over a text data set (`seqjax.data.objectives`): '' (the data set's
    # own task), 'mlm' (BERT masked LM on pystdlib/text_file/enwik8/text8 windows of seq_len or
    # imdb_bytes/listops texts of max_len; task 'mlm', [MASK] id = the data's vocab size) or
    # 'span_corruption' (T5 on a corpus with vocab='sentencepiece': seq2seq batches of
    # max_source_len/max_target_len, sentinel ids past the vocabulary); 'denoising' (BART's
    # noises, seqjax/data/bart_noise.py: seq2seq batches noised document -> document) and
    # 'sop' (ALBERT's sentence order + n-gram masking, seqjax/data/sop.py: task mlm_pair) on a
    # corpus with vocab='bytes'/'chars'.
    c.objective = ""
    # objective='mlm': share of the real tokens chosen (80% [MASK] / 10% random / 10% unchanged).
    c.mlm_probability = 0.15
    # objective='mlm': whole-word masking (BERT's WWM): the choice and the 80/10/10 decision
    # are made per word (sentencepiece: a '▁' piece and its continuations; bytes/chars: runs
    # of non-space characters), so every piece of a chosen word is masked together.
    c.mlm_whole_word = False
    # objective='denoising' (BART, seqjax/data/bart_noise.py): the noise, one of masking,
    # deletion, infilling, permutation, rotation or several joined by '+' (e.g.
    # 'infilling+permutation'); the share of words masked/deleted/infilled and the Poisson
    # mean of the infilled span lengths (Lewis et al. 2020: 0.3 and 3.5).
    c.noise = "infilling"
    c.noise_ratio = 0.3
    c.noise_lambda = 3.5
    # objective='sop' (ALBERT, seqjax/data/sop.py): sentence-order pairs of a corpus's lines
    # with n-gram masking of n <= sop_ngram words (P(n) ~ 1/n; Lan et al. 2020: 3) of
    # mlm_probability of the tokens.
    c.sop_ngram = 3
    # Pack several examples into each row (`seqjax.data.packing`: segment_ids, positions
    # restarting per example, efficiency logged): imdb_bytes/listops (classification, or
    # objective 'mlm' / 'lm') and the seq2seq sets; LM corpora are dense streams already.
    c.packing = False
    # packing: every example starts at a multiple of this many slots (mechanisms with blocks at
    # absolute positions, e.g. local block_len, need a multiple of their period; 1 = none).
    c.packing_align = 1
    # packing a classification set: examples (labels) per row at most (targets [B, K]).
    c.max_examples_per_row = 8
    # Characters of each input token in every batch (`seqjax.data.token_chars`: `token_chars`
    # [B, T, L], ELMo's byte vocabulary with begin/end-of-word marks; 0 = off). A model family
    # that reads them (ELMo, L = 50) fills this in (`seqjax.models.registry.Family.token_chars`).
    c.token_chars = 0
    for field, default in _registered_fields().items():  # DataSet.fields of imported plug-ins
        if field not in c:
            c[field] = default
    return c


def _registered_fields() -> dict:
    """The fields of the data sets registered so far (without importing the shipped ones)."""
    import sys

    registry = sys.modules.get("seqjax.data.registry")
    return registry.extra_fields() if registry is not None else {}
