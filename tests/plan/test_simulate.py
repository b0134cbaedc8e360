"""The simulating estimator: small DAGs whose schedule is known by hand."""

from __future__ import annotations

import math

import numpy as np
import pytest

from wire_daemon.core.events import EventKind, TaskEvent
from wire_daemon.core.run_state import RunState
from wire_daemon.core.workflow import TaskSpec, Workflow, build_workflow
from wire_daemon.plan.makespan import Slots
from wire_daemon.plan.simulate import Simulator, remaining_of
from wire_daemon.ports.prediction import DispatchEstimate

EXACT, BATCHES = 10**9, 0  # max_exact_tasks: always one event per task, always batches


def _dispatch(wf: Workflow, gap: float = 0.0, submit: float = 0.0, start: float = 0.0) -> DispatchEstimate:
    stages = len(wf.stages)
    return DispatchEstimate(np.full(stages, gap), gap, submit, start, observations=1, gap_observations=1)


def _end(wf: Workflow, times: dict[str, float], slots: int, mode: int = EXACT, **dispatch: float) -> float:
    sim = Simulator(wf, _dispatch(wf, **dispatch), max_exact_tasks=mode)
    state = RunState(wf)
    per_task = np.array([times[t] for t in wf.task_ids])
    return sim.run(remaining_of(state, 0.0), per_task, [Slots(0.0, slots)]).end


def _chain(n: int) -> Workflow:
    specs = [TaskSpec("t0", "A")] + [TaskSpec(f"t{i}", "A", (f"t{i - 1}",)) for i in range(1, n)]
    return build_workflow("chain", "test", specs)


def _fork_join(width: int) -> Workflow:
    specs = [TaskSpec("root", "R")]
    specs += [TaskSpec(f"m{i}", "M", ("root",)) for i in range(width)]
    specs.append(TaskSpec("join", "J", tuple(f"m{i}" for i in range(width))))
    return build_workflow("fork-join", "test", specs)


@pytest.mark.parametrize("mode", [EXACT, BATCHES])
def test_a_chain_takes_the_sum_of_its_tasks_whatever_the_pool(mode: int) -> None:
    wf = _chain(4)
    times = {"t0": 10.0, "t1": 20.0, "t2": 30.0, "t3": 40.0}
    for slots in (1, 4, 16):
        assert _end(wf, times, slots, mode) == pytest.approx(100.0)


def test_each_dependency_adds_the_submit_and_start_latency() -> None:
    wf = _chain(3)
    times = {"t0": 10.0, "t1": 10.0, "t2": 10.0}
    # Roots are submitted at the start too: three latencies of 5 + 2.
    assert _end(wf, times, 1, submit=5.0, start=2.0) == pytest.approx(30.0 + 3 * 7.0)


@pytest.mark.parametrize("mode", [EXACT, BATCHES])
def test_a_fork_join_packs_its_middle_on_the_slots(mode: int) -> None:
    wf = _fork_join(8)
    times = {"root": 10.0, "join": 10.0, **{f"m{i}": 10.0 for i in range(8)}}
    assert _end(wf, times, 1, mode) == pytest.approx(100.0)
    assert _end(wf, times, 2, mode) == pytest.approx(60.0)
    assert _end(wf, times, 3, mode) == pytest.approx(50.0)  # ceil(8 / 3) rounds of 10 s
    assert _end(wf, times, 8, mode) == pytest.approx(30.0)


def test_a_narrow_tail_is_bounded_by_its_longest_task_not_by_the_mean() -> None:
    wf = _fork_join(4)
    times = {"root": 0.0, "join": 0.0, "m0": 400.0, "m1": 10.0, "m2": 10.0, "m3": 10.0}
    assert _end(wf, times, 4) == pytest.approx(400.0)
    # Two slots: the long task starts first (submit order), the short ones share the other slot.
    assert _end(wf, times, 2) == pytest.approx(400.0)
    assert _end(wf, times, 1) == pytest.approx(430.0)


def test_lanes_of_unequal_length_overlap_instead_of_adding_their_longest_tasks() -> None:
    """Two lanes a -> b: the long a and the long b lie on different lanes; the level bound would add them."""
    specs = [
        TaskSpec("a1", "A"),
        TaskSpec("a2", "A"),
        TaskSpec("b1", "B", ("a1",)),
        TaskSpec("b2", "B", ("a2",)),
    ]
    wf = build_workflow("lanes", "test", specs)
    times = {"a1": 100.0, "a2": 10.0, "b1": 10.0, "b2": 100.0}
    assert _end(wf, times, 2) == pytest.approx(110.0)  # not 100 + 100


def test_instances_not_up_yet_add_their_boot_lag() -> None:
    wf = _fork_join(8)
    times = {"root": 10.0, "join": 10.0, **{f"m{i}": 100.0 for i in range(8)}}
    sim = Simulator(wf, _dispatch(wf))
    left = remaining_of(RunState(wf), 0.0)
    per_task = np.array([times[t] for t in wf.task_ids])
    now_only = sim.run(left, per_task, [Slots(0.0, 4)]).end
    assert now_only == pytest.approx(10.0 + 200.0 + 10.0)
    # Four more slots booting 50 s from now: the second four middle tasks start at 50, not at 110.
    booting = sim.run(left, per_task, [Slots(0.0, 4), Slots(50.0, 4)]).end
    assert booting == pytest.approx(50.0 + 100.0 + 10.0)
    # Booting after the first four have ended: no gain.
    late = sim.run(left, per_task, [Slots(0.0, 4), Slots(500.0, 4)]).end
    assert late == pytest.approx(now_only)


def test_no_slot_ever_means_no_end() -> None:
    wf = _chain(2)
    assert math.isinf(_end(wf, {"t0": 1.0, "t1": 1.0}, 0))


def test_the_dispatch_gap_keeps_a_busy_slot_idle_between_jobs() -> None:
    wf = _fork_join(4)
    times = {"root": 10.0, "join": 10.0, **{f"m{i}": 10.0 for i in range(4)}}
    # One slot: root, four middles, join; a 5 s gap after each of the first five jobs.
    assert _end(wf, times, 1, gap=5.0) == pytest.approx(60.0 + 5 * 5.0)


def test_running_tasks_hold_their_slots_and_finished_ones_are_gone() -> None:
    wf = _fork_join(4)
    state = RunState(wf)
    events = [
        TaskEvent(0.0, EventKind.SUBMITTED, "root"),
        TaskEvent(0.0, EventKind.STARTED, "root", host="i-1"),
        TaskEvent(10.0, EventKind.FINISHED, "root", host="i-1", exit_code=0),
        *[TaskEvent(10.0, EventKind.SUBMITTED, f"m{i}") for i in range(4)],
        *[TaskEvent(10.0, EventKind.STARTED, f"m{i}", host="i-1") for i in range(2)],
    ]
    state.apply_all(events)
    sim = Simulator(wf, _dispatch(wf))
    left = remaining_of(state, 30.0)
    remaining = np.zeros(wf.n_tasks)
    remaining[wf.index_of("m0")] = 20.0  # running: 20 s left
    remaining[wf.index_of("m1")] = 20.0
    remaining[wf.index_of("m2")] = 100.0  # queued
    remaining[wf.index_of("m3")] = 100.0
    remaining[wf.index_of("join")] = 5.0
    # Two slots: both busy until 50, then m2 and m3 run to 150, the join to 155.
    assert sim.run(left, remaining, [Slots(0.0, 2)]).end == pytest.approx(155.0)
    # Four slots: m2 and m3 start now.
    assert sim.run(left, remaining, [Slots(0.0, 4)]).end == pytest.approx(135.0)


def test_batches_stay_close_to_the_exact_schedule_on_a_wide_workflow() -> None:
    rng = np.random.default_rng(3)
    specs = [TaskSpec("root", "R")]
    specs += [TaskSpec(f"m{i}", "M", ("root",)) for i in range(200)]
    specs += [TaskSpec(f"n{i}", "N", (f"m{i}",)) for i in range(200)]
    specs.append(TaskSpec("join", "J", tuple(f"n{i}" for i in range(200))))
    wf = build_workflow("wide", "test", specs)
    per_task = {t: float(rng.uniform(50.0, 150.0)) for t in wf.task_ids}
    for slots in (8, 32, 128):
        exact = _end(wf, per_task, slots, EXACT)
        batched = _end(wf, per_task, slots, BATCHES)
        assert batched == pytest.approx(exact, rel=0.15)


def test_the_busy_slots_become_spans_of_instances_for_the_cost_rule() -> None:
    """Four 100 s middles on 2 instances of 2 slots, then a 10 s join: both instances busy, then one."""
    wf = _fork_join(4)
    times = {"root": 10.0, "join": 10.0, **{f"m{i}": 100.0 for i in range(4)}}
    sim = Simulator(wf, _dispatch(wf))
    per_task = np.array([times[t] for t in wf.task_ids])
    run = sim.run(remaining_of(RunState(wf), 0.0), per_task, [Slots(0.0, 4)])
    spans = run.as_levels(0.0, 2)
    assert run.end == pytest.approx(120.0)
    got = list(zip(spans.level_start.tolist(), spans.level_end.tolist(), spans.instances_used.tolist()))
    assert got == [(0.0, 10.0, 1), (10.0, 110.0, 2), (110.0, 120.0, 1)]
