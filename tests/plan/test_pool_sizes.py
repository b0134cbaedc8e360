"""``plan.pool_sizes``: the level-based estimate per pool size that ``wire-daemon plan`` prints."""

from __future__ import annotations

import numpy as np
import pytest

from wire_daemon.core.billing import Billing
from wire_daemon.core.events import EventKind, TaskEvent
from wire_daemon.core.run_state import RunState
from wire_daemon.core.workflow import TaskSpec, Workflow, build_workflow
from wire_daemon.plan.makespan import LevelModel
from wire_daemon.plan.pool_sizes import PoolTerms, TaskTimeSampler, estimate_pool_sizes, with_known_times
from wire_daemon.ports.prediction import POLICY_NOT_STARTED, POLICY_RUNNING_ONLY, DispatchEstimate, Prediction


def _workflow(times: dict[str, float], parents: dict[str, tuple[str, ...]], transformation: str = "t") -> Workflow:
    specs = [TaskSpec(t, transformation, parents.get(t, ()), runtime_s=s) for t, s in times.items()]
    return build_workflow("wf", "test", specs)


def _no_dispatch(workflow: Workflow) -> DispatchEstimate:
    return DispatchEstimate(np.full(len(workflow.stages), np.nan), 0.0, 0.0, 0.0, observations=1, gap_observations=1)


def _blind(n: int, policy: int = POLICY_NOT_STARTED, mean: float = 0.0, p90: float = 0.0) -> Prediction:
    """A prediction of one policy for every task (with nothing measured: no time at all)."""
    zeros = np.zeros(n)
    return Prediction(zeros, zeros, zeros, np.full(n, policy, dtype=np.int8), np.full(n, mean), np.full(n, p90))


def _known(workflow: Workflow, state: RunState, now: float = 0.0) -> Prediction:
    return with_known_times(_blind(workflow.n_tasks), state, now, workflow.runtime_s)


# The makespan-model paper's Fig. 1: eight tasks, top-down levels {0}, {1,2,3}, {4,5}, {6}, {7}.
PAPER_TIMES = {"t0": 13.0, "t1": 13.0, "t2": 9.0, "t3": 7.0, "t4": 9.0, "t5": 12.0, "t6": 10.0, "t7": 11.0}
PAPER_EDGES = {
    "t1": ("t0",),
    "t2": ("t0",),
    "t3": ("t0",),
    "t4": ("t1", "t2"),
    "t5": ("t3",),
    "t6": ("t4",),
    "t7": ("t5", "t6"),
}


def test_the_papers_example_gives_the_papers_makespans_and_the_billing_rules_cost():
    wf = _workflow(PAPER_TIMES, PAPER_EDGES)
    state = RunState(wf)
    terms = PoolTerms(slots_per_instance=1, billing=Billing(10.0), launch_lag_s=0.0)
    rows = estimate_pool_sizes(LevelModel(wf), state, _known(wf, state), _no_dispatch(wf), [2, 4], 0.0, terms)
    # TDA with 2 slots: 13 + 14.5 + 12 + 10 + 11; with 4 slots: 13 + 13 + 12 + 10 + 11 (the paper's §IV-D).
    assert [r.makespan_s for r in rows] == pytest.approx([60.5, 59.0])
    assert [r.cost_units for r in rows] == [2 * 7, 4 * 6]  # every started 10 s unit, per instance
    assert all(r.p50_makespan_s is None for r in rows)  # known times: no spread


def test_a_level_latency_is_added_per_level():
    wf = _workflow(PAPER_TIMES, PAPER_EDGES)
    state = RunState(wf)
    dispatch = DispatchEstimate(np.full(len(wf.stages), np.nan), 0.0, 2.0, 3.0, observations=1, gap_observations=1)
    terms = PoolTerms(1, Billing(3600.0), 0.0)
    (row,) = estimate_pool_sizes(LevelModel(wf), state, _known(wf, state), dispatch, [4], 0.0, terms)
    assert row.makespan_s == pytest.approx(59.0 + 5 * 5.0)


def _fan(n: int, seconds: float) -> Workflow:
    return _workflow({f"t{i}": seconds for i in range(n)}, {})


def test_during_a_run_the_instances_beyond_those_up_join_a_launch_lag_later_and_pay_from_now():
    wf = _fan(8, 100.0)
    state = RunState(wf)
    for task in wf.task_ids:  # all queued: one frontier, no level latency ahead
        state.apply(TaskEvent(1000.0, EventKind.SUBMITTED, task))
    terms = PoolTerms(1, Billing(60.0), launch_lag_s=50.0, up_now=1)
    rows = estimate_pool_sizes(
        LevelModel(wf), state, _known(wf, state, 1000.0), _no_dispatch(wf), [1, 2], 1000.0, terms
    )
    # One slot: 800 s. Two: one slot alone for 50 s, then both on the 750 s left.
    assert [r.makespan_s for r in rows] == pytest.approx([800.0, 50.0 + 375.0])
    assert [r.cost_units for r in rows] == [14, 2 * 8]


def test_with_known_times_fills_only_what_nothing_was_measured_for():
    wf = _fan(3, 100.0)
    state = RunState(wf)
    for task in ("t0", "t1"):
        state.apply(TaskEvent(0.0, EventKind.SUBMITTED, task))
    state.apply(TaskEvent(10.0, EventKind.STARTED, "t0", host="h"))
    prediction = _blind(3, POLICY_RUNNING_ONLY, mean=7.0, p90=7.0)
    prediction.policy[2] = 5  # a measured prediction: kept as it is
    filled = with_known_times(prediction, state, 40.0, np.array([100.0, 100.0, 100.0]))
    assert filled.remaining_mean_s is not None and filled.remaining_p90_s is not None
    assert filled.remaining_mean_s.tolist() == [70.0, 100.0, 7.0]  # the running one, less the 30 s it has run
    assert filled.remaining_p90_s.tolist() == [70.0, 100.0, 7.0]


def _measured_state(occupancies: list[float], running_for: float | None = None) -> tuple[RunState, float]:
    """A one-stage workflow whose first tasks finished with these occupancies; one more waits, one may run."""
    n = len(occupancies) + 2
    wf = _fan(n, 1.0)
    state = RunState(wf)
    for i, occupancy in enumerate(occupancies):
        task = f"t{i}"
        state.apply(TaskEvent(0.0, EventKind.SUBMITTED, task))
        state.apply(TaskEvent(0.0, EventKind.STARTED, task, host="h"))
        state.apply(TaskEvent(occupancy, EventKind.FINISHED, task, host="h", exec_runtime_s=occupancy))
    now = 100.0
    if running_for is not None:
        last = f"t{n - 1}"
        state.apply(TaskEvent(0.0, EventKind.SUBMITTED, last))
        state.apply(TaskEvent(now - running_for, EventKind.STARTED, last, host="h"))
    return state, now


def test_a_waiting_task_draws_the_stage_measurements_scaled_to_its_predicted_mean():
    state, now = _measured_state([10.0, 20.0, 30.0, 40.0])
    prediction = _blind(state.workflow.n_tasks, 3, mean=50.0)  # twice the measured mean of 25 s
    sampler = TaskTimeSampler(state, prediction, now)
    draws = np.array([sampler.draw(np.random.default_rng(k))[4] for k in range(200)])
    assert sampler.has_spread and set(draws.tolist()) == {20.0, 40.0, 60.0, 80.0}


def test_a_running_task_draws_only_what_outlasts_its_elapsed_time():
    state, now = _measured_state([10.0, 20.0, 30.0, 40.0, 50.0, 60.0], running_for=25.0)
    prediction = _blind(state.workflow.n_tasks, 3)
    sampler = TaskTimeSampler(state, prediction, now)
    draws = {sampler.draw(np.random.default_rng(k))[7] for k in range(200)}
    assert draws == {5.0, 15.0, 25.0, 35.0}  # 30..60 s measured, less the 25 s it has run


def test_a_stage_with_too_few_measurements_has_no_spread():
    state, now = _measured_state([10.0, 20.0])
    sampler = TaskTimeSampler(state, _blind(state.workflow.n_tasks, 7), now)
    assert not sampler.has_spread


def test_p50_and_p90_bracket_draws_and_shrink_or_hold_with_more_instances():
    state, now = _measured_state([5.0, 10.0, 20.0, 40.0, 80.0, 160.0])
    wf = state.workflow
    prediction = _blind(wf.n_tasks, 3, mean=52.5, p90=120.0)
    terms = PoolTerms(1, Billing(60.0), 30.0, up_now=0)
    rows = estimate_pool_sizes(LevelModel(wf), state, prediction, _no_dispatch(wf), [1, 2, 3], now, terms)
    p50 = [r.p50_makespan_s or 0.0 for r in rows]
    p90 = [r.p90_makespan_s or 0.0 for r in rows]
    assert all(r.p50_cost_units is not None and r.p90_cost_units is not None for r in rows)
    assert all(0 < a <= b for a, b in zip(p50, p90))
    assert all((r.p50_cost_units or 0) <= (r.p90_cost_units or 0) for r in rows)
    for column in ([r.makespan_s for r in rows], p50, p90):  # more instances: never slower
        assert all(b <= a for a, b in zip(column, column[1:]))
    assert p90[0] > p50[0]  # two tasks drawn from 5..160 s: a real spread
