"""Linformer efficiency: the shape of Wang et al. (2020) Table 3 on this machine.

Inference time and peak memory of ONE pre-LN encoder layer (``seqjax.models.transformer.
Block``: LayerNorm, Q/K/V/out projections, attention, MLP) with Linformer attention
(``sharing="headwise"``, k = 128 ... 2048) against the same layer with ``dense`` attention,
both ``implementation="reference"`` (materialized logits, the paper's Transformer) and
``"chunked"`` (FlashAttention-style), for n = 512 ... 65,536.

* Speed: every configuration of one n is timed side by side in interleaved rounds (round r
  times each configuration once); the best of the rounds is reported, and ratios are
  dense time / Linformer time from the same run.
* Memory: the peak XLA predicts from buffer assignment (``compiled.memory_analysis()``:
  arguments + outputs + temporaries - aliased), so configurations that would not fit are
  compiled, measured and reported without being run ("does not fit" above
  ``--memory-budget-gb``). Dense timings whose predicted duration exceeds
  ``--max-call-seconds`` (quadratic extrapolation from the previous n) are skipped.

Usage:
    python experiments/linformer/run.py --scale smoke   # seconds (tests run this)
    python experiments/linformer/run.py                 # --scale cpu, the full table

Writes ``results/linformer_<scale>.{json,md,png}`` beside this file.

Legend: B batch, n sequence length, k projected length, E model width.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

from seqjax import environment
from seqjax.models import layers
from seqjax.models.transformer import Block, TransformerConfig

HERE = Path(__file__).resolve().parent

# Wang et al. 2020 (Linformer), Table 3: inference speed-up over the Transformer.
PAPER_SPEEDUP = {
    512: {128: 1.5, 256: 1.3},
    1024: {128: 1.7, 256: 1.6, 512: 1.3},
    2048: {128: 2.6, 256: 2.4, 512: 2.1, 1024: 1.3},
    4096: {128: 3.4, 256: 3.2, 512: 2.8, 1024: 2.2, 2048: 1.3},
    8192: {128: 5.5, 256: 5.0, 512: 4.4, 1024: 3.5, 2048: 2.1},
    16384: {128: 8.6, 256: 7.8, 512: 7.0, 1024: 5.6, 2048: 3.3},
    32768: {128: 13.0, 256: 12.0, 512: 11.0, 1024: 8.8, 2048: 5.0},
    65536: {128: 20.0, 256: 18.0, 512: 16.0, 1024: 14.0, 2048: 7.9},
}
# Table 3 memory saved (k = 128).
PAPER_MEMORY = {4096: {128: 14.0}, 16384: {128: 56.0}, 65536: {128: 60.0}}


@dataclasses.dataclass(frozen=True)
class Scale:
    """One benchmark size: layer shape, the grids of n and k, and the limits."""

    d_model: int
    num_heads: int
    ns: tuple[int, ...]
    ks: tuple[int, ...]
    repeats: int
    batch: int = 1


SCALES = {
    # A few seconds on a laptop CPU: the code path of the full run at toy sizes.
    "smoke": Scale(d_model=64, num_heads=2, ns=(256, 512), ks=(32, 64), repeats=2),
    # The table: heads of D = 64 as in the paper's models, width 256 (4 heads), FF 4E.
    "cpu": Scale(
        d_model=256,
        num_heads=4,
        ns=(512, 1024, 2048, 4096, 8192, 16384, 32768, 65536),
        ks=(128, 256, 512, 1024, 2048),
        repeats=3,
    ),
}


def layer_config(scale: Scale, n: int, attention: tuple) -> TransformerConfig:
    return TransformerConfig(
        vocab_size=2,
        num_layers=1,
        num_heads=scale.num_heads,
        d_model=scale.d_model,
        max_len=n,
        attention=(attention,),
        causal=False,
    )


def variants(scale: Scale, n: int) -> dict[str, tuple]:
    """name -> (mechanism, frozen options) for every configuration timed at length n."""
    out = {
        "dense-reference": ("dense", layers.freeze_options({"implementation": "reference"})),
        "dense-chunked": ("dense", layers.freeze_options({"implementation": "chunked"})),
    }
    for k in scale.ks:
        if k <= n // 2:  # the paper's grid: k at most n / 2
            opts = {"k": k, "max_len": n, "sharing": "headwise"}
            out[f"linformer-k{k}"] = ("linformer", layers.freeze_options(opts))
    return out


def compile_layer(scale: Scale, n: int, attention: tuple):
    """Compiles one encoder layer's forward pass; returns (compiled, params, x, peak bytes)."""
    cfg = layer_config(scale, n, attention)
    block = Block(cfg, layer=0, causal=False)
    x_BnE = jax.ShapeDtypeStruct((scale.batch, n, scale.d_model), jnp.float32)
    params = jax.eval_shape(block.init, jax.random.key(0), x_BnE)

    def forward(p, x):
        return block.apply(p, x)

    compiled = jax.jit(forward).lower(params, x_BnE).compile()
    mem = compiled.memory_analysis()
    peak = (
        mem.argument_size_in_bytes
        + mem.output_size_in_bytes
        + mem.temp_size_in_bytes
        - mem.alias_size_in_bytes
    )
    return compiled, params, x_BnE, int(peak)


def materialize(params, x_spec):
    rng = np.random.default_rng(0)
    params = jax.tree.map(
        lambda s: jnp.asarray(rng.standard_normal(s.shape, np.float32) * 0.05), params
    )
    x = jnp.asarray(rng.standard_normal(x_spec.shape, np.float32))
    return params, x


def run_length(scale: Scale, n: int, args, state: dict) -> list[dict]:
    """Compiles, predicts memory, and times every configuration at length n side by side."""
    rows, ready = [], {}
    for name, attention in variants(scale, n).items():
        compiled, params, x_spec, peak = compile_layer(scale, n, attention)
        row = {"n": n, "variant": name, "peak_bytes": peak, "seconds": None, "status": "ok"}
        rows.append(row)
        predicted = state.get(name, 0.0) * (4.0 if name.startswith("dense") else 2.5)
        if peak > args.memory_budget_gb * 2**30:
            row["status"] = f"does not fit (predicted {peak / 2**30:.1f} GiB)"
        elif predicted > args.max_call_seconds:
            row["status"] = f"skipped (predicted {predicted:.0f} s per call)"
        else:
            p, x = materialize(params, x_spec)
            t0 = time.perf_counter()
            jax.block_until_ready(compiled(p, x))  # warm-up
            row["warmup_seconds"] = time.perf_counter() - t0
            ready[name] = (compiled, p, x, row)
    times: dict[str, list[float]] = {name: [] for name in ready}
    slowest = max([row["warmup_seconds"] for *_, row in ready.values()], default=0.0)
    rounds = scale.repeats if slowest > 0.1 else 4 * scale.repeats  # fast calls: more rounds
    for r in range(rounds):
        for name, (compiled, p, x, row) in ready.items():
            if r > 0 and row["warmup_seconds"] > args.long_call_seconds:
                continue  # long calls: one timed round is enough (noise << duration)
            t0 = time.perf_counter()
            jax.block_until_ready(compiled(p, x))
            times[name].append(time.perf_counter() - t0)
    for name, (_, _, _, row) in ready.items():
        row["seconds"] = min(times[name])
        row["rounds"] = len(times[name])
        state[name] = row["seconds"]
    for name in variants(scale, n):
        if name not in ready:
            state[name] = float("inf")
    return rows


def ratios(rows: list[dict]) -> list[dict]:
    """Speed-up and memory saving of each Linformer row over both dense implementations."""
    by = {(r["n"], r["variant"]): r for r in rows}
    out = []
    for r in rows:
        if not r["variant"].startswith("linformer"):
            continue
        n, k = r["n"], int(r["variant"].split("-k")[1])
        entry = {"n": n, "k": k}
        for base in ("reference", "chunked"):
            d = by[(n, f"dense-{base}")]
            ok = r["seconds"] is not None and d["seconds"] is not None
            entry[f"speedup_vs_{base}"] = d["seconds"] / r["seconds"] if ok else None
            entry[f"memory_vs_{base}"] = d["peak_bytes"] / r["peak_bytes"]
        entry["paper_speedup"] = PAPER_SPEEDUP.get(n, {}).get(k)
        entry["paper_memory"] = PAPER_MEMORY.get(n, {}).get(k)
        out.append(entry)
    return out


def summary_rows(payload: dict) -> list[dict]:
    """Paper-vs-ours rows for ``experiments/summarize.py``: Linformer (k = 128) speed-up over
    the standard Transformer at each length of Table 3 that ran (Wang et al. 2020)."""
    out = []
    for r in payload["ratios"]:
        # Against dense reference; where it does not fit, against dense chunked.
        base = "reference" if r.get("speedup_vs_reference") else "chunked"
        ours = r.get(f"speedup_vs_{base}")
        if r["k"] != 128 or not r.get("paper_speedup") or not ours:
            continue
        out.append({
            "study": f"linformer k=128 vs dense {base}, n = {r['n']:,} (one layer, inference)",
            "paper_figure": "Wang et al. 2020, Table 3",
            "paper": r["paper_speedup"],
            "ours": round(ours, 2),
            "ratio": round(ours / r["paper_speedup"], 2),
        })  # fmt: skip
    return out


def _fmt(x, suffix="×"):
    return "—" if x is None else f"{x:.1f}{suffix}"


def markdown(meta: dict, rows: list[dict], table: list[dict]) -> str:
    lines = [
        f"# Linformer vs dense, one encoder layer ({meta['scale']})",
        "",
        f"{meta['machine']}; jax {meta['jax']}; {meta['date']}. Layer: E={meta['d_model']}, "
        f"H={meta['num_heads']}, FF={4 * meta['d_model']}, batch {meta['batch']}, float32, "
        "forward only. Memory: XLA's predicted peak (arguments + outputs + temporaries).",
        "",
        "## Ratios (dense / Linformer), side by side with Wang et al. 2020 Table 3",
        "",
        "| n | k | speed-up vs reference | vs chunked | paper speed-up | memory saved vs "
        "reference | vs chunked | paper memory saved |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for e in table:
        lines.append(
            f"| {e['n']} | {e['k']} | {_fmt(e['speedup_vs_reference'])} | "
            f"{_fmt(e['speedup_vs_chunked'])} | {_fmt(e['paper_speedup'])} | "
            f"{_fmt(e['memory_vs_reference'])} | {_fmt(e['memory_vs_chunked'])} | "
            f"{_fmt(e['paper_memory'])} |"
        )
    lines += [
        "",
        "## Raw measurements",
        "",
        "| n | variant | seconds (best) | rounds | predicted peak MiB | status |",
        "|---|---|---|---|---|---|",
    ]
    for r in rows:
        sec = "—" if r["seconds"] is None else f"{r['seconds']:.4f}"
        lines.append(
            f"| {r['n']} | {r['variant']} | {sec} | {r.get('rounds', 0)} | "
            f"{r['peak_bytes'] / 2**20:.1f} | {r['status']} |"
        )
    return "\n".join(lines) + "\n"


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--scale", default="cpu", choices=sorted(SCALES))
    parser.add_argument("--out", default=str(HERE / "results"), help="results folder")
    parser.add_argument(
        "--memory-budget-gb", type=float, default=6.0, help="predicted peak above: not run"
    )
    parser.add_argument(
        "--max-call-seconds", type=float, default=40.0, help="skip longer predicted calls"
    )
    parser.add_argument(
        "--long-call-seconds", type=float, default=5.0, help="calls this long are timed once"
    )
    parser.add_argument("--max-n", type=int, default=0, help="stop after this n (0: all)")
    args = parser.parse_args(argv)
    scale = SCALES[args.scale]
    env = environment.capture()
    meta = {
        "scale": args.scale,
        "environment": env,
        "machine": f"{env['processor']}, {env['cpu_count']} cores, "
        f"{env['backend']} ({env['device_kind']})",
        "jax": env["versions"]["jax"],
        "python": env["python"],
        "date": env["date"],
        "d_model": scale.d_model,
        "num_heads": scale.num_heads,
        "batch": scale.batch,
        "args": vars(args),
    }
    rows, state = [], {}
    for n in scale.ns:
        if args.max_n and n > args.max_n:
            break
        new = run_length(scale, n, args, state)
        rows += new
        print(f"n={n}: " + ", ".join(f"{r['variant']}={r['seconds']}" for r in new), flush=True)
    table = ratios(rows)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    stem = out / f"linformer_{args.scale}"
    result = {"meta": meta, "rows": rows, "ratios": table, "paper_table3": PAPER_SPEEDUP}
    result["summary"] = summary_rows(result)
    stem.with_suffix(".json").write_text(json.dumps(result, indent=1))
    stem.with_suffix(".md").write_text(markdown(meta, rows, table))
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    import timing_plots  # experiments/timing_plots.py

    timing_plots.linformer(result, stem.with_suffix(".png"))
    print(stem.with_suffix(".md").read_text())
    return result


if __name__ == "__main__":
    main()
