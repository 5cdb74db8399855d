"""LSH-4 time growth from T = 4K to 64K at fixed tokens per batch, measured interleaved
(issue 7 goal; Kitaev et al. 2020, Fig. 5: LSH time nearly flat in T at fixed tokens).

``speed_memory.py`` times each cell once, one after the other, so on a shared machine the
load can change between the 4K and the 64K cell. Here the compiled steps for both lengths
(default K = 2T/128 buckets, and the same K factorized) are called in turn ``--rounds``
times and the minimum per cell is kept, so the 64K/4K ratio compares the same load.

    python experiments/reformer/growth.py                # cpu: 4K vs 64K, 64K tokens
    python experiments/reformer/growth.py --scale smoke  # seconds
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import jax

from seqjax import bench
from seqjax.attention import lsh

SCALES = {
    "smoke": dict(lengths=(256, 1024), tokens=1024, dim=16, hashes=2, chunk=64),
    "cpu": dict(lengths=(4096, 65536), tokens=65536, dim=32, hashes=4, chunk=128),
}


def step(seq: int, sc: dict, factorized: bool):
    """Compiled forward+backward of one causal LSH layer (1 head) and its input."""
    nb = lsh.default_n_buckets(seq, sc["chunk"])
    nb = lsh.factor_buckets(nb) if factorized else nb

    def loss(q, v):
        out = lsh.lsh_attention(
            q, None, v, causal=True, n_hashes=sc["hashes"], chunk_len=sc["chunk"], n_buckets=nb
        )
        return out.sum()

    x = jax.random.normal(jax.random.PRNGKey(0), (sc["tokens"] // seq, seq, 1, sc["dim"]))
    compiled = jax.jit(jax.value_and_grad(loss, argnums=(0, 1))).lower(x, x).compile()
    jax.block_until_ready(compiled(x, x))  # warm-up
    return compiled, x, nb


def summary_rows(payload: dict) -> list[dict]:
    """Rows for ``experiments/summarize.py``: time growth 4K -> 64K at a fixed number of
    tokens (LSH cost is linear in length, Kitaev et al. 2020; issue 7 goal: below 1.5x)."""
    return [
        {
            "study": f"reformer LSH time growth 4K -> 64K, {r['hashing']} hashing",
            "paper_figure": "Kitaev et al. 2020 (linear in T); issue goal < 1.5x",
            "paper": 1.5,
            "ours": round(r["growth"], 2),
            "ratio": round(r["growth"] / 1.5, 2),
        }
        for r in payload["rows"]
        if r.get("growth")
    ]


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scale", choices=sorted(SCALES), default="cpu")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--out", default=str(Path(__file__).parent / "results"))
    args = parser.parse_args(argv)
    sc = SCALES[args.scale]
    cells = {(t, f): step(t, sc, f) for f in (False, True) for t in sc["lengths"]}
    times = {k: [] for k in cells}
    load = [os.getloadavg()[0]]
    for _ in range(args.rounds):  # interleaved: every cell sees the same load
        for key, (compiled, x, _) in cells.items():
            start = time.perf_counter()
            jax.block_until_ready(compiled(x, x))
            times[key].append(time.perf_counter() - start)
        load.append(os.getloadavg()[0])
    t0, t1 = sc["lengths"]
    rows = []
    for f in (False, True):
        a, z = min(times[t0, f]), min(times[t1, f])
        rows.append(
            {
                "hashing": "factorized" if f else "one argmax over K",
                f"buckets_T{t0}": str(cells[t0, f][2]),
                f"buckets_T{t1}": str(cells[t1, f][2]),
                f"ms_T{t0}": a * 1e3,
                f"ms_T{t1}": z * 1e3,
                "growth": z / a,
            }
        )
    h = sc["hashes"]
    md = (
        f"# LSH-{h} forward+backward time growth, T = {t0} -> {t1} at {sc['tokens']} tokens per "
        f"batch (interleaved, min of {args.rounds})\n\n"
        + bench.markdown_table(rows, list(rows[0]))
        + f"\n\nGoal (issue 7): growth < 1.5x. 1-minute load average {min(load):.1f} to "
        f"{max(load):.1f} on {os.cpu_count()} cores."
    )
    name = "growth" if args.scale != "smoke" else "growth_smoke"
    out = Path(args.out)
    payload = {"scale": args.scale, "config": sc, "rows": rows, "times_s": {}, "load_avg": load}
    payload["times_s"] = {f"T{t}_{'factorized' if f else 'flat'}": v for (t, f), v in times.items()}
    payload["summary"] = summary_rows(payload) if args.scale != "smoke" else []
    bench.write_results(out, name, payload, md)
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    import timing_plots  # experiments/timing_plots.py

    timing_plots.reformer_growth(payload, out / f"{name}.png")
    print(md, flush=True)
    return rows


if __name__ == "__main__":
    main()
