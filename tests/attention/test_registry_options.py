"""A misspelled option of a mechanism called from Python raises the README's ValueError
listing the valid options (not a TypeError from an inner function)."""

import jax.numpy as jnp
import numpy as np
import pytest

from seqjax import attention


def _qkv():
    x = jnp.asarray(np.random.default_rng(0).normal(size=(1, 4, 2, 8)), jnp.float32)
    return x, x, x


@pytest.mark.parametrize("name", ["dense", "local", "performer"])
def test_misspelled_option_is_a_value_error(name):
    with pytest.raises(ValueError, match=r"unknown option\(s\) \['casual'\]; valid options: .*"
                       r"'causal'"):  # fmt: skip
        attention.get(name)(*_qkv(), casual=True)


def test_valid_options_still_pass():
    q, k, v = _qkv()
    out = attention.get("dense")(q, k, v, causal=True, implementation="reference")
    ref = attention.get("dense")(q, k, v, causal=True)
    np.testing.assert_allclose(out, ref, atol=1e-6)
