"""What the daemon knows about a running workflow, rebuilt from task events.

Per-task facts live in numpy arrays so that a large DAG stays compact and the
analyze/plan steps can work on slices. Events are applied idempotently: a
repeated or out-of-order event is ignored with a warning rather than counted
twice.

The frontier is kept up to date as events arrive, so that the questions the
loop asks every interval (which tasks run, which wait in the queue and in what
order, how many tasks are in each state, how many parents of a task are still
unfinished) cost in proportion to the frontier, not to the whole DAG. Every
change of ``status`` goes through ``_set_status``; nothing else may write it.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from enum import IntEnum

import numpy as np

from wire_daemon.core.events import EventKind, TaskEvent
from wire_daemon.core.workflow import Workflow

log = logging.getLogger(__name__)


class TaskStatus(IntEnum):
    WAITING = 0  # not yet submitted by DAGMan (parents unfinished)
    IDLE = 1  # in the Condor queue, ready to run
    RUNNING = 2  # occupying a slot
    DONE = 3
    HELD = 4


# Plain-int twins of TaskStatus for per-task code: reading an IntEnum member
# goes through the enum metaclass (about a microsecond each on Python 3.11),
# which dominated the per-task loops.
WAITING, IDLE, RUNNING, DONE, HELD = (int(s) for s in TaskStatus)


class RunState:
    """Task states, observed times and the running tasks' hosts."""

    def __init__(self, workflow: Workflow) -> None:
        n = workflow.n_tasks
        self.workflow = workflow
        self.status = np.zeros(n, dtype=np.int8)
        self.submit_seq = np.full(n, -1, dtype=np.int64)
        self.start_time = np.full(n, np.nan)
        self.finish_time = np.full(n, np.nan)
        self.occupancy_s = np.full(n, np.nan)  # execute -> terminate
        self.exec_s = np.full(n, np.nan)  # executable's own duration
        self.transfer_s = np.full(n, np.nan)  # occupancy - exec
        self.attempts = np.zeros(n, dtype=np.int32)
        self.lost_s = np.zeros(n)  # occupancy thrown away by evictions (restarts from zero)
        self.host: dict[int, str] = {}  # running task -> instance id
        self.evicted_s_by_host: dict[str, float] = {}  # instance id -> occupancy its evictions threw away
        # When each task was last submitted (became idle), and the host of its
        # latest start, as a code into ``host_names``: what a job costs beyond
        # its runtime (submit -> execute, slot gaps) is learned from these.
        self.submit_time = np.full(n, np.nan)
        self.start_host = np.full(n, -1, dtype=np.int32)
        self.host_names: list[str] = []
        self._host_code: dict[str, int] = {}
        self.completion_order: list[int] = []  # task indices, in completion order
        self.first_event_time: float | None = None
        self._next_seq = 0
        self.warnings = 0
        # Parents not yet DONE, per task: lets the planner tell when a task becomes
        # ready. Tasks finished since the last query are counted off in one batch.
        self._unfinished_parents = np.diff(workflow.parent_ptr).astype(np.int32)
        self._finished_uncounted: list[int] = []
        self._count = [n, 0, 0, 0, 0]  # tasks per status
        self._running: set[int] = set()
        # The queue: idle tasks sorted by submit sequence (with the sequence each
        # had when queued), as of the last query, plus the tasks that became idle
        # since. Tasks that left the queue are dropped lazily at the next query.
        self._queue = np.empty(0, dtype=np.int64)
        self._queue_seq = np.empty(0, dtype=np.int64)
        self._became_idle: list[int] = []

    # -- ingest ---------------------------------------------------------------

    def apply(self, event: TaskEvent) -> None:
        self.apply_all((event,))

    def apply_all(self, events: Iterable[TaskEvent]) -> None:
        """Apply events in order: what ``apply`` does to each, with the lookups hoisted out of the loop."""
        events = list(events)
        numbers = self.workflow.indices_of([event.task_id for event in events])  # one batched lookup
        started, finished, submitted = self._started, self._finished, self._submitted
        for event, i in zip(events, numbers):
            if i < 0:
                self._warn(event, "unknown task")
                continue
            if self.first_event_time is None:
                self.first_event_time = event.time
            # Identity tests rather than a dict keyed by the enum: hashing an
            # Enum member is a Python-level call. Commonest kinds first.
            kind = event.kind
            if kind is _STARTED:
                started(i, event)
            elif kind is _FINISHED:
                finished(i, event)
            elif kind is _SUBMITTED:
                submitted(i, event)
            elif kind is _EVICTED:
                self._evicted(i, event)
            elif kind is _HELD:
                self._held(i, event)
            elif kind is _RELEASED:
                self._released(i, event)
            elif kind is _ABORTED:
                self._aborted(i, event)

    def _set_status(self, i: int, old: int, new: int) -> None:
        self.status[i] = new
        self._count[old] -= 1
        self._count[new] += 1
        if old == RUNNING:
            self._running.discard(i)
        if new == RUNNING:
            self._running.add(i)
        elif new == IDLE:
            self._became_idle.append(i)
        elif new == DONE:
            self._finished_uncounted.append(i)

    # The handlers read per-task values with ``.item()``: a Python number, much
    # cheaper to compare and compute with than a numpy scalar.

    def _submitted(self, i: int, event: TaskEvent) -> None:
        if self.status.item(i) != WAITING:
            return  # a DAGMan retry resubmits; the task keeps its place
        self.submit_seq[i] = self._next_seq
        self._next_seq += 1
        self.submit_time[i] = event.time
        self._set_status(i, WAITING, IDLE)

    def _started(self, i: int, event: TaskEvent) -> None:
        status = self.status.item(i)
        if status == DONE:
            self._warn(event, "start after finish")
            return
        if self.submit_seq.item(i) < 0:  # start seen without its submit: accept it
            self.submit_seq[i] = self._next_seq
            self._next_seq += 1
        if status != RUNNING:
            self._set_status(i, status, RUNNING)
        self.start_time[i] = event.time
        self.attempts[i] += 1
        if event.host:
            self.host[i] = event.host
            code = self._host_code.get(event.host)
            if code is None:
                code = self._host_code[event.host] = len(self.host_names)
                self.host_names.append(event.host)
            self.start_host[i] = code

    def _finished(self, i: int, event: TaskEvent) -> None:
        if self.status.item(i) != RUNNING:
            self._warn(event, "finish without a start")
            return
        self.host.pop(i, None)
        if event.exit_code not in (None, 0):
            # A failed attempt: DAGMan retries it, so it goes back to the queue.
            self._set_status(i, RUNNING, IDLE)
            self.start_time[i] = np.nan
            return
        occupancy = max(event.time - self.start_time.item(i), 0.0)
        execution = occupancy if event.exec_runtime_s is None else min(event.exec_runtime_s, occupancy)
        self._set_status(i, RUNNING, DONE)
        self.finish_time[i] = event.time
        self.occupancy_s[i] = occupancy
        self.exec_s[i] = execution
        self.transfer_s[i] = occupancy - execution
        self.completion_order.append(i)

    def _evicted(self, i: int, event: TaskEvent) -> None:
        if self.status.item(i) != RUNNING:
            return
        lost = max(event.time - self.start_time.item(i), 0.0)
        self.lost_s[i] += lost
        host = self.host.pop(i, None)
        if host is not None:
            self.evicted_s_by_host[host] = self.evicted_s_by_host.get(host, 0.0) + lost
        self._set_status(i, RUNNING, IDLE)
        self.start_time[i] = np.nan

    def _held(self, i: int, event: TaskEvent) -> None:
        status = self.status.item(i)
        if status in (IDLE, RUNNING):
            self.host.pop(i, None)
            self._set_status(i, status, HELD)
            self.start_time[i] = np.nan

    def _released(self, i: int, event: TaskEvent) -> None:
        if self.status.item(i) == HELD:
            self._set_status(i, HELD, IDLE)

    def _aborted(self, i: int, event: TaskEvent) -> None:
        status = self.status.item(i)
        if status != DONE:
            self.host.pop(i, None)
            if status != WAITING:
                self._set_status(i, status, WAITING)
            self.start_time[i] = np.nan

    def _warn(self, event: TaskEvent, why: str) -> None:
        self.warnings += 1
        log.warning("ignored %s event for task %s at t=%.1f: %s", event.kind.value, event.task_id, event.time, why)

    # -- queries --------------------------------------------------------------

    def indices(self, status: TaskStatus) -> np.ndarray:
        return np.flatnonzero(self.status == status)

    def count(self, status: TaskStatus | int) -> int:
        """Tasks in ``status`` now, from counters kept as events arrive."""
        return self._count[int(status)]

    def unfinished_parents(self) -> np.ndarray:
        """Per task, how many of its parents are not DONE (read-only; valid until the next event)."""
        if self._finished_uncounted:
            finished = np.array(self._finished_uncounted, dtype=np.int64)
            self._finished_uncounted = []
            wf = self.workflow
            first = wf.child_ptr[finished]
            count = wf.child_ptr[finished + 1] - first
            # The children of every finished task, gathered from the CSR rows in one go.
            offsets = np.repeat(first - (np.cumsum(count) - count), count) + np.arange(int(count.sum()))
            np.subtract.at(self._unfinished_parents, wf.child_idx[offsets], 1)
        return self._unfinished_parents

    def running(self) -> np.ndarray:
        """Running tasks, in task-index order."""
        return np.sort(np.fromiter(self._running, dtype=np.int64, count=len(self._running)))

    def idle_in_queue_order(self) -> np.ndarray:
        """Idle tasks in submit order (read-only): cost in proportion to the queue and its changes."""
        queue, seq = self._queue, self._queue_seq
        valid = (self.status[queue] == IDLE) & (self.submit_seq[queue] == seq)
        if not valid.all():
            queue, seq = queue[valid], seq[valid]
        if self._became_idle:
            queue, seq = self._merge_new_idle(queue, seq)
        queue.setflags(write=False)
        self._queue, self._queue_seq = queue, seq
        return queue

    def _merge_new_idle(self, queue: np.ndarray, seq: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        new = np.unique(np.array(self._became_idle, dtype=np.int64))
        self._became_idle = []
        new = new[self.status[new] == IDLE]
        new_seq = self.submit_seq[new]
        # An evicted task comes back with its old sequence and may still be queued.
        at = np.searchsorted(seq, new_seq)
        queued = seq[np.minimum(at, seq.size - 1)] == new_seq if seq.size else np.zeros(new.size, dtype=bool)
        new, new_seq, at = new[~queued], new_seq[~queued], at[~queued]
        order = np.argsort(new_seq)
        # Sequences are unique, so inserting each before its first larger neighbour keeps the order exact.
        return np.insert(queue, at[order], new[order]), np.insert(seq, at[order], new_seq[order])

    def is_finished(self) -> bool:
        return self._count[DONE] == self.workflow.n_tasks

    def n_done(self) -> int:
        return len(self.completion_order)


_SUBMITTED, _STARTED, _FINISHED = EventKind.SUBMITTED, EventKind.STARTED, EventKind.FINISHED
_EVICTED, _HELD, _RELEASED, _ABORTED = EventKind.EVICTED, EventKind.HELD, EventKind.RELEASED, EventKind.ABORTED
