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
SCALES = {
    "smoke": dict(lengths=[64, 128], layers=1, d_model=32, heads=2, tgt_len=16, repeats=1),
    "cpu": dict(
        lengths=[800, 1800, 2800, 3800], layers=4, d_model=256, heads=4, tgt_len=80, repeats=3
    ),
    "full": dict(
        lengths=[800, 1800, 2800, 3800], layers=12, d_model=512, heads=8, tgt_len=80, repeats=10
    ),
}


def measure(length: int, s: dict) -> dict:
    common = dict(
        vocab_size=256,
        num_layers=s["layers"],
        d_model=s["d_model"],
        num_heads=s["heads"],
        max_len=length,
    )
    tgt, mem = s["tgt_len"], length - s["tgt_len"]
    vanilla = TransformerLM(TransformerConfig(**common))
    window = jnp.zeros((1, length), jnp.int32)
    v_params = vanilla.init(jax.random.key(0), window)["params"]
    # Vanilla: one forward over the whole window predicts one (the last) token.
    v = bench.benchmark(
        lambda p, x: vanilla.apply({"params": p}, x)[:, -1], v_params, window, repeats=s["repeats"]
    )
    xl_opts = (("clamp_len", -1), ("mem_len", mem), ("same_length", False))
    xl = TransformerXL(
        TransformerConfig(**common, positional="none", attention=(("relative", xl_opts),)),
        mem_len=mem,
    )
    seg = jnp.zeros((1, tgt), jnp.int32)
    x_params = xl.init(jax.random.key(0), seg)["params"]
    memory = xl.init_memory(1)
    memory = (memory[0], jnp.ones_like(memory[1]))  # a full memory, as mid-stream
    x = bench.benchmark(
        lambda p, t, m: xl.apply({"params": p}, t, m), x_params, seg, memory, repeats=s["repeats"]
    )
    v_tok = v["timing"]["median_s"]
    x_tok = x["timing"]["median_s"] / tgt
    return {
        "attn_len": length,
        "vanilla_ms_per_token": v_tok * 1e3,
        "xl_ms_per_token": x_tok * 1e3,
        "speedup": v_tok / x_tok,
        "paper_speedup": PAPER.get(length),
    }


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scale", choices=sorted(SCALES), default="cpu")
    parser.add_argument("--out", default=str(Path(__file__).parent / "results"))
    args = parser.parse_args(argv)
    s = SCALES[args.scale]
    rows = []
    for length in s["lengths"]:
        rows.append(measure(length, s))
        print(rows[-1], flush=True)
    md = (
        f"# Transformer-XL evaluation speed vs vanilla Transformer ({s['layers']} layers, "
        f"d={s['d_model']}, tgt_len={s['tgt_len']})\n\n"
    )
    md += bench.markdown_table(
        rows,
        ["attn_len", "vanilla_ms_per_token", "xl_ms_per_token", "speedup", "paper_speedup"],
        [
            "attention length",
            "vanilla ms/token",
            "XL ms/token",
            "ours: speed-up",
            "paper: speed-up",
        ],
    )
    out = Path(args.out)
    summary = [
        {
            "study": f"Transformer-XL eval speed, attention length {r['attn_len']}",
            "paper_figure": "Dai et al. 2019, Table 9",
            "paper": r["paper_speedup"],
            "ours": round(r["speedup"], 1),
            "ratio": round(r["speedup"] / r["paper_speedup"], 2) if r["paper_speedup"] else None,
        }
        for r in rows
    ]
    bench.write_results(
        out, f"eval_speed_{args.scale}", {"rows": rows, "scale": s, "summary": summary}, md
    )
    bench.plot_lines(
        out / f"eval_speed_{args.scale}.png",
        {
            "ours": ([r["attn_len"] for r in rows], [r["speedup"] for r in rows]),
            "paper": ([r["attn_len"] for r in rows], [r["paper_speedup"] for r in rows]),
        },
        xlabel="attention length",
        ylabel="speed-up over vanilla (x)",
        title=f"Transformer-XL evaluation speed ({bench.device_label()})",
        logx=False,
    )
    print(md)


if __name__ == "__main__":
    main()
