"""The Pallas kernels' shared memory as XLA's GPU compiler allocates it (issue 49).

``probe_kernels`` compiles the three kernels of ``pallas_blocks`` (forward, dK/dV, dQ) at one
setting for a compile-only GPU (``seqjax.compile_targets``) and reads each kernel's bytes
from the compiled program: what ``experiments/accelerator/smem_table.py`` records in
``pallas_smem`` and the compile-only tests re-check.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from seqjax import compile_targets
from seqjax.attention import blockwise, pallas_blocks, score_mod


def probe_kernels(
    device, dtype, d: int, tile: int, stages: int, budget: int, *, variant: str = "extras"
) -> dict[str, int]:
    """Shared-memory bytes of the forward, dK/dV and dQ Pallas kernels at one setting:
    ``{"fwd", "dkdv", "dq"}``, compiled forward and backward for ``device`` at ``tile`` x
    ``tile`` tiles, head dim ``d``, ``stages`` pipeline stages; ``variant`` "extras" with a
    key mask, segment ids and dropout, "plain" without, "t5_bias" with T5's learned bias."""
    t = 2 * tile
    table, count = blockwise.dense_table(2, 2, tile, tile, causal=True, offset=0)

    def attend(q, k, v, bias_NH):
        extra = {}
        if variant == "extras":
            extra = dict(
                mask=jnp.arange(t)[None] < t - 3,
                segment_ids=(jnp.arange(t)[None] >= 7).astype(jnp.int32),
                dropout_rate=0.1,
                dropout_rng=jax.random.key(0),
            )
        elif variant == "t5_bias":
            extra = dict(score_mod=score_mod.t5_bias(bias_NH, causal=True))
        out = pallas_blocks.block_sparse_attention(
            q, k, v, table=table, count=count, block_q=tile, block_k=tile, causal=True,
            num_stages=stages, **extra,
        )  # fmt: skip
        return out.astype(jnp.float32).sum()

    x = jax.ShapeDtypeStruct((1, t, 1, d), dtype)
    bias = jax.ShapeDtypeStruct((32, 1), jnp.float32)
    grad = jax.grad(attend, argnums=(0, 1, 2, 3))
    found = compile_targets.kernel_shared_memory(grad, [device], x, x, x, bias, budget=budget)
    return {k: found.get(f"seqjax_block_sparse_{k}", 0) for k in ("fwd", "dkdv", "dq")}
