"""The run header tells the truth (issue 40, item 5): each task describes its own data line
(pairs, images, examples or tokens, and only the lengths it uses), the model line names the
positions and the output layer, and every override typed is counted, option flags included."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from seqjax import console, tasks
from seqjax.configs import common
from tests.conftest import REPO


def _config(name: str, variant: str = "smoke"):
    return common.load_file(REPO / "configs" / name).get_config(variant)


def _run(config, task_name: str, **info):
    mesh = SimpleNamespace(shape={"data": 1}, devices=np.zeros(1))
    return SimpleNamespace(
        task=tasks.get(task_name).configure(config),
        info=SimpleNamespace(**info),
        model=None,
        mesh=mesh,
        provenance={"attention": {}, "imports": []},
    )


def _header(config, run, argv=("main",)) -> dict[str, str]:
    text = console.run_header(config, run, "/w", start_step=0, num_params=10, argv=list(argv))
    return {line.split()[0]: line for line in text.splitlines()[1:]}


def test_translation_data_line_counts_pairs_and_names_its_lengths():
    config = _config("translation.py")
    sizes = {"train": 900, "validation": 50, "test": 50}
    run = _run(config, "seq2seq", split_sizes=sizes, seq_len=32, target_len=40,
               source_lang="en", target_lang="de", num_classes=None)  # fmt: skip
    data = _header(config, run)["data"]
    assert "en->de" in data and "source 32 / target 40 tokens" in data
    assert "splits (pairs): train 900, validation 50, test 50" in data
    assert "seq_len" not in data and "(tok)" not in data


def test_image_classification_counts_images_of_their_shape():
    config = _config("image_fashion_mnist.py")
    run = _run(config, "classification", split_sizes={"train": 55_000, "validation": 5_000,
               "test": 10_000}, image_shape=(28, 28, 1), num_classes=10)  # fmt: skip
    lines = _header(config, run)
    assert "images of 28x28x1 pixels, 10 classes" in lines["data"]
    assert "splits (images): train 55,000" in lines["data"] and "seq_len" not in lines["data"]
    assert "classifier (10 classes)" in lines["model"]


def test_listops_counts_examples_of_max_len():
    config = _config("lra_listops.py")
    run = _run(config, "classification", split_sizes={"train": 96_000, "validation": 2_000,
               "test": 2_000}, image_shape=None, num_classes=10)  # fmt: skip
    data = _header(config, run)["data"]
    assert "examples of" in data and "splits (examples): train 96,000" in data
    assert "seq_len" not in data


def test_lm_model_line_names_positions_and_adaptive_softmax():
    config = _config("char_lm.py")
    with config.unlocked():
        config.model.positional = "rope"
        config.model.adaptive.enabled = True
        config.model.adaptive.cutoffs = (20, 40)
    run = _run(config, "lm", split_sizes={"train": 1000, "validation": 10, "test": 10},
               num_classes=None)  # fmt: skip
    lines = _header(config, run)
    assert "positions rope" in lines["model"]
    assert "adaptive softmax (cutoffs [20, 40]" in lines["model"]
    assert f"windows of {config.data.seq_len} tokens" in lines["data"]
    assert "splits (tokens): train 1,000" in lines["data"]


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["main", "--config=c.py", "--config.train.num_steps=4"], "+ train.num_steps=4"),
        (
            [
                "main",
                "--config=c.py",
                "--config.train.num_steps=4",
                "--config.model.attention_options.window.window=8",
            ],
            "+ train.num_steps=4 + model.attention_options.window.window=8",
        ),  # fmt: skip
    ],
)
def test_every_override_typed_is_counted(argv, expected, monkeypatch):
    """``seqjax.main`` takes option flags out of ``sys.argv`` before parsing; the header
    counts the command line as typed (``console.set_command_line``)."""
    config = _config("char_lm.py")
    run = _run(config, "lm", split_sizes={}, num_classes=None)
    monkeypatch.setattr(console, "_COMMAND_LINE", None)
    console.set_command_line(argv)
    monkeypatch.setattr("sys.argv", [a for a in argv if "attention_options" not in a])
    text = console.run_header(config, run, "/w", start_step=0, num_params=10)
    line = next(x for x in text.splitlines() if x.strip().startswith("config"))
    assert line.rstrip().endswith(expected), line


def test_overrides_are_named(monkeypatch):
    """The header names each override typed (not "+ 1 override")."""
    config = _config("char_lm.py")
    run = _run(config, "lm", split_sizes={}, num_classes=None)
    argv = ["main", "--config=c.py", "--config.train.num_steps=4",
            "--config.model.attention_options.window.window", "8"]  # fmt: skip
    line = _header(config, run, argv)["config"]
    assert line.endswith("c.py + train.num_steps=4 + model.attention_options.window.window=8")


def test_auto_is_resolved_per_mechanism():
    """``implementation=auto`` shows what it runs here (CPU, float32: the reference engine
    for short inputs, the plain-JAX block-sparse engine for flex)."""
    config = _config("char_lm.py")
    with config.unlocked():
        config.model.attention = "dense,flex"
        config.model.attention_options.flex = {"pattern": "sliding_window", "window": 8,
                                               "block_size": 16}  # fmt: skip
    run = _run(config, "lm", split_sizes={}, num_classes=None)
    line = _header(config, run)["attention"]
    assert "0: dense(implementation=auto -> reference)" in line
    assert "implementation=auto -> blocksparse" in line.split("1: flex")[1]


def test_performer_shows_the_options_it_runs_with():
    config = _config("lra_listops.py")
    config.model.attention = "performer"
    run = _run(config, "classification", split_sizes={}, image_shape=None, num_classes=10)
    line = _header(config, run)["attention"]
    assert "performer(" in line
    assert all(k in line for k in ("num_features=256", "redraw=False", "seed=0"))


def test_a_bounded_test_evaluation_is_stated():
    config = _config("lra_listops.py")  # smoke: train.test_max_batches = 2, batch 8
    run = _run(config, "classification", split_sizes={"train": 96, "test": 64},
               image_shape=None, num_classes=10)  # fmt: skip
    steps = _header(config, run)["steps"]
    n, bs = config.train.test_max_batches, config.data.batch_size
    assert f"test on its first {n} batches of {bs} ({n * bs} inputs at most" in steps
