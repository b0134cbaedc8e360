"""RunState's incrementally kept frontier against what a full scan of the task arrays says."""

from __future__ import annotations

import random

import numpy as np
import pytest

from wire_daemon.core.events import EventKind, TaskEvent
from wire_daemon.core.run_state import RunState, TaskStatus
from wire_daemon.core.workflow import TaskIndex, TaskSpec, build_workflow


def _random_workflow(rng: random.Random, n: int):
    specs = []
    for i in range(n):
        parents = tuple(f"t{p}" for p in rng.sample(range(i), k=min(i, rng.choice([0, 1, 1, 2, 3]))))
        specs.append(TaskSpec(f"t{i}", rng.choice("ab"), parents))
    return build_workflow("w", "test", specs)


def _random_event(rng: random.Random, state: RunState, time: float) -> TaskEvent:
    wf = state.workflow
    i = rng.randrange(wf.n_tasks)
    task = wf.task_ids[i]
    status = int(state.status[i])
    kind = rng.choice(list(EventKind))  # anything, in any order: repeats and nonsense included
    if status == TaskStatus.WAITING and rng.random() < 0.5:
        kind = EventKind.SUBMITTED
    elif status == TaskStatus.IDLE and rng.random() < 0.5:
        kind = EventKind.STARTED
    elif status == TaskStatus.RUNNING and rng.random() < 0.5:
        kind = EventKind.FINISHED
    exit_code = rng.choice([0, 0, 0, 1])
    return TaskEvent(time, kind, task, host=rng.choice(["i-1", "i-2"]), exec_runtime_s=1.0, exit_code=exit_code)


def _check(state: RunState) -> None:
    status = state.status
    idle = np.flatnonzero(status == TaskStatus.IDLE)
    assert state.idle_in_queue_order().tolist() == idle[np.argsort(state.submit_seq[idle], kind="stable")].tolist()
    assert state.running().tolist() == np.flatnonzero(status == TaskStatus.RUNNING).tolist()
    for s in TaskStatus:
        assert state.count(s) == int(np.count_nonzero(status == s))
    wf = state.workflow
    left = [int(np.count_nonzero(status[wf.parents(i)] != TaskStatus.DONE)) for i in range(wf.n_tasks)]
    assert state.unfinished_parents().tolist() == left
    assert state.is_finished() == bool(np.all(status == TaskStatus.DONE))


@pytest.mark.parametrize("seed", range(20))
def test_frontier_matches_a_full_scan(seed: int) -> None:
    rng = random.Random(seed)
    state = RunState(_random_workflow(rng, rng.randint(1, 30)))
    time = 0.0
    for _ in range(15):
        batch = []
        for _ in range(rng.randint(0, 12)):
            time += rng.choice([0.0, 1.0])
            batch.append(_random_event(rng, state, time))
        if rng.random() < 0.5:
            state.apply_all(batch)
        else:
            for event in batch:
                state.apply(event)
        _check(state)


def test_unknown_task_is_ignored_in_a_batch() -> None:
    state = RunState(_random_workflow(random.Random(1), 5))
    state.apply_all([TaskEvent(0.0, EventKind.SUBMITTED, "nope"), TaskEvent(0.0, EventKind.SUBMITTED, "t0")])
    assert state.warnings == 1 and state.count(TaskStatus.IDLE) == 1


class _Colliding(str):
    """A task id whose hash collides with every other one's."""

    def __hash__(self) -> int:
        return 42


def test_task_index_tells_ids_with_equal_hashes_apart() -> None:
    ids = [_Colliding(f"task-{i}") for i in range(50)] + [f"plain-{i}" for i in range(50)]
    index = TaskIndex(ids)
    assert [index[t] for t in ids] == list(range(100))
    assert index.numbers_of(list(reversed(ids)) + ["missing", _Colliding("missing")]) == list(range(99, -1, -1)) + [
        -1,
        -1,
    ]
    assert "plain-3" in index and "missing" not in index and len(index) == 100
    with pytest.raises(KeyError):
        index["missing"]
    assert TaskIndex([]).numbers_of(["a", "b"]) == [-1, -1]
