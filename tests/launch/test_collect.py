"""collect.py tells the truth: the step of each value, curves over steps, the last value
against the swept field(s), titles naming the sweep, and one-sentence refusals."""

import json
import sys

import matplotlib
import pytest

from tests.conftest import REPO

sys.path.insert(0, str(REPO))

from launch import collect  # noqa: E402

matplotlib.use("Agg")

BPC = "validation/bits_per_char"


@pytest.fixture
def figures(monkeypatch):
    """Every figure collect saves, by file name (its axes stay readable after close)."""
    from matplotlib.figure import Figure

    saved = {}
    original = Figure.savefig

    def record(fig, path, *args, **kwargs):
        saved[str(path).rsplit("/", 1)[-1]] = fig
        return original(fig, path, *args, **kwargs)

    monkeypatch.setattr(Figure, "savefig", record)
    return saved


def _sweep(base, points, validation_steps=(30,), steps=60, config="configs/char_lm.py:smoke"):
    """A fake sweep: one run per override dict, train/loss every 10 steps up to ``steps``,
    the metric only at ``validation_steps``."""
    base.mkdir(parents=True, exist_ok=True)
    runs = []
    for i, overrides in enumerate(points):
        name = ",".join(f"{k.split('.')[-1]}={v}" for k, v in overrides.items())
        wd = base / name
        wd.mkdir()
        lines = [
            {"step": s, "train/loss": 3.0 - s / 100 - i / 10} for s in range(10, steps + 1, 10)
        ]
        lines += [{"step": s, BPC: 2.5 - i / 10 - s / 1000} for s in validation_steps]
        (wd / "metrics.jsonl").write_text("".join(json.dumps(m) + "\n" for m in lines))
        command = ["python", "-m", "seqjax.main", f"--config={config}", f"--workdir={wd}"]
        runs.append({"name": name, "workdir": str(wd), "overrides": overrides, "command": command})
    (base / "sweep.json").write_text(json.dumps(runs))
    return runs


def test_each_value_comes_with_its_step(tmp_path, figures, capsys):
    base = tmp_path / "depth"
    _sweep(base, [{"config.model.num_layers": n} for n in (2, 3, 4)])
    rows, _ = collect.collect(str(base), BPC)
    assert {r["steps trained"] for r in rows} == {60}
    assert {r["last step"] for r in rows} == {30} and {r["best step"] for r in rows} == {30}
    assert collect.main(["--workdir", str(base)]) == 0
    table = capsys.readouterr().out
    assert "last step" in table and "steps trained" in table
    final = figures["final.png"].axes[0]
    title = final.get_title()
    assert "step 30" in title and "final" not in title.lower()
    assert "final" not in final.get_ylabel().lower() and "last value" in final.get_ylabel()
    points = {p["num_layers"]: p for p in collect.aggregate(rows, BPC)}
    assert points[2]["last step"] == "30"


def test_curves_over_steps_and_sweep_named(tmp_path, figures):
    base = tmp_path / "depth_sweep"
    runs = _sweep(base, [{"config.model.num_layers": n} for n in (2, 4)], (20, 40, 60, 80), 80)
    assert collect.main(["--workdir", str(base)]) == 0
    fig = figures["summary.png"]
    ax = fig.axes[0]
    assert [list(line.get_xdata()) for line in ax.get_lines()] == [[20, 40, 60, 80]] * 2
    assert sorted(line.get_label() for line in ax.get_lines()) == sorted(r["name"] for r in runs)
    assert "depth_sweep" in fig._suptitle.get_text()
    assert "configs/char_lm.py:smoke" in fig._suptitle.get_text()
    assert "depth_sweep" in figures["final.png"].axes[0].get_title()


def test_sparse_metric_gets_the_training_loss_beside_it(tmp_path, figures):
    base = tmp_path / "s"
    _sweep(base, [{"config.model.num_layers": n} for n in (2, 4)])
    assert collect.main(["--workdir", str(base)]) == 0
    metric_ax, train_ax = figures["summary.png"].axes
    assert metric_ax.get_xlim()[1] >= 60  # the step-30 point is seen as mid-run
    assert train_ax.get_ylabel() == "train/loss" and len(train_ax.get_lines()) == 2
    assert list(train_ax.get_lines()[0].get_xdata()) == [10, 20, 30, 40, 50, 60]


def test_integer_field_has_a_tick_per_swept_value(tmp_path, figures):
    base = tmp_path / "layers"
    _sweep(base, [{"config.model.num_layers": n} for n in (1, 2, 4, 5)])
    assert collect.main(["--workdir", str(base)]) == 0
    ax = figures["final.png"].axes[0]
    assert list(ax.get_xticks()) == [1, 2, 4, 5]  # no 2.25 layers
    assert [t.get_text() for t in ax.get_xticklabels()] == ["1", "2", "4", "5"]
    assert ax.get_xlabel() == "num_layers"


def test_fields_swept_together_are_one_series(tmp_path, figures):
    base = tmp_path / "size"
    pairs = [(2, 128), (3, 192), (4, 256)]
    _sweep(base, [{"config.model.num_layers": n, "config.model.d_model": d} for n, d in pairs])
    assert collect.main(["--workdir", str(base)]) == 0
    ax = figures["final.png"].axes[0]
    assert len(ax.containers) == 1  # one errorbar series, not one per d_model
    assert ax.get_xlabel() == "num_layers / d_model"
    assert [t.get_text() for t in ax.get_xticklabels()] == ["2\n128", "3\n192", "4\n256"]


def test_independent_fields_are_series_and_seeds_error_bars(tmp_path, figures):
    base = tmp_path / "grid"
    points = [
        {"config.model.num_layers": n, "config.optimizer.learning_rate": lr, "config.seed": s}
        for n in (2, 4)
        for lr in (0.001, 0.01)
        for s in (0, 1)
    ]
    _sweep(base, points)
    assert collect.main(["--workdir", str(base)]) == 0
    ax = figures["final.png"].axes[0]
    assert len(ax.containers) == 2
    labels = sorted(t.get_text() for t in ax.get_legend().get_texts())
    assert labels == ["learning_rate=0.001", "learning_rate=0.01"]
    assert "2 seeds" in ax.get_ylabel()


@pytest.mark.parametrize("extra", [[], ["--direction", "min"]])
def test_unknown_metric_lists_the_recorded_ones(tmp_path, capsys, extra):
    base = tmp_path / "sw"
    _sweep(base, [{"config.model.num_layers": 2}])
    assert collect.main(["--workdir", str(base), "--metric", "validation/bpc", *extra]) == 2
    captured = capsys.readouterr()
    assert "'validation/bpc' is not recorded" in captured.err
    assert f"recorded: train/loss, {BPC}" in captured.err
    assert "Traceback" not in captured.err and captured.out == ""
    assert not (base / "summary.md").exists() and not (base / "final.png").exists()


def test_misspelled_workdir_is_one_sentence(tmp_path, capsys):
    assert collect.main(["--workdir", str(tmp_path / "nope")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: [collect] --workdir") and "does not exist" in err
    assert len(err.strip().splitlines()) == 1
    (tmp_path / "empty").mkdir()
    assert collect.main(["--workdir", str(tmp_path / "empty")]) == 2
    assert "not a sweep folder" in capsys.readouterr().err


def test_resumed_run_later_line_wins(tmp_path):
    base = tmp_path / "r"
    _sweep(base, [{"config.model.num_layers": 2}], validation_steps=(30, 30))
    wd = base / "num_layers=2"
    with open(wd / "metrics.jsonl", "a") as f:
        f.write(json.dumps({"step": 30, BPC: 9.0}) + "\n")
    rows, curves = collect.collect(str(base), BPC)
    assert rows[0][f"last {BPC}"] == 9.0 and curves["num_layers=2"][0] == [30]


def test_fields_shared_by_every_run_are_no_axis(tmp_path, figures):
    base = tmp_path / "extra"
    steps = {"config.train.num_steps": 60}  # a --set extra: the same in every run
    _sweep(base, [{"config.model.num_layers": n, **steps} for n in (2, 4)])
    assert collect.main(["--workdir", str(base)]) == 0
    ax = figures["final.png"].axes[0]
    assert ax.get_xlabel() == "num_layers" and len(ax.containers) == 1
    points = [{"a": 1, "b": 5, "seeds": 1, "mean": 0.0, "std": 0.0, "last step": "1"}]
    assert collect.axis_fields(points) == (["a", "b"], [])  # one run: nothing varies
