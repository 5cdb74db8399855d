"""Where the evaluation time of Transformer-XL and the vanilla model goes (a profiler trace).

``eval_speed.py`` measures the per-token speed-up of Transformer-XL over a vanilla
Transformer that recomputes its window for every token (Dai et al. 2019, Table 9). This
script explains the figure: it runs the same contenders under ``jax.profiler`` and sums
the time of every XLA operation by what it computes (``seqjax.op_profile``: the name
scope of each op), per predicted token:

* the vanilla model with ``chunked`` (FlashAttention-style) dense attention, one forward
  over its window of L tokens per token;
* Transformer-XL (blockwise relative attention) with segments of 80 tokens and of L / 2
  (``eval_speed.SCALES``), over a full memory of L - tgt positions;
* Transformer-XL with the materialized relative attention (``reference``), segments L / 2.

    python experiments/transformer_xl/profile_eval.py                 # L = 3,800
    python experiments/transformer_xl/profile_eval.py --lengths 800 3800
"""

from __future__ import annotations

import argparse
from pathlib import Path

from seqjax import bench, op_profile
from seqjax.configs import common as config_files

# The contenders of the speed table, from the script beside this one.
eval_speed = config_files.load_file(
    Path(__file__).resolve().parent / "eval_speed.py", "xl_eval_speed", register=True
)

# (label, regex on the op's name scope), tried in order; see seqjax.op_profile.
GROUPS = [
    ("Q/K/V projections", r"attn\._proj"),
    ("W_R R projection (XL)", r"/attn/se,ehd"),
    ("attention output projection", r"/attn/out/"),
    ("scores (q+v).W_R R + shift (XL)", r"position_scores"),
    # XLA:CPU drops the metadata of some dots: q.k and p.v are counted together.
    ("scores q.k and probabilities . values", r"content_scores|weighted_values|no metadata"),
    ("softmax, masks, block loop", r"/attn/"),
    ("feed-forward", r"/mlp/"),
    ("layer norms", r"/ln_"),
    ("embedding and output logits", r"embed"),
]


def contenders(length: int, s: dict):
    """``{name: (fn, args, tokens predicted per call)}`` of one attention length: the
    vanilla model, XL (blockwise) for each segment length of the scale (``eval_speed.SCALES``:
    80 and L / 2 at ``cpu``), and XL with the materialized attention at the longest."""
    tgts = [length // 2 if t == "half" else int(t) for t in s["tgts"]]
    out = {"vanilla chunked": (*eval_speed.vanilla_call(length, "chunked", s), 1)}
    for tgt in tgts:
        out[f"XL blockwise, tgt {tgt}"] = (*eval_speed.xl_call(length, tgt, "blockwise", s), tgt)
    last = tgts[-1]
    out[f"XL materialized, tgt {last}"] = (*eval_speed.xl_call(length, last, "reference", s), last)
    return out


def profile_length(length: int, s: dict, calls: int) -> dict:
    out = {}
    with bench.LoadProbe() as probe:
        for name, (fn, args, tokens) in contenders(length, s).items():
            res = op_profile.profile_ops(fn, args, GROUPS, calls=calls)
            out[name] = {
                "tokens_per_call": tokens,
                "wall_ms_per_token": res["wall_ms"] / tokens,
                "op_ms_per_token": res["op_ms"] / tokens,
                "groups_ms_per_token": {k: v["ms"] / tokens for k, v in res["groups"].items()},
                "shares": {k: v["share"] for k, v in res["groups"].items()},
                "top_ops": res["top_ops"],
            }
            print(f"L={length} {name}: {res['wall_ms'] / tokens:.3f} ms/token", flush=True)
    return {"contenders": out, "load": probe.result, "noisy": probe.result["noisy"]}


def markdown(length: int, res: dict) -> str:
    names = list(res["contenders"])
    base = res["contenders"][names[0]]
    head = "| ms per predicted token | " + " | ".join(names) + " |\n"
    head += "|---" * (len(names) + 1) + "|\n"
    rows = []
    labels = [g for g, _ in GROUPS] + ["other"]
    for label in labels:
        cells = []
        for n in names:
            c = res["contenders"][n]
            ms, share = c["groups_ms_per_token"][label], c["shares"][label]
            cells.append(f"{ms:.3g} ({share:.0%})")
        rows.append(f"| {label} | " + " | ".join(cells) + " |")
    op = [f"{res['contenders'][n]['op_ms_per_token']:.3g}" for n in names]
    wall = [f"{res['contenders'][n]['wall_ms_per_token']:.3g}" for n in names]
    ratio = [
        f"{base['wall_ms_per_token'] / res['contenders'][n]['wall_ms_per_token']:.0f}x"
        for n in names
    ]
    rows.append("| **all ops** (summed over threads) | " + " | ".join(op) + " |")
    rows.append("| **wall** | " + " | ".join(wall) + " |")
    rows.append(
        "| speed-up over vanilla chunked (wall, traced calls) | " + " | ".join(ratio) + " |"
    )
    load = res["load"]
    return (
        f"## L = {length}\n\n{head}" + "\n".join(rows) + "\n\n"
        f"Load: average {load['loadavg_before']} before, {load['loadavg_after']} after; other "
        f"processes used {load['other_cores']} cores{' (NOISY)' if res['noisy'] else ''}.\n\n"
    )


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scale", choices=sorted(eval_speed.SCALES), default="cpu")
    parser.add_argument("--lengths", type=int, nargs="+", default=[3800])
    parser.add_argument("--calls", type=int, default=3, help="traced calls per contender")
    parser.add_argument("--out", default=str(Path(__file__).parent / "results"))
    args = parser.parse_args(argv)
    s = eval_speed.SCALES[args.scale]
    results = {length: profile_length(length, s, args.calls) for length in args.lengths}
    md = (
        f"# Where Transformer-XL's and the vanilla model's evaluation time goes "
        f"({s['layers']} layers, d={s['d_model']}, heads={s['heads']}, batch 1, float32)\n\n"
        "`jax.profiler` trace of each contender (`seqjax.op_profile`): every XLA operation's "
        "time, grouped by its name scope, per predicted token (share of all op time in "
        "brackets). Contenders run one after another, each traced over "
        f"{args.calls} calls after a warm-up; the speed-ups of record are eval_speed.py's "
        "(interleaved, medians).\n\n"
    )
    md += "".join(markdown(length, res) for length, res in results.items())
    bench.write_results(
        Path(args.out),
        f"profile_eval_{args.scale}",
        {"results": {str(k): v for k, v in results.items()}, "scale": s, "groups": GROUPS},
        md,
    )
    print(md)


if __name__ == "__main__":
    main()
