"""Reports of ``run.py``'s rows: the markdown tables (ratios against each section's first
contender), the summary rows for ``experiments/summarize.py`` and the fwd+bwd-vs-T plot."""

from __future__ import annotations

import importlib.util
from pathlib import Path

from seqjax import bench

HERE = Path(__file__).resolve().parent


def _sibling(name: str):
    spec = importlib.util.spec_from_file_location(f"accelerator_{name}", HERE / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def markdown(rows) -> str:
    out = []
    for section in ("dense", "sparse", "efficient"):
        sec = [r for r in rows if r["section"] == section]
        if not sec:
            continue
        names = list(sec[0]["seconds"])
        base = names[0]
        out.append(f"\n### {section} (fwd+bwd ms; ratio = {base} / contender)\n")
        out.append("| T | B | causal | " + " | ".join(names) + " |")
        out.append("|---" * (3 + len(names)) + "|")
        for r in sec:
            cells = []
            for n in names:
                v = r["seconds"].get(n)
                if isinstance(v, float):
                    ratio = r["seconds"][base] / v if isinstance(r["seconds"][base], float) else 0
                    cells.append(f"{v * 1e3:.2f} ({ratio:.2f}x)")
                else:
                    cells.append(str(v)[:40])
            out.append(
                f"| {r['T']} | {r['B']} | {r.get('causal', '')} | " + " | ".join(cells) + " |"
            )
        notes = {n: v for r in sec for n, v in r.get("notes", {}).items()}
        out += [f"- {n}: {v}" for n, v in notes.items()]
    tiles = [r for r in rows if r["section"] == "tiles"]
    if tiles:
        out.append("\n### tiles (causal fwd+bwd ms; ratio = the estimate's choice / contender)\n")
        for r in tiles:
            base = r["seconds"][next(iter(r["seconds"]))]
            cells = [
                f"{n} {v * 1e3:.2f} ({base / v:.2f}x)"
                if isinstance(v, float) and isinstance(base, float) else f"{n} {str(v)[:40]}"
                for n, v in r["seconds"].items()
            ]  # fmt: skip
            out.append(f"- T={r['T']} {r['dtype']} D={r['head_dim']} (planned {r['planned']}, "
                       f"budget {r['budget']} B): " + "; ".join(cells))  # fmt: skip
    for r in rows:
        if r["section"] == "train":
            out.append(_sibling("train_bench").markdown(r))
    return "\n".join(out) + "\n"


def summary_rows(rows, device: str) -> list[dict]:
    """Rows for ``experiments/summarize.py`` against the issue's targets and the paper."""
    out = []

    def sec(name):
        return [r for r in rows if r["section"] == name]

    for r in sec("dense"):
        fused, auto = r["seconds"].get("fused"), r["seconds"].get("auto")
        if isinstance(fused, float) and isinstance(auto, float):
            out.append(dict(
                study=f"dense fwd+bwd, {device}", paper_figure=f"T={r['T']}, causal={r['causal']}",
                paper="target >= 0.9x the fused kernel", ours=f"{fused / auto:.2f}x",
                ratio=None, note="seqjax auto vs the vendor kernel, interleaved",
            ))  # fmt: skip
    for r in sec("sparse"):
        base = r["seconds"].get("fused_dense")
        for kind, paper in (("strided", 3.7), ("fixed", 2.4)):
            kernel = next((v for n, v in r["seconds"].items()
                           if n.startswith(kind) and "blocksparse" not in n), None)  # fmt: skip
            if isinstance(base, float) and isinstance(kernel, float):
                out.append(dict(
                    study=f"Sparse Transformer {kind} vs dense, {device}",
                    paper_figure=f"Child et al. Table 2 speed-up, T={r['T']}",
                    paper=f"{paper}x (vs their dense kernel, T=12,288)",
                    ours=f"{base / kernel:.2f}x", ratio=None,
                    note="fwd+bwd vs the fused dense kernel, l=128, c=32, interleaved",
                ))  # fmt: skip
    for r in sec("efficient"):
        s = r["seconds"]
        base = s.get("fused_dense_causal")
        for name in ("performer", "linear"):
            if isinstance(base, float) and isinstance(s.get(name), float):
                out.append(dict(
                    study=f"causal {name} (chunked) vs dense causal, {device}",
                    paper_figure=f"T={r['T']}", ours=f"{base / s[name]:.2f}x", ratio=None,
                    paper="target > 1x at 16K, >= 3x at 64K (issue 37)",
                    note="fwd+bwd vs the fused dense causal kernel, 8 x 64, interleaved",
                ))  # fmt: skip
    for r in sec("train"):
        if r.get("mfu"):
            out.append(dict(
                study=f"GPT-2-small-class training, {device}", paper_figure="MFU, bf16",
                paper="target >= 45%", ours=f"{100 * r['mfu']:.1f}%", ratio=None,
                note=f"{r['tokens_per_s']:,.0f} tokens/s, B={r['B']}, T={r['T']}",
            ))  # fmt: skip
        s = r.get("seconds", {})
        if isinstance(s.get("seqjax"), float) and isinstance(s.get("torch_compile"), float):
            out.append(dict(
                study=f"GPT-2-small-class training vs torch.compile, {device}",
                paper_figure="step time ratio", paper="target > 1x (issue 37)",
                ours=f"{s['torch_compile'] / s['seqjax']:.2f}x", ratio=None,
                note="torch.compile time / seqjax time, same process, interleaved",
            ))  # fmt: skip
    return out


def plot(rows, path):
    """fwd+bwd time against T for every contender (dense, causal; and sparse)."""
    series = {}
    for r in rows:
        if r["section"] == "dense" and r["causal"] or r["section"] == "sparse":
            for name, v in r["seconds"].items():
                label = f"{r['section']}: {name}"
                xs, ys = series.setdefault(label, ([], []))
                xs.append(r["T"])
                ys.append(v * 1e3 if isinstance(v, float) else None)
    bench.plot_lines(path, series, xlabel="sequence length T", ylabel="fwd+bwd ms",
                     title="causal attention, fwd+bwd (interleaved medians)")  # fmt: skip
