"""The benchmark harness records how it measured (seqjax.bench): interleaving order, medians,
the noisy flag from a given load, the environment; and summarize.py shows noisy rows.

No timing assertions: the clock is replaced by a counter where times matter.
"""

from __future__ import annotations

import itertools
import json

import pytest

from seqjax import bench
from tests.experiments.test_studies_smoke import load_script


def test_interleave_order_alternates_contenders():
    assert bench.interleave_order(["a", "b"], 3) == ["a", "b", "a", "b", "a", "b"]
    assert bench.interleave_order(["x", "y", "z"], 2) == ["x", "y", "z", "x", "y", "z"]
    assert bench.interleave_order(["a"], 0) == []


def test_interleave_runs_in_turns_and_takes_medians():
    calls = []
    ticks = itertools.count()
    # Each timed call spans a fixed number of clock ticks per contender: a -> 2, b -> 4.
    span = {"a": 2, "b": 4}

    def make(name):
        def run():
            calls.append(name)
            for _ in range(span[name] - 1):
                next(ticks)
            return name

        return run

    out = bench.interleave(
        {"a": make("a"), "b": make("b")},
        rounds=5,
        warmup=1,
        block=lambda x: x,
        clock=lambda: float(next(ticks)),
    )
    assert calls == ["a", "b"] + ["a", "b"] * 5  # one warm-up turn, then A B A B ...
    assert out["order"] == ["a", "b"] * 5
    assert out["times"] == {"a": [2.0] * 5, "b": [4.0] * 5}
    assert out["timing"]["a"]["median_s"] == 2.0 and out["timing"]["b"]["repeats"] == 5
    assert out["ratios"] == {"a": 1.0, "b": 2.0}
    assert set(out["load"]) >= {"loadavg_before", "loadavg_after", "other_cores", "noisy"}
    assert out["noisy"] is out["load"]["noisy"]


def test_interleave_needs_a_contender():
    with pytest.raises(ValueError, match="at least one contender"):
        bench.interleave({})


def test_median_summary():
    assert bench.median_summary([3.0, 1.0, 2.0, 10.0]) == {
        "median_s": 2.5,
        "min_s": 1.0,
        "max_s": 10.0,
        "repeats": 4,
    }


@pytest.mark.parametrize(
    "other,cores,loadavg,noisy",
    [
        (0.1, 2, None, False),
        (0.49, 2, None, False),
        (0.6, 2, None, True),  # more than a quarter of 2 cores busy elsewhere
        (1.9, 8, None, False),
        (2.1, 8, None, True),
        (None, 2, [1.5, 1.0, 1.0], True),  # not measured: the load before decides
        (None, 2, [0.2, 1.0, 1.0], False),
        (None, 2, None, False),
    ],
)
def test_noisy_flag_from_a_given_load(other, cores, loadavg, noisy):
    assert bench.is_noisy(other, cores, loadavg) is noisy
    summary = bench.load_summary(loadavg, loadavg, 1.0, 1.0, other, cores)
    assert summary["noisy"] is noisy
    assert summary["noisy_threshold_cores"] == bench.NOISY_FRACTION * cores


def test_load_probe_records_before_and_after():
    with bench.LoadProbe() as probe:
        sum(range(1000))
    r = probe.result
    assert len(r["loadavg_before"]) == 3 and len(r["loadavg_after"]) == 3
    assert r["wall_s"] > 0 and r["own_cores"] >= 0 and r["cpu_count"] >= 1
    assert r["other_cores"] is None or r["other_cores"] >= 0
    assert isinstance(r["noisy"], bool)


def test_environment_records_cpu_threads_versions_commit():
    env = bench.environment()
    assert env["cpu_model"] and env["cpu_count"] >= 1
    assert env["threads"]["cpu_affinity"] >= 1 and env["threads"]["python_threads"] >= 1
    assert env["versions"]["jax"] and env["commit"]
    assert env["loadavg"] is None or len(env["loadavg"]) == 3


def test_write_results_marks_a_noisy_run(tmp_path):
    load = bench.load_summary([3.0, 2.0, 1.0], [3.5, 2.0, 1.0], 10.0, 1.0, 1.7, 2)
    bench.write_results(tmp_path, "noisy", {"load": load, "rows": []}, "| a |\n|---|")
    md = (tmp_path / "noisy.md").read_text()
    assert "**Noisy**" in md and "1.7 cores" in md
    quiet = bench.load_summary([0.1, 0.1, 0.1], [0.1, 0.1, 0.1], 10.0, 1.0, 0.05, 2)
    bench.write_results(tmp_path, "quiet", {"load": quiet, "rows": []}, "| a |\n|---|")
    assert "Noisy" not in (tmp_path / "quiet.md").read_text()
    assert json.loads((tmp_path / "quiet.json").read_text())["environment"]["cpu_model"]


def _results(root, study, name, payload):
    folder = root / study / "results"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{name}.json").write_text(json.dumps(payload))


def test_summarize_shows_noisy_rows_as_such(tmp_path):
    summarize = load_script("summarize.py")
    row = {"study": "s", "paper_figure": "f", "paper": 1.0, "ours": 2.0, "ratio": 2.0}
    _results(tmp_path, "a", "file_noisy", {"summary": [row], "load": {"noisy": True}})
    _results(tmp_path, "b", "row_noisy", {"summary": [{**row, "noisy": True}]})
    _results(tmp_path, "c", "quiet", {"summary": [row], "noisy": False})
    _results(tmp_path, "d", "old", {"summary": [row]})
    _results(tmp_path, "e", "row_wins", {"summary": [{**row, "noisy": False}], "noisy": True})
    _results(tmp_path, "f", "quality", {"summary": [{**row, "noisy": None}], "noisy": True})
    got = {r["file"].split("]")[0][1:]: r["measured"] for r in summarize.gather(tmp_path)}
    assert got == {
        "file_noisy.json": "**noisy**",
        "row_noisy.json": "**noisy**",
        "quiet.json": "quiet",
        "old.json": "not recorded",
        "row_wins.json": "quiet",
        "quality.json": "not a timing",
    }
    table = summarize.render(summarize.gather(tmp_path))
    assert "| measured |" in table and table.count("**noisy**") == 2


def test_timed_sections_are_recorded_and_summarized(tmp_path, monkeypatch):
    """Every time_compiled call records its load; a payload without its own "load" gets
    their summary, noisy if any section was."""
    import jax
    import jax.numpy as jnp

    monkeypatch.setattr(bench, "MEASUREMENTS", [])
    compiled = jax.jit(lambda x: x + 1).lower(jnp.zeros(3)).compile()
    bench.time_compiled(compiled, jnp.zeros(3), repeats=2)
    assert len(bench.MEASUREMENTS) == 1 and "noisy" in bench.MEASUREMENTS[0]
    quiet = bench.load_summary([0.1] * 3, [0.1] * 3, 1.0, 1.0, 0.0, 2)
    noisy = bench.load_summary([0.1] * 3, [2.0] * 3, 1.0, 1.0, 1.5, 2)
    monkeypatch.setattr(bench, "MEASUREMENTS", [quiet, noisy, quiet])
    agg = bench.aggregate_load(bench.MEASUREMENTS)
    assert agg["measurements"] == 3 and agg["noisy_measurements"] == 1 and agg["noisy"]
    assert agg["other_cores"] == 1.5 and agg["loadavg_after"] == [0.1] * 3
    bench.write_results(tmp_path, "study", {"rows": []}, "| a |\n|---|")
    payload = json.loads((tmp_path / "study.json").read_text())
    assert payload["load"]["noisy"] is True
    assert "in 1 of 3 timed sections" in (tmp_path / "study.md").read_text()
    assert not bench.aggregate_load([quiet, quiet])["noisy"]
