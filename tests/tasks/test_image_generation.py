"""Image generation: bits/dim, causal-only attention, the row stride of the sparse patterns,
axial positions, and sampled grids written as real PNG files."""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from seqjax import tasks
from seqjax.models import layers
from seqjax.models.transformer import TransformerConfig, TransformerLM, attention_cycle
from seqjax.tasks import image_grid


def test_bits_per_dim_of_a_known_distribution_is_its_entropy():
    """Logits = log p and targets drawn in exactly p's proportions: the loss is the entropy
    H(p) in nats, so bits/dim = H(p) / ln 2 = -sum p log2 p (1.75 bits here)."""
    task = tasks.get("image_generation")
    p = np.zeros(257)
    p[[7, 100, 200, 255]] = [1 / 2, 1 / 4, 1 / 8, 1 / 8]
    logits = np.log(np.where(p > 0, p, 1e-30))
    targets = np.array([[7, 7, 7, 7, 100, 100, 200, 255]] * 3, np.int32)
    logits_BDV = jnp.asarray(np.broadcast_to(logits, (*targets.shape, 257)), jnp.float32)
    weights = np.ones(targets.shape, np.float32)
    weights[2, :] = 0  # a padding row of the last evaluation batch does not count
    sums = task.sums(logits_BDV, {"targets": jnp.asarray(targets), "weights": jnp.asarray(weights)})
    out = task.eval_summary(jax.tree.map(float, sums), None)
    entropy_bits = -sum(q * math.log2(q) for q in p if q > 0)
    assert out["count"] == 16
    assert out["bits_per_dim"] == pytest.approx(entropy_bits, rel=1e-5)
    assert out["bits_per_dim"] == pytest.approx(out["loss"] / math.log(2), rel=1e-6)


def test_axial_positions_are_row_plus_column_plus_channel():
    h, w, c, e = 3, 4, 2, 8
    mod = layers.AxialPositions((h, w, c), e)
    pos_BT = jnp.arange(h * w * c)[None]
    params = mod.init(jax.random.PRNGKey(0), pos_BT)["params"]
    out = np.asarray(mod.apply({"params": params}, pos_BT))[0]
    row, col, chan = (np.asarray(params[k].unbox() if hasattr(params[k], "unbox") else params[k])
                      for k in ("row", "col", "chan"))  # fmt: skip
    for p in range(h * w * c):
        r, q, k = p // (w * c), (p // c) % w, p % c
        np.testing.assert_allclose(out[p], row[r] + col[q] + chan[k], rtol=1e-6)


def _lm(attention="dense", options=None, shape=(4, 4, 3), positional="axial", **kw):
    d = shape[0] * shape[1] * shape[2]
    cfg = TransformerConfig(vocab_size=257, num_layers=2, num_heads=2, d_model=16, max_len=d,
                            attention=attention_cycle(attention, {attention: options or {}}),
                            positional=positional, axial_shape=shape, **kw)  # fmt: skip
    model = TransformerLM(cfg)
    params = model.init(jax.random.PRNGKey(1), jnp.zeros((1, d), jnp.int32))["params"]
    return cfg, model, params


@pytest.mark.parametrize("attention", ["dense", "sparse_strided"])
def test_generation_model_is_causal_with_axial_positions_and_row_stride(attention):
    """Changing sub-pixel t changes no logit before t (axial positions, stride = a row)."""
    cfg, model, params = _lm(attention, {"stride": 12} if attention != "dense" else None)
    x = jax.random.randint(jax.random.PRNGKey(2), (1, 48), 0, 257)
    y = x.at[0, 30:].set((x[0, 30:] + 1) % 256)
    fwd = jax.jit(lambda t: model.apply({"params": params}, t))
    a, b = fwd(x), fwd(y)
    np.testing.assert_allclose(a[0, :30], b[0, :30], atol=1e-5)
    assert not np.allclose(a[0, 30:], b[0, 30:])


def test_axial_needs_image_data():
    with pytest.raises(ValueError, match="positional='axial' needs image data"):
        TransformerConfig(vocab_size=10, positional="axial")


def test_sampled_grid_is_a_real_png_of_the_right_size(tmp_path, monkeypatch):
    """The cached and the prefix-recomputing samplers draw the same images, and the grid
    PNG reads back with the grid's pixel size and values."""
    import matplotlib.image

    cfg, _, params = _lm("dense", shape=(4, 4, 3))
    cached = image_grid.sample_images(cfg, params, (4, 4, 3), 5, temperature=1.0, seed=3)
    import seqjax.tasks.sampling as sampling

    monkeypatch.setattr(sampling, "uses_kv_cache", lambda cfg: False)
    windowed = image_grid.sample_images(cfg, params, (4, 4, 3), 5, temperature=1.0, seed=3)
    np.testing.assert_array_equal(cached, windowed)
    assert cached.shape == (5, 4, 4, 3) and cached.dtype == np.uint8
    picture = image_grid.grid(cached, pad=1)  # 3 columns x 2 rows of 4x4 with 1-pixel gaps
    assert picture.shape == (2 * 5 + 1, 3 * 5 + 1, 3)
    path = image_grid.write_png(tmp_path / "grid.png", picture)
    assert open(path, "rb").read(8) == b"\x89PNG\r\n\x1a\n"
    back = matplotlib.image.imread(path)
    assert back.shape[:2] == (11, 16)
    np.testing.assert_array_equal(np.round(back[..., :3] * 255).astype(np.uint8), picture)
    gray = image_grid.grid(cached[..., :1], pad=0)
    image_grid.write_png(tmp_path / "gray.png", gray)
    assert matplotlib.image.imread(tmp_path / "gray.png").shape[:2] == (8, 12)


def _config(variant="smoke", **fields):
    from seqjax.configs import common
    from tests.conftest import REPO

    module = common.load_file(REPO / "configs" / "image_fashion_mnist.py", name="cfg_img")
    config = module.get_config(variant)
    config.mesh.data = 1
    for dotted, value in fields.items():
        node = config
        *parents, leaf = dotted.split(".")
        for p in parents:
            node = node[p]
        node[leaf] = value
    return config


@pytest.mark.parametrize(
    "fields, message",
    [
        ({"model.attention": "linformer"}, "model.attention='linformer' is invalid; valid: causal"),
        ({"model.attention": "sparse_strided", "model.attention_options.sparse_strided.stride": 5},
         r"sparse_strided.stride=5 is invalid; valid: a divisor of the image row, 28"),
        ({"data.name": "pystdlib", "data.image_task": "classification"},
         "model.positional='axial' is invalid; valid: 'axial' only with image data"),
        ({"data.image_task": "classification", "model.pooling": "cls", "model.max_len": 785},
         "model.pooling='cls' is invalid; valid: 'mean' with model.positional='axial'"),
    ],
)  # fmt: skip
def test_bad_configs_are_one_sentence_before_compiling(fields, message):
    from seqjax.train import config_validation

    with pytest.raises(config_validation.ConfigError, match=message):
        config_validation.validate(_config(**fields))


def test_tasks_of_one_image_set_and_the_row_stride_default():
    from seqjax.data import images

    assert tasks.for_data_config(_config().data).name == "image_generation"
    classify = _config(**{"data.image_task": "classification"})
    assert tasks.for_data_config(classify.data).name == "classification"
    config = _config(**{"model.attention": "sparse_fixed"})
    del config.model.attention_options["sparse_fixed"]["stride"]
    info = type("Info", (), dict(vocab_size=257, pad_id=None, image_shape=(28, 28, 1)))
    cfg = tasks.get("image_generation").model_config(config, info)
    assert dict(cfg.attention[0][1])["stride"] == 28 and cfg.axial_shape == (28, 28, 1)
    assert images.SPECS["fashion_mnist"].num_dims == 784
