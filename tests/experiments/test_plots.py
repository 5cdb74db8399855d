"""The committed experiment plots say what they show, drawn from the committed results
files (nothing is measured): titles with scale and steps, paper values, chance lines,
error bars, a "measured under load" mark; and the README tables come from a command."""

from __future__ import annotations

import json
from pathlib import Path

import matplotlib
import pytest

from seqjax.configs import common

matplotlib.use("Agg")

EXPERIMENTS = Path(__file__).resolve().parents[2] / "experiments"


def load_script(relpath: str):
    name = "study_" + relpath.replace("/", "_").removesuffix(".py")
    return common.load_file(EXPERIMENTS / relpath, name, register=True)


def results(relpath: str) -> dict:
    return json.loads((EXPERIMENTS / relpath).read_text())


@pytest.fixture
def figures(monkeypatch):
    """Every figure saved during the test, by file name."""
    from matplotlib.figure import Figure

    saved = {}
    original = Figure.savefig

    def record(fig, path, *args, **kwargs):
        saved[Path(str(path)).name] = fig
        return original(fig, path, *args, **kwargs)

    monkeypatch.setattr(Figure, "savefig", record)
    return saved


def _texts(fig) -> str:
    return " ".join(t.get_text() for t in fig.texts)


def test_duplication_plot_title_paper_values_and_legend_off_the_bars(tmp_path, figures):
    payload = results("reformer/results/duplication.json")
    load_script("reformer/duplication.py").plot(payload, tmp_path / "d.png")
    fig = figures["d.png"]
    ax = fig.axes[0]
    title = ax.get_title()
    assert "Table 2" in title and "length 64" in title and "800 steps" in title
    # The paper's value of every cell is drawn (black ticks), the 0.8% ones included.
    paper = {round(float(y), 1) for c in ax.collections for _, y in c.get_offsets()}
    assert {0.8, 52.5, 94.8, 77.9} <= paper
    labels = [t.get_text() for t in ax.texts]
    assert labels.count("paper 0.8%") == 3  # the disagreement, labelled on each LSH row
    assert any(line.get_label().startswith("chance") for line in ax.get_lines())
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    canvas = FigureCanvasAgg(fig)  # the saved figure was closed: give it a canvas again
    canvas.draw()
    renderer = canvas.get_renderer()
    legend_box = ax.get_legend().get_window_extent(renderer)
    assert legend_box.y1 <= ax.get_window_extent(renderer).y0  # below the axes, not on bars


@pytest.mark.parametrize(
    "name,recipe,chances",
    [("lra_accuracy_cpu", "lra", [10.0]), ("lra_accuracy_cpu_adamw", "adamw", [10.0, 50.0])],
)
def test_lra_plots_have_distinct_titles_scale_steps_chance_and_error_bars(
    tmp_path, figures, name, recipe, chances
):
    payload = results(f"lra_accuracy/results/{name}.json")
    load_script("lra_accuracy/run.py").plot(payload, tmp_path / f"{name}.png")
    ax = figures[f"{name}.png"].axes[0]
    title = ax.get_title()
    assert f"{recipe} recipe" in title and "cpu scale" in title
    assert "300 steps" in title and "T=512" in title
    levels = sorted({float(seg[0][1]) for c in ax.collections for seg in c.get_segments()})
    assert [v for v in levels if v in (10.0, 50.0)] == chances  # chance per task
    from matplotlib.container import BarContainer

    ours = next(c for c in ax.containers if isinstance(c, BarContainer))
    assert ours.errorbar is not None  # ±1 binomial standard error
    assert ours.get_label() == "ours (±1 s.e.)"


def test_lra_titles_differ(tmp_path, figures):
    run = load_script("lra_accuracy/run.py")
    for name in ("lra_accuracy_cpu", "lra_accuracy_cpu_adamw"):
        run.plot(results(f"lra_accuracy/results/{name}.json"), tmp_path / f"{name}.png")
    titles = {
        figures[f"{n}.png"].axes[0].get_title()
        for n in ("lra_accuracy_cpu", "lra_accuracy_cpu_adamw")
    }
    assert len(titles) == 2


def test_measured_under_load_mark(tmp_path, figures):
    char_lm = results("char_lm_quality/results/char_lm_cpu.json")
    load_script("char_lm_quality/run.py").plot(char_lm, tmp_path / "c.png")
    fig = figures["c.png"]
    assert "measured under load" in _texts(fig)
    assert "2000 steps" in fig.axes[0].get_title()
    speed = results("reformer/results/speed_memory.json")
    load_script("reformer/speed_memory.py").plot(speed, tmp_path, "s")
    assert "measured under load" in _texts(figures["s_ms.png"])
    assert "65,536 tokens per batch" in figures["s_ms.png"].axes[0].get_title()
    # An accuracy plot gets no load mark: the load does not change an accuracy.
    lra = results("lra_accuracy/results/lra_accuracy_cpu.json")
    load_script("lra_accuracy/run.py").plot(lra, tmp_path / "l.png")
    assert "measured under load" not in _texts(figures["l.png"])


def test_load_note_rules():
    plotting = load_script("plotting.py")
    quiet = {"environment": {"cpu_count": 2}, "load": {"noisy": False}, "load_avg": [1.0, 2.5]}
    assert plotting.load_note(quiet) is None
    assert "6.0" in plotting.load_note({**quiet, "load": {}, "load_avg": [6.0]})
    noisy = {"load": {"noisy": True, "other_cores": 1.2}, "environment": {"cpu_count": 2}}
    assert "1.2 of 2 cores" in plotting.load_note(noisy)
    assert plotting.binomial_se(50.0, 100) == pytest.approx(5.0)


def test_summary_ratio_125_rows_carry_a_note():
    summarize = load_script("summarize.py")
    rows = summarize.gather()
    extreme = [r for r in rows if isinstance(r.get("ratio"), int | float) and r["ratio"] >= 100]
    assert extreme and all(r.get("note") for r in extreme)
    table = summarize.render(rows)
    assert "| note |" in table.splitlines()[0]
    readme = (EXPERIMENTS / "README.md").read_text()
    assert table in readme  # the committed summary is the command's output


def test_lra_readme_tables_come_from_the_command():
    tables = load_script("lra_accuracy/tables.py")
    readme = (EXPERIMENTS / "lra_accuracy" / "README.md").read_text()
    for name, table in tables.tables().items():
        assert f"<!-- {name}:begin -->\n{table}\n<!-- {name}:end -->" in readme
    assert "| `lra` recipe | 17.4 | 31.2 | 31.4 | 18.2 |" in tables.recipe_table()


def test_replot_draws_every_listed_plot(tmp_path):
    replot = load_script("replot.py")
    written = replot.replot(out=tmp_path)
    names = sorted(p.name for p in written)
    assert "duplication.png" in names and "lra_accuracy_cpu_adamw.png" in names
    assert "speed_memory_ms.png" in names and "char_lm_cpu.png" in names
    assert all(p.stat().st_size > 10_000 for p in written)
    for _, result, _ in replot.PLOTS:  # each plot has its committed PNG beside the results
        stem = EXPERIMENTS / result
        assert stem.with_suffix(".json").exists()
        assert list(stem.parent.glob(stem.name + "*.png")), stem
