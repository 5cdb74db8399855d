"""Pictures at evaluation time (``Task.eval_pictures``): a tiny image-generation run and a
tiny pixel-classification run write ``<workdir>/<name>/step_XXXXXX.png`` (real PNGs of the
picture's size) and TensorBoard images at every evaluation, equal to what the hook draws from
the saved parameters; ``config.eval.pictures=False`` draws none; ``python -m seqjax.sample
--out grid.png`` writes an image model's grid."""

from __future__ import annotations

import io
import struct
import subprocess
import sys
import types

import matplotlib.image
import numpy as np
import pytest

from seqjax.configs import common
from seqjax.train import config_validation, loop, setup
from tests.conftest import REPO
from tests.data.test_data_images import write_fashion_mnist

NUM = 4  # images per picture: a 2 x 2 grid


def _config(tmp, image_task: str):
    config = common.load_file(REPO / "configs" / "image_fashion_mnist.py", "pic_cfg")
    config = config.get_config("smoke")
    d, t = config.data, config.train
    d.manual_dir, d.data_dir = str(tmp / "src"), str(tmp / "tfds")
    d.accept_checksum_mismatch, d.download = True, False
    d.image_task = image_task
    d.batch_size = 4
    config.mesh.data = 1
    if image_task == "classification":
        config.model.positional = "learned"
        config.model.max_len = 784
    t.num_steps, t.eval_every, t.eval_max_batches = 2, 1, 1
    t.checkpoint_every, t.final_eval, t.sample_length = 0, True, 0
    config.eval.num_pictures = NUM
    return config


def _images(workdir) -> list[tuple[int, str, bytes]]:
    """``(step, tag, PNG bytes)`` of every TensorBoard image summary of a workdir."""
    from tensorboardX.proto import event_pb2

    out = []
    for path in sorted((workdir / "tensorboard").glob("events.out.tfevents*")):
        data, i = path.read_bytes(), 0
        while i < len(data):
            (n,) = struct.unpack("<Q", data[i : i + 8])
            event = event_pb2.Event.FromString(data[i + 12 : i + 12 + n])
            i += 12 + n + 4
            out += [(event.step, v.tag, v.image.encoded_image_string)
                    for v in event.summary.value if v.HasField("image")]  # fmt: skip
    return out


def _decode(png: bytes) -> np.ndarray:
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    return np.round(matplotlib.image.imread(io.BytesIO(png), format="png")[..., :3] * 255)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """One tiny run per image task on small Fashion-MNIST-format files."""
    tmp = tmp_path_factory.mktemp("pictures")
    write_fashion_mnist(tmp / "src" / "fashion_mnist")
    out = {}
    for task in ("generation", "classification"):
        config = _config(tmp, task)
        config_validation.validate(config, num_devices=1)
        loop.train_and_evaluate(config, str(tmp / task))
        out[task] = tmp / task
    return out


@pytest.mark.parametrize(
    "task, name, size",
    [
        ("generation", "samples", (2 * (28 + 2) + 2, 2 * (28 + 2) + 2)),  # image_grid.grid
        ("classification", "predictions", (2 * 190, 2 * 150)),  # 1.5 x 1.9 in at 100 dpi
    ],
)
def test_each_evaluation_writes_a_png_and_a_tensorboard_image(runs, task, name, size):
    workdir = runs[task]
    pngs = sorted(p.name for p in (workdir / name).iterdir())
    assert pngs == ["step_000001.png", "step_000002.png"]  # validation at 1, test at 2
    tb = {(step, tag): png for step, tag, png in _images(workdir)}
    assert sorted(tb) == [(1, name), (2, name)]
    for step in (1, 2):
        png = (workdir / name / f"step_{step:06d}.png").read_bytes()
        picture = _decode(png)
        assert picture.shape == (*size, 3)
        np.testing.assert_array_equal(_decode(tb[(step, name)]), picture)
    # The last picture is the hook's on the saved parameters (the same seed at every step).
    run, state, step = setup.restore_latest(str(workdir))
    from seqjax.train import sharding

    with sharding.rules_and_mesh(run.mesh):
        drawn = run.task.eval_pictures(run, state["params"], "test", num=NUM, seed=run.config.seed)
    written = _decode((workdir / name / "step_000002.png").read_bytes())
    np.testing.assert_array_equal(np.broadcast_to(drawn[name], written.shape), written)


def test_generation_samples_come_from_the_model(runs):
    """The grid holds sampled pixels: not the blank padding everywhere, and its four cells
    differ (independent draws)."""
    picture = _decode((runs["generation"] / "samples" / "step_000002.png").read_bytes())
    cells = [picture[2 + r * 30 : 30 + r * 30, 2 + c * 30 : 30 + c * 30, 0]
             for r in range(2) for c in range(2)]  # fmt: skip
    assert all(cell.shape == (28, 28) for cell in cells)
    assert len({cell.tobytes() for cell in cells}) == NUM


def test_pictures_off_draws_nothing(tmp_path):
    def fail(*args, **kwargs):
        raise AssertionError("eval_pictures was called with eval.pictures=False")

    run = types.SimpleNamespace(task=types.SimpleNamespace(eval_pictures=fail))
    config = _config(tmp_path, "generation")
    config.eval.pictures = False
    loop._eval_pictures(config, run, {}, "validation", 1, None, tmp_path)
    del config.eval["pictures"]  # the ConfigDict would refuse a str in a bool field
    config.eval.pictures, config.eval.num_pictures = "yes", 65
    with pytest.raises(config_validation.ConfigError) as e:
        config_validation.validate(config, num_devices=1)
    assert "config.eval.pictures='yes' is invalid; valid: True or False" in str(e.value)
    assert "config.eval.num_pictures=65 is invalid; valid: an integer 1..64" in str(e.value)


@pytest.mark.slow  # a subprocess: a second JAX start-up and restore
def test_sample_cli_writes_the_grid_file(runs, tmp_path):
    out = tmp_path / "grid.png"
    cmd = [sys.executable, "-m", "seqjax.sample", f"--workdir={runs['generation']}",
           f"--out={out}", "--length=6", "--temperature=1"]  # fmt: skip
    proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=300,
                          env={**__import__("os").environ, "PYTHONPATH": str(REPO)})  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert f"wrote 6 sampled images as a grid to {out}" in proc.stdout
    assert _decode(out.read_bytes()).shape == (2 * 30 + 2, 3 * 30 + 2, 3)  # 3 columns, 2 rows
