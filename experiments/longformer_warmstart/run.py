"""The Longformer warm start at CPU scale (Beltagy et al. 2020, §5 and Table 5): masked-LM
loss of an encoder extended from n to 4n positions, at step 0 (copied vs random positions)
and after continued pre-training, for dense, Longformer (sliding window + global) and
BigBird attention.

The whole Hugging Face path with no download: a small RoBERTa-layout encoder is
pre-trained here with seqjax's masked LM (``seqjax.data.objectives.mask_tokens``: BERT's
15% / 80-10-10) on Tiny Shakespeare bytes at n = 64, exported with ``seqjax.convert.save``
to a Hugging Face folder, imported back with ``seqjax.convert.load`` (checked equal), then
extended (``seqjax.convert.longformer.extend_context``) and trained on at 4n = 256. With
``--init_from hf:<folder>`` a real RoBERTa/BERT checkpoint is used instead, the text encoded
with its own tokenizer.

    python experiments/longformer_warmstart/run.py --config configs/_longformer_warmstart.py

Writes ``results.json``, ``results.md`` and ``results.png`` into a fresh folder,
``workdirs/longformer_warmstart/<UTC time>/``, unless ``--out`` names one (the committed
results: ``--out experiments/longformer_warmstart/results``).
Legend: B batch, T length, V vocabulary.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import sys
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import optax

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from seqjax import bench, convert  # noqa: E402
from seqjax.configs import common  # noqa: E402
from seqjax.convert.longformer import extend_context  # noqa: E402
from seqjax.data import objectives  # noqa: E402
from seqjax.models import layers  # noqa: E402

SHA256 = "86c4e6aa9db7c042ec79f339dcb96d42b0075e16b8fc2e86bf0ca57e2dc565ed"
SPECIALS = 4  # RoBERTa's <s>, <pad>, </s>, <unk>; byte b is id b + 4, [MASK] = 260
PAD_ID = 1


def byte_text(path: Path) -> np.ndarray:
    raw = path.read_bytes()
    digest = hashlib.sha256(raw).hexdigest()
    if digest != SHA256:
        raise ValueError(f"{path} has sha256 {digest}, not Tiny Shakespeare's {SHA256}")
    return np.frombuffer(raw, np.uint8).astype(np.int32) + SPECIALS


def masked_batch(ids_N, starts_B, length, rows_B, *, seed, stream, mask_id, low, high):
    tokens_BT = np.stack([ids_N[s : s + length] for s in starts_B])
    return objectives.mask_tokens(
        tokens_BT, np.ones(tokens_BT.shape, bool), np.asarray(rows_B, np.int64), seed=seed,
        stream=stream, mask_id=mask_id, low=low, high=high,
    )  # fmt: skip


def mlm_loss(model, params, batch):
    logits_BTV = model.apply({"params": params}, batch["inputs"])
    ce_BT = optax.softmax_cross_entropy_with_integer_labels(logits_BTV, batch["targets"])
    w_BT = batch["weights"]
    return (ce_BT * w_BT).sum() / jnp.maximum(w_BT.sum(), 1.0)


def token_losses(model, params, batches) -> np.ndarray:
    """Cross-entropy (nats) of every masked evaluation token, in a fixed order."""
    fn = jax.jit(
        lambda p, b: optax.softmax_cross_entropy_with_integer_labels(
            model.apply({"params": p}, b["inputs"]), b["targets"]
        )
    )
    return np.concatenate([np.asarray(fn(params, b))[b["weights"] > 0] for b in batches])


def evaluate(model, params, batches) -> float:
    return float(token_losses(model, params, batches).mean())


def paired_se(a: np.ndarray, b: np.ndarray) -> float:
    """Standard error of mean(a - b) over the same masked tokens."""
    d = a - b
    return float(d.std(ddof=1) / np.sqrt(len(d)))


def train(model, params, cfg_train, sample, *, eval_fn=None, log=""):
    """AdamW with linear warm-up and cosine decay; ``sample(step)`` gives a batch. Returns
    the parameters and ``[(step, eval loss)]`` every ``eval_every`` steps (with eval_fn)."""
    steps = cfg_train.steps
    sched = optax.warmup_cosine_decay_schedule(
        0.0, cfg_train.learning_rate, min(cfg_train.warmup, max(steps - 1, 1)), max(steps, 2)
    )
    opt = optax.chain(optax.clip_by_global_norm(1.0), optax.adamw(sched, weight_decay=0.01))
    state = opt.init(params)

    @jax.jit
    def step_fn(p, s, batch):
        loss, g = jax.value_and_grad(lambda q: mlm_loss(model, q, batch))(p)
        updates, s = opt.update(g, s, p)
        return optax.apply_updates(p, updates), s, loss

    curve, every = [], cfg_train.get("eval_every", 0)
    t0 = time.time()
    log_every, running = cfg_train.get("log_every", 0), []
    for i in range(steps):
        params, state, loss = step_fn(params, state, sample(i))
        if log_every:
            running.append(loss)
            if (i + 1) % log_every == 0:
                print(f"  {log} step {i + 1}: train {float(jnp.mean(jnp.stack(running))):.3f}")
                running = []
        if eval_fn is not None and every and (i + 1) % every == 0:
            curve.append((i + 1, eval_fn(params)))
            print(f"  {log} step {i + 1}: train {float(loss):.3f} eval {curve[-1][1]:.3f}")
    print(f"  {log} {steps} steps in {time.time() - t0:.1f} s")
    return params, curve


def pretrained_model(c, text_N, out: Path):
    """The short-context encoder: trained here, exported to and re-imported from HF."""
    vocab = SPECIALS + 256 + 1  # + [MASK]
    n = c.short_len
    cfg = convert.model_config("roberta", {
        "vocab_size": vocab, "max_position_embeddings": n + PAD_ID + 1,
        "pad_token_id": PAD_ID, "layer_norm_eps": 1e-5, "type_vocab_size": 1,
        **c.model.to_dict(),
    })  # fmt: skip
    model = convert.make_model("roberta", cfg)
    params = jax.tree.map(
        np.asarray,
        __import__("flax").linen.meta.unbox(
            model.init(jax.random.key(c.seed), jnp.ones((1, n), jnp.int32))["params"]
        ),
    )
    # The learned position table starts as 0.2 x the sinusoids of Vaswani et al. 2017 §3.5
    # (then trained): from N(0, 0.02^2) this small MLM sat at the unigram loss for thousands
    # of steps before its attention found its neighbours.
    table = layers.sinusoidal_positions(n + PAD_ID + 1, cfg.d_model)
    params["encoder"]["pos_embed"] = (c.position_init_scale * table).astype(np.float32)
    train_N = text_N[: int(0.9 * len(text_N))]
    b = c.pretrain.batch_size

    def sample(step):
        starts = np.random.default_rng([c.seed, 1, step]).integers(0, len(train_N) - n, b)
        return masked_batch(train_N, starts, n, step * b + np.arange(b), seed=c.seed,
                            stream=0, mask_id=vocab - 1, low=SPECIALS, high=vocab - 1)  # fmt: skip

    params, _ = train(model, params, c.pretrain, sample, log="pretrain")
    folder = out / "pretrained_hf"
    convert.save(folder, "roberta", cfg, jax.tree.map(np.asarray, params))
    imp = convert.load(folder)
    same = jax.tree.map(lambda a, b: bool(np.array_equal(a, b)), imp.params,
                        jax.tree.map(np.asarray, params))  # fmt: skip
    assert all(jax.tree.leaves(same)) and imp.config == cfg, "HF export/import changed it"
    return imp, vocab - 1, (SPECIALS, vocab - 1)


def run(c, out: Path) -> dict:
    n, f = c.short_len, c.factor
    if c.init_from:
        folder = c.init_from.removeprefix("hf:")
        imp = convert.load(folder)
        tok = convert.tokenizer(folder)
        convert.check_vocabulary(imp.config.vocab_size, tok.vocab_size, "tokenizer")
        text_N = np.asarray(tok.encode((REPO / c.data_path).read_text()), np.int32)
        mask_id, (low, high) = tok.mask_id, (SPECIALS, tok.vocab_size)
        n = imp.config.max_len - imp.config.position_offset
    else:
        text_N = byte_text((REPO / c.data_path).resolve())
        imp, mask_id, (low, high) = pretrained_model(c, text_N, out)
    long_n = f * n
    eval_N = text_N[int(0.9 * len(text_N)) :]
    starts = np.linspace(0, len(eval_N) - long_n - 1, c.eval_windows).astype(int)
    long_batches = [
        masked_batch(
            eval_N,
            starts[i : i + 8],
            long_n,
            np.arange(i, i + len(starts[i : i + 8])),
            seed=c.seed,
            stream=1,
            mask_id=mask_id,
            low=low,
            high=high,
        )  # fmt: skip
        for i in range(0, len(starts), 8)
    ]
    # The same masked tokens cut into f windows of n: the short model in its own context.
    short_batches = [{k: v.reshape(-1, n) for k, v in b.items()} for b in long_batches]
    results = {
        "short_len": n, "long_len": long_n, "masked_eval_tokens":
        int(sum(b["weights"].sum() for b in long_batches)),
        "runs": {},
    }  # fmt: skip
    short_ce = token_losses(imp.model, imp.params, short_batches)
    results["short_model_loss"] = float(short_ce.mean())
    print(f"short model at n={n}: {results['short_model_loss']:.4f} nats / masked token")
    train_N = text_N[: int(0.9 * len(text_N))]
    b = c.extend.batch_size

    def sample(step):
        s = np.random.default_rng([c.seed, 2, step]).integers(0, len(train_N) - long_n, b)
        return masked_batch(train_N, s, long_n, 10**7 + step * b + np.arange(b), seed=c.seed,
                            stream=0, mask_id=mask_id, low=low, high=high)  # fmt: skip

    plan = [(name, "copy") for name in c.mechanisms]
    plan += [(name, "random") for name in c.random_positions_for]
    for name, init in plan:
        mech = c.mechanisms[name]
        cfg, params = extend_context(
            imp.config, imp.params, f, attention=mech.attention,
            attention_options={mech.attention: mech.options.to_dict()},
            position_init=init, seed=c.seed,
        )  # fmt: skip
        model = convert.make_model(imp.arch, cfg)
        t0 = time.time()
        step0_ce = token_losses(model, params, long_batches)
        step0 = float(step0_ce.mean())
        params, curve = train(model, params, c.extend, sample, log=f"{name}/{init}",
                         eval_fn=lambda p, m=model: evaluate(m, p, long_batches))  # fmt: skip
        key = f"{name}/{init}"
        results["runs"][key] = {
            "attention": mech.attention, "options": mech.options.to_dict(),
            "positions": init, "step0_loss": step0, "curve": curve,
            "final_loss": curve[-1][1] if curve else step0, "seconds": time.time() - t0,
            "step0_minus_short_se": paired_se(step0_ce, short_ce),
            "final_minus_short_se": paired_se(token_losses(model, params, long_batches),
                                              short_ce),
        }  # fmt: skip
        print(
            f"{key}: step 0 {step0:.4f}, after {c.extend.steps}: "
            f"{results['runs'][key]['final_loss']:.4f}"
        )
    return results


def write(results: dict, c, out: Path, command: str) -> None:
    out.mkdir(parents=True, exist_ok=True)
    (out / "results.json").write_text(json.dumps(results, indent=1) + "\n")
    ln2 = math.log(2)
    rows = [
        "| model | attention | positions | loss at step 0 | after "
        f"{c.extend.steps} steps | step 0 − short (± s.e.) | after − short (± s.e.) |",
        "|---|---|---|---|---|---|---|",
        f"| short (n = {results['short_len']}), its own windows | dense | learned | "
        f"{results['short_model_loss']:.3f} ({results['short_model_loss'] / ln2:.3f} bits) "
        "| | | |",
    ]
    short = results["short_model_loss"]
    for key, r in results["runs"].items():
        name = key.split("/")[0]
        rows.append(
            f"| extended (4n = {results['long_len']}) | {name} | {r['positions']} | "
            f"{r['step0_loss']:.3f} ({r['step0_loss'] / ln2:.3f} bits) | "
            f"{r['final_loss']:.3f} ({r['final_loss'] / ln2:.3f} bits) | "
            f"{r['step0_loss'] - short:+.3f} ± {r['step0_minus_short_se']:.3f} | "
            f"{r['final_loss'] - short:+.3f} ± {r['final_minus_short_se']:.3f} |"
        )
    text = (
        f"Masked-LM loss, nats per masked token (bits in brackets), on "
        f"{results['masked_eval_tokens']} masked held-out tokens.\n\n"
        f"Command: `{command}`\n\n" + "\n".join(rows) + "\n"
    )
    (out / "results.md").write_text(text)
    plot(results, out / "results.png")


def plot(results: dict, path: Path) -> None:
    """The loss curves of every extended model against the short model (``results.json``;
    ``experiments/replot.py`` redraws it)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    model = results.get("config", {}).get("model", {})
    fig, ax = plt.subplots(figsize=(6, 4))
    for key, r in results["runs"].items():
        xs = [0] + [s for s, _ in r["curve"]]
        ys = [r["step0_loss"]] + [v for _, v in r["curve"]]
        ax.plot(xs, ys, marker="o", ms=3, label=key, ls="--" if "random" in key else "-")
    ax.axhline(results["short_model_loss"], color="k", lw=0.8, label="short model, n")
    ax.set_xlabel("continued MLM steps at 4n")
    ax.set_ylabel("masked-LM loss (nats)")
    ax.set_yscale("log")
    ax.set_title(
        f"Longformer warm start, {model.get('num_hidden_layers', '?')} x "
        f"{model.get('hidden_size', '?')} MLM on bytes: n = {results['short_len']} -> "
        f"{results['long_len']}, {results['masked_eval_tokens']} masked eval tokens",
        fontsize=8,
    )
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def fresh_folder() -> Path:
    """A new folder under ``workdirs/`` (ignored by git): a run never overwrites the
    committed results unless ``--out`` names them."""
    stamp = time.strftime("%Y%m%d-%H%M%S", time.gmtime())
    base = REPO / "workdirs" / "longformer_warmstart"
    out, i = base / stamp, 1
    while out.exists():
        out, i = base / f"{stamp}-{i}", i + 1
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--config", default="configs/_longformer_warmstart.py")
    ap.add_argument("--init_from", default=None, help="hf:<folder> of a RoBERTa/BERT model")
    ap.add_argument(
        "--out", default=None, help="results folder (default: a fresh workdirs/"
        "longformer_warmstart/<UTC time>/; the committed one: experiments/longformer_warmstart/"
        "results)",
    )  # fmt: skip
    args = ap.parse_args(argv)
    c = common.load_config(args.config)
    if args.init_from:
        c.init_from = args.init_from
    out = Path(args.out) if args.out else fresh_folder()
    out.mkdir(parents=True, exist_ok=True)
    print(f"writing the results into {out}")
    results = run(c, out)
    results["environment"] = bench.environment()  # machine, versions, commit, load
    results["config"] = c.to_dict()
    command = "python experiments/longformer_warmstart/run.py " + " ".join(
        a for a in (argv if argv is not None else sys.argv[1:])
    )
    write(results, c, out, command.strip())
    return results


if __name__ == "__main__":
    main()
