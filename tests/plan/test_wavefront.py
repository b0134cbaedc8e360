"""The wavefront projection on hand-computed schedules."""

import numpy as np
import pytest

from wire_daemon.core.events import EventKind, TaskEvent
from wire_daemon.core.run_state import RunState
from wire_daemon.core.workflow import TaskSpec, build_workflow
from wire_daemon.plan.wavefront import PoolSlots, simulate_interval


def _state():
    wf = build_workflow(
        "w", "test", [TaskSpec("A", "x"), TaskSpec("B", "y", ("A",)), TaskSpec("C", "z"), TaskSpec("D", "z")]
    )
    state = RunState(wf)
    for t in ("A", "C", "D"):
        state.apply(TaskEvent(-10.0, EventKind.SUBMITTED, t))
    state.apply(TaskEvent(-10.0, EventKind.STARTED, "A", host="i-1"))
    return wf, state


def _run(state, remaining, occupancy, pool, queue, interval=60.0):
    return simulate_interval(
        state, np.array(remaining, float), np.array(occupancy, float), pool, 0.0, interval, np.array(queue)
    )


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
    load = simulate_interval(
        state,
        np.zeros(4),
        np.zeros(4),
        [PoolSlots("i-1", 1)],
        0.0,
        60.0,
        np.array([], dtype=np.int64),
        release_at={"i-1": 30.0},
    )
    assert a not in load.task.tolist()  # it frees its slot in the projection...
    assert load.restart_cost_s["i-1"] == pytest.approx(40.0)  # ...but killing it at t=30 loses 40 s


def test_restart_cost_counts_work_lost_to_earlier_evictions():
    wf, state = _state()
    state.apply(TaskEvent(-5.0, EventKind.EVICTED, "A"))  # A lost 5 s
    state.apply(TaskEvent(-2.0, EventKind.STARTED, "A", host="i-1"))
    a = wf.index_of("A")
    remaining = np.zeros(4)
    remaining[a] = 100.0
    load = simulate_interval(
        state,
        remaining,
        np.zeros(4),
        [PoolSlots("i-1", 1)],
        0.0,
        60.0,
        np.array([], dtype=np.int64),
        release_at={"i-1": 10.0},
    )
    assert load.restart_cost_s["i-1"] == pytest.approx(12.0 + 5.0)
    load = simulate_interval(
        state,
        remaining,
        np.zeros(4),
        [PoolSlots("i-1", 1)],
        0.0,
        60.0,
        np.array([], dtype=np.int64),
        release_at={"i-1": 10.0},
        count_lost_work=False,
    )
    assert load.restart_cost_s["i-1"] == pytest.approx(12.0)


# -- the optimised projection against the rules written plainly --------------------


def _reference(state, remaining, occupancy, pool, now, interval, queue, release_at, count_lost):
    """The module's rules as a plain single-heap simulation (end, order): slow, obviously right."""
    import heapq
    import math

    from wire_daemon.core.run_state import TaskStatus

    wf, horizon = state.workflow, now + interval
    capacity = {p.instance_id: p.slots for p in pool}
    cost_at = {i: min(release_at.get(i, horizon), horizon) for i in capacity}
    cost = {i: 0.0 for i in capacity}
    lost = state.lost_s if count_lost else np.zeros(wf.n_tasks)
    ends, start, where, free, used, order = [], {}, {}, [], {}, [0]

    def sunk(task, host, begin, end):
        if begin < cost_at[host] < end:
            cost[host] = max(cost[host], cost_at[host] - begin + float(lost[task]))

    def occupy(task, host, begin, end):
        start[task], where[task] = begin, host
        heapq.heappush(ends, (end, order[0], task))
        order[0] += 1

    for i in np.flatnonzero(state.status == TaskStatus.RUNNING).tolist():
        host = state.host.get(i)
        if host in capacity and used.get(host, 0) < capacity[host]:
            used[host] = used.get(host, 0) + 1
        else:
            host = None
        if host is not None and remaining[i] <= 0.0:
            sunk(i, host, float(state.start_time[i]), math.inf)
        occupy(i, host, float(state.start_time[i]), now + float(remaining[i]))
    for instance_id, slots in capacity.items():
        free.extend([instance_id] * (slots - used.get(instance_id, 0)))
    waiting, done = [int(q) for q in queue], [0]
    left: dict[int, int] = {}

    def fill(t):
        while waiting:
            task = waiting[0]
            host = None
            if wf.on_pool[task]:
                if not free:
                    return
                host = free.pop()
            waiting.pop(0)
            length = remaining[task] if state.status[task] == TaskStatus.RUNNING else occupancy[task]
            occupy(task, host, t, t + float(length))

    def finish(task, t):
        done[0] += 1
        host, begin = where.pop(task), start.pop(task)
        if host is not None:
            free.append(host)
            sunk(task, host, begin, t)
        for child in wf.children(task).tolist():
            if child not in left:
                left[child] = int(np.count_nonzero(state.status[wf.parents(child)] != TaskStatus.DONE))
            left[child] -= 1
            if left[child] == 0 and state.status[child] == TaskStatus.WAITING:
                waiting.append(child)

    fill(now)
    while ends and ends[0][0] <= horizon:
        t, _, task = heapq.heappop(ends)
        finish(task, t)
        while ends and ends[0][0] <= t:
            finish(heapq.heappop(ends)[2], t)
        fill(t)
    running = [(end, task) for end, _, task in sorted(ends, key=lambda e: e[1]) if wf.on_pool[task]]
    queued = [t for t in waiting if wf.on_pool[t]]
    for end, task in running:
        if where[task] is not None:
            sunk(task, where[task], start[task], end)
    tasks = [task for _, task in running] + queued
    rest = [end - horizon for end, _ in running] + [float(occupancy[t]) for t in queued]
    return tasks, rest, [horizon - start[t] for _, t in running] + [0.0] * len(queued), cost, done[0]


def _random_case(rng):
    n = rng.randint(1, 40)
    fan = rng.random() < 0.3  # a task with many children
    specs = []
    for i in range(n):
        k = min(i, rng.choice([0, 1, 1, 2, 3]))
        parents = ("t0",) if fan and i > 0 and rng.random() < 0.8 else tuple(f"t{p}" for p in rng.sample(range(i), k=k))
        specs.append(TaskSpec(f"t{i}", rng.choice("abc"), parents, on_pool=rng.random() > 0.1))
    wf = build_workflow("w", "x", specs)
    state = RunState(wf)
    hosts = [f"i-{k}" for k in range(rng.randint(0, 4))]
    for step in range(rng.randint(0, 3 * n)):
        i = rng.randrange(n)
        task, status = wf.task_ids[i], int(state.status[i])
        t = -1000.0 + step * rng.choice([0.0, 1.0, 7.5])
        if status == 0 and all(state.status[p] == 3 for p in wf.parents(i)):
            state.apply(TaskEvent(t, EventKind.SUBMITTED, task))
        elif status == 1 and rng.random() < 0.7:
            state.apply(TaskEvent(t, EventKind.STARTED, task, host=rng.choice(hosts + ["elsewhere"])))
        elif status == 2 and rng.random() < 0.6:
            kind = EventKind.FINISHED if rng.random() < 0.8 else EventKind.EVICTED
            state.apply(TaskEvent(t, kind, task, exec_runtime_s=1.0, exit_code=0))

    all_zero = rng.random() < 0.3  # a run's start: every task predicted at 0, now and then one not

    def length():  # zeros (unstarted stages), ties, and the odd negative
        if all_zero:
            return 0.0 if rng.random() < 0.97 else rng.choice([5.0, -1.0, 1e-300])
        return rng.choice([0.0, 0.0, -1.0, 10.0, 60.0, round(rng.uniform(0, 200), 2)])

    remaining = np.array([length() for _ in range(n)])
    occupancy = np.array([length() for _ in range(n)])
    pool = [PoolSlots(h, rng.randint(1, 3)) for h in hosts if rng.random() < 0.9]
    idle = state.idle_in_queue_order().tolist()
    queue = np.array(rng.sample(idle, len(idle)) if rng.random() < 0.3 else idle, dtype=np.int64)
    now, interval = rng.choice([0.0, 3.0]), rng.choice([0.0, 60.0, 180.0])
    release_at = {h: now + rng.choice([0.0, 30.0, 100.0, 500.0]) for h in hosts if rng.random() < 0.7}
    return state, remaining, occupancy, pool, now, interval, queue, release_at, rng.random() < 0.5


@pytest.mark.slow
@pytest.mark.parametrize("fan_out", [0, 32])
def test_projection_matches_the_plain_rules(monkeypatch, fan_out):
    import random

    from wire_daemon.plan import wavefront

    monkeypatch.setattr(wavefront, "_FAN_OUT", fan_out)  # 0: every multi-child finish takes the numpy path
    rng = random.Random(fan_out)
    drained = 0
    for _ in range(1500):
        case = _random_case(rng)
        load = simulate_interval(*case)
        tasks, rest, sunk, cost, done = _reference(*case)
        assert load.task.tolist() == tasks
        assert load.remaining_s.tolist() == rest
        assert load.sunk_s.tolist() == sunk
        assert load.restart_cost_s == cost and load.projected_done == done
        drained += len(load) == 0 and done > 0
    assert drained > 100  # the bulk drain was exercised
