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
* ``efficient``: Linformer (k = 256, bidirectional), LSH (4 rounds, causal), and causal
  Performer (256 features) and linear attention in chunks (the default) and by prefix sums
  (``chunk=0``, to 16K), against cuDNN dense at 4K-64K (batch 1, 8 heads x 64).
* ``train`` (``train_bench.py``): a GPT-2-small-class dense LM step (12 layers, d = 768,
  12 heads, T = 1024, vocab 50,304, bf16 compute / float32 parameters, AdamW): seqjax with
  the chunked cross-entropy and with the plain one, against nanoGPT with ``torch.compile``
  and eager; tokens/s and MFU from the analytic count ``6 N T + 12 L T^2 d`` per sequence
  (``seqjax.models.flops``: PaLM App. B; causal attention counted in full, as PaLM does).
* ``tiles`` (GPU; issue 49): the Pallas kernels' tiles and pipeline depths that the
  compiler's shared-memory figures (``seqjax.attention.pallas_smem``) allow but the old
  estimate refused, timed against the estimate's choice (``estimate_t<tile>_st<stages>``,
  the first contender): dense causal fwd+bwd at ``TILE_T`` for bf16/f32 and head dims 64
  and 128, every square tile and depth that fits this device's budget. Which is faster is
  what decides the planner's order (``pallas_plan.TILES``/``STAGES``) on a GPU.
* PyTorch peers (``peers.py``, where torch is installed; ``--no-peers`` to skip):
  ``torch_sdpa`` in ``dense``, FlexAttention with the strided/fixed masks in ``sparse``,
  nanoGPT in ``train``, each in the same process and interleaved with seqjax's contenders.

* ``tests`` (``--scale gpu``/``tpu`` only), first: the documented device test command
  (``GPU_TESTS``: ``JAX_PLATFORMS=cuda python -m pytest tests/attention tests/models
  tests/decoding -m "not slow"``) in a subprocess; its pass/fail counts go into the results,
  the log into ``results/<platform>_tests.txt``.

Contenders of a section are timed interleaved (A B C A B C ...), each call synchronised
(``block_until_ready``; the torch peers ``torch.cuda.synchronize``), and the medians are
reported with their ratio to the first contender. Writes ``results/<device>.json`` and
``.md`` (``--out`` to change the folder). ``--scale smoke`` runs every contender, the peers
included, at toy sizes on a CPU (``tests/experiments/test_accelerator_smoke.py``).

    python experiments/accelerator/run.py --scale gpu      # or --scale tpu
    python experiments/accelerator/run.py --scale smoke   # CPU, tiny, checks the script
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

from seqjax import attention, environment

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
DENSE, LINFORMER, LSH = (attention.get(n) for n in ("dense", "linformer", "lsh"))
PERFORMER, LINEAR = attention.get("performer"), attention.get("linear")
PREFIX_MAX_T = 16384  # the prefix-sum forms store [T, M, D] per head: not run above this


def _sibling(name: str):
    """``peers.py`` / ``train_bench.py`` of this folder, loaded by path (the script is run
    as a file and loaded by tests; ``experiments`` is not a package)."""
    spec = importlib.util.spec_from_file_location(f"accelerator_{name}", HERE / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


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
    tile_t=8192,
    tile_head_dims=(64, 128),
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
        tile_t=64,
        tile_head_dims=(16,),
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


def dense_section(scale, peers=None):
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
            if peers is not None:
                fns["torch_sdpa"] = peers.sdpa_peer(b, t, h, d, causal=causal)
            res = interleaved(fns, (q, k, v, ct), scale["rounds"])
            rows.append(dict(section="dense", T=t, B=b, causal=causal, seconds=res))
            print(json.dumps(rows[-1]), flush=True)
    return rows


def sparse_section(scale, peers=None):
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
        notes = {}
        if peers is not None:
            flex, notes = peers.flex_peers(b, t, h, d, stride=l, c=c)
            fns.update(flex)
        res = interleaved(fns, (q, k, v, ct), scale["rounds"])
        rows.append(dict(section="sparse", T=t, B=b, causal=True, seconds=res, notes=notes))
        print(json.dumps(rows[-1]), flush=True)
    return rows


def estimate_choice(t: int, d: int, itemsize: int, budget: int) -> tuple[int, int]:
    """``(tile, stages)`` the planner chose before issue 49, from the estimate alone."""
    from seqjax.attention import pallas_plan as pp

    dp = pp.pow2_at_least_16(d)
    for tile in (x for x in pp.TILES if x <= pp.pow2_at_least_16(t)):
        for stages in pp.STAGES:
            if max(pp.smem_estimate(tile, tile, dp, dp, itemsize, stages).values()) <= budget:
                return tile, stages
    return pp.MIN_TILE, 1


def tiles_section(scale):
    """The tiles the compiler's figures newly allow, against the estimate's (module doc)."""
    from seqjax.attention import blockwise, pallas_blocks, pallas_plan

    rows, budget, t = [], pallas_plan.device_budget(), scale["tile_t"]
    h = scale["heads"][1]
    for dtype in (jnp.bfloat16, jnp.float32):
        for d in scale["tile_head_dims"]:
            itemsize = np.dtype(dtype).itemsize
            old = estimate_choice(t, d, itemsize, budget)
            options = [old] + [
                (tile, st)
                for tile in pallas_plan.TILES
                for st in pallas_plan.STAGES
                if tile <= pallas_plan.pow2_at_least_16(t) and (tile, st) != old
                and max(pallas_plan.smem_of(tile, tile, d, d, itemsize, st).values()) <= budget
            ]  # fmt: skip
            q, k, v, ct = qkv(1, t, h, d, dtype)
            contenders = {}
            for i, (tile, st) in enumerate(options):
                n = t // tile
                table, count = blockwise.dense_table(n, n, tile, tile, causal=True, offset=0)
                name = f"{'estimate_' if i == 0 else ''}t{tile}_st{st}"
                contenders[name] = lambda q, k, v, tb=table, c=count, tl=tile, st=st: (
                    pallas_blocks.block_sparse_attention(
                        q, k, v, table=tb, count=c, block_q=tl, block_k=tl, causal=True,
                        num_stages=st,
                    )
                )  # fmt: skip
            planned = pallas_plan.plan(t, t, d, dtype=dtype)
            res = interleaved({n: grad_fn(f) for n, f in contenders.items()}, (q, k, v, ct),
                              scale["rounds"])  # fmt: skip
            rows.append(dict(section="tiles", T=t, B=1, causal=True, dtype=np.dtype(dtype).name,
                             head_dim=d, budget=budget, seconds=res,
                             planned=f"t{planned.block_q}_st{planned.num_stages}"))  # fmt: skip
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
            "performer": lambda q, k, v: PERFORMER(q, k, v, causal=True, num_features=256),
            "linear": lambda q, k, v: LINEAR(q, k, v, causal=True),
        }
        if t <= PREFIX_MAX_T:  # before chunking: prefix sums, [T, M, D] stored per head
            contenders["performer_prefix"] = lambda q, k, v: PERFORMER(
                q, k, v, causal=True, num_features=256, chunk=0
            )
            contenders["linear_prefix"] = lambda q, k, v: LINEAR(q, k, v, causal=True, chunk=0)
        fns = {n: grad_fn(f) for n, f in contenders.items()}
        res = interleaved(fns, (q, k, v, ct), scale["rounds"])
        rows.append(dict(section="efficient", T=t, B=b, seconds=res))
        print(json.dumps(rows[-1]), flush=True)
    return rows


_report = _sibling("report")
markdown, summary_rows, plot = _report.markdown, _report.summary_rows, _report.plot


# The documented device test command (README "Accelerators"), run before the benchmarks.
GPU_TESTS = ("tests/attention", "tests/models", "tests/decoding")
COUNT_WORDS = ("passed", "failed", "errors", "error", "skipped", "xfailed", "xpassed", "deselected")


def test_counts(summary: str) -> dict[str, int]:
    """``{'passed': 812, 'failed': 0, ...}`` from pytest's last line ("3 failed, 812 passed,
    4 skipped, 120 deselected in 301.2s"); ``error`` is counted as ``errors``."""
    counts = {w: 0 for w in ("passed", "failed", "errors", "skipped")}
    for n, word in re.findall(r"(\d+) (" + "|".join(COUNT_WORDS) + r")\b", summary):
        word = "errors" if word == "error" else word
        counts[word] = counts.get(word, 0) + int(n)
    return counts


def device_tests(platform: str, out: Path, timeout_s: int = 1800) -> dict:
    """``JAX_PLATFORMS=<platform> python -m pytest tests/attention tests/models
    tests/decoding -m "not slow"`` in a subprocess (the tests' CPU settings switched off);
    writes the log to ``out/<platform>_tests.txt``; returns the command, return code,
    summary line and counts."""
    env = dict(os.environ, JAX_PLATFORMS=platform, XLA_FLAGS="")
    env["PYTHONPATH"] = str(REPO) + os.pathsep + env.get("PYTHONPATH", "")
    cmd = [sys.executable, "-m", "pytest", *GPU_TESTS, "-m", "not slow", "-q"]
    try:
        proc = subprocess.run(
            cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=timeout_s
        )
        code, log = proc.returncode, proc.stdout + proc.stderr
    except subprocess.TimeoutExpired as e:
        partial = e.stdout.decode() if isinstance(e.stdout, bytes) else (e.stdout or "")
        code, log = -1, f"{partial}\ntimed out after {timeout_s} s"
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"{platform}_tests.txt"
    path.write_text(log)
    lines = [ln for ln in log.splitlines() if ln.strip()]
    summary = lines[-1] if lines else ""
    counts = test_counts(summary)
    print(f"device tests on {platform}: {summary} (log: {path})", flush=True)
    command = f"JAX_PLATFORMS={platform} python -m pytest {' '.join(GPU_TESTS)} -m 'not slow'"
    return {"command": command, "returncode": code, "summary": summary, "counts": counts,
            "log": str(path)}  # fmt: skip


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scale", choices=sorted(SCALES), default="gpu")
    parser.add_argument("--sections", default="tests,dense,sparse,efficient,train,tiles")
    parser.add_argument("--out", default=str(HERE / "results"))
    parser.add_argument("--no-peers", action="store_true", help="skip the PyTorch peers")
    parser.add_argument("--tests-timeout", type=int, default=1800, help="seconds (tests)")
    parser.add_argument(
        "--xent-chunks", default="", help="train: more loss chunk sizes to time, e.g. 256,4096"
    )
    args = parser.parse_args(argv)
    try:
        xent_chunks = tuple(int(c) for c in args.xent_chunks.split(",") if c.strip())
    except ValueError:
        xent_chunks = (-1,)
    if any(c < 1 for c in xent_chunks):
        parser.error(f"--xent-chunks={args.xent_chunks!r}: positive integers, comma-separated")
    scale = SCALES[args.scale]
    sections = [s.strip() for s in args.sections.split(",") if s.strip()]
    valid = ("tests", "dense", "sparse", "efficient", "train", "tiles")
    unknown = set(sections) - set(valid)
    if unknown:
        parser.error(f"--sections: unknown {sorted(unknown)}; valid: {', '.join(valid)}")
    if args.scale in ("gpu", "tpu") and jax.default_backend() != args.scale:
        parser.error(
            f"--scale {args.scale} needs a {args.scale.upper()} backend; this process has "
            f"{jax.default_backend()!r} (use --scale smoke to check the script on a CPU)"
        )
    device = jax.devices()[0]
    tests = None
    if "tests" in sections and args.scale in ("gpu", "tpu"):  # CI runs them on CPU already
        platform = {"gpu": "cuda", "tpu": "tpu"}[args.scale]
        tests = device_tests(platform, Path(args.out), args.tests_timeout)
    peers = _sibling("peers")
    peers = peers if peers.available() and not args.no_peers else None
    rows = []
    if "dense" in sections:
        rows += dense_section(scale, peers)
    if "sparse" in sections:
        rows += sparse_section(scale, peers)
    if "efficient" in sections:
        rows += efficient_section(scale)
    if "train" in sections:
        rows += _sibling("train_bench").train_section(
            scale["train_batch"], scale["rounds"], args.scale == "smoke", interleaved, peers,
            xent_chunks,
        )  # fmt: skip
        print(json.dumps(rows[-1]), flush=True)
    if "tiles" in sections and jax.default_backend() != "tpu":  # Triton tiles: GPU (smoke: CPU)
        rows += tiles_section(scale)
    env = {"device": getattr(device, "device_kind", str(device)), **environment.capture()}
    env["torch"] = peers.version() if peers is not None else "not used"
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    name = env["device"].replace(" ", "_") if args.scale != "smoke" else "smoke"
    summary = summary_rows(rows, env["device"])
    payload = dict(env=env, rows=rows, summary=summary, device_tests=tests)
    (out / f"{name}.json").write_text(json.dumps(payload, indent=1))
    if any(r["section"] in ("dense", "sparse") for r in rows):
        plot(rows, out / f"{name}.png")
    md = f"# Accelerator benchmarks on {env['device']}\n\n{json.dumps(env)}\n" + markdown(rows)
    if tests is not None:
        md += (f"\n\nDevice tests (`{tests['command']}`): {tests['counts']} "
               f"({tests['summary']}; log {tests['log']})\n")  # fmt: skip
    (out / f"{name}.md").write_text(md)
    print(md)


if __name__ == "__main__":
    main()
