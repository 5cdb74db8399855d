"""Transformer-XL evaluation speed vs a vanilla Transformer (Dai et al. 2019, Table 9).

The vanilla model (Al-Rfou et al. 2018) predicts each token with a full forward pass over
the last L tokens: one token per window of L. Transformer-XL processes a segment of
``tgt_len`` tokens per forward pass, attending to a cached memory of ``L - tgt_len``
earlier hidden states, so its attention length is also L. Both use the same model size;
per-token times are measured side by side in one run and their ratio is compared with the
paper's (363x at L = 800, 773x at 1,800, 1,409x at 2,800, 1,874x at 3,800).

Contenders: the vanilla model with dense ``reference`` (materialized) and ``chunked``
(FlashAttention-style) attention; Transformer-XL with the blockwise relative attention
(the table's XL) and with the materialized one (an extra column). All contenders of one
length are timed interleaved in one process (``bench.interleave``: A B C D A B C D ...,
medians), and every row says whether other processes loaded the machine (``noisy``).

    python experiments/transformer_xl/eval_speed.py               # cpu scale
    python experiments/transformer_xl/eval_speed.py --scale smoke
"""

from __future__ import annotations

import argparse
import sys
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
    "smoke": dict(lengths=[64], layers=1, d_model=32, heads=2, tgts=[16], repeats=2),
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
# Transformer-XL's relative attention: "blockwise" (online softmax over key blocks, the
# relative shift inside each block, masked blocks skipped) is the XL model of the table;
# "reference" (materialized [tgt, L] scores and shift gather, as in the paper's code) is
# kept as an extra column so the gain of the blockwise attention is visible.
XL_IMPLS = ("blockwise", "reference")


def _common(length: int, s: dict) -> dict:
    return dict(
        vocab_size=256,
        num_layers=s["layers"],
        d_model=s["d_model"],
        num_heads=s["heads"],
        max_len=length,
    )


def vanilla_call(length: int, impl: str, s: dict):
    """``(fn, args)``: one forward of the vanilla model over its whole window of ``length``
    tokens (one predicted token). ``reference`` materializes the L x L logits as the Transformers of
    2018-2019 did; ``chunked`` is FlashAttention-style (skips the masked half, never leaves
    cache-sized blocks)."""
    window = jnp.zeros((1, length), jnp.int32)
    cfg = TransformerConfig(
        **_common(length, s), attention=(("dense", (("implementation", impl),)),)
    )
    vanilla = TransformerLM(cfg)
    params = vanilla.init(jax.random.key(0), window)["params"]
    fn = jax.jit(lambda p, x: vanilla.apply({"params": p}, x)[:, -1])
    return fn, (params, window)


def vanilla_contender(length: int, impl: str, s: dict):
    fn, args = vanilla_call(length, impl, s)
    return lambda: fn(*args)


def xl_call(length: int, tgt: int, impl: str, s: dict):
    """``(fn, args)``: one segment of ``tgt`` tokens of Transformer-XL over a full memory of
    ``length - tgt`` positions (``tgt`` predicted tokens), relative attention ``impl``."""
    mem = length - tgt
    xl_opts = (("clamp_len", -1), ("implementation", impl), ("mem_len", mem))
    xl_opts += (("same_length", False),)
    cfg = TransformerConfig(
        **_common(length, s), positional="none", attention=(("relative", xl_opts),)
    )
    xl = TransformerXL(cfg, mem_len=mem)
    seg = jnp.zeros((1, tgt), jnp.int32)
    params = xl.init(jax.random.key(0), seg)["params"]
    memory = xl.init_memory(1)
    memory = (memory[0], jnp.ones_like(memory[1]))  # a full memory, as mid-stream
    fn = jax.jit(lambda p, t, m: xl.apply({"params": p}, t, m))
    return fn, (params, seg, memory)


def xl_contender(length: int, tgt: int, impl: str, s: dict):
    fn, args = xl_call(length, tgt, impl, s)
    return lambda: fn(*args)


def measure(length: int, s: dict) -> list[dict]:
    """All contenders of one attention length timed interleaved (``bench.interleave``:
    vanilla reference, vanilla chunked, then XL blockwise and materialized for every
    segment length, in turns), medians per call; one row per XL segment length."""
    tgts = [length // 2 if t == "half" else int(t) for t in s["tgts"]]
    contenders = {f"vanilla_{impl}": vanilla_contender(length, impl, s) for impl in VANILLA_IMPLS}
    for tgt in tgts:
        for impl in XL_IMPLS:
            contenders[f"xl_{impl}_{tgt}"] = xl_contender(length, tgt, impl, s)
    res = bench.interleave(contenders, rounds=s["repeats"], warmup=1)
    sec = {name: t["median_s"] for name, t in res["timing"].items()}
    rows = []
    for tgt in tgts:
        row = {"attn_len": length, "tgt_len": tgt, "mem_len": length - tgt}
        for impl in VANILLA_IMPLS:
            row[f"vanilla_{impl}_ms_per_token"] = sec[f"vanilla_{impl}"] * 1e3
        for impl in XL_IMPLS:
            x_tok = sec[f"xl_{impl}_{tgt}"] / tgt
            row[f"xl_{impl}_ms_per_token"] = x_tok * 1e3
            for v_impl in VANILLA_IMPLS:
                row[f"xl_{impl}_speedup_vs_{v_impl}"] = sec[f"vanilla_{v_impl}"] / x_tok
        row["blockwise_gain"] = sec[f"xl_reference_{tgt}"] / sec[f"xl_blockwise_{tgt}"]
        # The XL of the table is the blockwise one (the paper's model, modern attention).
        row["xl_ms_per_token"] = row["xl_blockwise_ms_per_token"]
        for v_impl in VANILLA_IMPLS:
            row[f"speedup_vs_{v_impl}"] = row[f"xl_blockwise_speedup_vs_{v_impl}"]
        row["paper_speedup"] = PAPER.get(length)
        row["noisy"] = res["noisy"]
        row["load"] = res["load"]
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
        "et al. and the paper) or FlashAttention-style (`chunked`). Transformer-XL runs one "
        "segment of tgt_len tokens over a full memory, with the blockwise relative attention "
        "(`XL ms/token` and the speed-ups) and, for comparison, the materialized one of the "
        "paper's code (`XL (materialized relative)`). All contenders of one L are timed "
        f"interleaved ({s['repeats']} rounds, medians); rows measured while other processes "
        "loaded the machine are marked noisy.\n\n"
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
            "xl_reference_ms_per_token",
            "blockwise_gain",
            "speedup_vs_reference",
            "speedup_vs_chunked",
            "xl_reference_speedup_vs_chunked",
            "paper_speedup",
            "noisy",
        ],
        [
            "attention length L",
            "XL tgt_len",
            "XL mem_len",
            "vanilla (reference) ms/token",
            "vanilla (chunked) ms/token",
            "XL ms/token",
            "XL (materialized relative) ms/token",
            "blockwise gain (x)",
            "ours: speed-up vs reference vanilla",
            "ours: speed-up vs chunked vanilla",
            "XL (materialized relative): speed-up vs chunked vanilla",
            "paper: speed-up",
            "noisy",
        ],
    )
    out = Path(args.out)
    summary = [
        {
            "study": f"Transformer-XL (blockwise relative) eval speed, L {r['attn_len']}, "
            f"tgt {r['tgt_len']}, vs {impl} vanilla",
            "paper_figure": "Dai et al. 2019, Table 9",
            "paper": r["paper_speedup"],
            "ours": round(r[f"speedup_vs_{impl}"], 1),
            "ratio": (
                round(r[f"speedup_vs_{impl}"] / r["paper_speedup"], 2)
                if r["paper_speedup"]
                else None
            ),
            "noisy": r["noisy"],
        }
        for r in rows
        for impl in VANILLA_IMPLS
    ]
    bench.write_results(
        out, f"eval_speed_{args.scale}", {"rows": rows, "scale": s, "summary": summary}, md
    )
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    import timing_plots  # experiments/timing_plots.py

    timing_plots.transformer_xl(
        {"rows": rows, "scale": s, "summary": summary}, out / f"eval_speed_{args.scale}.png"
    )
    print(md)


if __name__ == "__main__":
    main()
