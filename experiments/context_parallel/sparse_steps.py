"""Sparse patterns on the ring: ring steps executed and time per step, vs the dense ring.

    python experiments/context_parallel/sparse_steps.py            # --scale cpu (default)
    python experiments/context_parallel/sparse_steps.py --scale smoke

On 4 fake CPU devices of one ``sequence`` axis, the attention forward + backward of one
layer (``jax.grad`` of ``sum(attention(q, k, v)**2)`` w.r.t. q, k, v; ``[1, T, 8, 16]``
float32) for the dense causal ring (``ring.ring_attention``) and for ``flex`` patterns on
the ring (``ring_sparse``): a sliding window narrower than a shard (causal and
bidirectional) and causal BigBird. Per row: the ring steps the static schedule executes
(of n; a skipped step has no ``ppermute`` and no compute), the critical-path block pairs
(``Schedule.cost``), the per-device footprint from ``compiled.memory_analysis()``, and the
median time per step over interleaved rounds (with the load average: fake devices share
the machine's cores, so times show the work skipped, not a multi-device speed-up). One row
runs the window unsharded (the mechanism on one device) for scale.

Writes ``results/sparse_<scale>.{json,md}`` next to this file.
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

from seqjax.attention import flex, ring, ring_sparse  # noqa: E402

SCALES = {"smoke": dict(length=512, rounds=3), "cpu": dict(length=4096, rounds=5)}
N, HEADS, HEAD_DIM, BLOCK = 4, 8, 16, 128


def _rows(t):
    window = dict(pattern="sliding_window", window=BLOCK, block_size=BLOCK)
    bigbird = dict(pattern="bigbird", window=1, num_global=1, num_random=1, block_size=BLOCK)
    return [
        ("dense causal ring", None, True, N),
        ("flex window=128 causal, ring", window, True, N),
        ("flex window=128 bidirectional, ring", window, False, N),
        ("flex bigbird causal, ring", bigbird, True, N),
        ("flex window=128 causal, one device", window, True, 1),
    ]


def _step(options, causal, n):
    def attend(q, k, v):
        if options is None:
            return ring.ring_attention(q, k, v, causal=causal, block_q=BLOCK, block_k=BLOCK)
        if n == 1:
            return flex.flex_attention(q, k, v, causal=causal, **options)
        return ring_sparse.ring_sparse_attention(
            q, k, v, mechanism="flex", causal=causal, **options
        )

    def loss(q, k, v):
        return jnp.sum(attend(q, k, v).astype(jnp.float32) ** 2)

    return jax.jit(jax.grad(loss, argnums=(0, 1, 2)))


def _mesh(n):
    return jax.make_mesh(
        (n,), ("sequence",), axis_types=(AxisType.Auto,), devices=jax.devices()[:n]
    )


def measure(t, rounds):
    runs, rows = {}, []
    for name, options, causal, n in _rows(t):
        mesh = _mesh(n)
        sh = NamedSharding(mesh, P(None, "sequence"))
        x = jax.ShapeDtypeStruct((1, t, HEADS, HEAD_DIM), jnp.float32, sharding=sh)
        with jax.set_mesh(mesh):
            compiled = _step(options, causal, n).lower(x, x, x).compile()
        m = compiled.memory_analysis()
        mib = (m.argument_size_in_bytes + m.output_size_in_bytes + m.temp_size_in_bytes) / 2**20
        if options is None:
            steps, cost = N, None
        elif n == 1:
            steps, cost = 1, None
        else:
            fn, bs = ring_sparse.ring_pattern("flex", options, t=t, num_heads=HEADS, causal=causal)
            sched = ring_sparse.choose_schedule(fn, t, n, min(bs, t // n), causal)
            steps, cost = len(sched.steps), sched.cost
        xs = [
            jax.device_put(jax.random.normal(jax.random.key(i), (1, t, HEADS, HEAD_DIM)), sh)
            for i in range(3)
        ]
        jax.block_until_ready(compiled(*xs))  # warm
        runs[name] = (compiled, xs)
        rows.append(dict(name=name, devices=n, steps=steps, of=n, cost=cost,
                         footprint_mib=round(mib, 2)))  # fmt: skip
        print(rows[-1], flush=True)
    times = {name: [] for name in runs}
    for _ in range(rounds):  # interleaved: one call of each per round
        for name, (compiled, xs) in runs.items():
            start = time.perf_counter()
            jax.block_until_ready(compiled(*xs))
            times[name].append(time.perf_counter() - start)
    for r in rows:
        r["median_s"] = float(np.median(times[r["name"]]))
    return rows


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scale", choices=sorted(SCALES), default="cpu")
    args = parser.parse_args()
    s = SCALES[args.scale]
    rows = measure(s["length"], s["rounds"])
    load = os.getloadavg()
    out = HERE / "results"
    out.mkdir(exist_ok=True)
    record = {"scale": args.scale, **s, "devices": N, "heads": HEADS, "head_dim": HEAD_DIM,
              "block": BLOCK, "rows": rows, "loadavg": load}  # fmt: skip
    (out / f"sparse_{args.scale}.json").write_text(json.dumps(record, indent=1))
    dense_s = rows[0]["median_s"]
    lines = [
        f"Attention fwd+bwd, [1, {s['length']}, {HEADS}, {HEAD_DIM}] float32, blocks {BLOCK}, "
        f"sequence axis of {N} fake CPU devices (local length {s['length'] // N}); median of "
        f"{s['rounds']} interleaved rounds, load average {tuple(round(x, 2) for x in load)}.",
        "",
        "| attention | ring steps executed | critical-path block pairs | footprint MiB/device "
        "| median s | vs dense ring |",
        "|---|---|---|---|---|---|",
    ]
    for r in rows:
        steps = f"{r['steps']} of {r['of']}" if r["devices"] > 1 else "-"
        cost = "-" if r["cost"] is None else r["cost"]
        lines.append(
            f"| {r['name']} | {steps} | {cost} | {r['footprint_mib']} | "
            f"{r['median_s']:.4f} | {r['median_s'] / dense_s:.2f} |"
        )
    (out / f"sparse_{args.scale}.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
