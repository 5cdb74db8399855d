"""What a run writes, summarised for the before/after-refactor comparison of
``tests/tasks/test_unchanged.py``.

``produce(root)`` trains two tiny jobs through ``seqjax.train.loop`` (a duplication LM with
evaluation, checkpoints and a sample; a ListOps classifier with CLS pooling) and returns
their metrics.jsonl rows, result.json, checkpoint layout, parameter tree and the
tokens/FLOPs per step recovered from the throughput columns. It uses only APIs that
existed before ``seqjax.tasks``, so the frozen reference (``reference_before_tasks.json``)
was produced by running this file against the code before the refactor:

    PYTHONPATH=<old checkout> python tests/tasks/_reference.py OUT.json
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

TIMING = ("time", "train/steps_per_s", "train/tokens_per_s", "train/elapsed_s",
          "train/model_tflops_per_s", "train/mfu")  # fmt: skip


def _set(config, overrides: dict):
    for key, value in overrides.items():
        node = config
        *parents, leaf = key.split(".")
        for p in parents:
            node = node[p]
        node[leaf] = value
    return config


COMMON = {
    "model.num_layers": 2,
    "model.d_model": 32,
    "model.num_heads": 2,
    "model.max_len": 32,
    "mesh.data": 1,
    "optimizer.learning_rate": 3e-3,
    "optimizer.warmup_steps": 1,
    "train.num_steps": 4,
    "train.log_every": 1,
    "train.eval_every": 2,
    "train.eval_max_batches": 1,
    "train.eval_batch_size": 8,
    "train.checkpoint_every": 2,
    "train.async_checkpointing": False,
    "data.batch_size": 8,
}

JOBS = {
    "lm_duplication": {
        "data.name": "duplication",
        "data.seq_len": 16,
        "data.dup_vocab_size": 12,
        "data.dup_eval_size": 16,
        "train.sample_prompt": "1 2 3",
        "train.sample_length": 5,
        "optimizer.grad_accum_steps": 2,
    },
    "classification_listops_cls": {
        "data.name": "listops",
        "data.vocab": "bytes",  # ListOps' own tokens (the char LM base config says 'chars')
        "data.max_len": 24,
        "data.listops_num_procs": 1,
        "data.listops_train_size": 64,
        "data.listops_validation_size": 16,
        "data.listops_test_size": 16,
        "model.pooling": "cls",
        "model.positional": "learned",
        "train.sample_length": 0,
    },
}


def job_config(name: str, data_dir: str):
    from seqjax.configs import common

    repo = Path(__file__).resolve().parents[2]
    config = common.load_file(repo / "configs" / "char_lm.py").get_config("smoke")
    return _set(config, {**COMMON, **JOBS[name], "data.data_dir": data_dir})


def summarise(workdir: Path, config) -> dict:
    import jax
    import numpy as np

    from seqjax.train import setup

    rows = [json.loads(line) for line in (workdir / "metrics.jsonl").read_text().splitlines()]
    kept, per_step = [], []
    for row in rows:
        kept.append({k: v for k, v in row.items() if k not in TIMING})
        if "train/steps_per_s" in row:
            sps = row["train/steps_per_s"]
            per_step.append(
                {
                    "tokens_per_step": row["train/tokens_per_s"] / sps,
                    "flops_per_step": row["train/model_tflops_per_s"] * 1e12 / sps,
                    "keys": sorted(row),
                }
            )
    result = json.loads((workdir / "result.json").read_text())
    result.pop("train_seconds")
    for added in ("evaluated_batches", "split_batches"):  # recorded after the reference
        (result.get("test") or {}).pop(added, None)
    ckpt = workdir / "checkpoints"
    layout = sorted(
        str(p.relative_to(ckpt)) for p in ckpt.rglob("*") if "ocdbt" not in str(p) and "d/" not in
        str(p.relative_to(ckpt))
    )  # fmt: skip
    _, state, step = setup.restore_latest(str(workdir))
    leaves = jax.tree_util.tree_leaves_with_path(state)
    tree = {
        jax.tree_util.keystr(path): [
            list(np.shape(x)),
            str(np.asarray(x).dtype),
            float(np.asarray(x, np.float64).sum()) if np.asarray(x).dtype != np.uint32 else 0.0,
        ]
        for path, x in leaves
    }
    return {"metrics": kept, "throughput": per_step, "result": result, "layout": layout,
            "step": step, "state": tree}  # fmt: skip


def produce(root) -> dict:
    from seqjax.train import loop

    root = Path(root)
    out = {}
    for name in JOBS:
        config = job_config(name, str(root / "tfds"))
        workdir = root / name
        loop.train_and_evaluate(config, str(workdir))
        out[name] = summarise(workdir, config)
    return out


if __name__ == "__main__":
    os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=8 "
                          "--xla_backend_optimization_level=0")  # fmt: skip
    os.environ.setdefault("JAX_PLATFORMS", "cpu")
    os.environ.setdefault("JAX_NUMPY_RANK_PROMOTION", "raise")
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        res = produce(tmp)
    Path(sys.argv[1]).write_text(json.dumps(res, indent=1, sort_keys=True) + "\n")
