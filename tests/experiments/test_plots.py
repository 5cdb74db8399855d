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


def _draw(function: str, results_file: str, tmp_path, *folder_stem):
    timing = load_script("timing_plots.py")
    payload = results(results_file)
    if folder_stem:
        getattr(timing, function)(payload, tmp_path, *folder_stem)
    else:
        getattr(timing, function)(payload, tmp_path / "p.png")
    return payload


def _all_titles(fig) -> str:
    return " ".join(
        [fig._suptitle.get_text() if fig._suptitle else ""] + [ax.get_title() for ax in fig.axes]
    )


@pytest.mark.parametrize(
    "function,results_file,must_say,load",
    [
        ("linformer", "linformer/results/linformer_cpu.json",
         ["Table 3", "cpu scale", "d=256", "T=512..64K"], "load not recorded"),
        ("lra_speed", "lra_speed/results/lra_speed_cpu.json",
         ["LRA Table 2", "batch 1", "T=1K..4K", "median of 3"], None),
        ("lra_memory", "lra_speed/results/lra_memory_cpu_b32.json",
         ["batch 32", "T=4096", "6 of 6 variants exceed"], None),
        ("reformer_growth", "reformer/results/growth.json",
         ["65,536 tokens per batch", "min of 3"], "measured under load"),
        ("sparse_transformer", "sparse_transformer/results/cpu.json",
         ["cpu scale", "8 heads x 64", "T=1K..12K"], "measured under load"),
        ("train_throughput", "train_throughput/results/cpu.json",
         ["cpu scale", "452,352 parameters", "10 steps"], None),
        ("transformer_xl", "transformer_xl/results/eval_speed_cpu.json",
         ["Table 9", "4 layers", "L=800..3800", "median of 5"], None),
    ],
)  # fmt: skip
def test_timing_plots_say_scale_and_load(tmp_path, figures, function, results_file, must_say, load):
    _draw(function, results_file, tmp_path)
    fig = figures["p.png"]
    titles = _all_titles(fig)
    for phrase in must_say:
        assert phrase in titles, (phrase, titles)
    notes = _texts(fig)
    if load is None:  # recorded and not loaded: no mark at all
        assert notes == "" or "load" not in notes
    else:
        assert load in notes
    for ax in fig.axes:  # axis labels with units
        assert ax.get_xlabel() and ax.get_ylabel()


def test_linformer_smoke_plot_claims_no_paper_values(tmp_path, figures):
    _draw("linformer", "linformer/results/linformer_smoke.json", tmp_path)
    assert "no paper values" in figures["p.png"]._suptitle.get_text()


def test_timing_plots_draw_paper_values(tmp_path, figures):
    """The paper's numbers, from the results file, are drawn as labelled black/x markers."""
    _draw("transformer_xl", "transformer_xl/results/eval_speed_cpu.json", tmp_path)
    ax = figures["p.png"].axes[0]
    paper = next(line for line in ax.get_lines() if line.get_label() == "paper (Table 9)")
    assert list(paper.get_ydata()) == [363, 773, 1409, 1874]
    _draw("lra_speed", "lra_speed/results/lra_speed_cpu.json", tmp_path)
    ax = figures["p.png"].axes[0]
    linformer = next(line for line in ax.get_lines() if line.get_label() == "Linformer (paper)")
    assert linformer.get_ydata()[-1] == pytest.approx(7.7 / 1.4)  # Table 2, 4K, vs Transformer
    _draw("linformer", "linformer/results/linformer_cpu.json", tmp_path)
    ax_m = figures["p.png"].axes[1]
    assert any(line.get_label().startswith("paper") for line in ax_m.get_lines())


def test_dense_plots_title_and_goals(tmp_path, figures):
    _draw("dense", "dense_attention/results/dense_cpu.json", tmp_path, "d")
    title = figures["d_ms.png"].axes[0].get_title()
    assert "8 heads x 64" in title and "T=1K..16K" in title and "median of 3" in title
    assert "issue goal >= 1.5x" in title
    assert "load not recorded" in _texts(figures["d_ms.png"])
    assert figures["d_mib.png"].axes[0].get_ylabel() == "compiled peak MiB"
    assert _texts(figures["d_mib.png"]) == ""  # compiled memory does not depend on the load


def test_scripts_draw_with_timing_plots():
    """A fresh run of each timing study draws the same plot replot.py draws."""
    for script, function in [
        ("dense_attention/run.py", "timing_plots.dense("),
        ("linformer/run.py", "timing_plots.linformer("),
        ("lra_speed/run.py", "timing_plots.lra_speed"),
        ("reformer/growth.py", "timing_plots.reformer_growth("),
        ("sparse_transformer/run.py", "timing_plots.sparse_transformer("),
        ("train_throughput/run.py", "timing_plots.train_throughput("),
        ("transformer_xl/eval_speed.py", "timing_plots.transformer_xl("),
    ]:
        text = (EXPERIMENTS / script).read_text()
        assert function in text and "bench.plot_lines" not in text, script


def test_every_committed_png_is_replotted():
    import subprocess

    replot = load_script("replot.py")
    listed = set()
    for _, result, _ in replot.PLOTS:
        stem = EXPERIMENTS / result
        listed |= {p.relative_to(EXPERIMENTS) for p in stem.parent.glob(stem.name + "*.png")}
    tracked = subprocess.run(
        ["git", "ls-files", "*.png"], cwd=EXPERIMENTS, capture_output=True, text=True, check=True
    ).stdout.split()
    # Sample grids are pictures of what a model generated, not plots of a results file.
    plots = {Path(p) for p in tracked if not Path(p).name.startswith("samples_")}
    assert plots <= listed


def test_timing_plots_with_repeats_have_error_bars(tmp_path, figures):
    """Where the results file keeps every repeat's time, the plot shows their range."""
    from matplotlib.container import ErrorbarContainer

    for function, results_file in [
        ("sparse_transformer", "sparse_transformer/results/cpu.json"),
        ("reformer_growth", "reformer/results/growth.json"),
    ]:
        _draw(function, results_file, tmp_path)
        ax = figures["p.png"].axes[0]
        assert any(isinstance(c, ErrorbarContainer) for c in ax.containers), function
        assert "bars:" in _all_titles(figures["p.png"])
