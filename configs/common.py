"""What the config files share: their variant argument and loading one config from another.

Not a job config (no ``get_config``). Config files are loaded by path (``--config
configs/x.py``, ml_collections' ``config_flags``) or as modules of the installed package
(``seqjax.configs.x``); either way they import this file as ``seqjax.configs.common``. The
launchers, experiments and tests load configs with the same two functions::

    from seqjax.configs import common
    common.load_config("char_lm:smoke")          # the config of configs/char_lm.py:smoke
    common.load("lra_listops")                   # the module of configs/lra_listops.py
    common.load_file(path)                       # any Python file, by path
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import ModuleType

from seqjax.train.paths import load_file

HERE = Path(__file__).resolve().parent


def load(config: str | Path, folder: str | Path | None = None) -> ModuleType:
    """The module of a config file: a path (``configs/char_lm.py``) or the name of a shipped
    config (``char_lm``), looked up in ``folder`` (a config passes its own ``__file__`` to
    load a sibling from its own folder) or else in this ``configs/`` folder."""
    config = str(config)
    if config.endswith(".py"):
        return load_file(Path(config).expanduser())
    base = Path(folder) if folder is not None else HERE
    base = base.parent if base.suffix == ".py" else base
    return load_file(base / f"{config}.py", name=f"_seqjax_config_{config}")


def load_config(spec: str):
    """``"char_lm:smoke"`` or ``"configs/char_lm.py:smoke"`` -> that config's ConfigDict."""
    config, _, arg = spec.partition(":")
    return load(config).get_config(arg or None)


def shared_data_file(relative: str) -> str:
    """``relative`` under ``$SEQJAX_SHARED_DATA`` or else ``<repo>/../shared/data``."""
    root = os.environ.get("SEQJAX_SHARED_DATA")
    base = Path(root) if root else HERE.parent.parent / "shared" / "data"
    return str(base / relative)


def variant(arg: str | None, valid: Sequence[str], config_file: str) -> str:
    """The single variant ``arg`` names (``None`` / ``""``: the first of ``valid``).

    An unknown one is a ValueError naming the file and the valid variants.
    """
    chosen = arg or valid[0]
    if chosen not in valid:
        raise ValueError(f"{config_file} variant {chosen!r}; valid: {', '.join(valid)}")
    return chosen


def parse_args(
    arg: str | None,
    config_file: str,
    flags: Sequence[str] = (),
    options: Mapping[str, Sequence] | None = None,
    defaults: Mapping | None = None,
) -> dict:
    """A comma-separated variant argument -> a dict of its settings.

    ``flags`` are bare words (``smoke``: ``True`` when present, else ``False``); ``options``
    maps a key to its valid values (``k=256``: the value whose ``str`` matches, so integers
    stay integers), ``defaults`` gives the value of an option that is not set (else
    ``None``). ``parse_args("k=256,smoke", f, ("smoke",), {"k": (128, 256)})`` ->
    ``{"smoke": True, "k": 256}``. An unknown item is a ValueError naming the file, the item
    and everything valid.
    """
    options = dict(options or {})
    out: dict = {f: False for f in flags}
    out.update({k: (defaults or {}).get(k) for k in options})
    for item in [a.strip() for a in (arg or "").split(",") if a.strip()]:
        key, eq, value = item.partition("=")
        by_text = {str(v): v for v in options.get(key, ())}
        if not eq and key in flags:
            out[key] = True
        elif eq and value in by_text:
            out[key] = by_text[value]
        else:
            valid = [f"{k}={'|'.join(map(str, vs))}" for k, vs in options.items()] + list(flags)
            raise ValueError(
                f"{config_file} variant argument {item!r} is not valid; use comma-separated "
                f"{', '.join(valid)}"
            )
    return out
