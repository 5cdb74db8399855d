"""Pictures of image models: sampling a batch of images, tiling them into a grid, and
writing the grid as a PNG file (matplotlib) or a TensorBoard image (tensorboardX).

Sampling is ancestral in raster order, one sub-pixel per step (Child et al. 2019 §7.2):
with causal dense attention through the model's KV cache, otherwise by recomputing the
prefix for each position (``seqjax.tasks.sampling.prefix_logits``: exactly the prefix's
logits for every mechanism). The BOS id (256) is never drawn.

Legend: N images, H height, W width, C channels, D = H W C, L = model.max_len, V = 257.
"""

from __future__ import annotations

import functools
import io
import math
import os

import jax
import jax.numpy as jnp
import numpy as np

from seqjax.data.images import BOS_ID, NUM_LEVELS


def _pick_NV(logits_NV, rng, temperature, top_k: int, top_p):
    from seqjax.decoding.samplers import sample_logits

    logits_NV = logits_NV.at[:, NUM_LEVELS:].set(-jnp.inf)  # pixel values only, never BOS
    return sample_logits(logits_NV, rng, temperature=temperature, top_k=top_k,
                         top_p=top_p).astype(jnp.int32)  # fmt: skip


@functools.lru_cache(maxsize=8)
def _sampler(model_cfg, image_shape: tuple, num: int, greedy: bool, top_k: int, cached: bool):
    """The jitted ``(params, rng, temperature, top_p) -> int32 [N, D]`` sampler of one model
    and grid size, built once (the loop draws a grid at every evaluation); ``cached``: with
    the model's KV cache, else recomputing the prefix."""
    from seqjax.models import TransformerLM
    from seqjax.tasks.sampling import prefix_logits

    h, w, c = image_shape
    d, max_len = h * w * c, model_cfg.max_len

    def pick(logits_NV, rng, temperature, top_p):
        return _pick_NV(logits_NV, rng, 0 if greedy else temperature, top_k, top_p)

    if cached:
        model = TransformerLM(model_cfg, decode=True)
        shapes = jax.eval_shape(
            model.init, jax.random.PRNGKey(0), jnp.zeros((num, max_len), jnp.int32)
        )

        @jax.jit
        def run(params, rng, temperature, top_p):
            cache0 = jax.tree.map(lambda s: jnp.zeros(s.shape, s.dtype), shapes["cache"])

            def body(carry, _):
                cache, tok_N, rng = carry
                logits, mut = model.apply(
                    {"params": params, "cache": cache}, tok_N[:, None], mutable=["cache"]
                )
                rng, sub = jax.random.split(rng)
                nxt_N = pick(logits[:, -1], sub, temperature, top_p)
                return (mut["cache"], nxt_N, rng), nxt_N

            bos_N = jnp.full((num,), BOS_ID, jnp.int32)
            _, toks_DN = jax.lax.scan(body, (cache0, bos_N, rng), None, length=d)
            return toks_DN.T

        return run
    model = TransformerLM(model_cfg)

    @jax.jit
    def run(params, rng, temperature, top_p):
        # buf[0] = BOS, buf[t] = x_{t-1}: the model's inputs; x_t is read at position t.
        buf_NL = jnp.zeros((num, max_len), jnp.int32).at[:, 0].set(BOS_ID)
        out_ND = jnp.zeros((num, d), jnp.int32)

        def body(t, carry):
            buf_NL, out_ND, rng = carry
            logits_NV = jax.vmap(lambda b: prefix_logits(model, params, b, t + 1))(buf_NL)
            rng, sub = jax.random.split(rng)
            x_N = pick(logits_NV, sub, temperature, top_p)
            buf_NL = buf_NL.at[:, jnp.minimum(t + 1, max_len - 1)].set(x_N)
            return buf_NL, out_ND.at[:, t].set(x_N), rng

        return jax.lax.fori_loop(0, d, body, (buf_NL, out_ND, rng))[1]

    return run


def sample_images(
    model_cfg, params, image_shape, num: int, *, temperature=1.0, seed=0, top_k=0, top_p=1.0
):  # fmt: skip
    """Draws ``num`` images from a trained image model: uint8 ``[N, H, W, C]`` (temperature 0
    = greedy; ``top_k``/``top_p`` as ``seqjax.decoding.sample_logits``)."""
    from seqjax.decoding.samplers import check_sampling
    from seqjax.tasks.sampling import uses_kv_cache

    h, w, c = image_shape
    d, max_len = h * w * c, model_cfg.max_len
    if d > max_len:
        raise ValueError(f"images of {d} sub-pixels exceed the model's max_len={max_len}")
    check_sampling(temperature, top_k, top_p)
    greedy, cached = float(temperature) == 0, uses_kv_cache(model_cfg)
    run = _sampler(model_cfg, (h, w, c), int(num), greedy, int(top_k), cached)
    out = run(params, jax.random.PRNGKey(seed), jnp.float32(temperature), jnp.float32(top_p))
    return np.asarray(out, np.uint8).reshape(num, h, w, c)


def grid(images_NHWC, *, cols: int | None = None, pad: int = 2, value: int = 255) -> np.ndarray:
    """Tiles images into one uint8 picture ``[rows*(H+pad)+pad, cols*(W+pad)+pad, C]``
    (``cols`` default ceil(sqrt(N)); ``pad`` pixels of ``value`` between and around)."""
    images_NHWC = np.asarray(images_NHWC, np.uint8)
    n, h, w, c = images_NHWC.shape
    cols = cols or math.ceil(math.sqrt(n))
    rows = math.ceil(n / cols)
    out = np.full((rows * (h + pad) + pad, cols * (w + pad) + pad, c), value, np.uint8)
    for i in range(n):
        r, q = divmod(i, cols)
        y, x = pad + r * (h + pad), pad + q * (w + pad)
        out[y : y + h, x : x + w] = images_NHWC[i]
    return out


def labelled_grid(images_NHWC, titles, colors=None, *, cell_inches=(1.5, 1.9), dpi=100):
    """Images with a title above each (e.g. predicted and true class), tiled in
    ``ceil(sqrt(N))`` columns: uint8 ``[rows * 1.9 * dpi, cols * 1.5 * dpi, 3]`` rendered by
    matplotlib (Agg, no window). ``colors``: one matplotlib colour per title."""
    import matplotlib

    matplotlib.use("Agg", force=False)
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    images_NHWC = np.asarray(images_NHWC, np.uint8)
    n = len(images_NHWC)
    cols = max(1, math.ceil(math.sqrt(n)))
    rows = max(1, math.ceil(n / cols))
    fig = Figure(figsize=(cols * cell_inches[0], rows * cell_inches[1]), dpi=dpi)
    canvas = FigureCanvasAgg(fig)
    for i in range(rows * cols):
        ax = fig.add_subplot(rows, cols, i + 1)
        ax.axis("off")
        if i >= n:
            continue
        im = images_NHWC[i]
        if im.shape[-1] == 1:
            ax.imshow(im[..., 0], cmap="gray", vmin=0, vmax=255, interpolation="nearest")
        else:
            ax.imshow(im, interpolation="nearest")
        ax.set_title(titles[i], fontsize=7, color=(colors[i] if colors else "black"))
    fig.tight_layout(pad=0.3, h_pad=0.8)
    canvas.draw()
    return np.asarray(canvas.buffer_rgba())[..., :3].copy()


def png_bytes(picture_HWC) -> bytes:
    """A uint8 ``[H, W, C]`` picture (C = 1 or 3) as the bytes of a PNG of exactly H x W."""
    import matplotlib

    matplotlib.use("Agg", force=False)
    import matplotlib.image

    picture = np.asarray(picture_HWC, np.uint8)
    if picture.ndim != 3 or picture.shape[2] not in (1, 3):
        raise ValueError(f"a picture is uint8 [H, W, 1 or 3]; got shape {picture.shape}")
    rgb = np.repeat(picture, 3, axis=2) if picture.shape[2] == 1 else picture
    buf = io.BytesIO()
    matplotlib.image.imsave(buf, rgb, format="png")
    return buf.getvalue()


def write_png(path, picture_HWC) -> str:
    """Writes a uint8 ``[H, W, C]`` picture (C = 1 or 3) as a PNG of exactly H x W pixels
    (``path`` local or an ``epath``/``gs://`` path)."""
    from etils import epath

    data = png_bytes(picture_HWC)
    path = epath.Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return str(path)


def write_tensorboard(logdir, tag: str, picture_HWC, step: int) -> None:
    """Adds the picture as a TensorBoard image (tensorboardX) under ``logdir``."""
    from tensorboardX import SummaryWriter

    with SummaryWriter(os.fspath(logdir)) as writer:
        writer.add_image(tag, np.asarray(picture_HWC, np.uint8), step, dataformats="HWC")
