"""The per-minute study's figures (benchmarks/per_minute.py), computed from made-up runs."""

import pytest

from tests.lab.benchmark_script import load_benchmark


@pytest.fixture(scope="module")
def study():
    return load_benchmark("per_minute.py", "per_minute_study")


def _run(me: tuple[int, float], pfa: tuple[int, float], others: tuple[int, float] = (1, 1e9)) -> dict:
    row = {"pfa": {"cost_units": pfa[0], "makespan_s": pfa[1]}}
    row["target-slowdown"] = {"cost_units": me[0], "makespan_s": me[1]}
    for p in ("pure-reactive", "reactive-conserving"):
        row[p] = {"cost_units": others[0], "makespan_s": others[1]}
    return row


def test_the_figures_count_slower_cheaper_dearer_dominated_and_dominating_runs(study):
    runs = [
        _run((90, 106.0), (100, 100.0)),  # cheaper, 6 % slower: neither side
        _run((90, 105.0), (100, 100.0)),  # cheaper, exactly 5 % slower: not counted slower
        _run((100, 100.0), (100, 100.0)),  # the same run
        _run((101, 100.0), (100, 100.0)),  # dearer, same time: dominated by PFA
        _run((100, 99.0), (100, 100.0)),  # same price, faster: dominates PFA
        _run((80, 100.0), (100, 100.0), others=(70, 90.0)),  # beats PFA, but a reactive peer dominates it
    ]
    f = study.figures(runs)
    assert (f.runs, f.slower, f.cheaper, f.dearer, f.dominated, f.dominating) == (6, 1, 3, 1, 2, 2)
    assert "cheaper 3 (50.0 %)" in f.line("all")


def test_no_trace_there_is_one_clear_line(study, tmp_path, capsys):
    assert study.main(["--traces", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and str(tmp_path) in err
