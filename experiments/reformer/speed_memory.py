"""LSH vs full attention: forward+backward time and peak memory vs length (Kitaev et al. 2020,
Fig. 5: at a fixed number of tokens per batch, LSH time stays nearly flat as T grows while
full attention's grows with T).

One attention layer (no projections), float32, causal, ``tokens`` tokens per batch
(batch = tokens / T), H heads x D. Compared side by side in one run: ``lsh`` with n_hashes 1,
2, 4, 8 (chunk_len 128, one chunk before, n_buckets = 2T/128) and ``dense`` ``chunked``
(blockwise, exact, causal block skipping). Peak memory is the compiled program's
(``memory_analysis()``); programs over ``--max-gb`` are reported "does not fit" instead of
run. Full attention at lengths whose time, extrapolated linearly in T from the previous
length, would exceed ``--max-call-s`` per call is reported "skipped" with that prediction
(so the CPU run stays a few minutes).

    python experiments/reformer/speed_memory.py               # cpu: T = 1K..64K, 64K tokens
    python experiments/reformer/speed_memory.py --scale smoke  # seconds
    python experiments/reformer/speed_memory.py --scale gpu    # accelerator: 8 heads x 64

Goals (issue 7): at T = 16K LSH-4 is faster than ``dense`` ``chunked``; LSH-4's time grows
less than 1.5x from T = 4K to 64K.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

import jax
import jax.numpy as jnp

from seqjax import bench
from seqjax.attention import dense, lsh

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import plotting  # noqa: E402  (experiments/plotting.py)

SCALES = {
    "smoke": dict(lengths=[256, 512], tokens=1024, heads=1, dim=16, hashes=[2], chunk=64),
    "cpu": dict(
        lengths=[1024, 2048, 4096, 8192, 16384, 32768, 65536],
        tokens=65536,
        heads=1,
        dim=32,
        hashes=[1, 2, 4, 8],
        chunk=128,
    ),
    "gpu": dict(
        lengths=[1024, 2048, 4096, 8192, 16384, 32768, 65536],
        tokens=65536,
        heads=8,
        dim=64,
        hashes=[1, 2, 4, 8],
        chunk=128,
    ),
}


def fwd_bwd(name: str, *, n_hashes: int = 0, chunk: int = 128, seq: int = 0):
    """``value_and_grad`` of the summed output w.r.t. the attention's inputs.

    ``name`` "lsh_factored" hashes the default K = 2T/chunk buckets as two factors near
    sqrt(K) (``lsh.factor_buckets``), "lsh" as one argmax over K.
    """
    if name == "dense":

        def loss(q, v):
            return dense.dense_attention(q, q, v, causal=True, implementation="chunked").sum()

    else:
        nb = lsh.default_n_buckets(seq, chunk)
        nb = lsh.factor_buckets(nb) if name == "lsh_factored" else nb

        def loss(q, v):
            out = lsh.lsh_attention(
                q, None, v, causal=True, n_hashes=n_hashes, chunk_len=chunk, n_buckets=nb, seed=0
            )
            return out.sum()

    return jax.value_and_grad(loss, argnums=(0, 1))


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scale", choices=sorted(SCALES), default="cpu")
    parser.add_argument("--max-gb", type=float, default=8.0)
    parser.add_argument("--max-call-s", type=float, default=40.0)
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--out", default=str(Path(__file__).parent / "results"))
    args = parser.parse_args(argv)
    sc = SCALES[args.scale]
    configs = [("dense_chunked", "dense", 0)] + [(f"lsh{r}", "lsh", r) for r in sc["hashes"]]
    rf = 4 if 4 in sc["hashes"] else sc["hashes"][0]  # the goal's 4 rounds, factorized
    configs.append((f"lsh{rf}f", "lsh_factored", rf))
    load = [os.getloadavg()[0]]
    rows, last = [], {}
    for t in sc["lengths"]:
        b = max(1, sc["tokens"] // t)
        x = jax.random.normal(jax.random.PRNGKey(0), (b, t, sc["heads"], sc["dim"]), jnp.float32)
        row = {"seq": t, "batch": b}
        for label, name, r in configs:
            # Full attention's time at fixed tokens grows ~linearly in T: predict and skip.
            if name == "dense" and label in last:
                t_prev, s_prev = last[label]
                predicted = s_prev * t / t_prev
                if predicted > args.max_call_s:
                    row[f"{label}_status"] = f"skipped (~{predicted:.0f} s predicted)"
                    row[f"{label}_ms"] = None
                    print(f"T={t} {label}: skipped, predicted {predicted:.0f} s", flush=True)
                    continue
            res = bench.benchmark(
                fwd_bwd(name, n_hashes=r, chunk=sc["chunk"], seq=t),
                x,
                x,
                repeats=args.repeats,
                max_bytes=int(args.max_gb * 2**30),
            )
            timing = res["timing"]
            row[f"{label}_ms"] = timing["median_s"] * 1e3 if timing else None
            row[f"{label}_mib"] = res["memory"]["peak_bytes"] / 2**20 if res["memory"] else None
            row[f"{label}_status"] = res["status"]
            if timing:
                last[label] = (t, timing["median_s"])
            print(
                f"T={t} B={b} {label}: {res['status']} {row[f'{label}_ms']} ms "
                f"{row[f'{label}_mib']} MiB",
                flush=True,
            )
        if row.get("dense_chunked_ms") and row.get("lsh4_ms"):
            row["dense_over_lsh4"] = row["dense_chunked_ms"] / row["lsh4_ms"]
        row["load_avg_1min"] = os.getloadavg()[0]
        load.append(row["load_avg_1min"])
        rows.append(row)
        _write(args, sc, configs, rows, load)  # after every length: a cut-short run keeps rows
    return rows


def _write(args, sc, configs, rows, load) -> None:
    """Writes JSON, markdown and the two PNGs for the rows measured so far."""
    labels = [c[0] for c in configs]
    goals = _goals(rows)
    md = (
        f"# LSH vs dense (chunked) attention: forward+backward, causal, {sc['tokens']} tokens "
        f"per batch, {sc['heads']} head(s) x {sc['dim']}, float32\n\n## Time (ms per step)\n\n"
    )
    md += bench.markdown_table(
        rows,
        ["seq", "batch"] + [f"{l}_ms" for l in labels] + ["dense_over_lsh4", "load_avg_1min"],
    )
    md += "\n\n## Peak memory of the compiled step (MiB)\n\n"
    md += bench.markdown_table(rows, ["seq"] + [f"{l}_mib" for l in labels])
    md += "\n\n## Status\n\n" + bench.markdown_table(
        rows, ["seq"] + [f"{l}_status" for l in labels]
    )
    md += "\n\n## Goals\n\n" + "\n".join(f"- {k}: {v}" for k, v in goals.items())
    md += (
        f"\n\n1-minute load average during the run: {min(load):.1f} to {max(load):.1f} on "
        f"{os.cpu_count()} cores (a shared machine: absolute times are inflated and noisy; "
        f"compare ratios within a row or a column). {args.repeats} timed call(s) after one "
        "warm-up call per cell. `lsh4f`: LSH-4 with the same K = 2T/128 buckets hashed as "
        "two factors near sqrt(K) (`lsh.factor_buckets`)."
    )
    out = Path(args.out)
    name = "speed_memory" if args.scale != "smoke" else "speed_memory_smoke"
    bench.write_results(
        out,
        name,
        {"scale": args.scale, "config": sc, "rows": rows, "goals": goals, "load_avg": load},
        md,
    )
    plot(json.loads((out / f"{name}.json").read_text()), out, name)
    print(md, flush=True)


def plot(payload: dict, out, name: str) -> None:
    """``<name>_ms.png`` and ``<name>_mib.png``: time and peak memory against T, one line
    per attention; the title gives the scale and tokens per batch, and a red note on the
    time plot says when the results file records a loaded machine."""
    plt = plotting.pyplot()
    rows, sc = payload["rows"], payload.get("config") or {}
    labels = [k[: -len("_ms")] for k in rows[0] if k.endswith("_ms")] if rows else []
    xs = [r["seq"] for r in rows]
    tokens = rows[0]["seq"] * rows[0]["batch"] if rows and "batch" in rows[0] else None
    for metric, ylabel in (("ms", "forward+backward ms per step"), ("mib", "peak MiB")):
        fig, ax = plt.subplots(figsize=(6.8, 4.6))
        for label in labels:
            pts = [(x, r.get(f"{label}_{metric}")) for x, r in zip(xs, rows)]
            pts = [(x, y) for x, y in pts if y is not None]
            if pts:
                ax.plot(*zip(*pts), marker="o", label=label)
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("sequence length T (fixed tokens per batch)")
        ax.set_ylabel(ylabel)
        per_batch = f", {tokens:,} tokens per batch" if tokens else ""
        ax.set_title(
            f"LSH vs dense chunked attention, {payload.get('scale')} scale{per_batch}\n"
            f"causal, {sc.get('heads', '?')} head(s) x {sc.get('dim', '?')}, one layer, "
            "forward+backward",
            fontsize=9,
        )
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=7)
        if metric == "ms":  # compiled peak memory does not depend on the load
            plotting.mark_load(fig, payload)
        fig.tight_layout(rect=(0, 0.03, 1, 1))
        plotting.save(fig, Path(out) / f"{name}_{metric}.png")


def _goals(rows) -> dict:
    """The issue's two speed goals, evaluated on the measured rows."""
    by_t = {r["seq"]: r for r in rows}
    goals = {}
    if 16384 in by_t:
        r = by_t[16384]
        d, l4 = r.get("dense_chunked_ms"), r.get("lsh4_ms")
        goals["T=16K: LSH-4 faster than dense chunked"] = (
            f"{'yes' if d and l4 and l4 < d else 'no'} (dense {d} ms, lsh4 {l4} ms)"
        )
    if 4096 in by_t and 65536 in by_t:
        a, z = by_t[4096].get("lsh4_ms"), by_t[65536].get("lsh4_ms")
        if a and z:
            goals["LSH-4 time growth 4K -> 64K (< 1.5x)"] = f"{z / a:.2f}x"
        a, z = by_t[4096].get("lsh4f_ms"), by_t[65536].get("lsh4f_ms")
        if a and z:
            goals["LSH-4, factorized buckets: time growth 4K -> 64K (< 1.5x)"] = f"{z / a:.2f}x"
    return goals


if __name__ == "__main__":
    main()
