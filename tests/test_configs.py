"""Every config file loads, validates (before compiling anything) and its sweep applies."""

import pytest

from seqjax.configs import common
from seqjax.train import config_validation
from tests.conftest import REPO

# Every job config (common.py holds what they share and is not one).
CONFIGS = sorted(
    p for p in (REPO / "configs").glob("*.py") if not p.name.startswith("_") and p.stem != "common"
)


def _load(path):
    return common.load_file(path, name=f"cfg_{path.stem}")


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


@pytest.mark.parametrize("path", CONFIGS, ids=lambda p: p.name)
def test_unknown_variant_names_the_file(path):
    """A bad ``:arg`` is one ValueError naming the config file and the bad item."""
    with pytest.raises(ValueError, match=rf"configs/{path.name} .*'no_such_variant'"):
        _load(path).get_config("no_such_variant")


def test_variant_and_parse_args():
    assert common.variant(None, ("a", "b"), "f.py") == "a"
    assert common.variant("b", ("a", "b"), "f.py") == "b"
    with pytest.raises(ValueError, match=r"^f\.py variant 'c'; valid: a, b$"):
        common.variant("c", ("a", "b"), "f.py")
    options = {"k": (128, 256), "sharing": ("none", "kv")}
    got = common.parse_args(" k=128 , smoke", "f.py", ("smoke", "fast"), options, {"k": 256})
    assert got == {"smoke": True, "fast": False, "k": 128, "sharing": None}
    assert type(got["k"]) is int  # the valid value itself, not its text
    for bad in ("k=64", "k", "smoke=1", "sharing=all", "slow"):
        with pytest.raises(ValueError, match=r"k=128\|256, sharing=none\|kv, smoke, fast"):
            common.parse_args(bad, "f.py", ("smoke", "fast"), options)


def test_load_sibling_config_from_its_own_folder(tmp_path):
    """``common.load(name, __file__)`` reads the sibling next to the calling config (a copy
    edited outside the checkout), ``common.load(name)`` the shipped one."""
    (tmp_path / "char_lm.py").write_text("def get_config(arg=None):\n    return arg\n")
    assert common.load("char_lm", tmp_path / "other.py").get_config("x") == "x"
    shipped = common.load("char_lm")
    assert shipped.__file__ == str((REPO / "configs" / "char_lm.py").resolve())
    assert common.load_config("char_lm:smoke").train.num_steps == (
        common.load_config(str(REPO / "configs" / "char_lm.py") + ":smoke").train.num_steps
    )
    with pytest.raises(FileNotFoundError, match="no_such.py does not exist"):
        common.load("no_such")
