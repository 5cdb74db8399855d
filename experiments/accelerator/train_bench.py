"""The ``train`` section of ``run.py``: a GPT-2-small-class LM training step, seqjax against
the PyTorch nanoGPT peers, interleaved in one process.

Contenders (each call is one full step: forward, backward, clipping, AdamW update; state
kept between calls, so donation and the optimizer work as in training):

* ``seqjax``: ``TransformerLM`` through the LM task's loss (``seqjax.tasks.lm``) with the
  chunked cross-entropy (``train.xent_chunk = 1024``, what the default picks at this size:
  no float32 ``[B, T, V]`` logits);
* ``seqjax_plain_xent``: the same with ``xent_chunk = 0`` (the materialized logits and
  ``optax``'s cross-entropy), so every run measures the chunked loss's effect;
* ``seqjax_xent<C>`` (``run.py --xent-chunks 256,4096``): other chunk sizes;
* ``torch_compile`` / ``torch_eager``: ``peers.train_peers`` (nanoGPT).

MFU: the analytic model FLOPs ``6 N T + 12 L T^2 d`` per sequence (PaLM App. B; the
lookup tables out of N, a tied token table counted as the logits matmul) of each
contender's own parameter count, over the device's peak (``seqjax.models.flops``).

XLA's ``cost_analysis()`` of the compiled seqjax step is recorded (``xla_flops_per_step``)
and printed only when it is within 2x of the analytic count. On a GPU it is not: the
matmuls (cuBLAS GEMMs) and cuDNN attention are custom calls, which XLA's HLO cost analysis
counts as 0 FLOPs, so it reports the elementwise work only (issue 37 saw 0.04 against an
analytic 14.0 TFLOP/step); the row then says so instead of printing the number beside the
MFU line. The chunked loss's ``lax.scan`` is counted once, not once per chunk, too.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import optax

from seqjax.models import flops
from seqjax.models.transformer import TransformerConfig, TransformerLM
from seqjax.tasks import lm

GPT2 = dict(vocab=50304, layers=12, heads=12, width=768, length=1024)
TINY = dict(vocab=256, layers=2, heads=2, width=64, length=64)


def _seqjax_step(cfg, tokens, xent_chunk: int):
    """``(fn, compiled, params)``: one jitted seqjax step per ``fn()`` call."""
    model = TransformerLM(cfg)
    task = lm.LanguageModel(xent_chunk=xent_chunk)
    batch = {
        "inputs": tokens[:, :-1],
        "targets": tokens[:, 1:],
        "weights": jnp.ones(tokens[:, 1:].shape, jnp.float32),
    }
    params = jax.jit(model.init)(jax.random.PRNGKey(1), tokens[:1, :-1])["params"]
    params = jax.tree.map(lambda x: x.value if hasattr(x, "value") else x, params,
                          is_leaf=lambda x: hasattr(x, "value"))  # fmt: skip
    tx = optax.chain(optax.clip_by_global_norm(1.0), optax.adamw(3e-4, weight_decay=0.1))
    rng = jax.random.PRNGKey(2)

    def step(params, opt_state, batch):
        def loss_fn(p):
            sums, _ = task.batch_sums(model, p, batch, rng=rng, train=True)  # dropout 0
            return sums["loss_sum"] / sums["weight_sum"]

        loss, grads = jax.value_and_grad(loss_fn)(params)
        updates, opt_state = tx.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, loss

    opt_state = tx.init(params)
    compiled = jax.jit(step, donate_argnums=(0, 1)).lower(params, opt_state, batch).compile()
    n_params = sum(x.size for x in jax.tree.leaves(params))
    state = {"params": params, "opt": opt_state, "loss": None}

    def fn(*_):
        state["params"], state["opt"], state["loss"] = compiled(
            state["params"], state["opt"], batch
        )
        return state["loss"]

    return fn, compiled, n_params, state


def xla_flops_note(xla: float, analytic: float) -> str | None:
    """Why XLA's count is not printed, when it is off the analytic count by more than 2x."""
    if analytic and 0.5 <= xla / analytic <= 2.0:
        return None
    return (
        f"XLA cost analysis ({xla / 1e12:.3g} TFLOP/step) omitted: it is "
        f"{xla / analytic:.2g}x the analytic count; XLA counts custom calls (cuBLAS GEMMs, "
        "cuDNN attention on a GPU) as 0 FLOPs and a loop body once"
    )


def train_section(batch: int, rounds: int, smoke: bool, interleaved, peers=None, xent_chunks=()):
    """One row: seconds, tokens/s and MFU of every contender, ratios to ``seqjax``
    (``interleaved``: ``run.interleaved``; ``peers``: the ``peers`` module, or None;
    ``xent_chunks``: more loss chunk sizes, each a contender ``seqjax_xent<C>``)."""
    shape = TINY if smoke else GPT2
    cfg = TransformerConfig(
        vocab_size=shape["vocab"], num_layers=shape["layers"], num_heads=shape["heads"],
        d_model=shape["width"], max_len=shape["length"], positional="learned",
        dtype="bfloat16", causal=True,
    )  # fmt: skip
    t = cfg.max_len
    tokens = jax.random.randint(jax.random.PRNGKey(0), (batch, t + 1), 0, cfg.vocab_size)
    chunk = lm.AUTO_CHUNK
    contenders, counts, notes = {}, {}, {}
    fn, compiled, n_params, state = _seqjax_step(cfg, tokens, chunk)
    contenders["seqjax"], counts["seqjax"] = fn, (n_params, t * cfg.d_model)
    xla = flops.compiled_flops(compiled)
    fn_plain, _, _, _ = _seqjax_step(cfg, tokens, 0)
    contenders["seqjax_plain_xent"], counts["seqjax_plain_xent"] = fn_plain, counts["seqjax"]
    for c in xent_chunks:  # a sweep for the device (train.xent_chunk)
        contenders[f"seqjax_xent{c}"] = _seqjax_step(cfg, tokens, c)[0]
        counts[f"seqjax_xent{c}"] = counts["seqjax"]
    if peers is not None:
        try:
            fns, info = peers.train_peers(
                np.array(tokens), vocab=shape["vocab"], layers=shape["layers"],
                heads=shape["heads"], width=shape["width"],
            )  # fmt: skip
            for name, peer_fn in fns.items():
                contenders[name] = peer_fn
                counts[name] = (info["params"], info["lookup_params"])
            notes.update(info["notes"])
        except Exception as e:  # noqa: BLE001 (a peer that cannot run is reported)
            notes["torch"] = f"error: {type(e).__name__}: {str(e).splitlines()[0][:160]}"
    seconds = interleaved(contenders, (), max(rounds, 5))
    peak = flops.peak_flops()
    model_flops, mfu = {}, {}
    for name, (n, lookup) in counts.items():
        model_flops[name] = batch * flops.analytic_lm_flops(
            num_params=n, lookup_params=lookup, num_layers=cfg.num_layers,
            d_model=cfg.d_model, seq_len=t,
        )  # fmt: skip
        sec = seconds.get(name)
        mfu[name] = model_flops[name] / sec / peak if peak and isinstance(sec, float) else None
    sec = seconds["seqjax"]
    analytic = model_flops["seqjax"]
    row = dict(
        section="train", model="gpt2-small-class" if not smoke else "tiny", B=batch, T=t,
        params=int(n_params), lookup_params=int(t * cfg.d_model), xent_chunk=chunk,
        seconds=seconds, mfu_by_contender=mfu, model_flops_by_contender=model_flops,
        step_seconds=sec if isinstance(sec, float) else None,
        tokens_per_s=batch * t / sec if isinstance(sec, float) else None,
        model_flops_per_step=analytic, xla_flops_per_step=xla,
        xla_flops_note=xla_flops_note(xla, analytic), mfu=mfu["seqjax"], peak_flops=peak,
        loss=float(state["loss"]), notes=notes,
    )  # fmt: skip
    return [row]


def markdown(row) -> str:
    """The train row as a table: ms/step, tokens/s, MFU, ratio (seqjax time / contender's)."""
    base = row["seconds"].get("seqjax")
    out = [f"\n### train ({row['model']}, B={row['B']}, T={row['T']}, bf16, AdamW)\n"]
    out.append("| contender | ms/step | tokens/s | MFU | seqjax time / contender time |")
    out.append("|---|---|---|---|---|")
    for name, sec in row["seconds"].items():
        if not isinstance(sec, float):
            out.append(f"| {name} | {str(sec)[:80]} | | | |")
            continue
        m = row["mfu_by_contender"].get(name)
        mfu = f"{100 * m:.1f}%" if m else "n/a (no peak for this device)"
        ratio = f"{base / sec:.2f}x" if isinstance(base, float) else ""
        tok = row["B"] * row["T"] / sec
        out.append(f"| {name} | {sec * 1e3:.1f} | {tok:,.0f} | {mfu} | {ratio} |")
    out.append(
        f"\nModel FLOPs (analytic, seqjax): {row['model_flops_per_step'] / 1e12:.3g} TFLOP/step; "
        f"loss chunk {row['xent_chunk']} tokens."
    )
    if row.get("xla_flops_note"):
        out.append(row["xla_flops_note"] + ".")
    else:
        out.append(f"XLA cost analysis: {row['xla_flops_per_step'] / 1e12:.3g} TFLOP/step.")
    for name, note in row.get("notes", {}).items():
        out.append(f"- {name}: {note}")
    return "\n".join(out)
