"""ALBERT vs BERT at equal depth, CPU scale (Lan et al. 2020, Table 1-3 in miniature):
parameters, step time, compiled memory and masked-LM loss of the same 4-step post-LN
encoder with (a) BERT's layout (``TransformerConfig`` as ``convert.encoders.bert_config``
builds it), (b) ALBERT with a factorized embedding (W = 32) and all layers shared, (c)
ALBERT with W = 32 and no sharing (``num_hidden_groups = 4``).

    PYTHONPATH=$PWD nice -n 10 python experiments/albert_vs_bert/run.py

Data: this Python's standard library .py files as bytes (+4; ids 0-3 special), windows of
64 bytes, BERT's masking (15 %, 80/10/10); 300 AdamW steps, batch 16; the MLM loss of 8
held-out batches. Writes ``results.json`` and ``results.png`` beside this file.
"""

from __future__ import annotations

import dataclasses
import json
import pathlib
import sysconfig
import time

import jax
import jax.numpy as jnp
import numpy as np
import optax

from seqjax.models.albert import AlbertConfig, AlbertLM
from seqjax.models.transformer import TransformerConfig, TransformerLM

HERE = pathlib.Path(__file__).parent
T, B, STEPS, WIDTH, LAYERS, W = 64, 16, 300, 128, 4, 32
PAD, MASK, V = 0, 1, 260


def corpus(limit=4_000_000) -> np.ndarray:
    root = pathlib.Path(sysconfig.get_paths()["stdlib"])
    out, n = [], 0
    for path in sorted(root.glob("*.py")):
        data = path.read_bytes()
        out.append(data)
        n += len(data)
        if n > limit:
            break
    return np.frombuffer(b"".join(out), np.uint8).astype(np.int32) + 4


def batch(ids, rng):
    starts = rng.integers(0, len(ids) - T, size=B)
    x = np.stack([ids[s : s + T] for s in starts])
    chosen = rng.random(x.shape) < 0.15
    action = rng.random(x.shape)
    inp = np.where(chosen & (action < 0.8), MASK, x)
    inp = np.where(chosen & (action >= 0.9), rng.integers(4, V, x.shape), inp)
    return jnp.asarray(inp), jnp.asarray(x), jnp.asarray(chosen.astype(np.float32))


def models():
    common = dict(vocab_size=V, num_layers=LAYERS, num_heads=4, d_model=WIDTH, d_ff=4 * WIDTH,
                  max_len=T, pad_id=PAD)  # fmt: skip
    bert = TransformerConfig(**common, positional="learned", causal=False,
                             mlm_head_transform=True, norm_position="post", norm_eps=1e-12,
                             activation="gelu", attention_bias=True, embed_scale=False,
                             embed_norm=True, type_vocab_size=2)  # fmt: skip
    albert = AlbertConfig(**common, embed_dim=W, num_hidden_groups=1)
    return {
        "BERT": TransformerLM(bert),
        "ALBERT (W=32, shared)": AlbertLM(albert),
        "ALBERT (W=32, not shared)": AlbertLM(dataclasses.replace(albert, num_hidden_groups=4)),
    }


def run(name, model, ids, held_out):
    rng = np.random.default_rng(0)
    x, _, _ = batch(ids, rng)
    params = model.init(jax.random.key(0), x)["params"]
    n_params = sum(p.size for p in jax.tree.leaves(params))
    tx = optax.adamw(1e-3, weight_decay=0.01)
    state = tx.init(params)

    def loss_fn(p, inp, tgt, w):
        logits = model.apply({"params": p}, inp)
        nll = -jnp.take_along_axis(jax.nn.log_softmax(logits), tgt[..., None], -1)[..., 0]
        return jnp.sum(nll * w) / jnp.maximum(w.sum(), 1.0)

    @jax.jit
    def step(p, s, inp, tgt, w):
        loss, g = jax.value_and_grad(loss_fn)(p, inp, tgt, w)
        upd, s = tx.update(g, s, p)
        return optax.apply_updates(p, upd), s, loss

    compiled = step.lower(params, state, *batch(ids, rng)).compile()
    mem = compiled.memory_analysis()
    temp = int(getattr(mem, "temp_size_in_bytes", 0)) if mem is not None else 0
    losses, times = [], []
    for _ in range(STEPS):
        b = batch(ids, rng)
        t0 = time.perf_counter()
        params, state, loss = step(params, state, *b)
        loss.block_until_ready()
        times.append(time.perf_counter() - t0)
        losses.append(float(loss))
    evaluate = jax.jit(loss_fn)
    held = float(np.mean([evaluate(params, *hb) for hb in held_out]))
    return dict(
        name=name,
        params=int(n_params),
        step_ms=1000 * float(np.median(times[10:])),
        temp_bytes=temp,
        held_out_mlm_loss=held,
        losses=losses,
    )


def plot(results, path) -> None:
    """The masked-LM training curves of ``results`` (``results.json``) into ``path``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 3.5))
    for r in results:
        k = 10
        smooth = np.convolve(r["losses"], np.ones(k) / k, mode="valid")
        ax.plot(np.arange(len(smooth)) + k, smooth, label=f"{r['name']} ({r['params']:,} p.)")
    ax.set_xlabel("step")
    ax.set_ylabel("masked-LM loss (train, 10-step mean)")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main():
    ids = corpus()
    split = int(0.95 * len(ids))
    held_rng = np.random.default_rng(123)
    held_out = [batch(ids[split:], held_rng) for _ in range(8)]
    results = [run(n, m, ids[:split], held_out) for n, m in models().items()]
    (HERE / "results.json").write_text(json.dumps(results, indent=1))
    for r in results:
        print(f"{r['name']:28s} params {r['params']:>9,d}  step {r['step_ms']:6.1f} ms  "
              f"XLA temp {r['temp_bytes'] / 2**20:6.2f} MiB  held-out MLM loss "
              f"{r['held_out_mlm_loss']:.3f}")  # fmt: skip
    plot(results, HERE / "results.png")


if __name__ == "__main__":
    main()
