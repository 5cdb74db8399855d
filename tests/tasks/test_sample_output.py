"""Issue 40, item 7: ``python -m seqjax.sample`` shows a translation as source, then
``=> translation`` (not run together), and an image run's ``--out`` that is not a PNG is
named as ``--out`` (not as a ``--prompt`` that was never given)."""

import pytest

from seqjax import sample, tasks
from seqjax.train import cli_inputs


def test_a_translation_is_shown_apart_from_its_source(capsys, tmp_path):
    out = tmp_path / "t.txt"
    shown = sample.show(tasks.get("seq2seq"), "File not found", "Fehler nicht gefunden", str(out))
    assert shown == "File not found\n=> Fehler nicht gefunden"
    assert capsys.readouterr().out == shown + "\n" and out.read_text() == shown


def test_an_lm_sample_continues_its_prompt(capsys):
    assert sample.show(tasks.get("lm"), "def ", "f(x):") == "def f(x):"
    assert capsys.readouterr().out == "def f(x):\n"


def test_an_image_grid_goes_to_a_png_named_by_out():
    assert sample.image_target(None) == "samples.png"
    assert sample.image_target("runs/grid.png") == "runs/grid.png"
    with pytest.raises(cli_inputs.InputError, match=r"^--out='grid.jpg': .*ending in .png"):
        sample.image_target("grid.jpg")
    # The task's own check then accepts it (it used to see --out as a bad --prompt).
    tasks.get("image_generation").check_sample_inputs(None, sample.image_target("g.png"), 4)
