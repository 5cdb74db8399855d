"""Autoregressive image generation (``DataInfo.task`` 'image_generation'): density modelling
of images as raster-order sequences of 8-bit sub-pixels (Child et al. 2019 §7.2, Table 1;
Parmar et al. 2018), reported in **bits per dimension**: the mean negative log-likelihood of
one sub-pixel in nats divided by ln 2 (a D-dimensional image costs ``D * bits_per_dim`` bits).

Batches (``seqjax.data.images``, ``config.data.image_task='generation'``): ``inputs`` int32
``[B, D]`` = BOS (id 256) then the first D - 1 sub-pixels, ``targets`` int32 ``[B, D]`` the D
sub-pixels (0..255), ``weights`` float32 ``[B, D]``. Validation and test run over whole splits
(the evaluation iterator reads every image once). The model is the causal ``TransformerLM``
over 257 ids; attention must be causal (a mechanism that has no causal form is refused before
anything compiles). The Sparse Transformer patterns default to stride = one image row,
``W * C`` sub-pixels (Child et al. §4.1: "the stride ... equal to the row width" so that the
strided head attends to the column above); a stride must divide the row.

``sample`` draws a grid of images and writes it as a PNG (``seqjax.tasks.image_grid``);
``eval_pictures`` draws one at every evaluation (``samples/step_XXXXXX.png`` in the workdir
and a TensorBoard image).

Legend: B batch, D = H * W * C sub-pixels per image, V = 257 ids.
"""

from __future__ import annotations

import dataclasses
import math

from seqjax.tasks import base, registry

MAX_SAMPLE_IMAGES = 64


class _StridedPatterns:
    """``name in SPARSE``: whether ``name``'s period is its ``stride`` option (asked of the
    attention registry: ``Mechanism.stride_option``), which defaults to one image row."""

    def __contains__(self, name) -> bool:
        return _stride_option(name) == "stride"


SPARSE = _StridedPatterns()


def _spec(config):
    from seqjax.data import images

    return images.SPECS[config.data.name]


def _names(config) -> list[str]:
    from seqjax.attention import registry as attention_registry

    return attention_registry.parse(config.model.attention)


def _stride_option(name: str) -> str | None:
    """The option of ``name`` that sets its pattern's period (one image row by default)."""
    from seqjax.attention import registry as attention_registry

    mech = attention_registry.find(name)
    return mech.stride_option if mech is not None else None


def causal_problem(name: str, options: dict) -> str | None:
    """Why mechanism ``name`` cannot attend causally (its own error), else None.

    Traced abstractly on a tiny shape (nothing compiles); only errors that are about
    causality count (option errors are reported by the config validation itself).
    """
    import functools

    import jax
    import jax.numpy as jnp

    from seqjax import attention as attention_lib

    mech = attention_lib.spec(name)
    q = jax.ShapeDtypeStruct((1, 16, 1, 4), jnp.float32)
    opts = {k: v for k, v in options.items() if k not in ("stride", "block_size", "c")}
    try:
        jax.eval_shape(functools.partial(mech.fn, causal=True, **opts), q, q, q)
    except (ValueError, TypeError, NotImplementedError) as e:
        if "causal" in str(e):
            return str(e).split(". ")[0]
    return None


class ImageGeneration(base.Task):
    name = "image_generation"
    generates = True
    sample_to_file = True

    def input_length(self, config) -> int:
        """D = H * W * C sub-pixels of the data set's images."""
        return _spec(config).num_dims

    def validate(self, config, bad) -> None:
        m = config.model
        row = _spec(config).width * _spec(config).channels
        options = m.get("attention_options") or {}
        for name in dict.fromkeys(_names(config)):
            try:
                why = causal_problem(name, dict(options.get(name, {}) or {}))
            except (KeyError, ValueError):
                continue  # an unknown name: reported by the config validation
            if why:
                bad("model.attention", m.attention,
                    f"causal mechanisms only for image generation (each sub-pixel is predicted "
                    f"from the previous ones), and {name!r} has no causal form")  # fmt: skip
            key = _stride_option(name)
            stride = (options.get(name, {}) or {}).get(key) if key else None
            if stride is not None and (not isinstance(stride, int) or stride < 1 or row % stride):
                bad(f"model.attention_options.{name}.{key}", stride,
                    f"a divisor of the image row, {row} sub-pixels (width x channels) of "
                    f"{config.data.name}; None = the row (Child et al. 2019 §4.1)")  # fmt: skip
        n = config.train.sample_length
        if isinstance(n, int) and n > MAX_SAMPLE_IMAGES:
            bad("train.sample_length", n,
                f"0..{MAX_SAMPLE_IMAGES} (images in the sample grid of an image task)")  # fmt: skip

    def model_config(self, config, info):
        """The causal LM's config; the sparse patterns' stride defaults to one image row."""
        from seqjax.models import layers

        cfg = super().model_config(config, info)
        if not hasattr(cfg, "attention"):  # a family without per-layer mechanisms
            return cfg
        h, w, c = info.image_shape
        cycle = []
        for name, opts in cfg.attention:
            opts = dict(opts)
            if name in SPARSE and opts.get("stride") is None:
                opts["stride"] = w * c
            cycle.append((name, layers.freeze_options(opts)))
        return dataclasses.replace(cfg, attention=tuple(cycle))

    def train_metrics(self, sums, total_weight) -> dict:
        out = super().train_metrics(sums, total_weight)
        out["bits_per_dim"] = out["loss"] / math.log(2)
        return out

    def eval_summary(self, sums, config) -> dict:
        """loss (nats per sub-pixel), accuracy, count (sub-pixels), bits_per_dim."""
        out = super().eval_summary(sums, config)
        out["bits_per_dim"] = out["loss"] / math.log(2)
        return out

    def tokens_per_step(self, config) -> int:
        return int(config.data.batch_size) * self.input_length(config)

    def flops_per_step(self, run) -> float:
        from seqjax.models import flops

        return flops.train_flops_per_step(
            run.model_cfg, run.abstract["params"], batch_size=run.config.data.batch_size,
            seq_len=self.input_length(run.config), tied_output=run.model_cfg.tie_embeddings,
        )  # fmt: skip

    # ---- generation: a grid of images --------------------------------------------------

    def check_sample_inputs(self, run, prompt: str, length: int) -> None:
        from seqjax.tasks import inputs

        if not 1 <= length <= MAX_SAMPLE_IMAGES:
            raise inputs.InputError(
                f"--length={length} is the number of images for an image model; valid: "
                f"1..{MAX_SAMPLE_IMAGES}"
            )
        if prompt.strip() and not prompt.strip().endswith(".png"):
            raise inputs.InputError(
                f"--prompt={prompt!r}: for an image model the prompt is the PNG file the "
                "sample grid is written to (ending in .png), or empty for samples.png"
            )

    def sample(
        self, run, params, prompt: str, length: int, *, temperature=1.0, top_k=0, top_p=1.0,
        seed=0,
    ) -> str:  # fmt: skip
        """Draws ``length`` images (a grid) and writes them as a PNG to ``prompt`` when it
        names a .png file, else to ``samples.png``; returns a line naming the file."""
        from seqjax.tasks import image_grid

        n = max(1, min(int(length), MAX_SAMPLE_IMAGES))
        pixels = image_grid.sample_images(
            run.model_cfg, params, run.info.image_shape, n, temperature=temperature, seed=seed,
            top_k=top_k, top_p=top_p,
        )  # fmt: skip
        path = prompt.strip() if prompt.strip().endswith(".png") else "samples.png"
        image_grid.write_png(path, image_grid.grid(pixels))
        return f"\nwrote {n} sampled images as a grid to {path}"

    def eval_pictures(self, run, params, split: str, *, num: int, seed: int = 0) -> dict:
        """``{'samples': grid}``: ``num`` images drawn at temperature 1 (the distribution
        whose bits/dim the evaluation reports), with the same seed at every evaluation so
        successive grids show the same random draws through a changing model. ``split``
        plays no part."""
        from seqjax.tasks import image_grid

        del split
        pixels = image_grid.sample_images(
            run.model_cfg, params, run.info.image_shape, int(num), temperature=1.0, seed=seed
        )
        return {"samples": image_grid.grid(pixels)}

    def describe_data(self, config, info) -> str:
        """Images of ``DataInfo.image_shape`` as raster-order sub-pixel sequences."""
        d, shape = config.data, info.image_shape
        return (f"{d.name}, images of {'x'.join(map(str, shape))} = {self.input_length(config)} "
                f"sub-pixels, batch {d.batch_size}; splits (images): "
                f"{base.split_sizes(info)}")  # fmt: skip

    def describe_sample(self, prompt: str, text: str) -> str:
        return text.strip()


TASK = registry.register(ImageGeneration())
