"""Character-LM quality: nanoGPT's small CPU model on tiny shakespeare, then every causal
attention mechanism at the same budget.

Trains ``configs/shakespeare_char.py`` (4 layers, 4 heads, width 128, context 64, batch 12,
2,000 iterations, no dropout: the model nanoGPT's README runs on a laptop CPU, reporting a
validation loss of about 1.88 nats/char) in this process through
``seqjax.train.loop.train_and_evaluate``, evaluates the whole validation split, and records
the loss, the steady-state tokens/s (steps 50 -> end, compilation excluded) and the wall
time of training (compilation included). Then the same config with each attention
mechanism usable causally: dense ``reference`` / ``chunked``, ``causal``, ``sparse_fixed``,
``sparse_strided`` and ``lsh``.

Peers in the same run (``peers.py``): PyTorch nanoGPT (the ``bench`` extra), a minimal
Flax + optax step of the same model and seqjax's jitted step train on the same batches in
turns; the table's speed ratios come from that run only (``--no-peers`` skips it). A figure
from elsewhere appears only labelled as context.

The machine may be shared: ``os.getloadavg()`` is recorded before and after every run, the
peers' run records the CPU other processes used and is marked noisy when it was high, and
tokens/s on a loaded machine understate what it does alone.

Usage:
    python experiments/char_lm_quality/run.py --scale smoke   # seconds (tests run this)
    python experiments/char_lm_quality/run.py                 # --scale cpu (about 15 min)

Writes ``results/char_lm_<scale>.{json,md,png}`` beside this file.

Legend: T context length, B batch (rows), N iterations.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import logging
import os
import sys
import tempfile
import time
from pathlib import Path

import jax
import ml_collections

from seqjax import attention as attention_lib
from seqjax import bench
from seqjax.configs import common as config_files
from seqjax.train import checkpoint as checkpoint_lib
from seqjax.train import loop, metrics, setup

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import plotting  # noqa: E402  (experiments/plotting.py)

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]

# Context only, never divided by: nanoGPT's README reports ~1.88 validation loss for this
# config ("baby GPT on a laptop"); the study's first brief quoted a PyTorch run of it on this
# machine class on another day (40 ms/iteration, ~19k tokens/s, val 1.886). Speed ratios
# come from peers.py's run beside ours.
NANOGPT_CONTEXT = {
    "val_loss": 1.886,
    "source": "nanoGPT README (~1.88) / an earlier brief's run (1.886), not this run",
}
GOAL_SPEEDUP = 1.2

# name -> (mechanism, options); all usable with causal=True.
VARIANTS = {
    "dense-reference": ("dense", {"implementation": "reference"}),
    "sparse_fixed": ("sparse_fixed", {}),  # stride = 8 = sqrt(64), c = 2
    "lsh": ("lsh", {"n_hashes": 2, "chunk_len": 16}),  # 8 buckets per round at T = 64
    "causal": ("causal", {}),
    "dense-chunked": ("dense", {"implementation": "chunked"}),
    "sparse_strided": ("sparse_strided", {}),
}
SCALES = ("smoke", "cpu", "full")


def load_config(variant: str) -> ml_collections.ConfigDict:
    """``configs/shakespeare_char.py:<variant>`` (configs/ is not a package)."""
    return config_files.load("shakespeare_char").get_config(variant)


def job_config(scale: str, mechanism: str, options: dict, tfds_dir: str | None):
    c = load_config("smoke" if scale == "smoke" else "default")
    c.model.attention = mechanism
    if options:
        c.model.attention_options[mechanism] = ml_collections.ConfigDict(options)
    c.mesh.data = 1  # one device: the timing is of one CPU process, as nanoGPT's
    c.train.sample_length = 0
    c.train.final_eval = False  # the study evaluates the validation split itself
    c.train.async_checkpointing = False
    if tfds_dir:
        c.data.data_dir = tfds_dir
    if scale == "smoke":
        c.train.num_steps = 20
    return c


def train_one(config, workdir: str) -> dict:
    """Trains, then evaluates the validation split; returns loss, tokens/s, wall time."""
    load0 = os.getloadavg()[0]
    t0 = time.perf_counter()
    with contextlib.redirect_stderr(io.StringIO()):  # progress bars
        loop.train_and_evaluate(config, workdir)
    wall = time.perf_counter() - t0
    rows = [r for r in metrics.read_metrics(workdir) if "train/elapsed_s" in r]
    first, last = rows[0], rows[-1]
    tokens_per_step = config.data.batch_size * config.data.seq_len
    steady = (last["step"] - first["step"]) / max(
        last["train/elapsed_s"] - first["train/elapsed_s"], 1e-9
    )
    run = setup.build(config, validate=False)
    ckpt = checkpoint_lib.Checkpointer(workdir, max_to_keep=1, async_save=False)
    state, _ = ckpt.restore(ckpt.latest_step(), run.abstract)
    ckpt.close()
    from seqjax import evaluate as evaluate_lib

    val = evaluate_lib.Evaluator(run)(state["params"], "validation", show=False)
    return {
        "val_loss": float(val["loss"]),
        "val_bits_per_char": float(val.get("bits_per_char", float("nan"))),
        "final_train_loss": float(last["train/loss"]),
        "steps": int(last["step"]),
        "tokens_per_s": steady * tokens_per_step,
        "ms_per_iter": 1000.0 / steady,
        "train_wall_s": float(last["train/elapsed_s"]),
        "job_wall_s": wall,
        "loadavg_before": load0,
        "loadavg_after": os.getloadavg()[0],
    }


def main(argv=None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--scale", default="cpu", help=f"one of {SCALES}")
    p.add_argument("--out", default=str(HERE / "results"), help="results folder")
    p.add_argument("--mechanisms", default=",".join(VARIANTS), help="comma-separated variants")
    p.add_argument("--tfds-dir", default=None, help="TFDS data_dir (default: seqjax's)")
    p.add_argument("--no-peers", action="store_true", help="skip the interleaved peers' run")
    args = p.parse_args(argv)
    if args.scale not in SCALES:
        raise ValueError(f"--scale={args.scale!r} is not one of {SCALES}")
    wanted = [m.strip() for m in args.mechanisms.split(",") if m.strip()]
    for m in wanted:
        if m not in VARIANTS:
            raise ValueError(f"--mechanisms entry {m!r} is not one of {list(VARIANTS)}")
    if args.scale == "smoke":  # the code path in seconds: one variant, 20 steps
        wanted = wanted[:1]
    logging.getLogger().setLevel(logging.WARNING)
    rows = []
    args.peers = None
    if not args.no_peers:  # first, so that a loop run cut short still has the peers
        peers = _peers_module()
        text = Path(load_config("smoke" if args.scale == "smoke" else "default").data.path)
        args.peers = peers.run(args.scale, text.read_text())
        print(peers.markdown(args.peers), flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        for name in wanted:
            mech, opts = VARIANTS[name]
            if mech not in attention_lib.names():
                print(f"skipping {name}: mechanism {mech!r} is not registered")
                continue
            cfg = job_config(args.scale, mech, opts, args.tfds_dir)
            res = train_one(cfg, str(Path(tmp) / name))
            res["variant"] = name
            rows.append(res)
            print(
                f"{name:16s} val {res['val_loss']:.4f}  {res['tokens_per_s']:,.0f} tok/s  "
                f"train {res['train_wall_s']:.0f} s  load {res['loadavg_before']:.1f}",
                flush=True,
            )
            write(args, rows)  # a run cut short keeps the finished rows
    return write(args, rows)


def _peers_module():
    return config_files.load_file(HERE / "peers.py", "char_lm_peers", register=True)


def summary_rows(rows, peers: dict | None, scale: str) -> list[dict]:
    """Summary rows: validation loss against nanoGPT's (the PyTorch peer of the same run
    when it ran, else nanoGPT's reported value, labelled as context) and the seqjax step's
    tokens/s against the peer timed beside it."""
    ref = next((r for r in rows if r["variant"] == "dense-reference"), rows[0] if rows else None)
    if scale == "smoke":
        return []
    out = []
    ok = {r["contender"]: r for r in (peers or {}).get("rows", []) if r["status"] == "ok"}
    if ref is not None:
        torch_row = ok.get("pytorch")
        paper = torch_row["val_loss"] if torch_row else NANOGPT_CONTEXT["val_loss"]
        label = "PyTorch nanoGPT, same run" if torch_row else "nanoGPT, context: not this run"
        out.append({
            "study": "char_lm_quality",
            "paper_figure": f"nanoGPT shakespeare_char CPU config, val loss ({label})",
            "paper": round(paper, 4), "ours": round(ref["val_loss"], 4),
            "ratio": round(ref["val_loss"] / paper, 3), "noisy": None,
        })  # fmt: skip
    if peers and peers.get("peer") and "seqjax" in ok:
        peer = ok[peers["peer"]]
        out.append({
            "study": "char_lm_quality",
            "paper_figure": f"nanoGPT CPU model, train step tokens/s vs {peers['peer']} "
            "(interleaved, same run)",
            "paper": round(peer["tokens_per_s"]), "ours": round(ok["seqjax"]["tokens_per_s"]),
            "ratio": round(ok["seqjax"]["speed_vs_peer"], 2), "noisy": peers["noisy"],
        })  # fmt: skip
    return out


def write(args, rows) -> dict:
    """Writes the JSON, markdown and PNG of the rows so far (called after every run)."""
    peers = getattr(args, "peers", None)
    payload = {
        "scale": args.scale,
        "nanogpt_context": NANOGPT_CONTEXT,
        "goal": f">= {GOAL_SPEEDUP}x the PyTorch peer's tokens/s in the same run at equal "
        "validation loss",
        "cpu_count": os.cpu_count(),
        "devices": [str(d) for d in jax.devices()],
        "rows": rows,
        "peers": peers,
        "summary": summary_rows(rows, peers, args.scale),
    }
    cols = [
        "variant",
        "val_loss",
        "final_train_loss",
        "tokens_per_s",
        "ms_per_iter",
        "train_wall_s",
        "loadavg_before",
        "loadavg_after",
    ]
    head = [
        "variant",
        "val loss (nats/char)",
        "last train loss",
        "loop tokens/s",
        "ms/iter",
        "train wall s",
        "load before",
        "load after",
    ]
    md = (
        f"# Character LM on tiny shakespeare, nanoGPT CPU config ({args.scale})\n\n"
        "## seqjax's training loop, every causal mechanism\n\n"
        + bench.markdown_table(rows, cols, head)
        + "\n\nLoad average (1 min) of the shared machine recorded before/after each run; "
        "tokens/s are the whole loop's in steady state (compilation excluded), train wall "
        "time includes it. Context, not measured here: nanoGPT reports a validation loss of "
        f"about {NANOGPT_CONTEXT['val_loss']} for this config "
        f"({NANOGPT_CONTEXT['source']}).\n"
    )
    if peers:
        md += "\n## Peers, timed in turns in one run (peers.py)\n\n" + peers_markdown(peers)
    bench.write_results(args.out, f"char_lm_{args.scale}", payload, md)
    plot(payload, Path(args.out) / f"char_lm_{args.scale}.png")
    print(md)
    return payload


def peers_markdown(peers: dict) -> str:
    return _peers_module().markdown(peers).split("\n", 2)[2]


def plot(payload: dict, path: Path) -> None:
    """Validation loss against training speed, one point per mechanism; nanoGPT's reported
    validation loss as context (a figure from elsewhere, not timed here), the scale and
    steps in the title, and a "measured under load" mark when the file records it."""
    plt = plotting.pyplot()
    rows = payload["rows"]
    fig, ax = plt.subplots(figsize=(6.8, 4.6))
    for r in rows:
        ax.scatter(r["tokens_per_s"], r["val_loss"], label=r["variant"])
    ref = (payload.get("nanogpt") or NANOGPT_CONTEXT).get("val_loss")
    if ref:
        ax.axhline(ref, color="gray", ls="--", lw=1, label=f"nanoGPT's reported val loss {ref:g}")
    ax.set_xlabel("tokens/s (steady state, this machine)")
    ax.set_ylabel("validation loss (nats/char)")
    steps = sorted({r.get("steps") for r in rows if r.get("steps")})
    ax.set_title(
        f"tiny shakespeare, nanoGPT CPU model, {payload.get('scale')} scale: "
        f"{'/'.join(map(str, steps))} steps per mechanism",
        fontsize=9,
    )
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=7)
    plotting.mark_load(fig, payload)
    fig.tight_layout(rect=(0, 0.03, 1, 1))
    plotting.save(fig, path)


if __name__ == "__main__":
    sys.exit(0 if main() else 1)
