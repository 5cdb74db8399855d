"""Dense attention: ``reference`` vs ``chunked`` forward+backward time and peak memory.

Batch 1, 8 heads x 64, float32, sequence 1K-32K, causal and non-causal. Peak memory is the
compiled program's (``memory_analysis()``); a configuration whose program would need more
than ``--max-gb`` is reported as "does not fit" instead of being run.

    python experiments/dense_attention/run.py            # cpu scale: 1K..32K
    python experiments/dense_attention/run.py --scale smoke

Goals (issue 2): ``chunked`` at least as fast as ``reference`` at 4K non-causal, at least
1.5x faster causal, and the only one that fits at 32K on a 24 GB machine.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import jax
import jax.numpy as jnp

from seqjax import bench
from seqjax.attention import dense

SCALES = {
    "smoke": dict(lengths=[256, 512], heads=2, repeats=1),
    "cpu": dict(lengths=[1024, 2048, 4096, 8192, 16384, 32768], heads=8, repeats=3),
    "full": dict(lengths=[1024, 2048, 4096, 8192, 16384, 32768, 65536], heads=8, repeats=10),
}


def fwd_bwd(impl: str, causal: bool):
    def loss(q, k, v):
        out = dense.dense_attention(q, k, v, causal=causal, implementation=impl)
        return out.astype(jnp.float32).sum()

    return jax.value_and_grad(loss, argnums=(0, 1, 2))


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scale", choices=sorted(SCALES), default="cpu")
    parser.add_argument("--max-gb", type=float, default=16.0)
    parser.add_argument("--lengths", default=None, help="comma-separated, overrides the scale's")
    parser.add_argument("--out", default=str(Path(__file__).parent / "results"))
    args = parser.parse_args(argv)
    scale = dict(SCALES[args.scale])
    if args.lengths:
        scale["lengths"] = [int(x) for x in args.lengths.split(",")]
    rows = []
    for causal in (False, True):
        for t in scale["lengths"]:
            x = jax.random.normal(jax.random.key(0), (1, t, scale["heads"], 64), jnp.float32)
            row = {"seq": t, "causal": causal}
            for impl in ("reference", "chunked"):
                r = bench.benchmark(
                    fwd_bwd(impl, causal),
                    x,
                    x,
                    x,
                    repeats=scale["repeats"],
                    max_bytes=int(args.max_gb * 2**30),
                )
                mem = r["memory"]["peak_bytes"] / 2**20 if r["memory"] else None
                row[f"{impl}_ms"] = r["timing"]["median_s"] * 1e3 if r["timing"] else None
                row[f"{impl}_mib"] = mem
                row[f"{impl}_status"] = r["status"]
                print(
                    f"seq={t} causal={causal} {impl}: {r['status']} "
                    f"{row[f'{impl}_ms']} ms, {mem} MiB",
                    flush=True,
                )
            if row["reference_ms"] and row["chunked_ms"]:
                row["speedup"] = row["reference_ms"] / row["chunked_ms"]
            rows.append(row)
    cols = [
        "seq",
        "causal",
        "reference_ms",
        "chunked_ms",
        "speedup",
        "reference_mib",
        "chunked_mib",
        "reference_status",
    ]
    md = "# Dense attention, forward+backward (batch 1, 8 heads x 64, float32)\n\n"
    md += bench.markdown_table(
        rows,
        cols,
        [
            "seq",
            "causal",
            "reference ms",
            "chunked ms",
            "speed-up",
            "reference MiB",
            "chunked MiB",
            "reference",
        ],
    )
    out = Path(args.out)
    summary = []
    for r in rows:
        if r["seq"] == 4096 and r.get("speedup"):
            goal = 1.5 if r["causal"] else 1.0
            summary.append(
                {
                    "study": "dense chunked vs reference speed-up, 4K "
                    + ("causal" if r["causal"] else "non-causal"),
                    "paper_figure": f"issue goal >= {goal}x",
                    "paper": goal,
                    "ours": round(r["speedup"], 2),
                    "ratio": round(r["speedup"] / goal, 2),
                }
            )
    bench.write_results(
        out, f"dense_{args.scale}", {"rows": rows, "scale": args.scale, "summary": summary}, md
    )
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    import timing_plots  # experiments/timing_plots.py

    timing_plots.dense(
        {"rows": rows, "scale": args.scale, "summary": summary}, out, f"dense_{args.scale}"
    )
    print(md)


if __name__ == "__main__":
    main()
