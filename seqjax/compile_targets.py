"""Compile-only accelerators on a machine without one: an H100, an A100, a TPU v5e pod slice.

XLA's GPU compiler runs without a GPU or CUDA libraries: the CUDA PJRT plugin of the installed
jaxlib (``xla_cuda_plugin.so`` of the ``jax-cuda12-pjrt`` wheel at jaxlib's version, fetched
into a cache folder by ``python -m seqjax.compile_targets fetch``; see ``cuda_plugin_path``)
makes compile-only devices from a GPU target description (XLA's ``GpuTargetConfigProto``
text, ``GPU_DEVICES``), and ``jax.jit(f).lower(...).compile()``
runs XLA's whole GPU pipeline for them, Triton included: a Pallas kernel asking for more shared
memory than the device has fails here with the compiler's own ``RESOURCE_EXHAUSTED: Shared
memory size limit exceeded``. ``libtpu`` (``".[tpu-compile]"``, the version JAX's ``tpu``
extra pins) does the same for TPU topologies (``"v5e:2x2"``: 4 chips), Mosaic included.
Targets (``TARGETS``): ``h100``, ``a100``, ``h100x8`` (8 H100s in one box), ``v5e`` (2x2),
``v5e-8`` (2x4).
``compiled.memory_analysis()`` then gives the program's device memory before a device is
rented (``seqjax.train.dry_run``).

``compiling_for(devices)`` makes seqjax trace as it would on the device: its kernel dispatch
(``jax.default_backend()``), its device lists (``jax.devices()``, meshes) and the Pallas tile
planner's shared-memory budget answer for the target, and JAX's cuDNN version check answers
``CUDNN_VERSION`` (a CPU-only jaxlib has no cuDNN to ask).

What a compile-only device cannot give: speed, and the numerics of the device (TF32
matmuls, the kernels' reassociation); those need the device (README, "Compile-only checks").
"""

from __future__ import annotations

import contextlib
import functools
import importlib.metadata
import importlib.util
import os
import re
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

import jax

# XLA's GPU target descriptions (stream_executor.GpuTargetConfigProto, text format): the
# figures each device reports to XLA (cudaDeviceProp). ``shared_memory_per_block_optin`` is
# the budget of one Triton kernel; ``device_memory_size`` the HBM a program may use.
_GPU_SPEC = """gpu_device_info {{
  threads_per_block_limit: 1024
  threads_per_warp: 32
  shared_memory_per_block: 49152
  shared_memory_per_core: {smem_per_core}
  threads_per_core_limit: 2048
  core_count: {cores}
  fpus_per_core: {fpus}
  block_dim_limit_x: 2147483647
  block_dim_limit_y: 65535
  block_dim_limit_z: 65535
  memory_bandwidth: {bandwidth}
  l2_cache_size: {l2}
  clock_rate_ghz: {clock}
  device_memory_size: {memory}
  shared_memory_per_block_optin: {smem_optin}
  cuda_compute_capability {{ major: {major} minor: {minor} }}
  registers_per_core_limit: 65536
  registers_per_block_limit: 65536
}}
platform_name: "CUDA"
dnn_version_info {{ major: 9 minor: 8 }}
device_description_str: "{name}"
"""
GPU_DEVICES = {
    "h100": dict(
        name="NVIDIA H100 80GB HBM3", major=9, minor=0, cores=132, fpus=128,
        smem_per_core=233472, smem_optin=232448, memory=84942979072,
        bandwidth=3352320000000, l2=52428800, clock=1.98,
    ),
    "a100": dict(
        name="NVIDIA A100-SXM4-80GB", major=8, minor=0, cores=108, fpus=64,
        smem_per_core=167936, smem_optin=166912, memory=85100068864,
        bandwidth=2039040000000, l2=41943040, clock=1.41,
    ),
}  # fmt: skip
# GPU targets: (device, PJRT topology "slices x hosts x devices per host").
GPU_TARGETS = {"h100": ("h100", "1x1x1"), "a100": ("a100", "1x1x1"), "h100x8": ("h100", "1x1x8")}
TPU_TOPOLOGIES = {"v5e": "v5e:2x2", "v5e-8": "v5e:2x4"}
TARGETS = (*GPU_TARGETS, *TPU_TOPOLOGIES)
CUDNN_VERSION = 90800  # cuDNN 9.8: what jax 0.10's CUDA wheels use
# The Pallas tile planner's budget override (``seqjax.attention.pallas_plan.ENV_BUDGET``).
PALLAS_BUDGET_ENV = "SEQJAX_PALLAS_SMEM_BYTES"
CUDA_PLUGIN_ENV = "SEQJAX_CUDA_PLUGIN"  # a path to xla_cuda_plugin.so (else the cache's)
CUDA_PLUGIN_WHEEL = "jax-cuda12-pjrt"
CUDA_PLUGIN_MEMBER = "jax_plugins/xla_cuda12/xla_cuda_plugin.so"


def gpu_spec(name: str, **changes) -> str:
    """The target description of ``GPU_DEVICES[name]`` with fields changed (e.g.
    ``smem_optin=1`` to read each kernel's figure from the compiler's refusal)."""
    return _GPU_SPEC.format(**{**GPU_DEVICES[name], **changes})


def _jaxlib_version() -> str:
    return importlib.metadata.version("jaxlib")


def _installed(dist: str) -> str | None:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


def cache_dir() -> Path:
    """Where ``fetch`` puts the plugin: ``$XDG_CACHE_HOME/seqjax`` (``~/.cache/seqjax``)."""
    root = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(root) / "seqjax" / f"{CUDA_PLUGIN_WHEEL}-{_jaxlib_version()}"


def cuda_plugin_path() -> str | None:
    """``xla_cuda_plugin.so`` matching jaxlib: ``$SEQJAX_CUDA_PLUGIN``, else the one ``fetch``
    unpacked (``cache_dir``), else an installed ``jax-cuda12-pjrt`` wheel's at jaxlib's
    version (a CUDA install). The wheel is not a test extra: installed, JAX loads its plugin
    in every process and logs to stderr there ("cuda_plugin_extension is not found")."""
    if os.environ.get(CUDA_PLUGIN_ENV):
        return os.environ[CUDA_PLUGIN_ENV]
    cached = cache_dir() / "xla_cuda_plugin.so"
    if cached.is_file():
        return str(cached)
    spec = importlib.util.find_spec("jax_plugins")
    if _installed(CUDA_PLUGIN_WHEEL) == _jaxlib_version():
        for root in spec.submodule_search_locations if spec else ():
            path = Path(root) / "xla_cuda12" / "xla_cuda_plugin.so"
            if path.is_file():
                return str(path)
    return None


def fetch() -> str:
    """Downloads ``jax-cuda12-pjrt`` at jaxlib's version with pip (no install) and unpacks
    its ``xla_cuda_plugin.so`` into ``cache_dir()``; returns the path."""
    target = cache_dir() / "xla_cuda_plugin.so"
    if target.is_file():
        return str(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        pin = f"{CUDA_PLUGIN_WHEEL}=={_jaxlib_version()}"
        cmd = [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", pin, "-d", tmp]
        subprocess.run(cmd, check=True)
        (wheel,) = Path(tmp).glob("*.whl")
        with zipfile.ZipFile(wheel) as z, z.open(CUDA_PLUGIN_MEMBER) as src:
            partial = target.with_suffix(".partial")
            partial.write_bytes(src.read())
            partial.rename(target)
    return str(target)


def problem(target: str) -> str | None:
    """Why ``target`` cannot be compiled for here (None when it can)."""
    if target not in TARGETS:
        return f"compile target {target!r} is not one of {', '.join(TARGETS)}"
    if target in GPU_TARGETS:
        if cuda_plugin_path() is None:
            return (
                f"XLA's CUDA compiler plugin for jaxlib {_jaxlib_version()} is not fetched "
                "(python -m seqjax.compile_targets fetch)"
            )
        return None
    if _installed("libtpu") is None:
        return "libtpu is not installed (pip install -e '.[tpu-compile]')"
    return None


def _register_cuda_plugin() -> None:
    """Registers the plugin under ``cuda`` unless JAX's plugin discovery already did (an
    installed CUDA jaxlib)."""
    from jax._src import xla_bridge as xb

    xb._discover_and_register_pjrt_plugins()
    if "cuda" not in xb._topology_factories:
        xb.register_plugin("cuda", library_path=cuda_plugin_path())


@functools.cache
def _devices(target: str, spec: str | None) -> tuple:
    from jax.experimental import topologies

    if target in GPU_TARGETS:
        _register_cuda_plugin()
        device, topology = GPU_TARGETS[target]
        topo = topologies.get_topology_desc(
            target, "cuda", target_config=spec or gpu_spec(device), topology=topology
        )
    else:
        # Several processes may hold libtpu at once (pytest -n 2; no chip is opened).
        os.environ.setdefault("ALLOW_MULTIPLE_LIBTPU_LOAD", "1")
        topo = topologies.get_topology_desc(platform="tpu", topology_name=TPU_TOPOLOGIES[target])
    return tuple(topo.devices)


def devices(target: str, spec: str | None = None) -> list:
    """The compile-only devices of ``target`` (``spec``: another GPU description).

    Raises:
      ValueError: when the target is unknown or its compiler is not installed (``problem``).
    """
    why = problem(target)
    if why is not None:
        raise ValueError(why)
    return list(_devices(target, spec))


def device_memory(device) -> int | None:
    """Bytes of device memory a program may use: the GPU description's figure, or the TPU
    chip's HBM (``TPU_HBM``) by ``device_kind``."""
    kind = str(device.device_kind)
    for spec in GPU_DEVICES.values():
        if spec["name"] == kind:
            return int(spec["memory"])
    for name, size in TPU_HBM.items():
        if name in kind:
            return size
    return None


def shared_memory_budget(device) -> int | None:
    """The shared memory one kernel may use on a compile-only GPU (None elsewhere)."""
    for spec in GPU_DEVICES.values():
        if spec["name"] == str(device.device_kind):
            return int(spec["smem_optin"])
    return None


GIB = 1 << 30
TPU_HBM = {"v5 lite": 16 * GIB, "v5p": 95 * GIB, "v4": 32 * GIB, "v6 lite": 32 * GIB}


@contextlib.contextmanager
def compiling_for(target_devices, budget: int | None = None):
    """While tracing, seqjax sees ``target_devices`` (module docstring): its dispatch, its
    meshes and the Pallas planner's budget (``budget`` bytes if given) are the target's."""
    from jax._src.cudnn import fused_attention_stablehlo as cudnn_fa

    target_devices = list(target_devices)
    platform = target_devices[0].platform  # "gpu" or "tpu"
    patched = {
        "default_backend": lambda: platform,
        "devices": lambda backend=None: list(target_devices),
        "local_devices": lambda *a, **k: list(target_devices),
        "device_count": lambda backend=None: len(target_devices),
        "local_device_count": lambda backend=None: len(target_devices),
    }
    saved = {name: getattr(jax, name) for name in patched}
    saved_cudnn = cudnn_fa.check_cudnn_version
    saved_env = os.environ.get(PALLAS_BUDGET_ENV)
    for name, fn in patched.items():
        setattr(jax, name, fn)
    cudnn_fa.check_cudnn_version = lambda: CUDNN_VERSION
    budget = budget or shared_memory_budget(target_devices[0])
    if budget is not None:
        os.environ[PALLAS_BUDGET_ENV] = str(budget)
    try:
        yield
    finally:
        for name, fn in saved.items():
            setattr(jax, name, fn)
        cudnn_fa.check_cudnn_version = saved_cudnn
        if saved_env is None:
            os.environ.pop(PALLAS_BUDGET_ENV, None)
        else:
            os.environ[PALLAS_BUDGET_ENV] = saved_env


def compile_for(fn, target_devices, *args, compiler_options=None, budget=None):
    """``jax.jit(fn)`` traced as on the target and compiled for its (compile-only) devices;
    ``args`` are ``jax.ShapeDtypeStruct``s (with a sharding over the target's devices, or
    none for the first device). Raises the compiler's error when it refuses the program."""
    from jax.sharding import SingleDeviceSharding

    target_devices = list(target_devices)
    one = SingleDeviceSharding(target_devices[0])

    def placed(x):
        if isinstance(x, jax.ShapeDtypeStruct) and x.sharding is None:
            return jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=one)
        return x

    args = jax.tree.map(placed, args)
    jitted = fn if hasattr(fn, "trace") else jax.jit(fn)
    with compiling_for(target_devices, budget):
        lowered = jitted.trace(*args).lower()
    return lowered.compile(compiler_options=compiler_options)


_KERNEL_LINE = re.compile(r"kCustomKernel .*?\] (\S+) grid: .*shared_memory: (\d+) bytes")


def kernel_shared_memory(fn, target_devices, *args, budget=None) -> dict[str, int]:
    """``{kernel name: shared-memory bytes}`` of every GPU kernel of ``fn`` with any (the
    largest where a name repeats), as the compiler allocated them: read from the program's
    thunk sequence (XLA's dump of the compiled kernels and their launch settings)."""
    with tempfile.TemporaryDirectory() as tmp:
        options = {"xla_dump_to": tmp, "xla_dump_hlo_module_re": "jit_.*"}
        compile_for(fn, target_devices, *args, compiler_options=options, budget=budget)
        found: dict[str, int] = {}
        for path in Path(tmp).glob("*thunk_sequence.txt"):
            for name, size in _KERNEL_LINE.findall(path.read_text()):
                if int(size):
                    found[name] = max(found.get(name, 0), int(size))
    return found


if __name__ == "__main__":  # python -m seqjax.compile_targets fetch
    if sys.argv[1:] != ["fetch"]:
        sys.exit("usage: python -m seqjax.compile_targets fetch")
    print(fetch())
