"""LRA speed and memory: Tay et al. (2020) Table 2 on this machine.

Times one full jitted training step (forward, backward, AdamW update) of the LRA byte-level
Text classifier (``TransformerClassifier``: byte vocabulary 257 with 0 = padding, mean
pooling, 2 classes) for every seqjax attention mechanism at sequence lengths 1K, 2K, 3K, 4K
(and 8K, 16K where they fit), and reports steps/s, the compiled program's peak memory, and
the ratios to dense ``reference`` (materialized logits: the paper's Transformer) and to
dense ``chunked`` (FlashAttention-style) measured side by side in the same run: all
variants of one length are timed interleaved (``bench.interleave``, medians), and the table
says whether other processes loaded the machine meanwhile.

* Memory is XLA's prediction from buffer assignment (``compiled.memory_analysis()``), so a
  configuration above ``--memory-budget-gb`` is compiled and reported as "does not fit"
  without running.
* A configuration whose predicted step time (quadratic extrapolation from its previous
  length) exceeds ``--max-step-seconds`` is compiled for its memory but not timed
  ("skipped: slow").

Usage:
    python experiments/lra_speed/run.py --scale smoke     # seconds (tests run this)
    python experiments/lra_speed/run.py                   # --scale cpu (batch 1)
    python experiments/lra_speed/run.py --scale full      # LRA Text model, batch 32

Writes ``results/lra_speed_<scale>.{json,md,png}`` beside this file.

Legend: B batch, T sequence length, E model width, C classes.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import optax

from seqjax import attention as attention_lib
from seqjax import bench
from seqjax.models import layers
from seqjax.models.transformer import TransformerClassifier, TransformerConfig

HERE = Path(__file__).resolve().parent
GB = 1e9

# Tay et al. 2020 (LRA), Table 2: steps/s at 1K..4K and GB at 1K / 4K, batch 32,
# TPU v3 4x4. "Transformer" is the dense baseline the ratios are taken against.
PAPER = {
    "Transformer": {"steps": (8.1, 4.9, 2.3, 1.4), "gb": (0.85, 9.48)},
    "Linformer": {"steps": (9.3, 9.1, 8.5, 7.7), "gb": (0.37, 0.99)},
    "Reformer": {"steps": (4.4, 2.2, 1.5, 1.1), "gb": (0.48, 2.28)},
    "Performer": {"steps": (9.5, 9.4, 8.7, 8.0), "gb": (0.37, 1.06)},
}
PAPER_LENGTHS = (1024, 2048, 3072, 4096)
PAPER_VARIANTS = {"Linformer": "linformer", "Reformer": "lsh", "Performer": "performer"}
# Smoke: the code path with the two quickest compiles (sparse and LSH take ~10 s each).
SMOKE_VARIANTS = ["dense-reference", "linformer"]
GOAL_SPEEDUP, GOAL_MEMORY = 5.7, 1 / 9  # best paper ratio at 4K (Performer); memory 1/9


@dataclasses.dataclass(frozen=True)
class Scale:
    """Model and grid of one benchmark size."""

    num_layers: int
    d_model: int
    num_heads: int
    d_ff: int
    batch: int
    lengths: tuple[int, ...]
    repeats: int
    linformer_k: int
    lsh_chunk: int
    performer_features: int = 256  # LRA's Performer rows: 256 random features
    local_block: int = 128  # block-local attention: block length
    window: int = 128  # Longformer/BigBird rows: sliding window (positions each side)
    block: int = 64  # BigBird's block size (Zaheer et al. 2020, App. D: 64)


SCALES = {
    "smoke": Scale(
        1,
        32,
        2,
        64,
        1,
        (256,),
        1,
        linformer_k=32,
        lsh_chunk=32,
        performer_features=32,
        local_block=32,
        window=32,
        block=32,
    ),  # fmt: skip
    # The LRA Text model (4 layers, E = 256, 4 heads, FF 1024) at batch 1 on 2 cores.
    # Three interleaved rounds after a warm-up call (medians): a step of dense reference at
    # 4K takes about 20 s here.
    "cpu": Scale(4, 256, 4, 1024, 1, (1024, 2048, 3072, 4096, 8192, 16384), 3, 256, 128),
    # LRA Text exactly (Table 2: batch 32) for an accelerator.
    "full": Scale(4, 256, 4, 1024, 32, (1024, 2048, 3072, 4096, 8192, 16384), 10, 256, 128),
}


def variants(scale: Scale, t: int) -> dict[str, tuple[str, dict]]:
    """name -> (mechanism, options) at length t (every long-range mechanism of seqjax)."""
    return {
        "dense-reference": ("dense", {"implementation": "reference"}),
        "dense-chunked": ("dense", {"implementation": "chunked"}),
        "sparse_fixed": ("sparse_fixed", {}),  # stride = power of two nearest sqrt(T)
        "sparse_strided": ("sparse_strided", {}),
        "linformer": ("linformer", {"k": scale.linformer_k, "max_len": t}),
        "lsh": ("lsh", {"n_hashes": 2, "chunk_len": scale.lsh_chunk}),
        # The LRA baselines of Tay et al. 2020, Table 1-2 (issue 27).
        "performer": ("performer", {"num_features": scale.performer_features}),
        "linear": ("linear", {}),
        "local": ("local", {"block_len": scale.local_block}),
        # Longformer-style: sliding window + the first block of tokens global (a CLS-like
        # prefix; Beltagy et al. 2020, §3.1); BigBird-style: window, global and random
        # blocks (Zaheer et al. 2020, App. D: 3 window, 2 global, 3 random blocks of 64).
        "longformer": (
            "flex",
            {"pattern": "global_tokens", "window": scale.window, "num_global": scale.block},
        ),
        "bigbird": (
            "flex",
            {
                "pattern": "bigbird",
                "window": 1,
                "num_global": 2,
                "num_random": 3,
                "block_size": scale.block,
            },
        ),  # fmt: skip
    }


def make_step(scale: Scale, t: int, mechanism: str, options: dict, remat: bool = False):
    """A jitted-to-be ``step(state, tokens, labels) -> (state, loss)`` and its init state.

    ``remat``: rematerialize every block in the backward pass (only the block inputs are
    kept between the forward and the backward pass).
    """
    cfg = TransformerConfig(
        vocab_size=257,
        num_layers=scale.num_layers,
        num_heads=scale.num_heads,
        d_model=scale.d_model,
        d_ff=scale.d_ff,
        max_len=t,
        attention=((mechanism, layers.freeze_options(options)),),
        causal=False,
        num_classes=2,
        pooling="mean",
        pad_id=0,
        remat=remat,
    )
    model = TransformerClassifier(cfg)
    tx = optax.adamw(5e-4, weight_decay=0.01)
    rng = np.random.default_rng(0)
    tokens_BT = jnp.asarray(rng.integers(1, 257, (scale.batch, t)), jnp.int32)
    labels_B = jnp.asarray(rng.integers(0, 2, (scale.batch,)), jnp.int32)
    params = jax.jit(model.init)(jax.random.key(0), tokens_BT[:1])["params"]
    state = {"params": params, "opt": tx.init(params)}

    def step(state, tokens_BT, labels_B):
        def loss_fn(p):
            logits_BC = model.apply({"params": p}, tokens_BT)
            return optax.softmax_cross_entropy_with_integer_labels(logits_BC, labels_B).mean()

        loss, grads = jax.value_and_grad(loss_fn)(state["params"])
        updates, opt = tx.update(grads, state["opt"], state["params"])
        return {"params": optax.apply_updates(state["params"], updates), "opt": opt}, loss

    return step, (state, tokens_BT, labels_B)


def prepare(
    scale, t, name, mech, opts, *, max_bytes, predicted_s, max_step_s, remat=False
) -> tuple[dict, object]:
    """Compiles one variant: ``(row, call)`` where ``call()`` runs one step, or None when the
    variant is not timed (does not fit, memory only, predicted too slow)."""
    row = {"variant": name, "T": t, "remat": remat}
    step, args = make_step(scale, t, mech, opts, remat=remat)
    compiled, compile_s = bench.compile_fn(step, *args)
    mem = bench.compiled_memory(compiled)
    row["peak_gb"] = mem["peak_bytes"] / GB if mem else None
    row["compile_s"] = compile_s
    if mem is not None and mem["peak_bytes"] > max_bytes:
        row["status"] = "does not fit"
        return row, None
    if max_step_s <= 0:  # --memory-only
        row["status"] = "compiled (memory only)"
        return row, None
    if predicted_s is not None and predicted_s > max_step_s:
        row["status"] = f"skipped: slow (~{predicted_s:.0f} s/step predicted)"
        return row, None
    return row, lambda: compiled(*args)


def time_length(prepared: dict[str, tuple[dict, object]], *, repeats: int, warmup: int):
    """Times the variants of one length interleaved (``bench.interleave``: A B C A B C ...,
    medians), so a change in machine load hits all of them alike; fills their rows."""
    calls = {name: call for name, (_, call) in prepared.items() if call is not None}
    if not calls:
        return
    res = bench.interleave(calls, rounds=repeats, warmup=warmup)
    for name in calls:
        row = prepared[name][0]
        row["step_s"] = res["timing"][name]["median_s"]
        row["steps_per_s"] = 1.0 / row["step_s"]
        row["rounds"] = repeats
        row["status"] = "ok"
        row["noisy"] = res["noisy"]
        row["load"] = res["load"]


def main(argv=None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--scale", default="cpu", help=f"one of {tuple(SCALES)}")
    p.add_argument("--out", default=str(HERE / "results"), help="results folder")
    p.add_argument("--mechanisms", default=None, help="comma-separated variants (default all)")
    p.add_argument("--lengths", default=None, help="comma-separated T (default: the scale's)")
    p.add_argument("--warmup", type=int, default=1, help="untimed calls before timing")
    p.add_argument("--memory-budget-gb", type=float, default=8.0)
    p.add_argument("--batch", type=int, default=0, help="override the scale's batch (0: keep)")
    p.add_argument(
        "--memory-only",
        action="store_true",
        help="compile every configuration for its predicted memory, time nothing",
    )
    p.add_argument("--max-step-seconds", type=float, default=100.0)
    p.add_argument(
        "--remat",
        action="store_true",
        help="rematerialize every block in the backward pass (all mechanisms alike)",
    )
    args = p.parse_args(argv)
    if args.scale not in SCALES:
        raise ValueError(f"--scale={args.scale!r} is not one of {tuple(SCALES)}")
    scale = SCALES[args.scale]
    if args.batch:
        scale = dataclasses.replace(scale, batch=args.batch)
    if args.memory_only:
        args.max_step_seconds = 0.0
    if args.lengths:
        scale = dataclasses.replace(scale, lengths=tuple(int(x) for x in args.lengths.split(",")))
    all_names = list(variants(scale, scale.lengths[0]))
    default = SMOKE_VARIANTS if args.scale == "smoke" else all_names
    wanted = args.mechanisms.split(",") if args.mechanisms else default
    for w in wanted:
        if w not in all_names:
            raise ValueError(f"--mechanisms entry {w!r} is not one of {all_names}")
    registered = attention_lib.names()
    rows, last = [], {}
    for t in scale.lengths:
        prepared = {}
        for name, (mech, opts) in variants(scale, t).items():
            if name not in wanted:
                continue
            if mech not in registered:
                print(f"skipping {name}: mechanism {mech!r} is not registered")
                continue
            pred = None
            if name in last:  # extrapolation: T^2 for dense reference, T^1.5 for the others
                t0, s0 = last[name]
                pred = s0 * (t / t0) ** (2.0 if name == "dense-reference" else 1.5)
            prepared[name] = prepare(
                scale, t, name, mech, opts,
                max_bytes=int(args.memory_budget_gb * GB),
                predicted_s=pred, max_step_s=args.max_step_seconds, remat=args.remat,
            )  # fmt: skip
        time_length(prepared, repeats=scale.repeats, warmup=args.warmup)
        for name, (row, _) in prepared.items():
            if "step_s" in row:
                last[name] = (t, row["step_s"])
            rows.append(row)
            print(f"T={t:6d} {name:16s} {row['status']:14s} "
                  f"{row.get('steps_per_s') or 0:8.3f} steps/s  {row['peak_gb'] or 0:7.3f} GB",
                  flush=True)  # fmt: skip
    add_ratios(rows)
    payload = {
        "scale": args.scale,
        "model": dataclasses.asdict(scale),
        "memory_budget_gb": args.memory_budget_gb,
        "remat": args.remat,
        "warmup_calls": args.warmup,
        "loadavg": os.getloadavg(),
        "paper": PAPER,
        "rows": rows,
        "summary": (
            []
            if args.scale == "smoke"
            else summary(rows, args.memory_only, scale.batch, args.remat)
        ),
    }
    md = markdown(rows, args.scale, scale)
    stem = f"lra_{'memory' if args.memory_only else 'speed'}_{args.scale}"
    if args.batch:
        stem += f"_b{args.batch}"
    if args.remat:
        stem += "_remat"
    bench.write_results(args.out, stem, payload, md)
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    import timing_plots  # experiments/timing_plots.py

    plot = timing_plots.lra_memory if args.memory_only else timing_plots.lra_speed
    plot(payload, Path(args.out) / f"{stem}.png")
    print(md)
    return payload


def add_ratios(rows) -> None:
    """Speed-up and memory ratios to dense reference and dense chunked of the same T."""
    by = {(r["variant"], r["T"]): r for r in rows}
    for r in rows:
        for base in ("reference", "chunked"):
            b = by.get((f"dense-{base}", r["T"]))
            if b and b.get("step_s") and r.get("step_s"):
                r[f"speedup_vs_{base}"] = b["step_s"] / r["step_s"]
            if b and b.get("peak_gb") and r.get("peak_gb"):
                r[f"memory_vs_{base}"] = r["peak_gb"] / b["peak_gb"]


def best_at(rows, t: int):
    """The fastest non-dense mechanism at length t (all are exact or the paper's approx.)."""
    cands = [r for r in rows if r["T"] == t and not r["variant"].startswith("dense")]
    cands = [r for r in cands if r.get("speedup_vs_reference")]
    return max(cands, key=lambda r: r["speedup_vs_reference"], default=None)


def _summary_row(figure: str, paper: float, ours: float, digits: int = 2) -> dict:
    """One line of the experiments summary: ours beside the paper's value and their ratio."""
    return {"study": "lra_speed", "paper_figure": f"LRA Table 2, {figure}",
            "paper": round(paper, 3), "ours": round(ours, digits),
            "ratio": round(ours / paper, 2)}  # fmt: skip


def summary(rows, memory_only: bool = False, batch: int = 1, remat: bool = False) -> list[dict]:
    how = ", every block rematerialized" if remat else ""
    mem = 1.06 / 9.48  # Performer's memory / Transformer's at 4K
    at_4k = [r for r in rows if r["T"] == 4096]
    if memory_only:  # the memory ratio of every long-range mechanism at 4K
        return [
            _summary_row(f"memory / Transformer at 4K, batch {batch}{how} (ours: {r['variant']})",
                         mem, r["memory_vs_reference"], 3)
            for r in at_4k
            if r.get("memory_vs_reference") and r["variant"] != "dense-reference"
        ]  # fmt: skip
    out = []
    best = best_at(rows, 4096)
    if best:
        v = best["variant"]
        out.append(_summary_row(f"best speed-up at 4K (ours: {v})", GOAL_SPEEDUP,
                                best["speedup_vs_reference"]))  # fmt: skip
        out.append(_summary_row(f"memory vs Transformer at 4K (ours: {v})", mem,
                                best["memory_vs_reference"], 3))  # fmt: skip
    t_ref = PAPER["Transformer"]["steps"][-1]
    for paper_row, variant in PAPER_VARIANTS.items():  # Table 2's own rows, same run
        r = next((x for x in at_4k if x["variant"] == variant), None)
        if r and r.get("speedup_vs_reference"):
            want = round(PAPER[paper_row]["steps"][-1] / t_ref, 2)
            out.append(_summary_row(f"{paper_row} speed-up at 4K (ours: {variant})", want,
                                    r["speedup_vs_reference"]))  # fmt: skip
    return out


def markdown(rows, scale_name: str, scale: Scale) -> str:
    lengths = sorted({r["T"] for r in rows})
    names = list(dict.fromkeys(r["variant"] for r in rows))
    by = {(r["variant"], r["T"]): r for r in rows}

    def cell(r, key, fmt):
        if r is None:
            return "—"
        if r["status"] == "does not fit":
            return f"does not fit ({r['peak_gb']:.1f} GB)" if key == "peak_gb" else "does not fit"
        if r.get(key) is None:  # not timed ("slow"), or a ratio whose base did not run
            return "slow" if key == "steps_per_s" and r["status"] != "ok" else "—"
        return fmt.format(r[key])

    head = "| mechanism | " + " | ".join(f"{t // 1024}K" if t >= 1024 else str(t) for t in lengths)
    head += " |"
    sep = "|---|" + "---|" * len(lengths)
    rm = ", every block rematerialized" if rows and rows[0].get("remat") else ""
    parts = [f"# LRA Text train step ({scale_name}: {scale.num_layers} layers, E={scale.d_model}, "
             f"{scale.num_heads} heads, FF {scale.d_ff}, batch {scale.batch}{rm})\n"]  # fmt: skip
    for title, key, fmt in (
        ("steps/s", "steps_per_s", "{:.3g}"),
        ("speed-up vs dense reference", "speedup_vs_reference", "{:.2f}×"),
        ("speed-up vs dense chunked", "speedup_vs_chunked", "{:.2f}×"),
        ("peak memory (GB, XLA prediction)", "peak_gb", "{:.3f}"),
        ("memory / dense reference", "memory_vs_reference", "{:.3f}"),
    ):
        parts.append(f"\n## {title}\n\n{head}\n{sep}")
        for n in names:
            parts.append(f"| {n} | " + " | ".join(cell(by.get((n, t)), key, fmt) for t in lengths)
                         + " |")  # fmt: skip
    parts.append("\n## Paper (Tay et al. 2020, Table 2; TPU v3, batch 32)\n")
    parts.append(
        "| model | 1K | 2K | 3K | 4K | GB at 1K | GB at 4K |\n|---|---|---|---|---|---|---|"
    )
    for n, v in PAPER.items():
        parts.append(f"| {n} | " + " | ".join(map(str, v["steps"])) + " | "
                     + " | ".join(map(str, v["gb"])) + " |")  # fmt: skip
    best = best_at(rows, 4096)
    if best:
        parts.append(
            f"\nFastest long-range mechanism at 4K: **{best['variant']}**, "
            f"{best['speedup_vs_reference']:.2f}× dense reference (goal ≥ {GOAL_SPEEDUP}×) with "
            f"{best['memory_vs_reference']:.3f} of its memory (goal ≤ {GOAL_MEMORY:.3f})."
        )
    parts.append("\n## How it was timed\n")
    parts.append(
        "All variants of one length were timed interleaved (A B C ... A B C ..., "
        f"{scale.repeats} rounds after a warm-up call, medians):"
    )
    for t in lengths:
        timed = [r for r in rows if r["T"] == t and r.get("load")]
        if timed:
            load = timed[0]["load"]
            parts.append(
                f"* {t}: load average {load['loadavg_before']} before, {load['loadavg_after']} "
                f"after; other processes used {load['other_cores']} cores"
                + (" — **noisy**" if timed[0]["noisy"] else "")
            )
    parts.append(f"\nLoad average (1/5/15 min) at the end: {os.getloadavg()}.")
    return "\n".join(parts)


if __name__ == "__main__":
    sys.exit(0 if main() else 1)
