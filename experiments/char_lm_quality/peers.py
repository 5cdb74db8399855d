"""Peers timed beside seqjax in one process: nanoGPT's CPU model as seqjax's jitted train
step, a minimal Flax + optax step of the same model, and PyTorch nanoGPT.

The three train the same model on the same batches, step for step, and are timed in turns
(``seqjax.bench.interleave``: A B C A B C ...), so a change in machine load during the run
slows all of them alike; the table reports median ms/step and ratios from this run only.

* **seqjax**: ``configs/shakespeare_char.py`` built as the trainer builds it
  (``seqjax.train.state`` / ``optim`` / ``step``), the jitted ``train_step`` alone (the
  loop's data pipeline and metric fetches are not in it; ``run.py`` measures the loop).
* **flax+optax**: what plain JAX gets: nanoGPT's model in ~40 lines of Flax Linen and
  ``optax.chain(clip_by_global_norm, adamw)`` on the same schedule, one ``jax.jit``.
* **pytorch**: nanoGPT's published architecture (Karpathy, ``model.py``) written here:
  pre-LayerNorm GPT blocks without biases (``bias=False``), learned positions, causal
  ``scaled_dot_product_attention``, GELU MLP of width 4 x n_embd, the output layer tied to
  the token embedding, N(0, 0.02) initialization with the residual projections at
  0.02 / sqrt(2 n_layer); AdamW (decay on >= 2-D parameters, fused off on CPU) with
  nanoGPT's warm-up + cosine ``get_lr`` and gradient clipping at 1.0; eager mode
  (``--compile=False``, as nanoGPT's CPU command). Needs ``pip install -e ".[bench]"``
  (``torch==2.13.0``); without it the row says so and the others still run.

Hyper-parameters: nanoGPT's shakespeare_char CPU command (``--block_size=64
--batch_size=12 --n_layer=4 --n_head=4 --n_embd=128 --max_iters=2000 --lr_decay_iters=2000
--dropout=0.0``; lr 1e-3, 100 warm-up iterations, cosine to 1e-4, betas (0.9, 0.99), weight
decay 0.1, clip 1.0), i.e. ``configs/shakespeare_char.py``. The data: tiny shakespeare
split 90/10 as nanoGPT's ``prepare.py``, characters sorted into ids, random windows (its
``get_batch``) drawn once from a seeded generator and fed to all three. Validation loss: the
mean over the same ``eval_batches`` fixed windows of the validation split for all three.

Usage:
    python experiments/char_lm_quality/peers.py --scale smoke     # seconds
    python experiments/char_lm_quality/peers.py                   # cpu: 2,000 steps each

Legend: B batch, T context, V vocabulary, E width, L layers, H heads.
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax

from seqjax import bench, tasks
from seqjax.configs import common as config_files
from seqjax.train import optim, sharding, state
from seqjax.train import step as step_lib

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
SCALES = ("smoke", "cpu", "full")
CONTENDERS = ("pytorch", "seqjax", "flax+optax")


def load_config(scale: str):
    return config_files.load_config(f"shakespeare_char:{'smoke' if scale == 'smoke' else ''}")


# ---------------------------------------------------------------------------- data


class CharData:
    """nanoGPT's shakespeare_char data: sorted characters -> ids, 90/10 split, windows."""

    def __init__(self, text: str):
        self.chars = sorted(set(text))
        lookup = {c: i for i, c in enumerate(self.chars)}
        data = np.fromiter((lookup[c] for c in text), np.int32, len(text))
        n = int(0.9 * len(data))
        self.train, self.val = data[:n], data[n:]

    @property
    def vocab_size(self) -> int:
        return len(self.chars)

    @staticmethod
    def windows(split: np.ndarray, rng, b: int, t: int):
        """``(x_BT, y_BT)``: b random windows of t ids and their next ids (get_batch)."""
        ix = rng.integers(0, len(split) - t - 1, b)
        x = np.stack([split[i : i + t] for i in ix])
        y = np.stack([split[i + 1 : i + t + 1] for i in ix])
        return x, y


# ---------------------------------------------------------------------------- contenders


def hparams(config) -> SimpleNamespace:
    m, o, d = config.model, config.optimizer, config.data
    return SimpleNamespace(
        n_layer=m.num_layers, n_head=m.num_heads, n_embd=m.d_model, block_size=d.seq_len,
        batch_size=d.batch_size, lr=o.learning_rate, warmup=o.warmup_steps,
        min_lr=o.learning_rate * o.min_lr_ratio, betas=(o.b1, o.b2), weight_decay=o.weight_decay,
        grad_clip=o.grad_clip_norm,
    )  # fmt: skip


def seqjax_contender(config, vocab_size: int, batches, steps: int):
    """seqjax's jitted train step on ``batches`` (advanced one per call)."""
    config = config.copy_and_resolve_references()
    config.mesh.data = 1
    mesh = sharding.make_mesh(config.mesh)
    info = SimpleNamespace(task="lm", vocab_size=vocab_size, num_classes=0, pad_id=None)
    model_cfg = tasks.model_config(config, info)
    model = tasks.make_model(model_cfg, "lm")
    tx, schedule = optim.make_optimizer(config.optimizer, steps)
    t = config.data.seq_len
    _, shardings, init = state.create_state(model, tx, (1, t), config.seed, mesh)
    fn = step_lib.make_train_step(model, "lm", tx, schedule, accum_steps=1, mesh=mesh)
    train_step = step_lib.jit_train_step(fn, shardings, mesh)
    with sharding.rules_and_mesh(mesh):
        box = {"state": init(), "i": 0}
    ones = np.ones(batches[0][0].shape, np.float32)

    def step():
        x, y = batches[box["i"] % len(batches)]
        box["i"] += 1
        with sharding.rules_and_mesh(mesh):
            batch = sharding.global_batch({"inputs": x, "targets": y, "weights": ones}, mesh)
            box["state"], metrics = train_step(box["state"], batch)
        return metrics["loss"]

    apply = jax.jit(lambda p, x: model.apply({"params": p}, x, deterministic=True))

    def val_loss(val_batches) -> float:
        with sharding.rules_and_mesh(mesh):
            return _mean_ce(lambda x: apply(box["state"]["params"], x), val_batches)

    return step, val_loss


class FlaxBlock(nn.Module):
    """nanoGPT's block: x + attn(ln_1(x)); x + mlp(ln_2(x)); no biases."""

    n_head: int
    proj_std: float

    @nn.compact
    def __call__(self, x_BTE):
        b, t, e = x_BTE.shape
        init = nn.initializers.normal(0.02)
        h = nn.LayerNorm(use_bias=False)(x_BTE)
        qkv = nn.Dense(3 * e, use_bias=False, kernel_init=init)(h)
        q, k, v = jnp.split(qkv.reshape(b, t, 3 * self.n_head, e // self.n_head), 3, axis=2)
        att = jax.nn.dot_product_attention(q, k, v, is_causal=True).reshape(b, t, e)
        proj = nn.initializers.normal(self.proj_std)
        x_BTE = x_BTE + nn.Dense(e, use_bias=False, kernel_init=proj)(att)
        h = nn.LayerNorm(use_bias=False)(x_BTE)
        h = nn.gelu(nn.Dense(4 * e, use_bias=False, kernel_init=init)(h), approximate=False)
        return x_BTE + nn.Dense(e, use_bias=False, kernel_init=proj)(h)


class FlaxGPT(nn.Module):
    """nanoGPT's GPT in Flax: token + learned position embeddings, L blocks, final
    LayerNorm, logits through the tied token embedding."""

    vocab_size: int
    n_layer: int
    n_head: int
    n_embd: int
    block_size: int

    @nn.compact
    def __call__(self, idx_BT):
        init = nn.initializers.normal(0.02)
        wte = nn.Embed(self.vocab_size, self.n_embd, embedding_init=init)
        wpe = self.param("wpe", init, (self.block_size, self.n_embd))
        x = wte(idx_BT) + wpe[None, : idx_BT.shape[1]]
        std = 0.02 / math.sqrt(2 * self.n_layer)
        for _ in range(self.n_layer):
            x = FlaxBlock(self.n_head, std)(x)
        return wte.attend(nn.LayerNorm(use_bias=False)(x))


def flax_contender(config, vocab_size: int, batches, steps: int):
    """A minimal Flax + optax train step of nanoGPT's model."""
    hp = hparams(config)
    model = FlaxGPT(vocab_size, hp.n_layer, hp.n_head, hp.n_embd, hp.block_size)
    params = model.init(jax.random.PRNGKey(config.seed), jnp.zeros((1, hp.block_size), jnp.int32))
    schedule = optax.warmup_cosine_decay_schedule(
        0.0, hp.lr, hp.warmup, max(steps, hp.warmup + 1), hp.min_lr
    )
    tx = optax.chain(
        optax.clip_by_global_norm(hp.grad_clip),
        optax.adamw(schedule, b1=hp.betas[0], b2=hp.betas[1], weight_decay=hp.weight_decay,
                    mask=lambda p: jax.tree.map(lambda x: x.ndim >= 2, p)),
    )  # fmt: skip

    def loss_fn(p, x, y):
        logits = model.apply(p, x)
        return optax.softmax_cross_entropy_with_integer_labels(logits, y).mean()

    @jax.jit
    def train_step(p, opt_state, x, y):
        loss, grads = jax.value_and_grad(loss_fn)(p, x, y)
        updates, opt_state = tx.update(grads, opt_state, p)
        return optax.apply_updates(p, updates), opt_state, loss

    box = {"p": params, "opt": tx.init(params), "i": 0}

    def step():
        x, y = batches[box["i"] % len(batches)]
        box["i"] += 1
        box["p"], box["opt"], loss = train_step(box["p"], box["opt"], x, y)
        return loss

    apply = jax.jit(model.apply)

    def val_loss(val_batches) -> float:
        return _mean_ce(lambda x: apply(box["p"], x), val_batches)

    return step, val_loss, params


def _mean_ce(logits_fn, val_batches) -> float:
    losses = [
        float(optax.softmax_cross_entropy_with_integer_labels(logits_fn(x), y).mean())
        for x, y in val_batches
    ]
    return float(np.mean(losses))


def torch_available() -> str | None:
    """None if PyTorch can be imported, else why not."""
    try:
        import torch  # noqa: F401
    except ImportError:
        return 'skipped: torch is not installed (pip install -e ".[bench]")'
    return None


def torch_contender(config, vocab_size: int, batches, steps: int):
    """PyTorch nanoGPT (``nanogpt_torch.py``) trained eagerly, nanoGPT's loop body."""
    module = config_files.load_file(HERE / "nanogpt_torch.py", "nanogpt_torch")
    return module.make_torch_peer(hparams(config), vocab_size, batches, steps, seed=config.seed)


# ---------------------------------------------------------------------------- the study


def _block(x):
    """Waits for a JAX result; PyTorch CPU results are ready when returned."""
    if hasattr(x, "block_until_ready"):
        x.block_until_ready()
    return x


def run(scale: str, text: str, steps: int | None = None, eval_batches: int | None = None,
        contenders=CONTENDERS) -> dict:  # fmt: skip
    """Trains every contender for ``steps`` steps in turns; returns the payload."""
    config = load_config(scale)
    hp = hparams(config)
    steps = steps or (8 if scale == "smoke" else int(config.train.num_steps))
    eval_batches = eval_batches or (2 if scale == "smoke" else 20)
    data = CharData(text)
    rng, val_rng = np.random.default_rng(config.seed), np.random.default_rng(1234)
    b, t, v = hp.batch_size, hp.block_size, data.vocab_size
    batches = [CharData.windows(data.train, rng, b, t) for _ in range(steps)]
    val = [CharData.windows(data.val, val_rng, b, t) for _ in range(eval_batches)]
    builders = {"pytorch": torch_contender, "seqjax": seqjax_contender}
    steps_fns, evals, skipped = {}, {}, {}
    for name in contenders:
        if name == "pytorch" and torch_available():
            skipped[name] = torch_available()
            continue
        build = builders.get(name, flax_contender)
        steps_fns[name], evals[name] = build(config, v, batches, steps)[:2]
    t0 = time.perf_counter()
    timed = bench.interleave(steps_fns, rounds=steps - 1, warmup=1, block=_block)
    tokens = hp.batch_size * hp.block_size
    peer = next((n for n in ("pytorch", "flax+optax") if n in timed["timing"]), None)
    rows = []
    for name in contenders:
        if name in skipped:
            rows.append({"contender": name, "status": skipped[name]})
            continue
        med = timed["timing"][name]["median_s"]
        rows.append({
            "contender": name, "status": "ok", "steps": steps,
            "ms_per_step": 1000.0 * med, "tokens_per_s": tokens / med,
            "min_ms": 1000.0 * timed["timing"][name]["min_s"],
            "max_ms": 1000.0 * timed["timing"][name]["max_s"],
            "val_loss": evals[name](val),
        })  # fmt: skip
    by = {r["contender"]: r for r in rows if r["status"] == "ok"}
    for r in by.values():
        # Drift check: median ms/step of each tenth of the run.
        parts = np.array_split(np.asarray(timed["times"][r["contender"]]), min(10, steps - 1))
        r["ms_per_step_by_tenth"] = [round(1000.0 * float(np.median(x)), 1) for x in parts]
        r["speed_vs_peer"] = by[peer]["ms_per_step"] / r["ms_per_step"] if peer else None
    return {
        "scale": scale,
        "hparams": vars(hp) | {"vocab_size": data.vocab_size, "steps": steps},
        "peer": peer,
        "rows": rows,
        "order_head": timed["order"][: 2 * len(steps_fns)],
        "load": timed["load"],
        "noisy": timed["noisy"],
        "wall_s": time.perf_counter() - t0,
        "torch_threads": _torch_threads(),
    }


def _torch_threads():
    if torch_available():
        return None
    import torch

    return torch.get_num_threads()


GOAL = 1.2  # seqjax tokens/s over the PyTorch peer's, same run (issue 18)


def summary_rows(payload: dict) -> list[dict]:
    """experiments/README.md's row: seqjax's speed over the peer of the same run."""
    by = {r["contender"]: r for r in payload["rows"] if r.get("status") == "ok"}
    if "seqjax" not in by or not payload.get("peer") or payload["scale"] == "smoke":
        return []
    ours = by["seqjax"]["speed_vs_peer"]
    return [{
        "study": "char_lm_quality",
        "paper_figure": f"nanoGPT CPU model: seqjax tokens/s / {payload['peer']} in the same run "
                        f"(goal {GOAL}x; val loss {by['seqjax']['val_loss']:.2f} vs "
                        f"{by[payload['peer']]['val_loss']:.2f})",
        "paper": GOAL,
        "ours": round(ours, 3),
        "ratio": round(ours / GOAL, 2),
        "noisy": payload.get("noisy"),
    }]  # fmt: skip


def markdown(payload: dict) -> str:
    cols = ["contender", "status", "val_loss", "ms_per_step", "tokens_per_s", "speed_vs_peer",
            "min_ms", "max_ms"]  # fmt: skip
    head = ["contender", "status", "val loss (nats/char)", "median ms/step", "tokens/s",
            f"× {payload['peer']} speed", "min ms", "max ms"]  # fmt: skip
    load = payload["load"]
    return (
        f"# nanoGPT CPU model: seqjax vs peers, interleaved in one run ({payload['scale']})\n\n"
        + bench.markdown_table(payload["rows"], cols, head)
        + f"\n\n{payload['hparams']['steps']} steps each, timed in turns "
        f"({' '.join(payload['order_head'])} ...); medians of the per-step times, ratios to "
        f"{payload['peer']} from this run only. Other processes used {load['other_cores']} "
        f"cores on average meanwhile (load average {load['loadavg_before']} -> "
        f"{load['loadavg_after']}): {'**noisy**' if payload['noisy'] else 'quiet'}.\n\n"
        "Median ms/step in each tenth of the run (drift check):\n\n"
        + "\n".join(
            f"* {r['contender']}: {', '.join(map(str, r['ms_per_step_by_tenth']))}"
            for r in payload["rows"]
            if r.get("ms_per_step_by_tenth")
        )
        + "\n"
    )


def main(argv=None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--scale", default="cpu", help=f"one of {SCALES}")
    p.add_argument("--steps", type=int, default=0, help="override the steps (default: config)")
    p.add_argument("--eval-batches", type=int, default=0, help="validation windows batches")
    p.add_argument("--text", default=None, help="text file (default: tiny shakespeare)")
    p.add_argument("--out", default=str(HERE / "results"), help="results folder")
    args = p.parse_args(argv)
    if args.scale not in SCALES:
        raise ValueError(f"--scale={args.scale!r} is not one of {SCALES}")
    path = Path(args.text or load_config(args.scale).data.path)
    payload = run(args.scale, path.read_text(), args.steps or None, args.eval_batches or None)
    payload["summary"] = summary_rows(payload)
    md = markdown(payload)
    bench.write_results(args.out, f"peers_{args.scale}", payload, md)
    print(md)
    return payload


if __name__ == "__main__":
    sys.exit(0 if main() else 1)
