"""The market study's figures (benchmarks/markets.py), computed from synthetic rows, and its leak check.

The rows are made up so that each must-show figure is met or missed by a
known margin; one tiny replay checks that the study sees what a run leaves
behind on the site.
"""

from pathlib import Path

import pytest

import wire_daemon.runtime.assembly as assembly_module
from tests.lab.benchmark_script import load_benchmark
from wire_daemon.core.workflow import TaskSpec, build_workflow
from wire_daemon.emulated.site import EmulatedSite
from wire_daemon.runtime.replay import replay


@pytest.fixture(scope="module")
def study():
    return load_benchmark("markets.py", "markets_study")


def _row(policy, market, cost, makespan, lost=0.0, trace="t.json", k=100.0, seed=0, **extra):
    row = {
        "trace": trace,
        "tasks": 10,
        "time_scale": k,
        "seed": seed,
        "market": market,
        "policy": policy,
        "cost": cost,
        "cost_ratio": cost / 100.0,  # the full site costs 100 and ends at 1000 s in every run here
        "makespan_s": makespan,
        "relative_time": makespan / 1000.0,
        "interrupted_slot_s": lost,
        "interruptions": 1 if lost else 0,
        "spot_instances": 0,
        "on_demand_instances": 1,
        "tasks_completed": 10,
        "instances_leaked": 0,
    }
    return row | extra


def _references(study, **where):
    return [
        _row("full-site", study.ON_DEMAND, 100.0, 1000.0, **where),
        _row("pure-reactive", study.ON_DEMAND, 60.0, 1200.0, **where),
        _row("pfa", study.ON_DEMAND, 60.0, 1200.0, **where),
    ]


def _grid(study, default, annex, reactive):
    """Two seeds; in every market the default, annex-spot and reactive-spot as (cost, makespan, lost)."""
    rows = []
    for seed in (0, 1):
        rows += _references(study, seed=seed)
        for m in study.MARKETS:
            for policy, (cost, makespan, lost) in (
                (study.DEFAULT_POLICY, default),
                ("annex-spot", annex),
                ("reactive-spot", reactive),
            ):
                rows.append(_row(policy, m.name, cost, makespan, lost, seed=seed))
    return rows


def test_the_on_demand_references_join_every_market(study):
    rows = _grid(study, (30.0, 1050.0, 10.0), (35.0, 1000.0, 50.0), (25.0, 1300.0, 40.0))
    runs = study.by_run(rows)
    assert len(runs) == 2 * len(study.MARKETS)
    for row in runs.values():
        assert set(row) == {*study.SPOT_POLICIES, *study.REFERENCES}
        assert row["full-site"]["market"] == study.ON_DEMAND


def test_domination_needs_one_strict_side(study):
    a = {"cost": 30.0, "makespan_s": 1000.0}
    assert study.dominates({"cost": 29.0, "makespan_s": 1000.0}, a)
    assert study.dominates({"cost": 30.0, "makespan_s": 999.0}, a)
    assert not study.dominates({"cost": 30.0, "makespan_s": 1000.0}, a)  # equal: no one wins
    assert not study.dominates({"cost": 29.0, "makespan_s": 1001.0}, a)  # a trade, not a win
    assert not study.dominates({"cost": 30.0 * (1 - 1e-12), "makespan_s": 1000.0}, a)  # float noise is no win
    assert study.dominates({"cost": 30.0 * (1 + 1e-12), "makespan_s": 900.0}, a)  # nor a loss


def test_each_policy_is_held_to_target_3_against_the_other_two(study):
    # annex-spot is dearer and faster: no one dominates it; reactive-spot is dearer and slower than the default.
    rows = _grid(study, (30.0, 1050.0, 10.0), (35.0, 1000.0, 50.0), (32.0, 1300.0, 40.0))
    runs = study.by_run(rows)
    table = study.held_to_target_3(runs)
    n = len(runs)
    assert table[4] == f"| 0 (0.0 %) | 0 (0.0 %) | {n} (100.0 %) |"


def _verdicts(study, rows):
    return {(v.number, v.target): v for v in study.verdicts(rows, study.by_run(rows))}


def test_a_default_cheaper_faster_and_losing_less_meets_every_figure(study):
    # 0.30 of the full site at 1.05; reactive-spot 0.32 at 1.30; annex-spot dearer (0.35) but faster.
    rows = _grid(study, (30.0, 1050.0, 10.0), (35.0, 1000.0, 50.0), (32.0, 1300.0, 40.0))
    verdicts = _verdicts(study, rows)
    assert all(v.met for v in verdicts.values()), [v for v in verdicts.values() if not v.met]
    four = next(v for (n, _), v in verdicts.items() if n == "4")
    assert "0.300 at 1.050" in four.measured
    five = [v for (n, _), v in verdicts.items() if n == "5"]
    assert len(five) == 2 and all("sum 20 against 80 (75 % lower)" in v.measured for v in five)
    assert all("median per run 10 against 40" in v.measured for v in five)


def test_each_figure_is_missed_by_the_run_that_breaks_it(study):
    # The default dearer and slower than reactive-spot, which dominates it everywhere, and losing as much work.
    rows = _grid(study, (40.0, 1200.0, 40.0), (35.0, 1000.0, 50.0), (32.0, 1100.0, 40.0))
    rows[-1] = rows[-1] | {"tasks_completed": 9}  # one run lost a task
    verdicts = _verdicts(study, rows)
    by_number: dict[str, list] = {}
    for (number, _), v in verdicts.items():
        by_number.setdefault(number, []).append(v)
    assert [v.number for v in verdicts.values() if v.met] == ["1a"]  # the lost task was reactive-spot's
    assert "9 of 10 tasks" in by_number["1b"][0].measured and "reactive-spot" in by_number["1b"][0].measured
    assert "0 instance(s) leaked" in by_number["1a"][0].measured  # the default's runs: the cause is not there
    assert "0.400 against 0.320" in by_number["2a"][0].measured
    assert "1.200 against 1.100" in by_number["2b"][0].measured
    assert by_number["3"][0].measured.startswith(f"{2 * len(study.MARKETS)} of {2 * len(study.MARKETS)} (100.0 %)")
    assert "0.400 at 1.200" in by_number["4"][0].measured
    assert all("(0 % lower)" in v.measured for v in by_number["5"])


def test_work_lost_by_neither_policy_is_not_a_drop(study):
    rows = _grid(study, (30.0, 1050.0, 0.0), (35.0, 1000.0, 0.0), (32.0, 1300.0, 0.0))
    five = [v for v in study.verdicts(rows, study.by_run(rows)) if v.number == "5"]
    assert five and not any(v.met for v in five) and all("none lost by either" in v.measured for v in five)


def test_broken_runs_name_lost_tasks_and_leaked_instances(study):
    rows = _references(study)
    assert study.broken_runs(rows) == []
    rows[1] = rows[1] | {"tasks_completed": 7}
    rows[2] = rows[2] | {"instances_leaked": 1}
    bad = study.broken_runs(rows)
    assert len(bad) == 2 and "7 of 10 tasks" in bad[0] and "1 instance(s) leaked" in bad[1]


def test_an_instance_launched_behind_the_loops_back_is_a_leak(study):
    specs = [TaskSpec(f"a{i}", "a", runtime_s=100.0) for i in range(8)]
    specs += [TaskSpec("b", "b", parents=tuple(f"a{i}" for i in range(8)), runtime_s=50.0)]
    workflow = build_workflow("w", "t", specs)
    config = study.market_config(1.0, 0, study.MARKETS[2])
    with study.watched_site():
        result = replay(workflow, "reactive-spot", config)
    site = study._WatchedSite.last
    checks = study.site_checks(site, result, site.initial_ids, config.steering.interval_s)
    assert checks.tasks_completed == workflow.n_tasks and checks.leaked == 0
    assert checks.pool_at_end >= 1 and checks.spot_instances >= 1 and checks.on_demand_instances == 0
    site.launch(1)  # nobody's decision: the daemon would never know it
    assert study.site_checks(site, result, site.initial_ids, config.steering.interval_s).leaked == 1
    assert assembly_module.EmulatedSite is EmulatedSite  # the watch is lifted after the run


def test_a_spot_pool_that_never_falls_back_is_stopped_at_the_horizon(study):
    # One 10-hour task at 2 reclaims per instance-hour: each attempt survives with probability e^-20.
    workflow = build_workflow("w", "t", [TaskSpec("long", "a", runtime_s=36_000.0)])
    config = study.market_config(1.0, 0, study.MarketSetting("heavy", 2.0, False))
    with study.watched_site():
        stopped = study.measure(workflow, "annex-spot", config, horizon_s=20 * 3600.0)
        finished = study.measure(workflow, "full-site", study.market_config(1.0, 0, None), horizon_s=20 * 3600.0)
    assert stopped.checks.tasks_completed == 0 and stopped.makespan_s == 20 * 3600.0
    assert stopped.interruptions > 10 and stopped.restarts > 10 and stopped.money > 0
    assert finished.checks.tasks_completed == 1 and finished.makespan_s < 11 * 3600.0
    assert assembly_module.EmulatedSite is EmulatedSite and study._WatchedSite.horizon_s == float("inf")


def test_held_out_families_are_split_by_file_name_and_judged_apart(study):
    assert study.family("legacy/montage-4.0-osg-dataset02-run001.json.gz") == "montage"
    assert study.in_set("srasearch-chameleon-30a-001.json", "held-out")
    assert study.in_set("montage-chameleon-2mass-01d-001.json", "tuning")
    assert not study.in_set("cycles-chameleon-1l-1c-12p-001.json", "tuning")
    # The tuning trace: the default meets every figure; the held-out one: reactive-spot dominates it.
    good = _grid(study, (30.0, 1050.0, 10.0), (35.0, 1000.0, 50.0), (32.0, 1300.0, 40.0))
    bad = _grid(study, (40.0, 1400.0, 80.0), (35.0, 1000.0, 50.0), (32.0, 1300.0, 80.0))
    rows = [r | {"trace": "montage-a.json"} for r in good] + [r | {"trace": "seismology-b.json"} for r in bad]
    traces = [("montage-a.json", Path("montage-a.json")), ("seismology-b.json", Path("seismology-b.json"))]
    table = study.split_table(rows, traces)
    assert "seismology-b.json" in table[0] and "tuned on the other 1 traces" in table[0]
    three = next(line for line in table if line.startswith("| 3 |"))
    assert three.count("| yes |") == 1 and three.count("| **no** |") == 1
