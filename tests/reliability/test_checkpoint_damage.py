"""A damaged newest checkpoint no longer blocks a resume (issue 16, item 2).

Restore falls back to the newest checkpoint that restores, says which one it skipped and
why, and moves the damaged one to ``damaged_checkpoints/`` (never deletes it).
"""

from __future__ import annotations

import logging
import shutil

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from seqjax.train import checkpoint


def _state(step: int) -> dict:
    return {"step": jnp.int32(step), "w": jnp.full((64, 32), float(step), jnp.float32)}


def _abstract():
    return jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype), _state(0))


@pytest.fixture
def workdir(tmp_path):
    """Checkpoints of steps 1 and 2 (synchronous saves)."""
    ckpt = checkpoint.Checkpointer(str(tmp_path), max_to_keep=3, async_save=False)
    for s in (1, 2):
        ckpt.save(s, _state(s), {"spec": {"fingerprint": "f"}, "step": s}, {"seed": 0})
    ckpt.wait()
    ckpt.close()
    return tmp_path


def _truncate_largest_state_file(step_dir):
    files = [p for p in (step_dir / "state").rglob("*") if p.is_file()]
    big = max(files, key=lambda p: p.stat().st_size)
    data = big.read_bytes()
    big.write_bytes(data[: len(data) // 3])


DAMAGES = {
    "truncated_state_file": _truncate_largest_state_file,
    "emptied_data_metadata": lambda d: (d / "data" / "metadata").write_text(""),
    "deleted_state_dir": lambda d: shutil.rmtree(d / "state"),
}


@pytest.mark.parametrize("damage", list(DAMAGES))
def test_damaged_newest_falls_back_and_is_moved_aside(workdir, damage, caplog):
    DAMAGES[damage](workdir / "checkpoints" / "2")
    ckpt = checkpoint.Checkpointer(str(workdir), max_to_keep=3, async_save=False)
    with caplog.at_level(logging.WARNING):
        step, state, data_state = ckpt.restore_newest(_abstract())
    assert step == 1
    np.testing.assert_array_equal(np.asarray(state["w"]), np.full((64, 32), 1.0))
    assert data_state["step"] == 1
    assert ckpt.latest_step() == 1
    # Moved aside with its files, not deleted; the log names the step and the reason.
    moved = list((workdir / "damaged_checkpoints").iterdir())
    assert [p.name.split(".")[0] for p in moved] == ["2"]
    assert (moved[0] / "data").exists() or (moved[0] / "state").exists()
    assert not (workdir / "checkpoints" / "2").exists()
    text = caplog.text
    assert "step 2" in text and "moved it to" in text and "damaged_checkpoints" in text
    # Training goes on: step 2 can be saved again and is then the newest.
    ckpt.save(2, _state(2), {"spec": {}, "step": 2}, {"seed": 0})
    ckpt.wait()
    assert ckpt.latest_step() == 2
    ckpt.close()


def test_all_damaged_moves_nothing_and_names_each(workdir):
    for s in ("1", "2"):
        (workdir / "checkpoints" / s / "data" / "metadata").write_text("")
    ckpt = checkpoint.Checkpointer(str(workdir), max_to_keep=3, async_save=False)
    with pytest.raises(checkpoint.CheckpointError) as e:
        ckpt.restore_newest(_abstract())
    msg = str(e.value)
    assert "step 2:" in msg and "step 1:" in msg and "--workdir" in msg
    assert not (workdir / "damaged_checkpoints").exists()
    assert sorted(p.name for p in (workdir / "checkpoints").iterdir() if p.name.isdigit()) == [
        "1",
        "2",
    ]
    ckpt.close()


def test_empty_workdir_restores_nothing(tmp_path):
    ckpt = checkpoint.Checkpointer(str(tmp_path), max_to_keep=3, async_save=False)
    assert ckpt.restore_newest(_abstract()) == (None, None, None)
    ckpt.close()
