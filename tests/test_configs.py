"""Every config file loads, validates (before compiling anything) and its sweep applies."""

import importlib.util

import pytest

from seqjax.train import config_validation
from tests.conftest import REPO

CONFIGS = sorted(p for p in (REPO / "configs").glob("*.py") if not p.name.startswith("_"))


def _load(path):
    spec = importlib.util.spec_from_file_location(f"cfg_{path.stem}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _set(config, dotted: str, value):
    node = config
    *parents, leaf = dotted.removeprefix("config.").split(".")
    for p in parents:
        node = node[p]
    node[leaf] = value


def _validate(config):
    # Tests see 8 fake devices; "-1 = all devices" would make the batch divisibility depend
    # on this machine, so the data axis is pinned to what a 1-device run uses.
    if config.mesh.data == -1:
        config.mesh.data = 1
    config_validation.validate(config)


@pytest.mark.parametrize("path", CONFIGS, ids=lambda p: p.name)
def test_config_loads_and_validates(path):
    module = _load(path)
    assert module.__doc__ and "python -m seqjax.main" in module.__doc__, "docstring: command"
    for variant in (None, "smoke"):
        _validate(module.get_config(variant))
    if hasattr(module, "sweep"):
        points = module.sweep()
        assert points, "sweep() must list at least one point"
        for point in points:
            config = module.get_config("smoke")
            for key, value in point.items():
                _set(config, key, value)
            _validate(config)


def test_configs_exist():
    names = {p.name for p in CONFIGS}
    assert {"char_lm.py", "lra_text.py", "lra_listops.py"} <= names
