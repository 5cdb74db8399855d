"""Sparse Transformer Table 1's comparison at CPU scale: Fashion-MNIST density modelling in
bits/dim with dense, strided (stride 28 = one image row) and fixed attention (Child et al.
2019, §7.2; the paper's models are 128 layers on CIFAR-10: 2.80 bits/dim strided).

    python experiments/images/run.py --scale smoke --out /tmp/images_smoke
    python experiments/images/run.py --scale cpu   # writes experiments/images/results/

Every mechanism trains the same model (``configs/image_fashion_mnist.py`` with the sizes
below) for the same steps from the same seed; the script records validation bits/dim (the
first ``eval_images`` validation images: a fixed subset, the same for all), the train
seconds, the machine load (``os.getloadavg``) and a sample grid PNG per mechanism, and
writes ``results.json`` and ``results.md``. ``--scale full`` is the config's default size
(for an accelerator).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

MECHANISMS = ("dense", "sparse_strided", "sparse_fixed")
SCALES = {  # layers, width, heads, batch, steps, eval batches, sample images
    "smoke": dict(num_layers=1, d_model=32, num_heads=2, batch_size=4, num_steps=3,
                  eval_max_batches=1, sample_images=2),
    "cpu": dict(num_layers=2, d_model=64, num_heads=4, batch_size=8, num_steps=400,
                eval_max_batches=50, sample_images=9),
    "full": dict(num_layers=4, d_model=128, num_heads=4, batch_size=16, num_steps=2000,
                 eval_max_batches=0, sample_images=16),
}  # fmt: skip


def config_for(mechanism: str, scale: str, out: Path):
    from seqjax.configs import common

    module = common.load_file(REPO / "configs" / "image_fashion_mnist.py", "img_cfg")
    c = module.get_config("smoke" if scale == "smoke" else "default")
    s = SCALES[scale]
    c.model.attention = mechanism
    c.model.num_layers, c.model.d_model, c.model.num_heads = (
        s["num_layers"], s["d_model"], s["num_heads"])  # fmt: skip
    c.data.batch_size = s["batch_size"]
    c.mesh.data = 1
    t = c.train
    t.num_steps = s["num_steps"]
    t.eval_every = 0  # evaluated after training (``validation``)
    t.checkpoint_every = s["num_steps"]
    t.eval_max_batches = s["eval_max_batches"]
    t.final_eval = False
    t.sample_length = s["sample_images"]
    t.sample_prompt = str(out / f"samples_{mechanism}.png")
    c.optimizer.warmup_steps = min(c.optimizer.warmup_steps, max(1, s["num_steps"] // 10))
    return c


def validation(workdir: Path, max_batches: int) -> dict:
    """The final checkpoint's validation summary (the first ``max_batches`` batches; 0: all)."""
    from seqjax.train import evaluator, setup

    run_, state, _ = setup.restore_latest(str(workdir))
    return evaluator.Evaluator(run_)(state["params"], "validation", max_batches=max_batches,
                                     show=False)  # fmt: skip


def run(scale: str, out: Path) -> dict:
    from seqjax import main as seqjax_main

    out.mkdir(parents=True, exist_ok=True)
    rows = []
    for mechanism in MECHANISMS:
        workdir = out / "work" / mechanism
        config = config_for(mechanism, scale, out)
        load_before = os.getloadavg()
        t0 = time.perf_counter()
        result = seqjax_main.train(config, str(workdir))
        seconds = time.perf_counter() - t0
        val = validation(workdir, SCALES[scale]["eval_max_batches"])
        rows.append(
            dict(
                mechanism=mechanism,
                steps=result["step"],
                validation_bits_per_dim=val["bits_per_dim"],
                validation_count=val["count"],
                seconds=seconds,
                loadavg_before=load_before,
                loadavg_after=os.getloadavg(),
                sample_grid=Path(config.train.sample_prompt).name,
            )
        )
    commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=REPO, capture_output=True,
                            text=True).stdout.strip()  # fmt: skip
    payload = dict(
        scale=scale,
        command=" ".join([Path(sys.argv[0]).as_posix(), *sys.argv[1:]]),
        sizes=SCALES[scale],
        rows=rows,
        machine=dict(platform=platform.platform(), cpus=os.cpu_count()),
        commit=commit,
        date=time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
    )
    (out / "results.json").write_text(json.dumps(payload, indent=2) + "\n")
    lines = [
        f"# Fashion-MNIST bits/dim, scale {scale} ({payload['date']}, commit {commit[:10]})",
        "",
        f"`{payload['command']}`; sizes {SCALES[scale]}",
        "",
        "| attention | steps | validation bits/dim | sub-pixels | train s | load 1-min |",
        "|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['mechanism']} | {r['steps']} | {r['validation_bits_per_dim']:.3f} | "
            f"{int(r['validation_count'] or 0):,} | {r['seconds']:.0f} | "
            f"{r['loadavg_before'][0]:.1f} -> {r['loadavg_after'][0]:.1f} |"
        )
    lines += ["", "Sample grids: " + ", ".join(f"`{r['sample_grid']}`" for r in rows), ""]
    (out / "results.md").write_text("\n".join(lines))
    return payload


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--scale", choices=tuple(SCALES), default="cpu")
    parser.add_argument("--out", default=str(REPO / "experiments" / "images" / "results"))
    args = parser.parse_args()
    payload = run(args.scale, Path(args.out))
    print(Path(args.out) / "results.md")
    print((Path(args.out) / "results.md").read_text())
    return payload


if __name__ == "__main__":
    main()
