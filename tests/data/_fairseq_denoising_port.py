"""A step-by-step numpy port of fairseq's ``fairseq/data/denoising_dataset.py`` noising
functions (``DenoisingDataset.__getitem__``, ``permute_sentences``, ``add_whole_word_mask``,
``add_insertion_noise``, ``add_rolling_noise``), written from reading the reference, with
torch's random calls replaced one for one by an injected ``np.random.Generator``
(``randperm`` -> ``permutation``, ``Categorical.sample`` -> ``choice``, ``uniform_`` ->
``random``, ``randint`` -> ``integers``). Loops and in-place updates follow the reference's
structure, not seqjax's vectorised one. For tests only."""

from __future__ import annotations

import math

import numpy as np


class Port:
    def __init__(self, *, vocab_size, mask_idx, eos, full_stop_index=None, mask_ratio=0.0,
                 poisson_lambda=None, replace_length=1, random_ratio=0.0, insert_ratio=0.0,
                 permute_sentence_ratio=0.0, rotate_ratio=0.0, mask_whole_word=None):  # fmt: skip
        self.V, self.mask_idx, self.eos = vocab_size, mask_idx, eos
        self.full_stop_index = full_stop_index
        self.mask_ratio, self.replace_length = mask_ratio, replace_length
        self.random_ratio, self.insert_ratio = random_ratio, insert_ratio
        self.permute_sentence_ratio, self.rotate_ratio = permute_sentence_ratio, rotate_ratio
        self.mask_whole_word = mask_whole_word
        self.ps = None
        if poisson_lambda is not None:
            lam_k, e_lam, k_fact, ps = 1.0, math.exp(-poisson_lambda), 1, []
            for k in range(0, 128):
                ps.append(e_lam * lam_k / k_fact)
                lam_k *= poisson_lambda
                k_fact *= k + 1
                if ps[-1] < 0.0000001:
                    break
            ps = np.asarray(ps)
            self.ps = ps / ps.sum()

    def sample_lengths(self, rng, n):
        return rng.choice(len(self.ps), size=n, p=self.ps)

    def getitem(self, tokens, rng):
        source = np.array(tokens, copy=True)
        assert source[-1] == self.eos
        if self.permute_sentence_ratio > 0.0:
            source = self.permute_sentences(source, rng, self.permute_sentence_ratio)
        if self.mask_ratio > 0:
            source = self.add_whole_word_mask(source, rng, self.mask_ratio)
        if self.insert_ratio > 0:
            source = self.add_insertion_noise(source, rng, self.insert_ratio)
        if self.rotate_ratio > 0.0 and rng.random() < self.rotate_ratio:
            source = self.add_rolling_noise(source, rng)
        return source

    def permute_sentences(self, source, rng, p=1.0):
        full_stops = source == self.full_stop_index
        full_stops[-2] = True
        sentence_ends = np.nonzero(full_stops[1:] * ~full_stops[:-1])[0] + 2
        result = source.copy()
        num_sentences = sentence_ends.shape[0]
        num_to_permute = math.ceil((num_sentences * 2 * p) / 2.0)
        substitutions = rng.permutation(num_sentences)[:num_to_permute]
        ordering = np.arange(0, num_sentences)
        ordering[substitutions] = substitutions[rng.permutation(num_to_permute)]
        index = 1
        for i in ordering:
            sentence = source[(sentence_ends[i - 1] if i > 0 else 1) : sentence_ends[i]]
            result[index : index + sentence.shape[0]] = sentence
            index += sentence.shape[0]
        return result

    def word_starts(self, source):
        if self.mask_whole_word is not None:
            is_word_start = np.asarray(self.mask_whole_word, np.int64).copy()
        else:
            is_word_start = np.ones(source.shape, np.int64)
        is_word_start[0] = 0
        is_word_start[-1] = 0
        return is_word_start

    def add_whole_word_mask(self, source, rng, p):
        is_word_start = self.word_starts(source)
        num_to_mask = int(math.ceil(is_word_start.astype(float).sum() * p))
        num_inserts = 0
        if num_to_mask == 0:
            return source
        if self.ps is not None:
            lengths = self.sample_lengths(rng, num_to_mask)
            cum_length = np.cumsum(lengths, 0)
            while cum_length[-1] < num_to_mask:
                lengths = np.concatenate([lengths, self.sample_lengths(rng, num_to_mask)])
                cum_length = np.cumsum(lengths, 0)
            i = 0
            while cum_length[i] < num_to_mask:
                i += 1
            lengths[i] = num_to_mask - (0 if i == 0 else cum_length[i - 1])
            num_to_mask = i + 1
            lengths = lengths[:num_to_mask]
            lengths = lengths[lengths > 0]
            num_inserts = num_to_mask - lengths.shape[0]
            num_to_mask -= num_inserts
            if num_to_mask == 0:
                return self.add_insertion_noise(source, rng, num_inserts / source.shape[0])
        else:
            lengths = np.ones((num_to_mask,), np.int64)
        word_starts = np.nonzero(is_word_start)[0]
        indices = word_starts[rng.permutation(word_starts.shape[0])[:num_to_mask]]
        mask_random = rng.random(num_to_mask) < self.random_ratio
        source_length = source.shape[0]
        to_keep = np.ones(source_length, dtype=bool)
        is_word_start[-1] = 255
        if self.replace_length == 0:
            to_keep[indices] = 0
        else:
            source[indices] = self.mask_idx
            source[indices[mask_random]] = rng.integers(1, self.V, size=int(mask_random.sum()))
        if self.ps is not None:
            lengths = lengths - 1
            while indices.shape[0] > 0:
                lengths = lengths - is_word_start[indices + 1]
                uncompleted = lengths >= 0
                indices = indices[uncompleted] + 1
                mask_random = mask_random[uncompleted]
                lengths = lengths[uncompleted]
                to_keep[indices] = 0  # replace_length != -1: delete
        else:
            while indices.shape[0] > 0:
                uncompleted = is_word_start[indices + 1] == 0
                indices = indices[uncompleted] + 1
                mask_random = mask_random[uncompleted]
                to_keep[indices] = 0
        source = source[to_keep]
        if num_inserts > 0:
            source = self.add_insertion_noise(source, rng, num_inserts / source.shape[0])
        return source

    def add_rolling_noise(self, tokens, rng):
        offset = rng.integers(1, max(1, tokens.shape[-1] - 1) + 1)
        return np.concatenate((tokens[0:1], tokens[offset:-1], tokens[1:offset], tokens[-1:]))

    def add_insertion_noise(self, tokens, rng, p):
        if p == 0.0:
            return tokens
        num_tokens = len(tokens)
        n = int(math.ceil(num_tokens * p))
        noise_indices = rng.permutation(num_tokens + n - 2)[:n] + 1
        noise_mask = np.zeros(num_tokens + n, dtype=bool)
        noise_mask[noise_indices] = 1
        result = np.full(n + len(tokens), -1, dtype=tokens.dtype)
        num_random = int(math.ceil(n * self.random_ratio))
        result[noise_indices[num_random:]] = self.mask_idx
        result[noise_indices[:num_random]] = rng.integers(low=1, high=self.V, size=num_random)
        result[~noise_mask] = tokens
        return result
