"""Policy target-slowdown given an operator's deadline or budget, on the bundled Montage at K = 100."""

from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path

import pytest

from wire_daemon.core.config import EmulationConfig, PredictionConfig, ReplayConfig, SteeringConfig
from wire_daemon.emulated.traces import load_trace
from wire_daemon.runtime.replay import ReplayResult, replay

TRACE = Path(__file__).resolve().parents[1] / "data" / "traces" / "montage-chameleon-2mass-01d-001.json"
BASE = ReplayConfig(
    PredictionConfig(), SteeringConfig(charging_unit_s=900, max_instances=12), EmulationConfig(time_scale=100)
)


@pytest.fixture(scope="module")
def workflow():
    return load_trace(TRACE)


def _run(workflow, **steering) -> ReplayResult:
    return replay(workflow, "target-slowdown", replace(BASE, steering=replace(BASE.steering, **steering)))


def test_a_deadline_it_can_meet_is_met_and_said(workflow):
    full = replay(workflow, "full-site", BASE).makespan_s
    deadline = 1.5 * full
    run = _run(workflow, deadline=f"{deadline:.0f}s", deadline_quantile="p90")
    assert run.makespan_s <= deadline
    planned = [r.rule for r in run.records if r.rule != "no work left"]
    met, missed = r"met with ~\d+ (min|s) to spare", r"missed by ~\d+ (min|s) at full pool"
    said = rf"; deadline {deadline:.0f}s after start ({met}|{missed})"
    assert all(re.search(said, r) for r in planned)
    assert "met with" in planned[0] and "met with" in planned[-1]


def test_a_deadline_no_pool_meets_is_said_with_the_miss_and_the_pool_goes_as_fast_as_it_can(workflow):
    run = _run(workflow, deadline="600s")
    missed = [r.rule for r in run.records if "missed by" in r.rule]
    said = r"deadline 600s after start missed by ~\d+ (min|s) at full pool"
    assert missed and all(re.search(said, m) for m in missed)
    default = _run(workflow)
    assert run.makespan_s <= default.makespan_s  # not slower than the default, which aims at the full pool's time


def test_a_budget_that_is_never_reached_changes_nothing(workflow):
    default, rich = _run(workflow), _run(workflow, budget=1000.0)
    assert (rich.cost_units, rich.makespan_s) == (default.cost_units, default.makespan_s)
    assert not any("budget" in r.rule for r in rich.records)


def test_a_budget_spent_stops_every_launch_and_keeps_only_the_minimal_pool(workflow):
    run = _run(workflow, budget=3.0)
    rules = [r.rule for r in run.records]
    assert any("budget 3 binds" in r for r in rules)
    first = next(i for i, r in enumerate(rules) if "budget 3 exceeded" in r)
    after = run.records[first:]
    assert not any(r.launched for r in after)  # paid units are used up; nothing new is bought
    assert after[-1].target <= BASE.steering.min_instances
    assert run.cost_money < _run(workflow).cost_money + 1.0  # the minimal pool's units only, past the budget
