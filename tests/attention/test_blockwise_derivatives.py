"""Derivatives the blockwise engine supports (``seqjax.attention.blockwise``).

First-order reverse mode only; forward mode and second-order reverse mode raise a message
that names the materializing implementations, which support every transformation.

Legend: B batch, T length, H heads, D head dim.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from seqjax import attention
from seqjax.attention import blockwise

B, T, H, D = 1, 16, 2, 4
WAY_OUT = 'implementation="reference"'


def _loss(name, implementation, **opts):
    fn = attention.get(name)

    def loss(q):
        out = fn(q, q, q, causal=True, implementation=implementation, **opts)
        return jnp.sum(jnp.sin(out))

    return loss


CHUNKED = dict(name="dense", implementation="chunked", block_q=8, block_k=8)
BLOCKSPARSE = dict(name="sparse_strided", implementation="blocksparse", stride=4, block_size=4)


def _q(seed=0):
    return jax.random.normal(jax.random.PRNGKey(seed), (B, T, H, D))


TRANSFORMS = {
    "jvp": lambda f, q: jax.jvp(f, (q,), (q,)),
    "jit_jvp": lambda f, q: jax.jit(lambda q: jax.jvp(f, (q,), (q,)))(q),
    "jacfwd": lambda f, q: jax.jacfwd(f)(q),
    "grad_of_grad": lambda f, q: jax.grad(lambda q: jnp.sum(jax.grad(f)(q) ** 2))(q),
    "hvp_forward_over_reverse": lambda f, q: jax.jvp(jax.grad(f), (q,), (q,)),
    "jit_hessian": lambda f, q: jax.jit(jax.hessian(f))(q[:, :8]),
}


@pytest.mark.parametrize("transform", sorted(TRANSFORMS))
@pytest.mark.parametrize("engine", [CHUNKED, BLOCKSPARSE], ids=["chunked", "blocksparse"])
def test_unsupported_derivatives_name_the_way_out(engine, transform):
    opts = dict(engine)
    f = _loss(opts.pop("name"), opts.pop("implementation"), **opts)
    with pytest.raises(NotImplementedError, match=WAY_OUT) as err:
        TRANSFORMS[transform](f, _q())
    assert "first-order reverse mode only" in str(err.value)
    assert str(err.value) == blockwise.HIGHER_ORDER_MESSAGE


def test_first_order_reverse_mode_still_equals_reference_and_the_way_out_works():
    """The guard changes nothing for ``grad`` (also under ``jit`` and ``checkpoint``), and
    the reference's forward mode / Hessian-vector product agree with the chunked gradient:
    ``jvp_ref(t) == <grad_chunked, t>`` and ``hvp_ref(t)`` == a central difference of
    ``grad_chunked``."""
    q, t = _q(1), _q(2)
    chunked = _loss("dense", "chunked", block_q=8, block_k=8)
    reference = _loss("dense", "reference")
    g = jax.jit(jax.grad(jax.checkpoint(chunked)))(q)
    np.testing.assert_allclose(g, jax.grad(reference)(q), rtol=1e-5, atol=1e-5)
    _, jvp_ref = jax.jit(lambda q, t: jax.jvp(reference, (q,), (t,)))(q, t)
    np.testing.assert_allclose(jvp_ref, jnp.sum(g * t), rtol=1e-4, atol=1e-4)
    _, hvp_ref = jax.jit(lambda q, t: jax.jvp(jax.grad(reference), (q,), (t,)))(q, t)
    eps = 1e-2
    grad_c = jax.jit(jax.grad(chunked))
    fd = (grad_c(q + eps * t) - grad_c(q - eps * t)) / (2 * eps)
    np.testing.assert_allclose(hvp_ref, fd, rtol=0.0, atol=2e-2 * float(jnp.abs(fd).max()))
