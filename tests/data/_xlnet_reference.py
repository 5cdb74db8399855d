"""A numpy port of zihangdai/xlnet ``data_utils.py``'s ``_sample_mask``, ``_local_perm`` and
the two-half assembly of ``get_dataset``'s parser, step for step (TensorFlow ops by their
numpy equivalents), with the random generator injected (``rng``) and the sentencepiece
lookup replaced by ``is_start(token)``. The oracle of ``seqjax.data.xlnet_perm``."""

from __future__ import annotations

import numpy as np

SEP_ID, CLS_ID = 4, 3


def ref_sample_mask(rng, seg, *, mask_alpha, mask_beta, reverse=False, max_gram=5,
                    goal_num_predict=None, is_start=lambda tok: True):  # fmt: skip
    seg_len = len(seg)
    mask = np.array([False] * seg_len, dtype=bool)
    num_predict = 0
    ngrams = np.arange(1, max_gram + 1, dtype=np.int64)
    pvals = 1.0 / np.arange(1, max_gram + 1)
    pvals /= pvals.sum(keepdims=True)
    if reverse:
        seg = np.flip(seg, 0)
    cur_len = 0
    while cur_len < seg_len:
        if goal_num_predict is not None and num_predict >= goal_num_predict:
            break
        n = rng.choice(ngrams, p=pvals)
        if goal_num_predict is not None:
            n = min(n, goal_num_predict - num_predict)
        ctx_size = (n * mask_alpha) // mask_beta
        l_ctx = rng.choice(ctx_size)
        r_ctx = ctx_size - l_ctx
        beg = cur_len + l_ctx
        while beg < seg_len and not is_start(seg[beg].item()):
            beg += 1
        if beg >= seg_len:
            break
        end = beg + 1
        cnt_ngram = 1
        while end < seg_len:
            if is_start(seg[beg].item()):  # sic: the reference tests seg[beg]
                cnt_ngram += 1
                if cnt_ngram > n:
                    break
            end += 1
        if end >= seg_len:
            break
        mask[beg:end] = True
        num_predict += end - beg
        cur_len = end + r_ctx
    while goal_num_predict is not None and num_predict < goal_num_predict:
        i = rng.integers(seg_len)
        if not mask[i]:
            mask[i] = True
            num_predict += 1
    if reverse:
        mask = np.flip(mask, 0)
    return mask


def ref_local_perm(rng, inputs, targets, is_masked, perm_size, seq_len):
    index = np.arange(seq_len, dtype=np.int64)
    index = np.transpose(np.reshape(index, [-1, perm_size]))
    index = index[rng.permutation(index.shape[0])]  # tf.random_shuffle (first axis)
    index = np.reshape(np.transpose(index), [-1])
    non_func_tokens = np.logical_not(np.logical_or(inputs == SEP_ID, inputs == CLS_ID))
    non_mask_tokens = np.logical_and(np.logical_not(is_masked), non_func_tokens)
    masked_or_func_tokens = np.logical_not(non_mask_tokens)
    smallest_index = -np.ones([seq_len], dtype=np.int64)
    rev_index = np.where(non_mask_tokens, smallest_index, index)
    target_tokens = np.logical_and(masked_or_func_tokens, non_func_tokens)
    target_mask = target_tokens.astype(np.float32)
    self_rev_index = np.where(target_tokens, rev_index, rev_index + 1)
    perm_mask = np.logical_and(
        self_rev_index[:, None] <= rev_index[None, :], masked_or_func_tokens
    ).astype(np.float32)
    new_targets = np.concatenate([inputs[0:1], targets[:-1]], axis=0)
    inputs_k = inputs
    inputs_q = target_mask
    return perm_mask, new_targets, target_mask, inputs_k, inputs_q


def ref_parse(rng, inputs, target, is_masked, *, seq_len, reuse_len, perm_size, num_predict):
    non_reuse_len = seq_len - reuse_len
    pm0, t0, tm0, ik0, iq0 = ref_local_perm(
        rng, inputs[:reuse_len], target[:reuse_len], is_masked[:reuse_len], perm_size, reuse_len
    )
    pm1, t1, tm1, ik1, iq1 = ref_local_perm(
        rng, inputs[reuse_len:], target[reuse_len:], is_masked[reuse_len:], perm_size,
        non_reuse_len,
    )  # fmt: skip
    pm0 = np.concatenate([pm0, np.ones([reuse_len, non_reuse_len])], axis=1)
    pm1 = np.concatenate([np.zeros([non_reuse_len, reuse_len]), pm1], axis=1)
    perm_mask = np.concatenate([pm0, pm1], axis=0)
    target = np.concatenate([t0, t1], axis=0)
    target_mask = np.concatenate([tm0, tm1], axis=0)
    input_k = np.concatenate([ik0, ik1], axis=0)
    input_q = np.concatenate([iq0, iq1], axis=0)
    ex = {"perm_mask": perm_mask, "input_k": input_k, "input_q": input_q}
    indices = np.arange(seq_len)[target_mask.astype(bool)]
    pad_len = num_predict - len(indices)
    tmap = np.eye(seq_len, dtype=np.float32)[indices]
    ex["target_mapping"] = np.concatenate([tmap, np.zeros([pad_len, seq_len], np.float32)])
    ex["target"] = np.concatenate(
        [target[target_mask.astype(bool)], np.zeros([pad_len], target.dtype)]
    )
    ex["target_mask"] = np.concatenate([np.ones(len(indices)), np.zeros(pad_len)]).astype(
        np.float32
    )
    return ex
