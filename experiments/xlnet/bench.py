"""Memory and speed of XLNet's two streams: materialized ("reference") vs blockwise relative
attention, one training step (forward + backward of the query-stream loss) of a 1-layer
XLNet (d_model 128, 4 heads, batch 1, P = T/6 targets, a random permutation mask).

Peak memory is XLA's compiled ``memory_analysis()`` (temporaries + arguments + outputs) of
the jitted step, so it needs only compilation; step time is the median of 3 timed steps
after one warm-up, measured where ``--time_max`` allows. The largest T within ``--budget_mib``
is searched over multiples of 512 by compilation alone.

    nice -n 10 python experiments/xlnet/bench.py --out experiments/xlnet/bench.json
    python experiments/xlnet/plot.py
"""

from __future__ import annotations

import argparse
import json
import time

import jax
import jax.numpy as jnp
import numpy as np

from seqjax.models.xlnet import XLNet, XLNetConfig


def step_fn(impl: str, t: int):
    """``impl``: "reference", "blockwise" (dense ``perm_mask``) or "blockwise+ranks" (the
    order as two rank vectors, ``perm_ranks``: no ``[T, S]`` mask anywhere)."""
    ranks = impl.endswith("+ranks")
    cfg = XLNetConfig(vocab_size=256, d_model=128, num_layers=1, num_heads=4, d_inner=512,
                      dropout_rate=0.0, implementation=impl.removesuffix("+ranks"))  # fmt: skip
    model = XLNet(cfg)
    p = max(t // 6, 1)
    rng = np.random.default_rng(0)
    ids = jnp.asarray(rng.integers(0, 256, (1, t)), jnp.int32)
    rank = rng.permutation(t)
    perm = jnp.asarray((rank[None, :] >= rank[:, None])[None])  # may not see later/self
    rank_1T = jnp.asarray(rank[None], jnp.int32)  # the same: q_rank[i] <= k_rank[j] blocked
    tmap = np.zeros((1, p, t), np.float32)
    tmap[0, np.arange(p), np.argsort(rank)[-p:]] = 1.0
    tmap = jnp.asarray(tmap)
    params = jax.eval_shape(lambda: model.init(jax.random.key(0), ids[:, :8]))["params"]

    def loss(params):
        order = {"perm_ranks": (rank_1T, rank_1T)} if ranks else {"perm_mask_BTT": perm}
        logits = model.apply({"params": params}, ids, target_mapping_BPT=tmap, **order)
        return -jnp.mean(jax.nn.log_softmax(logits)[..., 0])

    return jax.jit(jax.value_and_grad(loss)), params, model, ids


def peak_mib(impl: str, t: int) -> float:
    fn, params, _, _ = step_fn(impl, t)
    m = fn.lower(params).compile().memory_analysis()
    total = m.temp_size_in_bytes + m.argument_size_in_bytes + m.output_size_in_bytes
    return total / 2**20


def step_seconds(impl: str, t: int) -> float:
    fn, _, model, ids = step_fn(impl, t)
    params = model.init(jax.random.key(0), ids[:, :8])["params"]
    jax.block_until_ready(fn(params))
    times = []
    for _ in range(3):
        t0 = time.perf_counter()
        jax.block_until_ready(fn(params))
        times.append(time.perf_counter() - t0)
    return float(np.median(times))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--lengths", default="512,1024,2048,4096")
    ap.add_argument("--time_max", type=int, default=2048, help="time steps up to this T")
    ap.add_argument("--budget_mib", type=float, default=1024.0)
    ap.add_argument("--search_max", type=int, default=16384)
    ap.add_argument("--out", default="experiments/xlnet/bench.json")
    ap.add_argument("--impls", default="reference,blockwise")
    ap.add_argument("--no_search", action="store_true", help="skip the largest-T search")
    a = ap.parse_args()
    impls = a.impls.split(",")
    rows = []
    for t in [int(x) for x in a.lengths.split(",")]:
        for impl in impls:
            row = {"T": t, "implementation": impl, "peak_mib": peak_mib(impl, t)}
            if t <= a.time_max:
                row["step_s"] = step_seconds(impl, t)
            print(json.dumps(row), flush=True)
            rows.append(row)
    largest = {}
    for impl in () if a.no_search else impls:
        best, t = 0, 512
        while t <= a.search_max and peak_mib(impl, t) <= a.budget_mib:
            best, t = t, t * 2
        if best and best * 2 <= a.search_max:  # refine between best and 2 * best
            lo, hi = best, best * 2
            while hi - lo > 512:
                mid = (lo + hi) // 2 // 512 * 512
                lo, hi = (mid, hi) if peak_mib(impl, mid) <= a.budget_mib else (lo, mid)
            best = lo
        largest[impl] = best
        print(json.dumps({"implementation": impl, "largest_T_within_budget": best}), flush=True)
    out = {"device": str(jax.devices()[0]), "budget_mib": a.budget_mib, "rows": rows,
           "largest_T": largest, "search_max": a.search_max}  # fmt: skip
    with open(a.out, "w") as f:
        json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
