"""``model.dtype="auto"``: bfloat16 compute on GPU/TPU, float32 on CPU; parameters float32
(issue 36)."""

import jax
import jax.numpy as jnp
import pytest

from seqjax.models import TransformerConfig, TransformerLM
from seqjax.models import dtype as model_dtype
from seqjax.train import defaults


@pytest.mark.parametrize(
    "backend,want", [("cpu", "float32"), ("gpu", "bfloat16"), ("tpu", "bfloat16")]
)
def test_auto_resolves_by_backend(backend, want):
    assert model_dtype.resolve("auto", backend) == want
    assert model_dtype.describe("auto", backend) == f"{want} (auto on {backend})"


def test_explicit_dtype_wins_and_bad_names_raise():
    for name in ("float32", "bfloat16", "float16"):
        assert model_dtype.resolve(name, "gpu") == name == model_dtype.describe(name, "gpu")
    with pytest.raises(ValueError, match=r"model.dtype='fp8' is not one of \('auto'"):
        model_dtype.resolve("fp8")
    assert "auto" in model_dtype.DTYPES and "fp8" not in model_dtype.DTYPES


def test_default_config_is_auto():
    assert defaults.model().dtype == "auto"


def _tiny(dtype):
    return TransformerConfig(
        vocab_size=16, num_layers=1, d_model=16, num_heads=2, max_len=8, dtype=dtype
    )


@pytest.mark.parametrize("backend", ["cpu", "gpu"])
def test_auto_model_computes_in_the_backend_dtype_with_float32_params(backend, monkeypatch):
    """While tracing for ``backend`` (as ``lowering_lib.target`` does): the attention inputs
    are bfloat16 on GPU, float32 on CPU; every parameter is float32 either way."""
    cfg = _tiny("auto")
    tok = jnp.zeros((1, 8), jnp.int32)
    seen = []
    import seqjax.attention.dense as dense

    real = dense.reference_attention

    def spy(q, k, v, **kw):
        seen.append(q.dtype)
        return real(q, k, v, **kw)

    monkeypatch.setattr(dense, "reference_attention", spy)
    monkeypatch.setattr(dense, "auto_implementation", lambda *a, **k: "reference")
    monkeypatch.setattr(jax, "default_backend", lambda: backend)
    model = TransformerLM(cfg)
    params = jax.eval_shape(model.init, jax.random.key(0), tok)["params"]
    assert {leaf.dtype for leaf in jax.tree.leaves(params)} == {jnp.dtype(jnp.float32)}
    want = jnp.bfloat16 if backend == "gpu" else jnp.float32
    assert seen and set(seen) == {jnp.dtype(want)}
