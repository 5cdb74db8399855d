"""Input-pipeline throughput (tokens/s) of the seqjax.data LM datasets on this machine's CPU.

Target: the default training config consumes 64 x 256 tokens per step at about 5 steps/s,
about 82k tokens/s; the pipeline must deliver at least 10x that (819,200 tokens/s) so that it
never bottlenecks training.

Run (from the repository root; about a minute on 2 CPU cores):

    python experiments/data_throughput/run.py --out experiments/data_throughput/results

Writes `throughput.json` (every measurement) and `throughput.md` (a table) under `--out`.
Shared data are read from `../shared/data` (or `--shared_data`); data sets are prepared into a
fresh temporary `data_dir` unless `--data_dir` is given, so first-build times are measured too.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from pathlib import Path

import tensorflow_datasets as tfds

import seqjax.data as sd
from seqjax import environment

BATCH, SEQ_LEN, STEPS_PER_S = 64, 256, 5  # the default training config's consumption
TARGET = 10 * BATCH * SEQ_LEN * STEPS_PER_S


def measure(cfg, seconds: float) -> dict:
    """Builds (if needed) and times one training iterator; returns the measurements."""
    t0 = time.perf_counter()
    info = sd.info(cfg)
    prepare_s = time.perf_counter() - t0
    it = sd.make(cfg, split="train")
    t0 = time.perf_counter()
    first = next(it)
    first_batch_s = time.perf_counter() - t0
    for _ in range(5):  # warm up
        next(it)
    steps, tokens, t0 = 0, 0, time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        batch = next(it)
        tokens += batch["inputs"].size
        steps += 1
    elapsed = time.perf_counter() - t0
    it.close()
    assert first["inputs"].shape == (cfg.batch_size, cfg.seq_len)
    return {
        "dataset": cfg.name,
        "path": Path(cfg.path).name if cfg.path else None,
        "vocab": "-" if cfg.name == "duplication" else cfg.vocab,
        "vocab_size": info.vocab_size,
        "lm_batching": cfg.lm_batching,
        "num_workers": cfg.num_workers,
        "batch_size": cfg.batch_size,
        "seq_len": cfg.seq_len,
        "train_tokens": info.split_sizes["train"],
        "prepare_s": round(prepare_s, 3),
        "first_batch_s": round(first_batch_s, 3),
        "steps": steps,
        "seconds": round(elapsed, 3),
        "tokens_per_s": round(tokens / elapsed),
        "steps_per_s": round(steps / elapsed, 1),
        "x_target": round(tokens / elapsed / TARGET, 1),
    }


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default=None, help="folder for throughput.json/.md")
    default_shared = Path(__file__).resolve().parents[2].parent / "shared" / "data"
    parser.add_argument("--shared_data", default=os.environ.get("SEQJAX_SHARED_DATA"))
    parser.add_argument("--data_dir", default=None, help="TFDS data_dir (default: a temp dir)")
    parser.add_argument("--seconds", type=float, default=3.0, help="timing per measurement")
    args = parser.parse_args()
    shared = Path(args.shared_data) if args.shared_data else default_shared
    tfds.disable_progress_bar()

    data_dir = args.data_dir or tempfile.mkdtemp(prefix="seqjax_tfds_")
    cases = [("pystdlib", None, "bytes")]
    tiny = shared / "tinyshakespeare" / "input.txt"
    uapi = shared / "linux_uapi" / "linux_uapi_headers.txt"
    if tiny.is_file():
        cases.append(("text_file", str(tiny), "chars"))
    if uapi.is_file():
        cases.append(("text_file", str(uapi), "bytes"))
    cases.append(("duplication", None, "bytes"))
    results = []
    for name, path, vocab in cases:
        for batching in ("random", "stream"):
            if name == "duplication" and batching == "stream":
                continue  # generated sequences: lm_batching does not apply
            cfg = sd.default_config()
            cfg.update(
                name=name,
                path=path,
                vocab=vocab,
                lm_batching=batching,
                data_dir=data_dir,
                batch_size=BATCH,
                seq_len=SEQ_LEN,
                download=False,
            )
            if name == "duplication":
                cfg.seq_len = 1024  # Reformer Table 2 length; tokens/s counts all positions
                cfg.batch_size = 16
            r = measure(cfg, args.seconds)
            results.append(r)
            print(json.dumps(r))

    env = environment.capture()
    report = {"target_tokens_per_s": TARGET, "env": env, "results": results}
    out = Path(args.out) if args.out else None
    if out is None:
        print(json.dumps(report, indent=2))
        return
    out.mkdir(parents=True, exist_ok=True)
    (out / "throughput.json").write_text(json.dumps(report, indent=2) + "\n")
    lines = [
        "# seqjax.data input throughput (training iterators, this CPU)",
        "",
        f"Target: the default training config consumes {BATCH} x {SEQ_LEN} tokens per step at "
        f"~{STEPS_PER_S} steps/s = {BATCH * SEQ_LEN * STEPS_PER_S:,} tokens/s; the pipeline must "
        f"deliver at least 10x that: **{TARGET:,} tokens/s**.",
        "",
        f"Machine: {env['cpu_count']} CPU cores ({env['processor']}), Python {env['python']}, "
        f"numpy {env['versions']['numpy']}, tensorflow-datasets "
        f"{env['versions']['tensorflow-datasets']}; num_workers=0 "
        f"(batches made in the training process); {args.seconds:g} s per measurement; "
        f"{env['date']}.",
        "",
        "| dataset | file | vocab | batching | batch x T | train tokens | prepare (s) "
        "| tokens/s | x target | meets 10x |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in results:
        lines.append(
            f"| {r['dataset']} | {r['path'] or '-'} | {r['vocab']} ({r['vocab_size']}) "
            f"| {r['lm_batching']} | {r['batch_size']} x {r['seq_len']} "
            f"| {r['train_tokens'] or 'endless'} | {r['prepare_s']:.1f} "
            f"| {r['tokens_per_s']:,} | {r['x_target']} | {'yes' if r['x_target'] >= 1 else 'NO'} |"
        )
    lines += [
        "",
        "`prepare (s)` is `seqjax.data.info`: on the first row of a data set it builds the TFDS "
        "array_record files in an empty data_dir; later rows reuse them. `x target` is tokens/s "
        "divided by the 10x "
        "target, so >= 1 passes. duplication (Reformer Table 2) is generated on the fly at "
        "T = 1024.",
        "",
        "Command: `python experiments/data_throughput/run.py --out "
        "experiments/data_throughput/results`",
        "",
    ]
    (out / "throughput.md").write_text("\n".join(lines))
    print(f"wrote {out / 'throughput.json'} and {out / 'throughput.md'}")


if __name__ == "__main__":
    main()
