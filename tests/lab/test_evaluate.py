"""The evaluation (benchmarks/evaluate.py, wire_daemon/evaluate*.py) on a tiny grid."""

import csv

import pytest

from tests.lab.benchmark_script import load_benchmark
from wire_daemon.emulated.traces import bundled_trace_path
from wire_daemon.runtime.policies import POLICY_NAMES
from wire_lab.evaluation.runs import GROUPS, Job, ResultCache, find_traces, group_of, make_jobs, run_job


@pytest.fixture(scope="module")
def evaluate():
    return load_benchmark("evaluate.py", "evaluate_script")


@pytest.fixture(scope="module")
def tiny(evaluate, tmp_path_factory):
    out = tmp_path_factory.mktemp("evaluation")
    argv = [
        "--traces",
        str(bundled_trace_path()),
        "--units",
        "60",
        "--scales",
        "1",
        "--seeds",
        "0",
        "--settings",
        "paper",
        "--out",
        str(out),
    ]
    assert evaluate.main(argv) == 0
    return out, argv


def read_runs(out):
    with (out / "runs.csv").open() as f:
        return list(csv.DictReader(f))


@pytest.mark.slow
def test_tiny_grid_writes_every_output(tiny):
    out, _ = tiny
    for name in (
        "runs.csv",
        "tables.md",
        "per_trace.md",
        "prediction_errors.csv",
        "README.md",
        "fig4_prediction_error_cdf.png",
        "fig5_cost.png",
        "fig6_relative_time.png",
        "groups_paper.png",
    ):
        assert (out / name).stat().st_size > 0, name
    readme = (out / "README.md").read_text()
    assert "python3 benchmarks/evaluate.py --traces" in readme
    assert "--settings paper --units 60 --scales 1 --seeds 0" in readme
    assert "## Headline" in readme and "CPU cores" in readme


@pytest.mark.slow
def test_tiny_grid_numbers_are_sane(tiny):
    out, _ = tiny
    rows = read_runs(out)
    assert [r["policy"] for r in rows] == list(POLICY_NAMES)  # 1 trace x 1 unit x 1 scale x 1 seed x 6 policies
    by_policy = {r["policy"]: r for r in rows}
    full = by_policy["full-site"]
    assert float(full["relative_time"]) == 1.0 and float(full["cost_ratio"]) == 1.0
    assert int(full["cost_units"]) == 12  # 12 instances, one hour: the run is far shorter
    for r in rows:
        assert r["status"] == "ok"
        assert int(r["cost_units"]) > 0
        assert float(r["relative_time"]) >= 0.999
        assert 0 < float(r["utilization"]) <= 1
        assert r["group"] == GROUPS[0]  # this trace ends within one 3-minute interval on the full site
    assert float(by_policy["wire"]["decision_share_pct"]) > 0
    with (out / "prediction_errors.csv").open() as f:
        errors = list(csv.DictReader(f))
    assert {e["stage_class"] for e in errors} == {"short", "medium", "long"}
    assert int(next(e for e in errors if e["stage_class"] == "short")["tasks"]) > 0
    assert "| montage-chameleon-2mass-01d-001.json | 103 |" in (out / "per_trace.md").read_text()
    assert "workflow model (MB)" in (out / "tables.md").read_text()


@pytest.mark.slow
def test_a_second_run_takes_the_jobs_from_the_cache(evaluate, tiny):
    out, argv = tiny
    before = read_runs(out)
    assert evaluate.main(argv) == 0
    assert "(1 taken from the cache" in (out / "README.md").read_text()
    assert read_runs(out) == before


def test_cache_ignores_entries_of_other_code(tmp_path):
    path = tmp_path / "jobs.jsonl"
    ResultCache(path, "old").add("job:x", {"a": 1})
    path.open("a").write('{"key": "job:cut')  # a line cut short by an interruption
    assert ResultCache(path, "old").load() == {"job:x": {"a": 1}}
    assert ResultCache(path, "new").load() == {}


def test_grid_selection():
    traces = find_traces([bundled_trace_path().parent])
    assert [name for name, _ in traces] == [bundled_trace_path().name]
    jobs = make_jobs(traces, ["paper", "modern"], [1.0, 60.0], [1.0, 100.0], [0, 1])
    assert len(jobs) == 2 * 2 * 2 + 1 * 2 * 2  # the modern setting only bills per minute
    assert jobs[0].time_scale == 100.0  # the long runs first
    assert {j.u_min for j in jobs if j.setting == "modern"} == {1.0}
    assert make_jobs(traces, ["modern"], [60.0], [1.0], [0]) == []
    assert [group_of(x) for x in (0.5, 1.0, 9.99, 10.0)] == [GROUPS[0], GROUPS[1], GROUPS[1], GROUPS[2]]


def test_a_timed_out_policy_leaves_the_others(monkeypatch):
    import wire_lab.evaluation.runs as ev

    real = ev.replay

    def slow_pfa(workflow, name, config, *args):
        if name == "pfa":
            raise ev.ReplayTimeout()
        return real(workflow, name, config, *args)

    monkeypatch.setattr(ev, "replay", slow_pfa)
    result = run_job(
        Job("m.json", str(bundled_trace_path()), "paper", 60.0, 1.0, 0), ("wire", "full-site", "pfa"), limit_s=0
    )
    status = {r.policy: r.status for r in result.runs}
    assert status == {"wire": "ok", "full-site": "ok", "pfa": "timeout"}
    assert result.errors["short"]  # WIRE's per-task errors are kept for Fig. 4
