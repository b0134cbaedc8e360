"""Issue 13: ``wire-daemon plan``, the estimated makespan and cost per pool size, before and during a run."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from wire_daemon.cli.main import main
from wire_daemon.core.billing import Billing
from wire_daemon.core.config import EmulationConfig, SteeringConfig
from wire_daemon.emulated.site import task_times, world_dispatch
from wire_daemon.emulated.traces import bundled_trace_path, load_trace
from wire_daemon.runtime.replay import replay
from wire_daemon.runtime.settings import Settings
from wire_daemon.service.sizing import plan_trace
from wire_lab.evaluation.runs import SETTINGS, replay_config
from wire_lab.live_writer import WriterOptions, build_live

STEERING = SteeringConfig()


def _plan(capsys: pytest.CaptureFixture[str], *args: str) -> dict:
    assert main(["plan", *args, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def _error(capsys: pytest.CaptureFixture[str], *args: str) -> list[str]:
    assert main(["plan", *args]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    return captured.err.strip().splitlines()


def _non_increasing(values: list[float]) -> bool:
    return all(b <= a for a, b in zip(values, values[1:]))


def test_plan_on_the_bundled_trace_prints_one_row_per_pool_size(capsys):
    assert main(["plan"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("plan for montage-chameleon-2mass-01d-001 (trace ")
    assert "103 tasks, 0 done, 0 running" in lines[0]
    header = next(i for i, line in enumerate(lines) if line.split()[:3] == ["instances", "makespan", "units"])
    rows = [line.split() for line in lines[header + 1 : header + 1 + STEERING.max_instances]]
    assert [int(r[0]) for r in rows] == list(range(1, STEERING.max_instances + 1))
    assert lines[header + 1 + STEERING.max_instances].startswith("(no P50/P90: the trace's task times are known")


def test_plan_on_a_trace_json_is_monotone_and_billed_by_the_one_rule(capsys):
    data = _plan(capsys, str(bundled_trace_path()), "--max-instances", "6", "--price", "0.5")
    sizes = data["sizes"]
    assert [s["instances"] for s in sizes] == [1, 2, 3, 4, 5, 6]
    makespans = [s["makespan_s"] for s in sizes]
    assert _non_increasing(makespans) and makespans[0] > makespans[-1] > 0
    billing = Billing(STEERING.charging_unit_s)
    for s in sizes:  # launched a launch lag before the start, every started unit paid
        assert s["cost_units"] == s["instances"] * billing.units(-STEERING.interval_s, s["makespan_s"])
        assert s["cost"] == pytest.approx(0.5 * s["cost_units"])
        assert s["p50_makespan_s"] is None and s["p90_makespan_s"] is None


def test_plan_billed_per_second_says_so_and_counts_seconds(capsys, tmp_path):
    config = tmp_path / "config.yaml"
    config.write_text(f"steering: {{billing_model: second, max_instances: 3}}\nstate_path: {tmp_path}/state.sqlite\n")
    data = _plan(capsys, "--config", str(config))
    assert (data["charging_unit_s"], data["minimum_charge_s"]) == (1.0, 60.0)
    billing = Billing.per_second(60.0)
    for s in data["sizes"]:  # launched a launch lag before the start, every second paid
        assert s["cost_units"] == s["instances"] * billing.units(-STEERING.interval_s, s["makespan_s"])
    assert main(["plan", "--config", str(config)]) == 0
    assert "  cost: billed per second (units are seconds), at least 60 s an instance" in capsys.readouterr().out
    priced = tmp_path / "priced.yaml"
    priced.write_text(
        config.read_text().replace("max_instances: 3", "max_instances: 3, price_per_hour: 0.17, currency: USD")
    )
    assert main(["plan", "--config", str(priced)]) == 0
    assert "; priced 0.17 USD an instance-hour" in capsys.readouterr().out


def test_a_trace_is_planned_with_what_the_emulated_worlds_negotiation_cycle_costs():
    workflow = load_trace(bundled_trace_path())
    occupancy, _ = task_times(workflow, EmulationConfig())
    dispatch = world_dispatch(workflow, EmulationConfig())
    lost = dispatch.gap_per_task(workflow.stage_of)
    # The per-stage gap is the mean over the stage of what the negotiation cycle makes each task lose.
    cycle = EmulationConfig().negotiation_interval_s
    expected = np.ceil(occupancy / cycle - 1e-9) * cycle - occupancy
    assert lost.sum() == pytest.approx(expected.sum())
    assert dispatch.level_latency_s == pytest.approx(EmulationConfig().submit_delay_s + cycle / 2)


@pytest.fixture(scope="module")
def live(tmp_path_factory):
    """A live-written submit dir of the bundled Montage on 2 instances, about a third done."""
    run = build_live(
        load_trace(bundled_trace_path()),
        tmp_path_factory.mktemp("live") / "run",
        EmulationConfig(initial_instances=2, time_scale=5.0),
        options=WriterOptions(subsecond_times=True),
    )
    return run


def test_plan_on_a_submit_dir_before_anything_finished_uses_the_default_times(capsys, live):
    live.advance_to(0.5)
    data = _plan(capsys, str(live.writer.dag_path.parent), "--max-instances", "4")
    assert data["kind"] == "submit dir" and data["done"] == 0 and data["running"] > 0
    assert data["task_times"].startswith("nothing finished yet: the default 3.0 min per task")
    makespans = [s["makespan_s"] for s in data["sizes"]]
    # 103 tasks of the default 180 s on one instance of 4 slots: at least 103 x 180 / 4 s.
    assert makespans[0] >= 103 * 180 / 4 and _non_increasing(makespans)
    assert all(s["p50_makespan_s"] is None for s in data["sizes"])


def test_plan_during_a_run_gives_p50_below_p90_and_bills_from_now(capsys, live, tmp_path):
    live.advance_to(200.0)
    config = tmp_path / "config.yaml"
    config.write_text("steering:\n  charging_unit_s: 60\n  max_instances: 5\n")
    data = _plan(capsys, str(live.writer.dag_path.parent), "--config", str(config))
    assert 0 < data["done"] < data["tasks"] and data["now_from"] == "last-event"
    assert data["up_now"] == 2 and data["task_times"].startswith("online predictions")
    sizes = data["sizes"]
    assert [s["instances"] for s in sizes] == [1, 2, 3, 4, 5]
    for key in ("makespan_s", "p50_makespan_s", "p90_makespan_s"):
        assert _non_increasing([s[key] for s in sizes]), key
    for s in sizes:
        assert data["elapsed_s"] < s["p50_makespan_s"] <= s["p90_makespan_s"]
        assert s["p50_cost_units"] <= s["p90_cost_units"]
        remaining = s["makespan_s"] - data["elapsed_s"]  # every instance pays the 60 s units from now
        assert s["cost_units"] == s["instances"] * max(1, int(np.ceil(remaining / 60 - 1e-6)))


def test_plan_text_during_a_run_names_its_inputs(capsys, live):
    live.advance_to(200.0)
    assert main(["plan", str(live.writer.dag_path.parent), "--max-instances", "3"]) == 0
    text = capsys.readouterr().out
    assert "(last-event)" in text and "2 instance(s) running tasks now" in text
    header = next(line for line in text.splitlines() if line.startswith("instances"))
    assert header.split() == ["instances", "makespan", "units", "cost", "P50", "P90", "P50", "units", "P90", "units"]
    assert "; money in on-demand instance-hours" in text  # money by default: the config's price, 1 an hour


def test_plan_on_a_finished_submit_dir_says_so(capsys, tmp_path):
    run = build_live(load_trace(bundled_trace_path()), tmp_path / "run", EmulationConfig(initial_instances=4))
    run.run()
    run.writer.close(run.site.last_finish)
    assert main(["plan", str(run.writer.dag_path.parent)]) == 0
    assert "the workflow has finished" in capsys.readouterr().out


@pytest.mark.parametrize(
    "args, message",
    [
        (["--max-instances", "0"], "--max-instances must be > 0 (got 0)"),
        (["--max-instances", "-3"], "--max-instances must be > 0 (got -3)"),
        (["--price", "-1"], "--price must be >= 0 (got -1)"),
    ],
)
def test_a_bad_flag_value_is_one_line_naming_the_flag(capsys, args, message):
    assert _error(capsys, *args) == [f"wire-daemon: error: {message}"]


def test_a_missing_input_is_one_line_naming_it(capsys, tmp_path):
    missing = tmp_path / "nope.json"
    assert _error(capsys, str(missing)) == [f"wire-daemon: error: {missing}: no such trace file or submit directory"]


def test_a_directory_without_a_dag_and_a_bad_trace_are_one_line_each(capsys, tmp_path):
    assert _error(capsys, str(tmp_path)) == [f"wire-daemon: error: {tmp_path}: no .dag file in the submit directory"]
    bad = tmp_path / "bad.json"
    bad.write_text("{}")
    (line,) = _error(capsys, str(bad))
    assert line.startswith(f"wire-daemon: error: {bad}: unknown trace layout")


def test_a_bad_config_is_one_line_naming_the_key(capsys, tmp_path):
    config = tmp_path / "config.yaml"
    config.write_text("steering:\n  max_instances: 0\n")
    (line,) = _error(capsys, "--config", str(config))
    assert line.startswith("wire-daemon: error: ") and "steering.max_instances" in line


def test_the_help_names_the_command(capsys):
    with pytest.raises(SystemExit):
        main(["plan", "--help"])
    assert "TRACE_OR_SUBMIT_DIR" in capsys.readouterr().out


@pytest.mark.parametrize("scale", [1.0, 100.0])
def test_plan_before_a_run_lands_within_ten_percent_of_the_emulated_fixed_pool(scale):
    """The remaining DAG scheduled on the pool, not per-level bounds (those were 30-60 % off here at 16)."""
    config = replay_config(SETTINGS["paper"], 60.0, scale, 0)
    settings = Settings(prediction=config.prediction, steering=config.steering, emulation=config.emulation)
    path = Path(bundled_trace_path())
    estimates = {e.instances: e.makespan_s for e in plan_trace(path, settings, 16).sizes}
    workflow = load_trace(path)
    for n in (1, 4, 16):
        fixed = replace(config, steering=replace(config.steering, max_instances=n))
        real = replay(workflow, "full-site", fixed).makespan_s
        assert estimates[n] == pytest.approx(real, rel=0.10), n


def test_plan_with_only_the_config_plans_the_running_daemon_s_workflows(capsys, live, tmp_path):
    from wire_daemon.persist.store import StateStore
    from wire_daemon.service.status import STATUS_KEY

    live.advance_to(200.0)
    submit_dir = str(live.writer.dag_path.parent)
    config = tmp_path / "config.yaml"
    config.write_text(
        f"site: {{kind: condor, submit_root: {tmp_path}}}\ncloud: {{kind: ec2}}\n"
        f"state_path: {tmp_path / 'state.sqlite'}\nsteering: {{max_instances: 3}}\n"
    )
    assert main(["plan", "--config", str(config)]) == 2  # a daemon that follows nothing: give the submit dir
    assert "follows no running workflow now" in capsys.readouterr().err
    store = StateStore(tmp_path / "state.sqlite")
    snapshot = {"time": 0.0, "workflows": [{"name": "montage-0", "state": "running", "submit_dir": submit_dir}]}
    store.set_meta(STATUS_KEY, json.dumps(snapshot))
    store.close()
    data = _plan(capsys, "--config", str(config))
    assert data["kind"] == "submit dir" and 0 < data["done"] < data["tasks"]
    assert data["now_from"] == "wall-clock" and data["task_times"].startswith("online predictions")
