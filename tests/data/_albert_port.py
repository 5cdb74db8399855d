"""A step-by-step port of google-research/albert ``create_pretraining_data.py``'s
``create_instances_from_document``, ``create_masked_lm_predictions`` and
``truncate_seq_pair`` over token ids, written from reading the reference, with its random
calls replaced one for one by an injected ``np.random.Generator`` (``random()`` ->
``random()``, ``randint(a, b)`` -> ``integers(a, b + 1)``, ``shuffle`` -> ``shuffle``,
``np.random.choice`` -> ``choice``). Flags: ``do_whole_word_mask``, ``favor_shorter_ngram``,
``ngram``, ``random_next_sentence``; ``do_permutation`` off (the default). Tests only."""

from __future__ import annotations

import numpy as np


def create_instances_from_document(all_documents, document_index, max_seq_length,
                                   short_seq_prob, masked_lm_prob, max_predictions_per_seq,
                                   vocab_words, rng, flags):  # fmt: skip
    document = all_documents[document_index]
    max_num_tokens = max_seq_length - 3
    target_seq_length = max_num_tokens
    if rng.random() < short_seq_prob:
        target_seq_length = int(rng.integers(2, max_num_tokens + 1))
    instances = []
    current_chunk = []
    current_length = 0
    i = 0
    while i < len(document):
        segment = document[i]
        current_chunk.append(segment)
        current_length += len(segment)
        if i == len(document) - 1 or current_length >= target_seq_length:
            if current_chunk:
                a_end = 1
                if len(current_chunk) >= 2:
                    a_end = int(rng.integers(1, len(current_chunk) - 1 + 1))
                tokens_a = []
                for j in range(a_end):
                    tokens_a.extend(current_chunk[j])
                tokens_b = []
                is_random_next = False
                if len(current_chunk) == 1 or (flags["random_next_sentence"]
                                               and rng.random() < 0.5):  # fmt: skip
                    is_random_next = True
                    target_b_length = target_seq_length - len(tokens_a)
                    for _ in range(10):
                        random_document_index = int(rng.integers(0, len(all_documents) - 1 + 1))
                        if random_document_index != document_index:
                            break
                    random_document = all_documents[random_document_index]
                    random_start = int(rng.integers(0, len(random_document) - 1 + 1))
                    for j in range(random_start, len(random_document)):
                        tokens_b.extend(random_document[j])
                        if len(tokens_b) >= target_b_length:
                            break
                    num_unused_segments = len(current_chunk) - a_end
                    i -= num_unused_segments
                elif not flags["random_next_sentence"] and rng.random() < 0.5:
                    is_random_next = True
                    for j in range(a_end, len(current_chunk)):
                        tokens_b.extend(current_chunk[j])
                    tokens_a, tokens_b = tokens_b, tokens_a
                else:
                    is_random_next = False
                    for j in range(a_end, len(current_chunk)):
                        tokens_b.extend(current_chunk[j])
                truncate_seq_pair(tokens_a, tokens_b, max_num_tokens, rng)
                tokens = [flags["cls"]] + tokens_a + [flags["sep"]] + tokens_b + [flags["sep"]]
                segment_ids = [0] * (len(tokens_a) + 2) + [1] * (len(tokens_b) + 1)
                tokens, positions, labels, boundary = create_masked_lm_predictions(
                    tokens, masked_lm_prob, max_predictions_per_seq, vocab_words, rng, flags
                )
                instances.append(dict(tokens=tokens, segment_ids=segment_ids,
                                      swapped=is_random_next, positions=positions,
                                      labels=labels, boundary=boundary))  # fmt: skip
            current_chunk = []
            current_length = 0
        i += 1
    return instances


def create_masked_lm_predictions(tokens, masked_lm_prob, max_predictions_per_seq,
                                 vocab_words, rng, flags):  # fmt: skip
    is_start_piece = flags["is_start_piece"]
    cand_indexes = []
    token_boundary = [0] * len(tokens)
    for i, token in enumerate(tokens):
        if token == flags["cls"] or token == flags["sep"]:
            token_boundary[i] = 1
            continue
        if flags["do_whole_word_mask"] and len(cand_indexes) >= 1 and not is_start_piece(token):
            cand_indexes[-1].append(i)
        else:
            cand_indexes.append([i])
            if is_start_piece(token):
                token_boundary[i] = 1
    output_tokens = list(tokens)
    masked_lm_positions, masked_lm_labels = [], []
    if masked_lm_prob == 0:
        return output_tokens, masked_lm_positions, masked_lm_labels, token_boundary
    num_to_predict = min(max_predictions_per_seq, max(1, int(round(len(tokens) * masked_lm_prob))))
    ngrams = np.arange(1, flags["ngram"] + 1, dtype=np.int64)
    pvals = 1.0 / np.arange(1, flags["ngram"] + 1)
    pvals /= pvals.sum(keepdims=True)
    if not flags["favor_shorter_ngram"]:
        pvals = pvals[::-1]
    ngram_indexes = []
    for idx in range(len(cand_indexes)):
        ngram_index = []
        for n in ngrams:
            ngram_index.append(cand_indexes[idx : idx + n])
        ngram_indexes.append(ngram_index)
    rng.shuffle(ngram_indexes)
    masked_lms = []
    covered_indexes = set()
    for cand_index_set in ngram_indexes:
        if len(masked_lms) >= num_to_predict:
            break
        if not cand_index_set:
            continue
        for index_set in cand_index_set[0]:  # (a no-op in the reference too)
            for index in index_set:
                if index in covered_indexes:
                    continue
        n = rng.choice(ngrams[: len(cand_index_set)],
                       p=pvals[: len(cand_index_set)]
                       / pvals[: len(cand_index_set)].sum(keepdims=True))  # fmt: skip
        index_set = sum(cand_index_set[n - 1], [])
        n -= 1
        while len(masked_lms) + len(index_set) > num_to_predict:
            if n == 0:
                break
            index_set = sum(cand_index_set[n - 1], [])
            n -= 1
        if len(masked_lms) + len(index_set) > num_to_predict:
            continue
        is_any_index_covered = False
        for index in index_set:
            if index in covered_indexes:
                is_any_index_covered = True
                break
        if is_any_index_covered:
            continue
        for index in index_set:
            covered_indexes.add(index)
            if rng.random() < 0.8:
                masked_token = flags["mask"]
            else:
                if rng.random() < 0.5:
                    masked_token = tokens[index]
                else:
                    masked_token = vocab_words[int(rng.integers(0, len(vocab_words) - 1 + 1))]
            output_tokens[index] = masked_token
            masked_lms.append((index, tokens[index]))
    rng.shuffle(ngram_indexes)
    masked_lms = sorted(masked_lms, key=lambda x: x[0])
    for index, label in masked_lms:
        masked_lm_positions.append(index)
        masked_lm_labels.append(label)
    return output_tokens, masked_lm_positions, masked_lm_labels, token_boundary


def truncate_seq_pair(tokens_a, tokens_b, max_num_tokens, rng):
    while True:
        total_length = len(tokens_a) + len(tokens_b)
        if total_length <= max_num_tokens:
            break
        trunc_tokens = tokens_a if len(tokens_a) > len(tokens_b) else tokens_b
        if rng.random() < 0.5:
            del trunc_tokens[0]
        else:
            trunc_tokens.pop()
