"""Field checks the config validator lacked (issue 38), as small functions with one call site
each, so they can move into ``seqjax.train.config_validation`` as they are:

* ``override_type_problem(argv)``: ``--config.train.num_steps=abc`` (or ``2.5``) on an
  integer field is named with the field, its type and its valid values, before
  ``ml_collections`` answers ``invalid literal for int() with base 10`` (``seqjax.main``);
* ``sample_prompt_problem(run)``: a translation run's ``config.train.sample_prompt`` longer
  than ``data.max_source_len`` is refused before step 0 (``seqjax.train.setup.build``), not
  found after the last step with no ``result.json`` written.

(The decoder's mechanism names are checked against ``config.model.decoder_attention`` in
``seqjax.train.extensions.prepare_training``.)
"""

from __future__ import annotations

_TRUE = ("true", "t", "1", "yes", "y")
_FALSE = ("false", "f", "0", "no", "n")


def _overrides(argv: list[str]):
    """``(key, value)`` of each ``--config.a.b=v`` / ``--config.a.b v`` in ``argv``."""
    for i, arg in enumerate(argv[1:], start=1):
        if not arg.startswith("--config."):
            continue
        key, sep, value = arg[len("--config.") :].partition("=")
        if not sep:
            if i + 1 >= len(argv) or argv[i + 1].startswith("--"):
                continue  # a boolean given as a bare flag
            value = argv[i + 1]
        yield key, value


def _field_type(config, key: str):
    """``(type, current value)`` of ``config.<key>``, or None when the path is no field."""
    node = config
    *parents, leaf = key.split(".")
    for part in parents:
        if not hasattr(node, "keys") or part not in node.keys():
            return None
        node = node[part]
    if not hasattr(node, "get_type") or leaf not in node.keys():
        return None
    return node.get_type(leaf), node.get(leaf)


def _valid_ints(config, key: str) -> str:
    """The validator's ``valid: ...`` text for integer field ``key`` (found by giving it a
    value no field accepts), else 'an integer'."""
    try:
        from seqjax.train import config_validation

        probe = config.copy_and_resolve_references()
        node = probe
        *parents, leaf = key.split(".")
        for part in parents:
            node = node[part]
        with probe.unlocked():
            node[leaf] = -(10**12)
        config_validation.validate(probe)
    except Exception as e:  # noqa: BLE001 - only a hint: any failure falls back to the type
        for line in str(e).splitlines():
            line = line.strip().removeprefix("- ")
            if line.startswith(f"config.{key}=") and "valid: " in line:
                return line.split("valid: ", 1)[1]
    return "an integer"


def override_type_problem(config, argv: list[str]) -> str | None:
    """A sentence for the first ``--config.<field>=<value>`` whose value is not of the
    field's type (int, float or bool), naming the field and its valid values. ``config``:
    the ``--config`` file's config before the overrides (None: nothing to check)."""
    if config is None:
        return None
    for key, value in _overrides(argv):
        found = _field_type(config, key)
        if found is None:
            continue  # an unknown field: reported by errors.config_file_problem
        kind, current = found
        text = value.strip()
        if kind is bool:
            ok = text.lower() in _TRUE + _FALSE
            valid = "True or False"
        elif kind is int:
            ok = _is_int_text(text)
            valid = None
        elif kind is float:
            ok = _is_float_text(text)
            valid = "a number, e.g. 0.001 or 1e-3"
        else:
            continue
        if ok:
            continue
        if valid is None:
            valid = _valid_ints(config, key)
        what = {bool: "a boolean", int: "an integer", float: "a number"}[kind]
        return (
            f"--config.{key}={value!r}: config.{key} is {what} field (this config has "
            f"{current!r}); valid: {valid}"
        )
    return None


def _is_int_text(text: str) -> bool:
    try:
        int(text, 10)
    except ValueError:
        return False
    return True


def _is_float_text(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def sample_prompt_problem(run) -> str | None:
    """A sentence when the end-of-run sample of a translation run cannot be made: its
    ``config.train.sample_prompt`` (the source sentence) is longer than ``data.max_source_len``
    tokens. Checked once the vocabulary is known, before step 0."""
    t = run.config.train
    task = run.task
    if not (task.generates and t.sample_length) or getattr(task, "translate", None) is None:
        return None
    from seqjax.tasks import inputs

    try:
        task.check_sample_inputs(run, str(t.sample_prompt), int(t.sample_length))
    except inputs.InputError as e:
        return (
            f"config.train.sample_prompt={_short(t.sample_prompt)} cannot be translated at the end "
            f"of the run: {e}, or set config.train.sample_length=0 (no sample)"
        )
    return None


def _short(text: str, n: int = 60) -> str:
    text = str(text)
    return repr(text if len(text) <= n else text[:n] + "...")
