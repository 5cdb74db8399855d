"""Training throughput (tokens/s) of configs/char_lm.py, with model FLOPs utilization on GPUs.

    python experiments/train_throughput/run.py               # --scale cpu (default)
    python experiments/train_throughput/run.py --scale smoke # a few seconds

Variants are timed side by side in one process (speed is reported as ratios to the first):
the default float32 step, bfloat16 compute, and rematerialized blocks; each both as the
bare jitted step on a fixed batch and end to end (data pipeline + batch assembly + step).
Peak memory of each compiled step comes from ``compiled.memory_analysis()``; a variant
predicted above ``--max_gb`` is recorded as "does not fit" instead of running.

Writes ``results/<scale>.{json,md,png}`` next to this file.

Model FLOPs per token (Kaplan et al. 2020 / PaLM appendix B): ``6 N + 6 L T E`` for the
forward and backward passes of N non-embedding parameters and causal attention over T
positions (half of the ``12 L T E`` of full attention).
"""

from __future__ import annotations

import argparse
import copy
import json
import math
import sys
import time
from pathlib import Path

import jax
import numpy as np

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
# Dense bf16 peak FLOP/s per device (vendor data sheets), for MFU.
PEAK_FLOPS = {"H100": 989e12, "H200": 989e12, "A100": 312e12, "V100": 125e12, "L4": 121e12}


def load_config(scale: str):
    from seqjax.configs import common as config_files

    config = config_files.load_config("char_lm:smoke" if scale == "smoke" else "char_lm")
    config.train.num_steps = 100_000  # the schedule length does not matter here
    return config


def variants(config, scale: str) -> dict:
    out = {"float32": config}
    bf16 = copy.deepcopy(config)
    bf16.model.dtype = "bfloat16"
    out["bfloat16 compute"] = bf16
    remat = copy.deepcopy(config)
    remat.model.remat = True
    out["remat"] = remat
    return out


def model_flops_per_token(run) -> float:
    cfg = run.model_cfg
    leaves = jax.tree_util.tree_flatten_with_path(run.abstract["params"])[0]
    n = sum(
        int(np.prod(x.shape))
        for path, x in leaves
        if "embed" not in "/".join(str(getattr(p, "key", p)) for p in path)
    )
    t = run.config.data.seq_len
    return 6.0 * n + 6.0 * cfg.num_layers * t * cfg.d_model


def peak_flops() -> float | None:
    kind = jax.devices()[0].device_kind
    for name, flops in PEAK_FLOPS.items():
        if name in kind:
            return flops * jax.device_count()
    return None


def time_variant(config, steps: int, max_gb: float) -> dict:
    from seqjax import data as data_lib
    from seqjax.train import setup, sharding
    from seqjax.train import step as step_lib

    run = setup.build(config)
    fn = step_lib.make_train_step(
        run.model, run.task, run.tx, run.schedule,
        accum_steps=config.optimizer.grad_accum_steps, mesh=run.mesh,
    )  # fmt: skip
    train_step = step_lib.jit_train_step(fn, run.shardings, run.mesh)
    it = data_lib.make(config.data, split="train")
    batch = sharding.global_batch(next(it), run.mesh)
    state = run.init()
    compiled = train_step.lower(state, batch).compile()
    mem = compiled.memory_analysis()
    peak_bytes = None
    if mem is not None:
        peak_bytes = int(
            mem.temp_size_in_bytes + mem.argument_size_in_bytes + mem.output_size_in_bytes
        )
    tokens = config.data.batch_size * config.data.seq_len
    out = {"peak_bytes_predicted": peak_bytes, "tokens_per_step": tokens}
    if peak_bytes is not None and peak_bytes > max_gb * 2**30:
        return {**out, "fits": False}
    with sharding.rules_and_mesh(run.mesh):
        state, m = compiled(state, batch)  # warm-up
        jax.block_until_ready(m)
        t0 = time.perf_counter()
        for _ in range(steps):
            state, m = compiled(state, batch)
        jax.block_until_ready(m)
        step_s = (time.perf_counter() - t0) / steps
        t0 = time.perf_counter()
        for _ in range(steps):
            state, m = compiled(state, sharding.global_batch(next(it), run.mesh))
        jax.block_until_ready(m)
        e2e_s = (time.perf_counter() - t0) / steps
    flops = model_flops_per_token(run) * tokens
    peak = peak_flops()
    return {
        **out,
        "fits": True,
        "params": int(sum(x.size for x in jax.tree.leaves(state["params"]))),
        "step_seconds": step_s,
        "end_to_end_step_seconds": e2e_s,
        "tokens_per_s": tokens / step_s,
        "end_to_end_tokens_per_s": tokens / e2e_s,
        "model_tflops_per_s": flops / step_s / 1e12,
        "mfu": (flops / step_s / peak) if peak else None,
    }


def machine() -> dict:
    from seqjax import environment

    return environment.capture()


def write(results: dict, scale: str, out=None) -> None:
    out = Path(out) if out else HERE / "results"
    out.mkdir(exist_ok=True)
    (out / f"{scale}.json").write_text(json.dumps(results, indent=2) + "\n")
    rows = results["variants"]
    base = next(iter(rows.values()))
    m = results["machine"]
    lines = [
        f"# Training throughput of configs/char_lm.py ({scale})",
        "",
        f"{m['device_kind']} x {m['device_count']}, jax {m['versions']['jax']}, "
        f"{m['cpu_count']} CPUs, load average at start {(m['loadavg'] or [math.nan])[0]:.1f}. "
        "Ratios are to the first row, measured in the same process.",
        "",
        "| variant | tokens/s (step) | ratio | tokens/s (end to end) | predicted peak MB | MFU |",
        "|---|---|---|---|---|---|",
    ]
    for name, r in rows.items():
        mb = f"{r['peak_bytes_predicted'] / 2**20:.0f}" if r["peak_bytes_predicted"] else "n/a"
        if not r["fits"]:
            lines.append(f"| {name} | does not fit | | | {mb} | |")
            continue
        mfu = f"{100 * r['mfu']:.1f}%" if r["mfu"] is not None else "n/a (CPU)"
        lines.append(
            f"| {name} | {r['tokens_per_s']:,.0f} | "
            f"{r['tokens_per_s'] / base['tokens_per_s']:.2f} | "
            f"{r['end_to_end_tokens_per_s']:,.0f} | {mb} | {mfu} |"
        )
    (out / f"{scale}.md").write_text("\n".join(lines) + "\n")

    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    import timing_plots  # experiments/timing_plots.py

    timing_plots.train_throughput(results, out / f"{scale}.png")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=None, help="results folder (default: results/)")
    parser.add_argument("--scale", choices=("smoke", "cpu", "gpu"), default="cpu")
    parser.add_argument("--steps", type=int, default=0, help="timed steps (0 = by scale)")
    parser.add_argument("--max_gb", type=float, default=8.0, help="skip variants above this")
    args = parser.parse_args(argv)
    steps = args.steps or {"smoke": 2, "cpu": 10, "gpu": 50}[args.scale]
    config = load_config(args.scale)
    results = {"scale": args.scale, "steps": steps, "machine": machine(), "variants": {}}
    for name, cfg in variants(config, args.scale).items():
        results["variants"][name] = time_variant(cfg, steps, args.max_gb)
        print(name, json.dumps(results["variants"][name]), flush=True)
    write(results, args.scale, args.out)


if __name__ == "__main__":
    main()
