"""Accelerator benchmarks: fused attention kernels and training MFU (issue: accelerator path).

Sections (``--sections``, default all):

* ``dense``: fwd+bwd of dense attention, bf16, ``B = max(1, 16K / T)``, 16 heads x 64, at
  1K-32K, causal and not: the vendor's fused kernel (``fused``:
  ``jax.nn.dot_product_attention(implementation="cudnn")`` on GPU, splash on TPU; the
  target), seqjax ``dense`` with ``auto`` (what a model gets), the Pallas block-table kernel
  (GPU) or splash (TPU), plain-JAX ``chunked`` and the materializing ``reference`` (to 8K).
* ``sparse``: Child et al. 2019 Table 2 shape (8 heads x 64, stride l = 128, c = 32, causal)
  at 4K-16K: ``sparse_strided`` / ``sparse_fixed`` through the Pallas kernels and through
  the plain-JAX engine, against cuDNN dense causal.
* ``efficient``: Linformer (k = 256, bidirectional) and LSH (4 rounds, causal) against cuDNN
  dense at 4K-64K (batch 1, 8 heads x 64).
* ``train``: tokens/s and MFU of a GPT-2-small-class dense LM (12 layers, d = 768, 12 heads,
  T = 1024, vocab 50,304, bf16 compute / float32 parameters, AdamW), model FLOPs from the
  analytic count ``6 N T + 12 L T^2 d`` per sequence (``seqjax.models.flops``: PaLM App. B;
  causal attention counted in full, as PaLM does) and, for comparison, XLA's
  ``cost_analysis()`` of the compiled step.

* ``tests`` (``--scale gpu``/``tpu`` only): the kernel tests (``KERNEL_TESTS``) run first,
  compiled on the device, in a pytest subprocess; log in ``results/<platform>_kernel_tests.txt``.

Contenders of a section are timed interleaved (A B C A B C ...), each call synchronised
with ``block_until_ready``, and the medians are reported with their ratio to the first
contender. Writes ``results/<device>.json`` and ``.md`` (``--out`` to change the folder).

    python experiments/accelerator/run.py --scale gpu      # or --scale tpu
    python experiments/accelerator/run.py --scale smoke   # CPU, tiny, checks the script
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import optax

from seqjax import attention, bench, environment
from seqjax.models import flops
from seqjax.models.transformer import TransformerConfig, TransformerLM

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
DENSE, LINFORMER, LSH = (attention.get(n) for n in ("dense", "linformer", "lsh"))
FULL = dict(
    dense=(1024, 2048, 4096, 8192, 16384, 32768),
    sparse=(4096, 8192, 12288, 16384),
    efficient=(4096, 16384, 65536),
    heads=(16, 8),  # dense, sparse/efficient (Child et al.: 8 heads x 64)
    head_dim=64,
    stride=(128, 32),  # Child et al. Table 2: l = 128, c = 32
    tokens=16384,
    train_batch=16,
    rounds=7,
)
SCALES = {
    "gpu": FULL,
    "tpu": FULL,
    # CPU: every code path once at toy sizes (kernels in interpret mode), for tests.
    "smoke": dict(
        dense=(64,),
        sparse=(64,),
        efficient=(64,),
        heads=(2, 2),
        head_dim=16,
        stride=(16, 4),
        tokens=64,
        train_batch=2,
        rounds=1,
    ),  # fmt: skip
}


def fused_dense(q, k, v, causal=False):
    """The vendor's fused attention: cuDNN on GPU, splash on TPU (XLA on CPU, smoke only)."""
    backend = jax.default_backend()
    if backend == "tpu":
        return DENSE(q, k, v, causal=causal, implementation="splash")
    impl = "cudnn" if backend == "gpu" else "xla"
    return jax.nn.dot_product_attention(q, k, v, is_causal=causal, implementation=impl)


def grad_fn(fn):
    """jit(fwd+bwd) of ``fn(q, k, v)`` against a fixed cotangent."""

    def loss(q, k, v, ct):
        return jnp.vdot(fn(q, k, v).astype(jnp.float32), ct.astype(jnp.float32))

    return jax.jit(jax.grad(loss, argnums=(0, 1, 2)))


def interleaved(contenders: dict, args, rounds: int) -> dict[str, float | str]:
    """Median seconds per call of each contender, timed A B C A B C ...; errors as text."""
    compiled, result = {}, {}
    for name, fn in contenders.items():
        try:
            jax.block_until_ready(fn(*args))  # compile + warm up
            compiled[name] = fn
        except Exception as e:  # noqa: BLE001 (a contender that cannot run is reported)
            result[name] = f"error: {type(e).__name__}: {str(e).splitlines()[0][:160]}"
    times = {name: [] for name in compiled}
    for _ in range(rounds):
        for name, fn in compiled.items():
            t0 = time.perf_counter()
            jax.block_until_ready(fn(*args))
            times[name].append(time.perf_counter() - t0)
    result.update({name: statistics.median(ts) for name, ts in times.items()})
    return {name: result[name] for name in contenders}  # contender order: baseline first


def qkv(b, t, h, d, dtype=jnp.bfloat16, seed=0):
    ks = jax.random.split(jax.random.PRNGKey(seed), 4)
    return [jax.random.normal(kk, (b, t, h, d), dtype) for kk in ks]


def dense_section(scale):
    rows = []
    for t in scale["dense"]:
        b, h, d = max(1, scale["tokens"] // t), scale["heads"][0], scale["head_dim"]
        q, k, v, ct = qkv(b, t, h, d)
        kernel = "splash" if jax.default_backend() == "tpu" else "pallas"
        for causal in (False, True):
            contenders = {"fused": lambda q, k, v, causal=causal: fused_dense(q, k, v, causal)}
            impls = ("auto", kernel, "chunked") + (("reference",) if t <= 8192 else ())
            for impl in impls:
                contenders[impl] = lambda q, k, v, impl=impl, causal=causal: DENSE(
                    q, k, v, causal=causal, implementation=impl
                )
            fns = {n: grad_fn(f) for n, f in contenders.items()}
            res = interleaved(fns, (q, k, v, ct), scale["rounds"])
            rows.append(dict(section="dense", T=t, B=b, causal=causal, seconds=res))
            print(json.dumps(rows[-1]), flush=True)
    return rows


def sparse_section(scale):
    rows = []
    l, c = scale["stride"]
    kernel = "splash" if jax.default_backend() == "tpu" else "pallas"
    for t in scale["sparse"]:
        b, h, d = 1, scale["heads"][1], scale["head_dim"]
        q, k, v, ct = qkv(b, t, h, d)
        contenders = {"fused_dense": lambda q, k, v: fused_dense(q, k, v, True)}
        for kind in ("strided", "fixed"):
            fn = attention.get(f"sparse_{kind}")
            opts = dict(stride=l) if kind == "strided" else dict(stride=l, c=c)
            for impl in (kernel, "blocksparse"):
                contenders[f"{kind}_{impl}"] = lambda q, k, v, fn=fn, impl=impl, o=opts: fn(
                    q, k, v, causal=True, implementation=impl, **o
                )
        fns = {n: grad_fn(f) for n, f in contenders.items()}
        res = interleaved(fns, (q, k, v, ct), scale["rounds"])
        rows.append(dict(section="sparse", T=t, B=b, causal=True, seconds=res))
        print(json.dumps(rows[-1]), flush=True)
    return rows


def efficient_section(scale):
    rows = []
    for t in scale["efficient"]:
        b, h, d = 1, scale["heads"][1], scale["head_dim"]
        q, k, v, ct = qkv(b, t, h, d)
        key = jax.random.PRNGKey(1)
        kp = min(256, t)
        proj = (jax.random.normal(key, (kp, t)) / np.sqrt(t)).astype(jnp.bfloat16)
        chunk = min(128, t // 2)
        contenders = {
            "fused_dense": lambda q, k, v: fused_dense(q, k, v, False),
            "linformer": lambda q, k, v, p=proj, n=kp: LINFORMER(
                q, k, v, k=n, max_len=q.shape[1], sharing="kv", proj_e=p
            ),
            "fused_dense_causal": lambda q, k, v: fused_dense(q, k, v, True),
            "lsh": lambda q, k, v, r=key, c=chunk: LSH(
                q, None, v, causal=True, n_hashes=4, rng=r, chunk_len=c
            ),
        }
        fns = {n: grad_fn(f) for n, f in contenders.items()}
        res = interleaved(fns, (q, k, v, ct), scale["rounds"])
        rows.append(dict(section="efficient", T=t, B=b, seconds=res))
        print(json.dumps(rows[-1]), flush=True)
    return rows


def train_section(batch, rounds, smoke):
    cfg = TransformerConfig(
        vocab_size=50304 if not smoke else 256,
        num_layers=12 if not smoke else 2,
        num_heads=12 if not smoke else 2,
        d_model=768 if not smoke else 64,
        max_len=1024 if not smoke else 64,
        positional="learned",
        dtype="bfloat16",
        causal=True,
    )
    t = cfg.max_len
    model = TransformerLM(cfg)
    tokens = jax.random.randint(jax.random.PRNGKey(0), (batch, t + 1), 0, cfg.vocab_size)
    params = model.init(jax.random.PRNGKey(1), tokens[:, :-1])["params"]
    tx = optax.chain(optax.clip_by_global_norm(1.0), optax.adamw(3e-4, weight_decay=0.1))
    opt_state = tx.init(params)

    def step(params, opt_state, tokens):
        def loss_fn(p):
            logits = model.apply({"params": p}, tokens[:, :-1]).astype(jnp.float32)
            return optax.softmax_cross_entropy_with_integer_labels(logits, tokens[:, 1:]).mean()

        loss, grads = jax.value_and_grad(loss_fn)(params)
        updates, opt_state = tx.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, loss

    jstep = jax.jit(step, donate_argnums=(0, 1))
    compiled = jstep.lower(params, opt_state, tokens).compile()
    xla_flops = flops.compiled_flops(compiled)
    n_params = sum(x.size for x in jax.tree.leaves(params))
    n_lookup = cfg.max_len * cfg.d_model  # learned positions (the token table is tied)
    analytic = batch * flops.analytic_lm_flops(
        num_params=n_params, lookup_params=n_lookup, num_layers=cfg.num_layers,
        d_model=cfg.d_model, seq_len=t,
    )  # fmt: skip
    params, opt_state, loss = compiled(params, opt_state, tokens)
    jax.block_until_ready(loss)
    times = []
    for _ in range(max(rounds, 5)):
        t0 = time.perf_counter()
        params, opt_state, loss = compiled(params, opt_state, tokens)
        jax.block_until_ready(loss)
        times.append(time.perf_counter() - t0)
    sec = statistics.median(times)
    peak = flops.peak_flops()
    row = dict(
        section="train",
        model="gpt2-small-class" if not smoke else "tiny",
        B=batch,
        T=t,
        params=int(n_params),
        lookup_params=int(n_lookup),
        step_seconds=sec,
        tokens_per_s=batch * t / sec,
        model_flops_per_step=analytic,
        xla_flops_per_step=xla_flops,
        mfu=analytic / sec / peak if peak else None,
        peak_flops=peak,
        loss=float(loss),
    )
    print(json.dumps(row), flush=True)
    return [row]


def markdown(rows) -> str:
    out = []
    for section in ("dense", "sparse", "efficient"):
        sec = [r for r in rows if r["section"] == section]
        if not sec:
            continue
        names = list(sec[0]["seconds"])
        base = names[0]
        out.append(f"\n### {section} (fwd+bwd ms; ratio = {base} / contender)\n")
        out.append("| T | B | causal | " + " | ".join(names) + " |")
        out.append("|---" * (3 + len(names)) + "|")
        for r in sec:
            cells = []
            for n in names:
                v = r["seconds"].get(n)
                if isinstance(v, float):
                    ratio = r["seconds"][base] / v if isinstance(r["seconds"][base], float) else 0
                    cells.append(f"{v * 1e3:.2f} ({ratio:.2f}x)")
                else:
                    cells.append(str(v)[:40])
            out.append(
                f"| {r['T']} | {r['B']} | {r.get('causal', '')} | " + " | ".join(cells) + " |"
            )
    for r in rows:
        if r["section"] == "train":
            mfu = f"{100 * r['mfu']:.1f}%" if r["mfu"] else "n/a (no peak for this device)"
            out.append(
                f"\n### train ({r['model']}, B={r['B']}, T={r['T']}, bf16)\n\n"
                f"{r['tokens_per_s']:,.0f} tokens/s, {r['step_seconds'] * 1e3:.1f} ms/step, "
                f"MFU {mfu} (analytic {r['model_flops_per_step'] / 1e12:.2f} TFLOP/step; "
                f"XLA cost analysis {r['xla_flops_per_step'] / 1e12:.2f} TFLOP/step)"
            )
    return "\n".join(out) + "\n"


def summary_rows(rows, device: str) -> list[dict]:
    """Rows for ``experiments/summarize.py`` against the issue's targets and the paper."""
    out = []

    def sec(name):
        return [r for r in rows if r["section"] == name]

    for r in sec("dense"):
        fused, auto = r["seconds"].get("fused"), r["seconds"].get("auto")
        if isinstance(fused, float) and isinstance(auto, float):
            out.append(dict(
                study=f"dense fwd+bwd, {device}", paper_figure=f"T={r['T']}, causal={r['causal']}",
                paper="target >= 0.9x the fused kernel", ours=f"{fused / auto:.2f}x",
                ratio=None, note="seqjax auto vs the vendor kernel, interleaved",
            ))  # fmt: skip
    for r in sec("sparse"):
        base = r["seconds"].get("fused_dense")
        for kind, paper in (("strided", 3.7), ("fixed", 2.4)):
            kernel = next((v for n, v in r["seconds"].items()
                           if n.startswith(kind) and "blocksparse" not in n), None)  # fmt: skip
            if isinstance(base, float) and isinstance(kernel, float):
                out.append(dict(
                    study=f"Sparse Transformer {kind} vs dense, {device}",
                    paper_figure=f"Child et al. Table 2 speed-up, T={r['T']}",
                    paper=f"{paper}x (vs their dense kernel, T=12,288)",
                    ours=f"{base / kernel:.2f}x", ratio=None,
                    note="fwd+bwd vs the fused dense kernel, l=128, c=32, interleaved",
                ))  # fmt: skip
    for r in sec("train"):
        if r.get("mfu"):
            out.append(dict(
                study=f"GPT-2-small-class training, {device}", paper_figure="MFU, bf16",
                paper="target >= 45%", ours=f"{100 * r['mfu']:.1f}%", ratio=None,
                note=f"{r['tokens_per_s']:,.0f} tokens/s, B={r['B']}, T={r['T']}",
            ))  # fmt: skip
    return out


def plot(rows, path):
    """fwd+bwd time against T for every contender (dense, causal; and sparse)."""
    series = {}
    for r in rows:
        if r["section"] == "dense" and r["causal"] or r["section"] == "sparse":
            for name, v in r["seconds"].items():
                label = f"{r['section']}: {name}"
                xs, ys = series.setdefault(label, ([], []))
                xs.append(r["T"])
                ys.append(v * 1e3 if isinstance(v, float) else None)
    bench.plot_lines(path, series, xlabel="sequence length T", ylabel="fwd+bwd ms",
                     title="causal attention, fwd+bwd (interleaved medians)")  # fmt: skip


# The kernel tests, run compiled on the device (their kernels leave interpret mode there).
KERNEL_TESTS = (
    "tests/attention/test_pallas_blocks.py",
    "tests/attention/test_splash.py",
    "tests/attention/test_flex.py",
    "tests/attention/test_dense.py",
    "tests/attention/test_sparse_attention.py",
)


def kernel_tests(platform: str, out: Path, timeout_s: int = 300) -> dict:
    """Runs ``KERNEL_TESTS`` with pytest on ``platform`` (``cuda`` / ``tpu``) in a
    subprocess (the tests' CPU settings switched off) and writes the log to
    ``out/<platform>_kernel_tests.txt``; returns ``{'returncode', 'summary', 'log'}``."""
    env = dict(os.environ, JAX_PLATFORMS=platform, XLA_FLAGS="")
    env["PYTHONPATH"] = str(REPO) + os.pathsep + env.get("PYTHONPATH", "")
    cmd = [sys.executable, "-m", "pytest", "-q", "-m", "not slow", *KERNEL_TESTS]
    try:
        proc = subprocess.run(
            cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=timeout_s
        )
        code, log = proc.returncode, proc.stdout + proc.stderr
    except subprocess.TimeoutExpired as e:
        code, log = -1, f"timed out after {timeout_s} s\n{e.stdout or ''}"
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"{platform}_kernel_tests.txt"
    path.write_text(log)
    lines = [ln for ln in log.splitlines() if ln.strip()]
    summary = lines[-1] if lines else ""
    print(f"kernel tests on {platform}: {summary} (log: {path})", flush=True)
    return {"returncode": code, "summary": summary, "log": str(path)}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scale", choices=sorted(SCALES), default="gpu")
    parser.add_argument("--sections", default="tests,dense,sparse,efficient,train")
    parser.add_argument("--out", default=str(HERE / "results"))
    args = parser.parse_args(argv)
    scale = SCALES[args.scale]
    sections = [s.strip() for s in args.sections.split(",") if s.strip()]
    unknown = set(sections) - {"tests", "dense", "sparse", "efficient", "train"}
    if unknown:
        parser.error(
            f"--sections: unknown {sorted(unknown)}; valid: tests, dense, sparse, efficient, train"
        )
    if args.scale in ("gpu", "tpu") and jax.default_backend() != args.scale:
        parser.error(
            f"--scale {args.scale} needs a {args.scale.upper()} backend; this process has "
            f"{jax.default_backend()!r} (use --scale smoke to check the script on a CPU)"
        )
    device = jax.devices()[0]
    tests = None
    if "tests" in sections and args.scale in ("gpu", "tpu"):  # CI runs them on CPU already
        tests = kernel_tests({"gpu": "cuda", "tpu": "tpu"}[args.scale], Path(args.out))
    rows = []
    if "dense" in sections:
        rows += dense_section(scale)
    if "sparse" in sections:
        rows += sparse_section(scale)
    if "efficient" in sections:
        rows += efficient_section(scale)
    if "train" in sections:
        rows += train_section(scale["train_batch"], scale["rounds"], args.scale == "smoke")
    env = {"device": getattr(device, "device_kind", str(device)), **environment.capture()}
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    name = env["device"].replace(" ", "_") if args.scale != "smoke" else "smoke"
    summary = summary_rows(rows, env["device"])
    payload = dict(env=env, rows=rows, summary=summary, kernel_tests=tests)
    (out / f"{name}.json").write_text(json.dumps(payload, indent=1))
    if any(r["section"] in ("dense", "sparse") for r in rows):
        plot(rows, out / f"{name}.png")
    md = f"# Accelerator benchmarks on {env['device']}\n\n{json.dumps(env)}\n" + markdown(rows)
    if tests is not None:
        md += f"\n\nKernel tests compiled on the device: {tests['summary']} ({tests['log']})\n"
    (out / f"{name}.md").write_text(md)
    print(md)


if __name__ == "__main__":
    main()
