"""Collects the runs of ``run.sh`` (``WORKDIR/<run>/result.json``, ``metrics.jsonl``, the
``.time`` files) into ``results.json``, ``results.md`` and ``results.png`` beside this file,
with XLA's FLOP count of each pre-training step (``compiled.cost_analysis()``: forward,
backward and optimizer of one batch; ``seqjax.models.flops.compiled_flops``).

    PYTHONPATH=$PWD python experiments/xlnet_vs_bert/summarize.py /tmp/xlnet_vs_bert
    PYTHONPATH=$PWD python experiments/xlnet_vs_bert/summarize.py --replot
"""

from __future__ import annotations

import json
import math
import pathlib
import sys

import numpy as np

HERE = pathlib.Path(__file__).parent
MODELS = {"xlnet": "XLNet (permutation LM)", "bert": "BERT (masked LM)"}


def step_flops(workdir: pathlib.Path) -> tuple[float, int]:
    """XLA's FLOPs of one training step of the run in ``workdir`` and its parameter count."""
    import jax

    from seqjax import data as data_lib
    from seqjax.models import flops
    from seqjax.train import setup, sharding
    from seqjax.train import step as step_lib

    config = setup.load_config(str(workdir))
    run = setup.build(config, validate=False)
    it = data_lib.make(config.data, split="train", process_index=0, process_count=1, train=True)
    batch = sharding.global_batch(next(it), run.mesh)
    it.close()
    fn = step_lib.jit_train_step(
        step_lib.make_train_step(run.model, run.task, run.tx, run.schedule, accum_steps=1,
                                 mesh=run.mesh),
        run.shardings, run.mesh,
    )  # fmt: skip
    compiled = fn.lower(run.abstract, batch).compile()
    n = sum(int(np.prod(x.shape)) for x in jax.tree.leaves(run.abstract["params"]))
    return flops.compiled_flops(compiled), n


def cpu_wall(path: pathlib.Path) -> tuple[float, float]:
    user, system, wall = map(float, path.read_text().split()[-3:])
    return user + system, wall


def curve(workdir: pathlib.Path, key="train/loss") -> list[tuple[int, float]]:
    rows = [json.loads(x) for x in (workdir / "metrics.jsonl").read_text().splitlines()]
    return [(r["step"], r[key]) for r in rows if key in r]


def collect(out: pathlib.Path) -> dict:
    res = {"pretrain": {}, "finetune": []}
    for m in MODELS:
        wd = out / f"{m}_pt"
        test = json.loads((wd / "result.json").read_text())["test"]
        cpu, wall = cpu_wall(out / f"{m}_pt.time")
        fl, n = step_flops(wd)
        train_s = json.loads((wd / "result.json").read_text()).get("train_seconds")
        res["pretrain"][m] = dict(params=n, step_flops_xla=fl, cpu_s=cpu, wall_s=wall,
                                  train_s=train_s, test=test, curve=curve(wd))  # fmt: skip
    for wd in sorted(out.glob("*_ft_s*")) + sorted(out.glob("*_scratch_s*")):
        if not (wd / "result.json").is_file():
            continue
        test = json.loads((wd / "result.json").read_text())["test"]
        acc, count = float(test["accuracy"]), int(test["count"])
        cpu, wall = cpu_wall(out / f"{wd.name}.time")
        m, rest = wd.name.split("_", 1)
        res["finetune"].append(dict(
            run=wd.name, model=m, init="pre-trained" if rest.startswith("ft") else "scratch",
            seed=int(wd.name.rsplit("_s", 1)[1]), accuracy=acc, count=count,
            se=math.sqrt(acc * (1 - acc) / count), cpu_s=cpu, wall_s=wall,
        ))  # fmt: skip
    return res


def table(res: dict) -> str:
    lines = ["| pre-training | parameters | XLA GFLOPs / step | 200 steps: wall (CPU) s | "
             "test loss (own objective) |", "|---|---:|---:|---:|---:|"]  # fmt: skip
    for m, r in res["pretrain"].items():
        gf, loss = r["step_flops_xla"] / 1e9, r["test"]["loss"]
        lines.append(f"| {MODELS[m]} | {r['params']:,} | {gf:.1f} | "
                     f"{r['wall_s']:.0f} ({r['cpu_s']:.0f}) | {loss:.3f} |")  # fmt: skip
    lines += ["", "| fine-tuned from | seed | test accuracy ± s.e. (n) | wall (CPU) s |",
              "|---|---:|---:|---:|"]  # fmt: skip
    for r in res["finetune"]:
        name = MODELS[r["model"]].split(" (")[0] + (" pre-training" if r["init"] != "scratch"
                                                    else " (scratch)")  # fmt: skip
        lines.append(f"| {name} | {r['seed']} | {100 * r['accuracy']:.1f} ± "
                     f"{100 * r['se']:.1f} % ({r['count']}) | {r['wall_s']:.0f} "
                     f"({r['cpu_s']:.0f}) |")  # fmt: skip
    for init in ("pre-trained", "scratch"):
        for m in MODELS:
            rows = [r for r in res["finetune"] if r["model"] == m and r["init"] == init]
            accs = [r["accuracy"] for r in rows]
            if len(accs) > 1:
                sd = np.std(accs, ddof=1) / math.sqrt(len(accs))
                name, mean = MODELS[m].split(" (")[0], 100 * np.mean(accs)
                se = 100 * sd
                lines.append(f"| **{name} {init}, mean of {len(accs)} seeds** | | "
                             f"**{mean:.1f} ± {se:.1f} %** (s.e. across seeds) | |")  # fmt: skip
    return "\n".join(lines) + "\n"


def plot(res: dict, path: pathlib.Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (a, b) = plt.subplots(1, 2, figsize=(10, 3.6))
    for m, r in res["pretrain"].items():
        s, loss = zip(*r["curve"])
        a.plot(s, loss, label=MODELS[m])
    a.set_xlabel("pre-training step")
    a.set_ylabel("train loss (own objective, nats)")
    a.legend(fontsize=8)
    rows = res["finetune"]
    names = [
        f"{r['model']}\n{'pre' if r['init'] != 'scratch' else 'scr.'}\ns{r['seed']}" for r in rows
    ]
    b.errorbar(range(len(rows)), [100 * r["accuracy"] for r in rows],
               yerr=[100 * r["se"] for r in rows], fmt="o", capsize=3)  # fmt: skip
    b.axhline(50, color="grey", lw=0.8, ls="--")
    b.set_xticks(range(len(rows)), names, fontsize=7)
    b.set_ylabel("IMDB test accuracy % (± binomial s.e.)")
    b.set_title("fine-tuned 200 steps; 1,024 test reviews; 50 % = chance", fontsize=8)
    a.set_title("pre-training: 2 layers x 64, 8000 BPE pieces, n = 256, batch 16", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main(out: str) -> None:
    if out == "--replot":  # the plot again from the committed results.json
        plot(json.loads((HERE / "results.json").read_text()), HERE / "results.png")
        return
    res = collect(pathlib.Path(out))
    (HERE / "results.json").write_text(json.dumps(res, indent=1))
    md = table(res)
    (HERE / "results.md").write_text(md)
    print(md)
    plot(res, HERE / "results.png")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "/tmp/xlnet_vs_bert")
