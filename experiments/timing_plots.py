"""Plots of the timing studies, drawn from their results payloads (the JSON their scripts
wrote), so ``python experiments/replot.py`` redraws them without measuring.

Every plot's title names the study, the scale (model size, batch, lengths, repeats) and what
is timed; the paper's values are drawn where the study's table has them (black crosses);
axes carry units; a red "measured under load" or grey "load not recorded" line comes from
``plotting.mark_timing``.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import plotting  # noqa: E402  (experiments/plotting.py)

PAPER_STYLE = dict(color="black", marker="x", ls=":", ms=7)


def _k(n: int) -> str:
    return f"{n // 1024}K" if n >= 1024 and n % 1024 == 0 else str(n)


def _span(lengths) -> str:
    lengths = sorted(set(lengths))
    return f"T={_k(lengths[0])}..{_k(lengths[-1])}" if len(lengths) > 1 else f"T={lengths[0]}"


def _finish(fig, ax, payload, path, *, title, xlabel, ylabel, logx=True, logy=True, mark=True):
    if logx:
        ax.set_xscale("log", base=2)
    if logy:
        ax.set_yscale("log")
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title, fontsize=8.5)
    ax.grid(True, which="both", alpha=0.3)
    handles, labels = ax.get_legend_handles_labels()
    if handles:
        unique = dict(zip(labels, handles))  # one entry per label
        ax.legend(list(unique.values()), list(unique.keys()), fontsize=6.5)
    if mark:  # a compiled program's peak memory does not depend on the machine's load
        plotting.mark_timing(fig, payload)
    fig.tight_layout(rect=(0, 0.03, 1, 1))
    plotting.save(fig, path)


def dense(payload: dict, out, stem: str) -> None:
    """``<stem>_ms.png`` / ``<stem>_mib.png``: reference vs chunked dense attention
    (``experiments/dense_attention``); the time plot states the issue's 4K speed-up goals."""
    plt = plotting.pyplot()
    rows = payload["rows"]
    heads = {"smoke": 2}.get(payload.get("scale"), 8)
    repeats = {"smoke": 1, "cpu": 3, "full": 10}.get(payload.get("scale"), "?")
    goals = "; ".join(
        f"{r['study'].rsplit(', ', 1)[-1]}: {r['ours']}x ({r['paper_figure']})"
        for r in payload.get("summary") or []
    )
    for metric, ylabel in (("ms", "forward+backward ms (median)"), ("mib", "compiled peak MiB")):
        fig, ax = plt.subplots(figsize=(6.8, 4.6))
        for impl in ("reference", "chunked"):
            for causal in (False, True):
                pts = [
                    (r["seq"], r[f"{impl}_{metric}"])
                    for r in rows
                    if r["causal"] == causal and r.get(f"{impl}_{metric}") is not None
                ]
                if pts:
                    label = f"{impl}{', causal' if causal else ''}"
                    ax.plot(*zip(*pts), marker="o", ls="--" if causal else "-", label=label)
        title = (
            f"Dense attention, reference vs chunked ({payload.get('scale')} scale)\n"
            f"batch 1, {heads} heads x 64, float32, {_span([r['seq'] for r in rows])}, "
            + (f"median of {repeats}" if metric == "ms" else "XLA's compiled peak")
        )
        if metric == "ms" and goals:
            title += f"\nspeed-up at 4K: {goals}"
        _finish(
            fig,
            ax,
            payload,
            Path(out) / f"{stem}_{metric}.png",
            title=title,
            xlabel="sequence length T (tokens)",
            ylabel=ylabel,
            mark=metric == "ms",
        )


def linformer(payload: dict, path) -> None:
    """Linformer / dense time and memory ratios against n, with Wang et al. (2020) Table 3
    (speed-up; memory saved at k=128) as black crosses (``experiments/linformer``)."""
    plt = plotting.pyplot()
    meta, table = payload["meta"], payload["ratios"]
    fig, (ax_t, ax_m) = plt.subplots(1, 2, figsize=(11, 4.6))
    ks = sorted({e["k"] for e in table})
    for i, k in enumerate(ks):
        es = [e for e in table if e["k"] == k]
        for key, style, label in (
            ("speedup_vs_reference", "-o", "vs reference"),
            ("speedup_vs_chunked", "--s", "vs chunked"),
        ):
            pts = [(e["n"], e[key]) for e in es if e[key] is not None]
            if pts:
                ax_t.plot(*zip(*pts), style, color=f"C{i}", label=f"k={k} {label}", ms=4)
        paper = [(e["n"], e["paper_speedup"]) for e in es if e.get("paper_speedup")]
        if paper:
            ax_t.plot(*zip(*paper), **{**PAPER_STYLE, "color": f"C{i}"}, label=f"k={k} paper")
        pts = [(e["n"], e["memory_vs_reference"]) for e in es if e["memory_vs_reference"]]
        ax_m.plot(*zip(*pts), "-o", color=f"C{i}", label=f"k={k} vs reference", ms=4)
    paper_m = sorted((e["n"], e["paper_memory"]) for e in table if e.get("paper_memory"))
    if paper_m:
        ax_m.plot(*zip(*paper_m), **PAPER_STYLE, label="paper (Table 3), k=128")
    for ax, what in ((ax_t, "time speed-up"), (ax_m, "peak memory saved")):
        ax.set_xscale("log", base=2)
        ax.set_yscale("log", base=2)
        ax.set_xlabel("sequence length n (tokens)")
        ax.set_ylabel(f"dense / Linformer, {what} (x)")
        ax.grid(True, which="both", alpha=0.3)
        ax.axhline(1.0, color="gray", lw=0.8)
    ax_t.set_title("inference time, one encoder layer (solid: vs reference)", fontsize=8)
    ax_m.set_title("compiled peak memory vs dense reference", fontsize=8)
    ax_t.legend(fontsize=6, ncol=2)
    ax_m.legend(fontsize=6)
    fig.suptitle(
        f"Linformer vs dense, Wang et al. 2020 Table 3 ({meta['scale']} scale): one layer, "
        f"d={meta.get('d_model')}, {meta.get('num_heads')} heads, batch {meta.get('batch')}, "
        f"{_span([e['n'] for e in table])}"
        + (
            ", crosses: paper"
            if any(e.get("paper_speedup") for e in table)
            else ", no paper values"
        ),
        fontsize=9,
    )
    plotting.mark_timing(fig, payload)
    fig.tight_layout(rect=(0, 0.03, 1, 1))
    plotting.save(fig, path)


# Our variant -> its row in LRA Table 2 (Tay et al. 2021).
LRA_PAPER_NAMES = {
    "dense-reference": "Transformer",
    "linformer": "Linformer",
    "lsh": "Reformer",
    "performer": "Performer",
}
LRA_PAPER_T = [1024, 2048, 3072, 4096]


def _lra_title(payload: dict, what: str) -> str:
    m = payload["model"]
    timed = f", median of {m['repeats']}" if any("step_s" in r for r in payload["rows"]) else ""
    return (
        f"LRA Text train step, {what} ({payload.get('scale')} scale)\n"
        f"{m['num_layers']} layers, d={m['d_model']}, {m['num_heads']} heads, batch "
        f"{m['batch']}, {_span(m['lengths'])}{timed}; crosses: LRA Table 2"
        " (TPU, batch 32)"
    )


def lra_speed(payload: dict, path) -> None:
    """Train-step speed-up over the dense reference against T, one line per variant, with
    LRA Table 2's speed-ups over the Transformer (``experiments/lra_speed``)."""
    plt = plotting.pyplot()
    rows, paper = payload["rows"], payload.get("paper") or {}
    base = paper.get("Transformer", {}).get("steps")
    fig, ax = plt.subplots(figsize=(7.2, 4.8))
    variants = list(dict.fromkeys(r["variant"] for r in rows))
    for i, v in enumerate(variants):
        pts = [(r["T"], r.get("speedup_vs_reference")) for r in rows if r["variant"] == v]
        pts = [(t, s) for t, s in pts if s]
        if pts:
            ax.plot(*zip(*pts), marker="o", color=f"C{i}", label=v)
        name = LRA_PAPER_NAMES.get(v)
        if name and name != "Transformer" and base and name in paper:
            ys = [s / b for s, b in zip(paper[name]["steps"], base)]
            ax.plot(LRA_PAPER_T, ys, **{**PAPER_STYLE, "color": f"C{i}"}, label=f"{name} (paper)")
    ax.axhline(1.0, color="gray", lw=0.8)
    skipped = sorted({f"{r['variant']} at {_k(r['T'])}" for r in rows if r["status"] != "ok"})
    title = _lra_title(payload, "speed-up over dense reference")
    if skipped:
        title += "\nnot timed (does not fit): " + ", ".join(skipped)
    _finish(
        fig,
        ax,
        payload,
        path,
        title=title,
        xlabel="sequence length T (tokens)",
        ylabel="steps/s / dense reference steps/s (x)",
    )


def lra_memory(payload: dict, path) -> None:
    """Compiled peak memory per variant at one length, as a fraction of the dense reference,
    with LRA Table 2's memory / Transformer at 4K (``--memory-only``)."""
    plt = plotting.pyplot()
    rows, paper = payload["rows"], payload.get("paper") or {}
    fig, ax = plt.subplots(figsize=(7.2, 4.6))
    names = [r["variant"] for r in rows]
    ax.bar(range(len(rows)), [r["peak_gb"] for r in rows], color="C0", label="ours, peak GB")
    for i, r in enumerate(rows):
        ax.text(
            i,
            r["peak_gb"],
            f"{r['memory_vs_reference']:.2f}x",
            ha="center",
            fontsize=7,
            va="bottom",
        )
        name = LRA_PAPER_NAMES.get(r["variant"])
        tr = paper.get("Transformer", {}).get("gb")
        if name in paper and tr:
            ref = rows[0]["peak_gb"] * paper[name]["gb"][-1] / tr[-1]
            ax.plot(
                [i],
                [ref],
                **{**PAPER_STYLE, "ls": "none"},
                label="paper ratio x our reference" if i == 0 or name != "Transformer" else None,
            )
    ax.set_xticks(range(len(rows)), names, rotation=20, fontsize=7)
    budget = payload.get("memory_budget_gb")
    if budget:
        ax.axhline(budget, color="firebrick", ls="--", lw=1, label=f"budget {budget} GB")
    _finish(
        fig,
        ax,
        payload,
        path,
        title=_lra_title(payload, "compiled peak memory (labels: / dense reference)")
        + f"\n{sum(r['status'] == 'does not fit' for r in rows)} of {len(rows)} variants "
        "exceed the budget (compiled, not run)",
        xlabel="variant",
        ylabel="compiled peak memory (GB)",
        logx=False,
        mark=False,
    )


def sparse_transformer(payload: dict, path) -> None:
    """Fwd+bwd time and predicted peak memory per mechanism (``experiments/sparse_transformer``)."""
    plt = plotting.pyplot()
    rows, meta = payload["rows"], payload["machine"]
    fig, (ax_t, ax_m) = plt.subplots(1, 2, figsize=(10.5, 4.4))
    methods = list(dict.fromkeys((r["mechanism"], r["implementation"]) for r in rows))
    for name, impl in methods:
        sel = [r for r in rows if (r["mechanism"], r["implementation"]) == (name, impl)]
        timed = [r for r in sel if r.get("median_s") is not None]
        if timed:
            ys = [r["median_s"] for r in timed]
            spread = [  # the repeats' range around the median
                [y - min(r.get("times_s") or [y]) for y, r in zip(ys, timed)],
                [max(r.get("times_s") or [y]) - y for y, r in zip(ys, timed)],
            ]
            xs = [r["seq_len"] for r in timed]
            ax_t.errorbar(xs, ys, yerr=spread, fmt="o-", capsize=2, label=f"{name} {impl}")
        mem = [r for r in sel if r.get("predicted_gb") is not None]
        ax_m.plot(
            [r["seq_len"] for r in mem],
            [r["predicted_gb"] for r in mem],
            "o-",
            label=f"{name} {impl}",
        )
    for ax, ylabel in ((ax_t, "fwd+bwd seconds (median)"), (ax_m, "predicted peak GB")):
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("sequence length T (tokens; stride ≈ sqrt(T))")
        ax.set_ylabel(ylabel)
        ax.grid(alpha=0.3)
    ax_m.axhline(meta["max_gb"], color="gray", ls="--", lw=1, label=f"budget {meta['max_gb']} GB")
    ax_t.legend(fontsize=7)
    ax_m.legend(fontsize=7)
    repeats = max((len(r.get("times_s") or []) for r in rows), default=0)
    fig.suptitle(
        f"Sparse Transformer attention vs dense, one layer ({meta.get('scale')} scale): "
        f"batch 1, {meta['heads']} heads x {meta['head_dim']}, "
        f"{_span([r['seq_len'] for r in rows])}, median of {repeats} (bars: range); "
        "Child et al. 2019 gives no comparable timing",
        fontsize=8.5,
    )
    plotting.mark_timing(fig, payload)
    fig.tight_layout(rect=(0, 0.03, 1, 1))
    plotting.save(fig, path)


def train_throughput(payload: dict, path) -> None:
    """Training tokens/s per variant, jitted step and end to end
    (``experiments/train_throughput``)."""
    import numpy as np

    plt = plotting.pyplot()
    rows = payload["variants"]
    names = [n for n, r in rows.items() if r["fits"]]
    fig, ax = plt.subplots(figsize=(6.4, 3.8))
    x = np.arange(len(names))
    ax.bar(x - 0.2, [rows[n]["tokens_per_s"] for n in names], 0.4, label="jitted step")
    ax.bar(
        x + 0.2,
        [rows[n]["end_to_end_tokens_per_s"] for n in names],
        0.4,
        label="end to end (data + step)",
    )
    ax.set_xticks(x, names)
    ax.set_xlabel("variant")
    ax.set_ylabel("training tokens / s")
    first = rows[names[0]] if names else {}
    ax.set_title(
        f"char_lm training throughput ({payload.get('scale')} scale, "
        f"{payload['machine'].get('device_kind')})\n{first.get('params', 0):,} parameters, "
        f"{first.get('tokens_per_step', 0):,} tokens per step, {payload.get('steps')} steps "
        "timed",
        fontsize=8.5,
    )
    ax.legend(fontsize=7, loc="lower right")
    plotting.mark_timing(fig, payload)
    fig.tight_layout(rect=(0, 0.03, 1, 1))
    plotting.save(fig, path)


def reformer_growth(payload: dict, path) -> None:
    """LSH time at 4K and 64K tokens per sequence (fixed tokens per batch), one-argmax vs
    factorized buckets, min and spread of the repeats (``experiments/reformer/growth.py``)."""
    plt = plotting.pyplot()
    sc, rows = payload["config"], payload["rows"]
    t0, t1 = sc["lengths"]
    fig, ax = plt.subplots(figsize=(6.6, 4.4))
    for r in rows:
        key = "factorized" if r["hashing"] == "factorized" else "flat"
        ys = [r[f"ms_T{t0}"], r[f"ms_T{t1}"]]
        times = [payload["times_s"].get(f"T{t}_{key}") or [] for t in (t0, t1)]
        hi = [1e3 * max(ts) - y if ts else 0.0 for ts, y in zip(times, ys)]
        ax.errorbar(
            [t0, t1],
            ys,
            yerr=[[0.0, 0.0], hi],
            marker="o",
            capsize=3,
            label=f"{r['hashing']} ({r['growth']:.2f}x)",
        )
    ax.plot(
        [t0, t1],
        [rows[0][f"ms_T{t0}"]] * 2,
        color="gray",
        ls=":",
        lw=1,
        label="flat in T (Kitaev et al. 2020, Fig. 5)",
    )
    n = max((len(v) for v in payload["times_s"].values()), default=0)
    _finish(
        fig,
        ax,
        payload,
        path,
        title=(
            f"Reformer LSH-{sc['hashes']} time growth with T ({payload.get('scale')} scale)\n"
            f"{sc['tokens']:,} tokens per batch, dim {sc['dim']}, chunk {sc['chunk']}, "
            f"fwd+bwd, min of {n} (bars: up to max)"
        ),
        xlabel="sequence length T (tokens; fixed tokens per batch)",
        ylabel="forward+backward ms",
        logy=False,
    )


def transformer_xl(payload: dict, path) -> None:
    """Evaluation speed-up of Transformer-XL over vanilla against attention length, with
    Dai et al. (2019) Table 9 (``experiments/transformer_xl/eval_speed.py``)."""
    plt = plotting.pyplot()
    rows, s = payload["rows"], payload["scale"]
    fig, ax = plt.subplots(figsize=(7.2, 4.8))
    for i, tgt in enumerate(s["tgts"]):
        sel = [r for r in rows if r["tgt_len"] == (r["attn_len"] // 2 if tgt == "half" else tgt)]
        seg = "tgt = L/2" if tgt == "half" else f"tgt = {tgt}"
        for impl, ls in (("reference", "-"), ("chunked", "--")):
            ys = [r[f"speedup_vs_{impl}"] for r in sel]
            label = f"{seg}, vs {impl} vanilla"
            ax.plot([r["attn_len"] for r in sel], ys, marker="o", ls=ls, color=f"C{i}", label=label)
        ys = [r.get("xl_reference_speedup_vs_chunked") for r in sel]
        if all(y is not None for y in ys):
            label = f"{seg}, materialized relative, vs chunked"
            ax.plot(
                [r["attn_len"] for r in sel], ys, marker="s", ls=":", color=f"C{i}", label=label
            )
    paper = sorted({(r["attn_len"], r["paper_speedup"]) for r in rows if r.get("paper_speedup")})
    if paper:
        ax.plot(*zip(*paper), **PAPER_STYLE, label="paper (Table 9)")
    _finish(
        fig,
        ax,
        payload,
        path,
        title=(
            f"Transformer-XL evaluation speed-up over vanilla, Dai et al. 2019 Table 9\n"
            f"{s['layers']} layers, d={s['d_model']}, {s['heads']} heads, attention length "
            f"L={min(s['lengths'])}..{max(s['lengths'])}, median of {s['repeats']}"
        ),
        xlabel="attention length L (tokens)",
        ylabel="vanilla ms/token / XL ms/token (x)",
        logx=False,
    )
