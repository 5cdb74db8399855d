"""XLNet's permutation LM as a pre-training objective over a text corpus or example texts
(``config.data.objective = 'plm'``; Yang et al. 2019 §2.3, appendix A.2): each window of
``data.seq_len`` tokens (or each right-padded text of ``data.max_len``: targets among its
real tokens only, at most half of each half's) gets a sampled factorization order and
partial-prediction targets (``seqjax.data.xlnet_perm``).

Batches (task ``plm``, ``seqjax.tasks.plm``): ``inputs`` the original tokens (the content
stream: no ``<mask>`` overwrites them), ``perm_mask`` bool ``[B, T, T]``,
``target_mapping`` ``[B, P, T]``, ``targets`` ``[B, P]`` and ``weights`` ``[B, P]``
(``P = data.plm_num_predict``). With ``data.plm_ranks = True`` the order travels as
``q_rank``/``k_rank`` int32 ``[B, T]`` instead of ``perm_mask`` (``perm_mask[i, j] ==
q_rank[i] <= k_rank[j]``; the blockwise engine then forms no ``[T, S]`` mask).

Options (``config.data``): ``plm_num_predict`` (default ``seq_len // 6``: XLNet's K = 6),
``plm_reuse_len`` (default ``seq_len // 2``), ``plm_perm_size`` (default ``plm_reuse_len``),
``plm_mask_alpha`` / ``plm_mask_beta`` (6 / 1) and ``plm_max_gram`` (5). Every row draws from
``numpy.random.default_rng((data.seed, stream, global row))``: the same seed gives the same
orders, a resumed run the same next batch; evaluation orders are fixed per split. Evaluation
windows past a split's end keep their targets' weights at 0.

Legend: B global batch, b per-process batch, T ``seq_len``, P predicted positions.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from seqjax.data import packing, pipeline, registry, xlnet_perm


def is_texts(cfg) -> bool:
    """Whether the objective reads example texts (padded rows) rather than corpus windows."""
    return cfg.get("name") in registry.names("texts")


def length(cfg) -> int:
    """T: ``data.seq_len`` (corpus windows) or ``data.max_len`` (example texts)."""
    if is_texts(cfg):  # as ``api.max_len``
        return int(cfg.max_len) if cfg.max_len else int(registry.get(cfg.name).default_max_len)
    return int(cfg.seq_len)


def options(cfg) -> dict:
    """The sampler's options with their defaults filled in."""
    t = length(cfg)
    reuse = int(cfg.get("plm_reuse_len") or t // 2)
    return {
        "num_predict": int(cfg.get("plm_num_predict") or max(t // 6, 1)),
        "reuse_len": reuse,
        "perm_size": int(cfg.get("plm_perm_size") or reuse),
        "mask_alpha": int(cfg.get("plm_mask_alpha") or 6),
        "mask_beta": int(cfg.get("plm_mask_beta") or 1),
        "max_gram": int(cfg.get("plm_max_gram") or 5),
    }


def problems(cfg) -> list[tuple[str, object, str]]:
    """Invalid ``config.data`` fields of the objective as ``(field, value, valid)``."""
    if cfg.get("objective") != "plm":
        return []
    out = []
    readable = registry.names("corpus") + registry.names("texts")
    if cfg.get("name") not in readable:
        return [("objective", "plm", f"'' for this data set; 'plm' reads a corpus or example "
                 f"texts ({', '.join(readable)})")]  # fmt: skip
    t = length(cfg) if is_texts(cfg) else cfg.get("seq_len")
    if not isinstance(t, int) or t < 4:
        return out + [("seq_len", t, "an integer >= 4 with objective='plm'")]
    o = options(cfg)
    if not 0 < o["reuse_len"] < t:
        out.append(("plm_reuse_len", o["reuse_len"], f"an integer in (0, seq_len={t})"))
    elif not _divides(o["perm_size"], o["reuse_len"], t - o["reuse_len"]):
        out.append(("plm_perm_size", o["perm_size"], "a divisor of both halves' lengths, "
                    "<= plm_reuse_len and <= seq_len - plm_reuse_len"))  # fmt: skip
    if not 2 <= o["num_predict"] <= t // 2:
        out.append(("plm_num_predict", o["num_predict"], f"an integer in [2, seq_len/2={t // 2}]"))
    if cfg.get("plm_ranks", False) not in (True, False):
        out.append(("plm_ranks", cfg.get("plm_ranks"), "True or False"))
    if o["mask_alpha"] < o["mask_beta"] or o["mask_beta"] < 1:
        out.append(("plm_mask_alpha", o["mask_alpha"], "an integer >= plm_mask_beta >= 1"))
    return out


def _divides(p: int, *lengths: int) -> bool:
    return all(0 < p <= n and n % p == 0 for n in lengths)


class PermutationLM:
    """Wraps an LM window maker: each row gets an order and targets (module docstring)."""

    def __init__(self, base, *, seed: int, stream: int, num_tokens: int, opts: dict, texts=False,
                 ranks=False):  # fmt: skip
        self.base, self.seed, self.stream, self.num_tokens, self.opts = (
            base, seed, stream, num_tokens, opts,
        )  # fmt: skip
        self.texts = texts  # padded example texts: targets among the real tokens only
        self.ranks = ranks  # the order as q_rank/k_rank [B, T] instead of perm_mask [B, T, T]

    def __call__(self, step: int) -> dict[str, np.ndarray]:
        batch = self.base(step)
        tokens_bT = np.asarray(batch["inputs"])
        rows_b = self.base.rows(step)
        o = self.opts
        n1 = o["num_predict"] // 2
        kw = dict(max_gram=o["max_gram"], mask_alpha=o["mask_alpha"], mask_beta=o["mask_beta"])
        out = []
        t, r = tokens_bT.shape[1], o["reuse_len"]
        real_b = np.full(len(tokens_bT), t)
        if self.texts:  # right-padded rows (0 = padding); rows with weight 0 are padding
            real_b = (tokens_bT != 0).sum(1) * (np.asarray(batch["weights"]) > 0)
        for row, tokens_T, real in zip(rows_b, tokens_bT, real_b):
            rng = np.random.default_rng((self.seed, self.stream, int(row)))
            n0, n1_real = min(real, r), max(real - r, 0)  # real tokens per half
            goal0 = min(o["num_predict"] - n1, n0 // 2)
            goal1 = min(n1, n1_real // 2)
            m0 = np.zeros(r, bool)
            m0[:n0] = xlnet_perm.sample_mask(tokens_T[:n0], rng, goal_num_predict=goal0, **kw)
            m1 = np.zeros(t - r, bool)
            m1[:n1_real] = xlnet_perm.sample_mask(
                tokens_T[r : r + n1_real], rng, goal_num_predict=goal1, **kw
            )
            out.append(xlnet_perm.permutation_example(
                tokens_T, np.concatenate([m0, m1]), rng, reuse_len=r, perm_size=o["perm_size"],
                num_predict=o["num_predict"], functional_ids=(), dense_mask=not self.ranks,
            ))  # fmt: skip
        ex = {k: np.stack([e[k] for e in out]) for k in out[0]}
        weights = ex["target_weight"]
        if self.num_tokens:  # evaluation windows: targets past the split's end weigh 0
            pos_bP = ex["target_mapping"].argmax(-1)
            weights = weights * (rows_b[:, None] * t + pos_bP + 1 < self.num_tokens)
        order = {"perm_mask": ex["perm_mask"].astype(bool)} if not self.ranks else {
            "q_rank": ex["q_rank"].astype(np.int32), "k_rank": ex["k_rank"].astype(np.int32),
        }  # fmt: skip
        return {
            "inputs": tokens_bT.astype(np.int32),
            **order,
            "target_mapping": ex["target_mapping"].astype(np.float32),
            "targets": ex["target"].astype(np.int32),
            "weights": weights.astype(np.float32),
        }


def make_plm(cfg, split, process_index, process_count, train, base_make, base_info):
    """The corpus windows with XLNet's permutation inputs (``api.make`` with objective
    'plm')."""
    base_cfg = packing.base_data(cfg)
    if cfg.get("lm_batching") == "stream":  # model.kind='xlnet': the memory's reuse_len halves
        with base_cfg.unlocked():
            base_cfg.stream_stride = options(cfg)["reuse_len"]
    base = packing.base_iterator(base_cfg, split, process_index, process_count, train, base_make)
    maker = base.maker
    n = len(maker.tokens()) if isinstance(maker, pipeline.LMEvalWindows) else 0
    stream = 0 if train else 1 + ("train", "validation", "test").index(split)
    opts = options(cfg)
    ranks = bool(cfg.get("plm_ranks", False))
    wrapped = PermutationLM(maker, seed=int(cfg.seed), stream=stream, num_tokens=n, opts=opts,
                            texts=is_texts(cfg), ranks=ranks)  # fmt: skip
    spec = {**base.spec, "objective": "plm", **{f"plm_{k}": v for k, v in opts.items()}}
    if ranks:
        spec["plm_ranks"] = True
    return pipeline.DataIterator(
        wrapped, base.num_steps, spec, num_workers=int(cfg.num_workers),
        prefetch=int(cfg.prefetch),
    )  # fmt: skip


def plm_info(cfg, base_info):
    """The text data set's info, task 'plm' (no token is added: the query stream starts from
    the model's ``mask_emb``)."""
    return dataclasses.replace(base_info(packing.base_data(cfg)), task="plm", num_classes=None)


registry.register_objective(registry.Objective("plm", "plm", plm_info, make_plm))
