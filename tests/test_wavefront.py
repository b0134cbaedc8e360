"""The wavefront projection on hand-computed schedules."""

import numpy as np
import pytest

from wire_daemon.monitor.run_state import RunState
from wire_daemon.plan.wavefront import PoolSlots, simulate_interval
from wire_daemon.sites.ports import EventKind, TaskEvent
from wire_daemon.workflow.model import TaskSpec, build_workflow


def _state():
    wf = build_workflow("w", "test", [TaskSpec("A", "x"), TaskSpec("B", "y", ("A",)), TaskSpec("C", "z"), TaskSpec("D", "z")])
    state = RunState(wf)
    for t in ("A", "C", "D"):
        state.apply(TaskEvent(-10.0, EventKind.SUBMITTED, t))
    state.apply(TaskEvent(-10.0, EventKind.STARTED, "A", host="i-1"))
    return wf, state


def _run(state, remaining, occupancy, pool, queue, interval=60.0):
    return simulate_interval(state, np.array(remaining, float), np.array(occupancy, float), pool, 0.0, interval, np.array(queue))


def test_fifo_queue_then_children():
    wf, state = _state()
    a, b, c, d = (wf.index_of(x) for x in "ABCD")
    remaining = np.zeros(4)
    occupancy = np.zeros(4)
    remaining[a], occupancy[b], occupancy[c], occupancy[d] = 20, 100, 30, 5
    # one slot: A ends at 20; C (queued first) runs 20-50; D 50-55; B (ready at 20, queued last) from 55.
    load = _run(state, remaining, occupancy, [PoolSlots("i-1", 1)], [c, d])
    assert load.task.tolist() == [b]
    assert load.remaining_s.tolist() == pytest.approx([95.0])
    assert load.sunk_s.tolist() == pytest.approx([5.0])
    assert load.restart_cost_s == {"i-1": pytest.approx(5.0)}
    assert load.projected_done == 3


def test_queue_left_over_is_load_with_no_sunk_cost():
    wf, state = _state()
    a, b, c, d = (wf.index_of(x) for x in "ABCD")
    remaining = np.zeros(4)
    occupancy = np.zeros(4)
    remaining[a], occupancy[b], occupancy[c], occupancy[d] = 100, 100, 30, 5
    load = _run(state, remaining, occupancy, [PoolSlots("i-1", 1), PoolSlots("i-2", 1)], [c, d])
    # i-2 takes C (0-30) then D (30-35); A still runs at 60 with 40 left and 70 sunk.
    assert load.task.tolist() == [a]
    assert load.remaining_s.tolist() == pytest.approx([40.0])
    assert load.restart_cost_s["i-1"] == pytest.approx(70.0)
    assert load.restart_cost_s["i-2"] == 0.0


def test_no_slot_means_everything_waits():
    wf, state = _state()
    a, b, c, d = (wf.index_of(x) for x in "ABCD")
    occupancy = np.zeros(4)
    remaining = np.zeros(4)
    remaining[a], occupancy[b], occupancy[c], occupancy[d] = 200, 100, 30, 5
    load = _run(state, remaining, occupancy, [], [c, d])
    # A's host is not in the pool: it keeps running on no instance; C and D wait.
    assert load.task.tolist() == [a, c, d]
    assert load.remaining_s.tolist() == pytest.approx([140.0, 30.0, 5.0])
    assert load.sunk_s.tolist() == pytest.approx([70.0, 0.0, 0.0])


def test_zero_predictions_drain_through_the_dag():
    wf, state = _state()
    load = _run(state, np.zeros(4), np.zeros(4), [PoolSlots("i-1", 1)], [wf.index_of("C"), wf.index_of("D")])
    assert len(load) == 0
    assert load.projected_done == 4


def test_an_overdue_running_task_still_makes_its_instance_costly_to_release():
    wf, state = _state()
    a = wf.index_of("A")  # running on i-1 since t=-10, predicted to end now
    load = simulate_interval(state, np.zeros(4), np.zeros(4), [PoolSlots("i-1", 1)], 0.0, 60.0, np.array([], dtype=np.int64), release_at={"i-1": 30.0})
    assert a not in load.task.tolist()  # it frees its slot in the projection...
    assert load.restart_cost_s["i-1"] == pytest.approx(40.0)  # ...but killing it at t=30 loses 40 s


def test_restart_cost_counts_work_lost_to_earlier_evictions():
    wf, state = _state()
    state.apply(TaskEvent(-5.0, EventKind.EVICTED, "A"))  # A lost 5 s
    state.apply(TaskEvent(-2.0, EventKind.STARTED, "A", host="i-1"))
    a = wf.index_of("A")
    remaining = np.zeros(4)
    remaining[a] = 100.0
    load = simulate_interval(state, remaining, np.zeros(4), [PoolSlots("i-1", 1)], 0.0, 60.0, np.array([], dtype=np.int64), release_at={"i-1": 10.0})
    assert load.restart_cost_s["i-1"] == pytest.approx(12.0 + 5.0)
    load = simulate_interval(state, remaining, np.zeros(4), [PoolSlots("i-1", 1)], 0.0, 60.0, np.array([], dtype=np.int64), release_at={"i-1": 10.0}, count_lost_work=False)
    assert load.restart_cost_s["i-1"] == pytest.approx(12.0)
