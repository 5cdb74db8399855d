"""Context parallelism: how long a sequence fits, and what the sharded attentions cost.

    python experiments/context_parallel/run.py            # --scale cpu (default)
    python experiments/context_parallel/run.py --scale smoke

On 1, 2, 4 and 8 (fake CPU) devices of one ``sequence`` mesh axis:

1. *Longest sequence under a per-device memory budget*: the attention forward + backward of
   one layer (``jax.grad`` of ``sum(attention(q, k, v)**2)`` with respect to q, k, v; causal,
   ``[1, T, 8, 16]``) is compiled at doubling lengths, and its per-device footprint
   (arguments + outputs + temporaries, from ``compiled.memory_analysis()``) is compared
   with ``--budget_mib``; 1 device runs ``chunked``, more run ``ring`` and ``ulysses``.
2. *Time per step* at a length where all fit: ring vs all-to-all vs unsharded ``chunked``,
   timed interleaved (one call of each per round, ``--rounds`` rounds, median), as ratios
   to unsharded. Fake CPU devices share the machine's cores, so these ratios measure the
   overhead of the collectives and the reordering, not a speed-up; the load average is
   recorded beside them.

Writes ``results/<scale>.{json,md}`` next to this file.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=8")
os.environ.setdefault("JAX_PLATFORMS", "cpu")

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from jax.sharding import AxisType, NamedSharding  # noqa: E402
from jax.sharding import PartitionSpec as P  # noqa: E402

from seqjax.attention import dense, ring, ulysses  # noqa: E402

SCALES = {
    "smoke": dict(budget_mib=4, lengths=(256, 512, 1024, 2048), time_len=256, rounds=3),
    "cpu": dict(
        budget_mib=16, lengths=(1024, 2048, 4096, 8192, 16384, 32768), time_len=2048, rounds=7
    ),
}
HEADS, HEAD_DIM, BLOCK = 8, 16, 128


def _mesh(n):
    return jax.make_mesh(
        (n,), ("sequence",), axis_types=(AxisType.Auto,), devices=jax.devices()[:n]
    )


def _step(impl):
    fn = {"chunked": dense.chunked_attention, "ring": ring.ring_attention}.get(
        impl, ulysses.ulysses_attention
    )

    def loss(q, k, v):
        out = fn(q, k, v, causal=True, block_q=BLOCK, block_k=BLOCK)
        return jnp.sum(out.astype(jnp.float32) ** 2)

    return jax.jit(jax.grad(loss, argnums=(0, 1, 2)))


def _compiled(impl, n, t):
    mesh = _mesh(n)
    sh = NamedSharding(mesh, P(None, "sequence"))
    x = jax.ShapeDtypeStruct((1, t, HEADS, HEAD_DIM), jnp.float32, sharding=sh)
    with jax.set_mesh(mesh):
        return _step(impl).lower(x, x, x).compile(), mesh, sh


def footprint_mib(impl, n, t) -> float:
    m = _compiled(impl, n, t)[0].memory_analysis()
    total = m.argument_size_in_bytes + m.output_size_in_bytes + m.temp_size_in_bytes
    return total / 2**20


def longest(impl, n, lengths, budget) -> tuple[int, dict]:
    best, seen = 0, {}
    for t in lengths:
        if t % (2 * n):
            continue
        seen[t] = round(footprint_mib(impl, n, t), 2)
        if seen[t] > budget:
            break
        best = t
    return best, seen


def time_steps(t, rounds, n) -> dict:
    runs = {}
    for impl, devices in (("chunked", 1), ("ring", n), ("ulysses", n)):
        compiled, mesh, sh = _compiled(impl, devices, t)
        xs = [
            jax.device_put(jax.random.normal(jax.random.key(i), (1, t, HEADS, HEAD_DIM)), sh)
            for i in range(3)
        ]
        jax.block_until_ready(compiled(*xs))  # warm
        runs[impl] = (compiled, xs)
    times = {impl: [] for impl in runs}
    for _ in range(rounds):  # interleaved: one call of each per round
        for impl, (compiled, xs) in runs.items():
            start = time.perf_counter()
            jax.block_until_ready(compiled(*xs))
            times[impl].append(time.perf_counter() - start)
    med = {impl: float(np.median(v)) for impl, v in times.items()}
    return {
        "length": t,
        "devices": n,
        "median_s": med,
        "ratio_to_unsharded": {k: v / med["chunked"] for k, v in med.items()},
        "loadavg": os.getloadavg(),
    }


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scale", choices=sorted(SCALES), default="cpu")
    args = parser.parse_args()
    s = SCALES[args.scale]
    fit = []
    for n in (1, 2, 4, 8):
        for impl in ("chunked",) if n == 1 else ("ring", "ulysses"):
            best, seen = longest(impl, n, s["lengths"], s["budget_mib"])
            fit.append({"devices": n, "impl": impl, "longest": best, "footprint_mib": seen})
            print(fit[-1], flush=True)
    timing = time_steps(s["time_len"], s["rounds"], 4)
    print(timing, flush=True)
    out = HERE / "results"
    out.mkdir(exist_ok=True)
    record = {"scale": args.scale, **s, "heads": HEADS, "head_dim": HEAD_DIM, "fit": fit,
              "timing": timing, "devices": str(jax.devices()[0].device_kind)}  # fmt: skip
    (out / f"{args.scale}.json").write_text(json.dumps(record, indent=1))
    lines = [
        f"Per-device budget {s['budget_mib']} MiB; causal attention fwd+bwd, "
        f"[1, T, {HEADS}, {HEAD_DIM}] float32, blocks {BLOCK}.",
        "",
        "| devices | implementation | longest T that fits | footprint MiB by T |",
        "|---|---|---|---|",
    ]
    for r in fit:
        fp = ", ".join(f"{t}: {m}" for t, m in r["footprint_mib"].items())
        lines.append(f"| {r['devices']} | {r['impl']} | {r['longest']} | {fp} |")
    lines += [
        "",
        f"Time per step at T={timing['length']} on {timing['devices']} fake devices "
        f"(median of {s['rounds']} interleaved rounds; load average {timing['loadavg']}):",
        "",
        "| implementation | median s | ratio to unsharded |",
        "|---|---|---|",
    ]
    for impl, sec in timing["median_s"].items():
        lines.append(f"| {impl} | {sec:.4f} | {timing['ratio_to_unsharded'][impl]:.2f} |")
    (out / f"{args.scale}.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
