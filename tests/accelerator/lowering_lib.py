"""Lowering seqjax for GPU (``cuda``) and TPU on a CPU-only machine (``jax.export``).

``export(fn, platform, *args)`` traces ``fn`` as the target would run it and lowers it to
StableHLO for ``platform`` with ``jax.export.export(jax.jit(fn), platforms=[platform])``;
nothing is compiled or run. What that proves and what it does not:

* the Pallas kernels go through their real compiler front ends: Pallas -> **Mosaic** (TPU,
  ``tpu_custom_call``; block shapes, tiling and layouts are checked here) and Pallas ->
  **Triton** (GPU, ``__gpu$xla.gpu.triton``; Triton's block-shape rules are checked here).
  A kernel that lowers on CPU can still fail in the device compiler (Mosaic's and Triton's
  later passes, register pressure) — that needs the device;
* the dispatch is the target's: seqjax picks kernels with ``jax.default_backend()``, so
  ``target(platform)`` makes it answer ``"gpu"``/``"tpu"`` while tracing (``auto`` then
  means cuDNN / Pallas-Triton on GPU and splash on TPU, and the kernels leave interpret
  mode);
* cuDNN attention: JAX's cuDNN front end asks the CUDA plugin for the cuDNN version
  (``check_cudnn_version``), which a CPU-only jaxlib does not have; ``target("cuda")`` pins
  it to ``CUDNN_VERSION`` so that the ``__cudnn$fmha*`` custom calls are emitted with their
  shapes and masks checked by JAX's cuDNN rules (head dims, dtypes, layouts). The cuDNN
  graph itself is built only by XLA on a GPU;
* the TPU chip: a few Mosaic lowering rules ask the device for its generation (e.g. the
  ``sign`` in an integer ``%``); on a CPU host ``target("tpu")`` answers a TPU v5e
  (``TPU_CHIP``) with one core;
* tracer leaks (e.g. a cache that kept a trace's tracers) fail here as they would on the
  device, because the target's code path is traced.

**Disabled checks.** ``jax.export`` refuses custom calls without a compatibility guarantee
unless they are named; only these are: ``__gpu$xla.gpu.triton`` (the Pallas-Triton
kernels) and ``__cudnn$fmhaSoftmax`` / ``__cudnn$fmhaSoftmaxBackward`` (cuDNN fused
attention). ``tpu_custom_call`` (Mosaic) is on JAX's stable list and needs nothing. Any
other custom call still fails the export.
"""

from __future__ import annotations

import contextlib
import json
import re
from collections.abc import Callable

import jax
from jax import export as jax_export

TRITON = "__gpu$xla.gpu.triton"
CUDNN = (
    "__cudnn$fmhaSoftmax",
    "__cudnn$fmhaSoftmaxBackward",
    "__cudnn$fmhaScaleBiasSoftmax",
    "__cudnn$fmhaScaleBiasSoftmaxBackward",
)
MOSAIC = "tpu_custom_call"
PLATFORMS = ("cuda", "tpu")
DISABLED = {
    "cuda": tuple(jax_export.DisabledSafetyCheck.custom_call(n) for n in (TRITON, *CUDNN)),
    "tpu": (),
}
BACKEND = {"cuda": "gpu", "tpu": "tpu"}
CUDNN_VERSION = 90800  # pinned for lowering only (cuDNN 9.8: what jax 0.10's CUDA wheels use)


def _tpu_chip():
    from jax._src.pallas.mosaic import tpu_info

    return tpu_info.ChipVersion.TPU_V5E


TPU_CHIP = _tpu_chip()  # the chip Mosaic's chip-dependent lowering rules assume (v5e)


@contextlib.contextmanager
def target(platform: str):
    """While tracing: ``jax.default_backend()`` answers the target's backend name (seqjax's
    kernel dispatch), and for ``cuda`` JAX's cuDNN version check answers ``CUDNN_VERSION``."""
    if platform not in PLATFORMS:
        raise ValueError(f"platform {platform!r} is not one of {PLATFORMS}")
    from jax._src.cudnn import fused_attention_stablehlo as cudnn_fa
    from jax._src.pallas.mosaic import tpu_info

    saved = jax.default_backend, cudnn_fa.check_cudnn_version
    jax.default_backend = lambda: BACKEND[platform]
    if platform == "cuda":
        cudnn_fa.check_cudnn_version = lambda: CUDNN_VERSION
    kind = jax.devices()[0].device_kind  # "cpu": Mosaic asks it for the chip's properties
    had_kind = kind in tpu_info.registry
    if platform == "tpu" and not had_kind:
        tpu_info.registry[kind] = lambda: tpu_info._get_tpu_info_impl(TPU_CHIP, 1)
    try:
        yield
    finally:
        jax.default_backend, cudnn_fa.check_cudnn_version = saved
        if platform == "tpu" and not had_kind:
            del tpu_info.registry[kind]


def export(fn: Callable, platform: str, *args) -> jax_export.Exported:
    """``fn`` (jitted here unless it already is) lowered for ``platform`` on this machine."""
    jitted = fn if hasattr(fn, "lower") else jax.jit(fn)
    with target(platform):
        return jax_export.export(jitted, platforms=[platform], disabled_checks=DISABLED[platform])(
            *args
        )


def custom_calls(exported: jax_export.Exported) -> list[dict]:
    """Every custom call of the lowered module: ``{'target', 'name', 'grid'}`` where known
    (``name``: the Pallas kernel's name; ``grid``: Triton's launch grid ``(x, y, z)``; for
    Triton also ``num_warps`` and ``num_stages``)."""
    calls = []
    for line in exported.mlir_module().splitlines():
        m = re.search(r"stablehlo\.custom_call @([\w$.]+)\(", line)
        if not m:
            continue
        call = {"target": m.group(1), "name": None, "grid": None}
        if call["target"] == TRITON:
            name = re.search(r'name = "([^"]*)"', line)
            grid = [re.search(rf"grid_{a} = (\d+)", line) for a in "xyz"]
            call["name"] = name.group(1) if name else None
            if all(grid):
                call["grid"] = tuple(int(g.group(1)) for g in grid)
            for setting in ("num_warps", "num_stages"):
                found = re.search(rf"{setting} = (\d+)", line)
                call[setting] = int(found.group(1)) if found else None
        elif call["target"] == MOSAIC:
            name = re.search(r'kernel_name = "([^"]*)"', line)
            call["name"] = name.group(1) if name else None
            config = re.search(r'backend_config = "((?:[^"\\]|\\.)*)"', line)
            if config:  # the serialized Mosaic module is present
                text = config.group(1).replace("\\22", '"')
                call["mosaic_body_chars"] = len(json.loads(text)["custom_call_config"]["body"])
        calls.append(call)
    return calls


def targets(exported: jax_export.Exported) -> list[str]:
    return [c["target"] for c in custom_calls(exported)]


# ---------------------------------------------------------------------------- train steps


def _set(config, overrides: dict):
    for key, value in overrides.items():
        node = config
        *parents, leaf = key.split(".")
        for p in parents:
            node = node[p]
        node[leaf] = value
    return config


def family_config(family: str):
    """The smoke config of a model family, shrunk for lowering (no data is read)."""
    from seqjax.configs import common

    path = {
        "lm_dense": "char_lm.py",
        "lm_sparse": "sparse_lm.py",
        "classifier": "lra_listops.py",
        "lsh_reversible": "lsh_lm.py",
        "transformer_xl": "transformer_xl.py",
    }[family]
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    config = common.load_file(root / "configs" / path).get_config("smoke")
    config.mesh.data = 1
    config.data.batch_size = 2
    if family == "lm_sparse":  # the kernels' dispatch ("auto"), tiles of 16 for Triton
        for name in ("sparse_strided", "sparse_fixed"):
            config.model.attention_options[name].update(implementation="auto", stride=16)
        config.model.attention_options.sparse_fixed.c = 4
    if family == "lsh_reversible":
        config.model.reversible = True
        config.model.attention_options.dense.implementation = "auto"
    if family == "classifier":  # LRA's attention dropout sends dense to plain JAX: off
        config.model.attention_dropout_rate = 0.0
        config.data.max_len = 127  # + CLS = 128
        config.model.max_len = 128
    return config


def _fake_info(config):
    """A ``DataInfo`` with the shapes the config implies (the data is never read)."""
    from seqjax import data as data_lib
    from seqjax import tasks
    from seqjax.train import config_validation

    task = tasks.for_data_config(config.data)
    classification = task.name == "classification"
    return data_lib.DataInfo(
        name=config.data.name,
        task=task.name,
        vocab_size=96,
        seq_len=config_validation.input_length(config),
        num_classes=10 if classification else None,
        pad_id=0 if classification else None,
        fingerprint="lowering",
        split_sizes={"train": 10_000},
        encode=lambda s: None,
        decode=lambda ids: "",
    )


def train_step_and_args(config):
    """The jitted train step of ``config`` (sharded as training shards it) and abstract
    ``(state, batch)`` arguments (``seqjax.train.dry_run.train_step_and_args``; the data
    is described by ``_fake_info``, never read)."""
    from seqjax.train import dry_run

    return dry_run.train_step_and_args(config, _fake_info(config), accum_steps=1)


def export_train_step(config, platform: str) -> jax_export.Exported:
    """The full jitted train step of ``config`` lowered for ``platform``."""
    from seqjax.train import sharding

    with target(platform):  # the model's dispatch happens while tracing, inside
        jitted, args, mesh = train_step_and_args(config)
        with sharding.rules_and_mesh(mesh):
            return export(jitted, platform, *args)


def lower_train_step(config, platform: str):
    """The train step lowered for ``platform`` with ``jit(...).trace(...).lower`` (not
    serialized): for meshes of several devices, where cuDNN's sharding rule
    (``custom_partitioning``, a Python callback) cannot be serialized by ``jax.export``.
    Returns the lowered module's text."""
    from seqjax.train import sharding

    with target(platform):
        jitted, args, mesh = train_step_and_args(config)
        with sharding.rules_and_mesh(mesh):
            return jitted.trace(*args).lower(lowering_platforms=(platform,)).as_text()
