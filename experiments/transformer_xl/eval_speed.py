"""Transformer-XL evaluation speed vs a vanilla Transformer (Dai et al. 2019, Table 9).

The vanilla model (Al-Rfou et al. 2018) predicts each token with a full forward pass over
the last L tokens: one token per window of L. Transformer-XL processes a segment of
``tgt_len`` tokens per forward pass, attending to a cached memory of ``L - tgt_len``
earlier hidden states, so its attention length is also L. Both use the same model size;
per-token times are measured side by side in one run and their ratio is compared with the
paper's (363x at L = 800, 773x at 1,800, 1,409x at 2,800, 1,874x at 3,800).

    python experiments/transformer_xl/eval_speed.py               # cpu scale
    python experiments/transformer_xl/eval_speed.py --scale smoke
"""

from __future__ import annotations

import argparse
from pathlib import Path

import jax
import jax.numpy as jnp

from seqjax import bench
from seqjax.models import TransformerConfig, TransformerLM
from seqjax.models.transformer_xl import TransformerXL

PAPER = {800: 363, 1800: 773, 2800: 1409, 3800: 1874}
# XL segment lengths: an int, or "half" for tgt = mem = L / 2 (the paper's 24-layer setting
# of tgt = mem). The attention length L is mem + tgt in both: the last query of a segment
# sees L positions, the first sees mem.
SCALES = {
    "smoke": dict(lengths=[64, 128], layers=1, d_model=32, heads=2, tgts=[16], repeats=1),
    "cpu": dict(
        lengths=[800, 1800, 2800, 3800],
        layers=4,
        d_model=256,
        heads=4,
        tgts=[80, "half"],
        repeats=5,
    ),
    "full": dict(
        lengths=[800, 1800, 2800, 3800],
        layers=12,
        d_model=512,
        heads=8,
        tgts=[80, "half"],
        repeats=10,
    ),
}
VANILLA_IMPLS = ("reference", "chunked")


def vanilla_per_token(length: int, s: dict) -> dict[str, float]:
    """Seconds per predicted token of the vanilla model (one forward of the whole window),
    for each dense implementation: ``reference`` materializes the L x L logits as the
    Transformers of 2018-2019 did; ``chunked`` is FlashAttention-style (skips the masked
    half, never leaves cache-sized blocks)."""
    out = {}
    window = jnp.zeros((1, length), jnp.int32)
    for impl in VANILLA_IMPLS:
        cfg = TransformerConfig(
            **_common(length, s), attention=(("dense", (("implementation", impl),)),)
        )
        vanilla = TransformerLM(cfg)
        params = vanilla.init(jax.random.key(0), window)["params"]
        res = bench.benchmark(
            lambda p, x, m=vanilla: m.apply({"params": p}, x)[:, -1],
            params,
            window,
            repeats=s["repeats"],
        )
        out[impl] = res["timing"]["median_s"]
    return out


def xl_per_token(length: int, tgt: int, s: dict) -> float:
    """Seconds per token of Transformer-XL: one segment of ``tgt`` tokens over a full memory
    of ``length - tgt`` positions, divided by ``tgt``."""
    mem = length - tgt
    xl_opts = (("clamp_len", -1), ("mem_len", mem), ("same_length", False))
    cfg = TransformerConfig(
        **_common(length, s), positional="none", attention=(("relative", xl_opts),)
    )
    xl = TransformerXL(cfg, mem_len=mem)
    seg = jnp.zeros((1, tgt), jnp.int32)
    params = xl.init(jax.random.key(0), seg)["params"]
    memory = xl.init_memory(1)
    memory = (memory[0], jnp.ones_like(memory[1]))  # a full memory, as mid-stream
    res = bench.benchmark(
        lambda p, t, m: xl.apply({"params": p}, t, m), params, seg, memory, repeats=s["repeats"]
    )
    return res["timing"]["median_s"] / tgt


def _common(length: int, s: dict) -> dict:
    return dict(
        vocab_size=256,
        num_layers=s["layers"],
        d_model=s["d_model"],
        num_heads=s["heads"],
        max_len=length,
    )


def measure(length: int, s: dict) -> list[dict]:
    """One row per XL segment length, all against the same vanilla timings."""
    v = vanilla_per_token(length, s)
    rows = []
    for t in s["tgts"]:
        tgt = length // 2 if t == "half" else int(t)
        x_tok = xl_per_token(length, tgt, s)
        row = {"attn_len": length, "tgt_len": tgt, "mem_len": length - tgt}
        for impl in VANILLA_IMPLS:
            row[f"vanilla_{impl}_ms_per_token"] = v[impl] * 1e3
        row["xl_ms_per_token"] = x_tok * 1e3
        for impl in VANILLA_IMPLS:
            row[f"speedup_vs_{impl}"] = v[impl] / x_tok
        row["paper_speedup"] = PAPER.get(length)
        rows.append(row)
    return rows


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scale", choices=sorted(SCALES), default="cpu")
    parser.add_argument("--out", default=str(Path(__file__).parent / "results"))
    args = parser.parse_args(argv)
    s = SCALES[args.scale]
    rows = []
    for length in s["lengths"]:
        for row in measure(length, s):
            rows.append(row)
            print(row, flush=True)
    md = (
        f"# Transformer-XL evaluation speed vs vanilla Transformer ({s['layers']} layers, "
        f"d={s['d_model']}, heads={s['heads']}, batch 1, float32)\n\n"
        "Attention length L = mem_len + tgt_len. The vanilla model recomputes its whole "
        "window of L for each token, with materialized attention (`reference`, as in Al-Rfou "
        "et al. and the paper) or FlashAttention-style (`chunked`).\n\n"
    )
    md += bench.markdown_table(
        rows,
        [
            "attn_len",
            "tgt_len",
            "mem_len",
            "vanilla_reference_ms_per_token",
            "vanilla_chunked_ms_per_token",
            "xl_ms_per_token",
            "speedup_vs_reference",
            "speedup_vs_chunked",
            "paper_speedup",
        ],
        [
            "attention length L",
            "XL tgt_len",
            "XL mem_len",
            "vanilla (reference) ms/token",
            "vanilla (chunked) ms/token",
            "XL ms/token",
            "ours: speed-up vs reference vanilla",
            "ours: speed-up vs chunked vanilla",
            "paper: speed-up",
        ],
    )
    out = Path(args.out)
    summary = [
        {
            "study": f"Transformer-XL eval speed, L {r['attn_len']}, tgt {r['tgt_len']}, "
            f"vs {impl} vanilla",
            "paper_figure": "Dai et al. 2019, Table 9",
            "paper": r["paper_speedup"],
            "ours": round(r[f"speedup_vs_{impl}"], 1),
            "ratio": (
                round(r[f"speedup_vs_{impl}"] / r["paper_speedup"], 2)
                if r["paper_speedup"]
                else None
            ),
        }
        for r in rows
        for impl in VANILLA_IMPLS
    ]
    bench.write_results(
        out, f"eval_speed_{args.scale}", {"rows": rows, "scale": s, "summary": summary}, md
    )
    lines = {
        "paper": (
            [r["attn_len"] for r in rows if r["tgt_len"] == rows[0]["tgt_len"]],
            [r["paper_speedup"] for r in rows if r["tgt_len"] == rows[0]["tgt_len"]],
        )
    }
    for t in s["tgts"]:
        sel = [r for r in rows if r["tgt_len"] == (r["attn_len"] // 2 if t == "half" else int(t))]
        seg = "tgt = L/2" if t == "half" else f"tgt = {t}"
        for impl in VANILLA_IMPLS:
            lines[f"ours, {seg}, vs {impl}"] = (
                [r["attn_len"] for r in sel],
                [r[f"speedup_vs_{impl}"] for r in sel],
            )
    bench.plot_lines(
        out / f"eval_speed_{args.scale}.png",
        lines,
        xlabel="attention length",
        ylabel="speed-up over vanilla (x)",
        title=f"Transformer-XL evaluation speed ({bench.device_label()})",
        logx=False,
    )
    print(md)


if __name__ == "__main__":
    main()
