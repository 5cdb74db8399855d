"""Resuming with another config: compare with the workdir's ``config.json`` before restoring.

A checkpoint fits only the model it was saved from, and its data position only the data it
was read from. ``check(config, workdir)`` lists every field that differs from the config the
workdir last ran with; a change that makes the checkpoint unusable (model shape, vocabulary,
data, data fingerprint) stops the job with one message (``ResumeConfigError``, exit 2),
while allowed changes (learning rate, num_steps, evaluation, mesh, ...) are logged.
"""

from __future__ import annotations

import json
import logging
import math

from etils import epath

from seqjax.train import config_validation

# Changes that leave the checkpoint usable (fnmatch-free prefixes/exact names).
ALLOWED_PREFIXES = ("optimizer.", "train.", "eval.", "mesh.")
ALLOWED_FIELDS = {
    "seed",
    "data.data_dir",
    "data.manual_dir",
    "data.download",
    "data.num_workers",
    "data.prefetch",
    "data.accept_checksum_mismatch",
    "model.dropout_rate",
    "model.attention_dropout_rate",
    "model.remat",
    "model.ff_chunk_size",
    "model.dtype",
}
# Attention options that pick an implementation, not parameters.
ALLOWED_OPTION_NAMES = ("implementation", "block_q", "block_k")


class ResumeConfigError(config_validation.ConfigError):
    """The config differs from the workdir's in a way that makes its checkpoint unusable."""


def _flatten(d, prefix: str = "") -> dict:
    out = {}
    for k, v in (d or {}).items():
        key = f"{prefix}{k}"
        if isinstance(v, dict):
            out.update(_flatten(v, key + "."))
        else:
            out[key] = v
    return out


def _same(a, b) -> bool:
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    if isinstance(a, list | tuple) and isinstance(b, list | tuple):
        return list(a) == list(b)
    return a == b


def why_unusable(field: str) -> str | None:
    """Why a change of ``field`` makes the checkpoint unusable, or None when allowed."""
    if field in ALLOWED_FIELDS or field.startswith(ALLOWED_PREFIXES):
        return None
    if field.startswith("model.attention_options.") and field.endswith(ALLOWED_OPTION_NAMES):
        return None
    if field.startswith("model."):
        return "model shape"
    if field == "data.vocab":
        return "vocabulary"
    if field.startswith("data."):
        return "data (the saved data position and vocabulary belong to the old data)"
    return None


def compare(saved: dict, new: dict) -> tuple[list[str], list[str]]:
    """``(blocking, allowed)`` lines ``field: old -> new (reason)`` of two config dicts."""
    a, b = _flatten(saved), _flatten(new)
    blocking, allowed = [], []
    for field in sorted(set(a) | set(b)):
        old, now = a.get(field, "<unset>"), b.get(field, "<unset>")
        if _same(old, now):
            continue
        # A field one side lacks comes from another seqjax version (a new default); the
        # restore itself still refuses a checkpoint whose structure does not fit.
        reason = None if "<unset>" in (old, now) else why_unusable(field)
        line = f"config.{field}: {old!r} -> {now!r}"
        (blocking if reason else allowed).append(line + (f" ({reason})" if reason else ""))
    return blocking, allowed


def _saved_fingerprint(workdir: str) -> tuple[int, str] | None:
    """``(step, data fingerprint)`` of the newest checkpoint whose data state reads."""
    from seqjax.train import checkpoint

    ckpt = checkpoint.Checkpointer(workdir, max_to_keep=1, async_save=False)
    try:
        for step in sorted(ckpt.manager.all_steps(), reverse=True):
            try:
                data = ckpt.manager.restore(
                    step, args=checkpoint.ocp.args.Composite(data=checkpoint.ocp.args.JsonRestore())
                )["data"]
            except Exception:  # a damaged step: the restore falls back and reports it
                continue
            fp = (data.get("spec") or {}).get("fingerprint")
            return (step, fp) if fp else None
    finally:
        ckpt.close()
    return None


def check(config, workdir: str) -> None:
    """Raises ``ResumeConfigError`` when ``config`` cannot resume ``workdir``'s checkpoints.

    Does nothing for a workdir without checkpoints; logs the allowed differences.
    """
    work = epath.Path(workdir)
    ckpt_dir = work / "checkpoints"
    if not ckpt_dir.is_dir() or not any(p.name.isdigit() for p in ckpt_dir.iterdir()):
        return
    blocking, allowed = [], []
    saved_path = work / "config.json"
    if saved_path.exists():
        try:
            saved = json.loads(saved_path.read_text())
        except ValueError:
            saved = None
            logging.warning("%s is not valid JSON; resuming without comparing configs", saved_path)
        if saved is not None:
            new = json.loads(config.to_json_best_effort())
            blocking, allowed = compare(saved, new)
    if not blocking and config.data.name != "duplication":
        saved_fp = _saved_fingerprint(workdir)
        if saved_fp is not None:
            from seqjax import data as data_lib

            now = data_lib.info(config.data).fingerprint
            if now != saved_fp[1]:
                blocking.append(
                    f"data fingerprint (sha256 of config.data's source): {saved_fp[1][:16]}... "
                    f"in checkpoint {saved_fp[0]} -> {now[:16]}... now (the data changed)"
                )
    for line in allowed:
        logging.warning("resuming with a changed config: %s (allowed)", line)
    if blocking:
        raise ResumeConfigError(
            f"the config differs from the one {workdir} was trained with ({saved_path}) in "
            "ways that make its checkpoints unusable:\n  - "
            + "\n  - ".join(blocking)
            + (("\nallowed changes: " + "; ".join(allowed)) if allowed else "")
            + "\nUse a new --workdir for the new config, or set these fields back to resume."
        )
