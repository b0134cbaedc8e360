"""What the daemon knows about a running workflow, rebuilt from task events.

Per-task facts live in numpy arrays so that a large DAG stays compact and the
analyze/plan steps can work on slices. Events are applied idempotently: a
repeated or out-of-order event is ignored with a warning rather than counted
twice.
"""

from __future__ import annotations

import logging
from enum import IntEnum

import numpy as np

from wire_daemon.sites.ports import EventKind, TaskEvent
from wire_daemon.workflow.model import Workflow

log = logging.getLogger(__name__)


class TaskStatus(IntEnum):
    WAITING = 0  # not yet submitted by DAGMan (parents unfinished)
    IDLE = 1  # in the Condor queue, ready to run
    RUNNING = 2  # occupying a slot
    DONE = 3
    HELD = 4


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
        self.completion_order: list[int] = []  # task indices, in completion order
        self.first_event_time: float | None = None
        self._next_seq = 0
        self.warnings = 0

    # -- ingest ---------------------------------------------------------------

    def apply(self, event: TaskEvent) -> None:
        try:
            i = self.workflow.index_of(event.task_id)
        except KeyError:
            self._warn(event, "unknown task")
            return
        if self.first_event_time is None:
            self.first_event_time = event.time
        handler = _HANDLERS.get(event.kind)
        if handler is not None:
            handler(self, i, event)

    def _submitted(self, i: int, event: TaskEvent) -> None:
        if self.status[i] != TaskStatus.WAITING:
            return  # a DAGMan retry resubmits; the task keeps its place
        self.status[i] = TaskStatus.IDLE
        self.submit_seq[i] = self._next_seq
        self._next_seq += 1

    def _started(self, i: int, event: TaskEvent) -> None:
        if self.status[i] == TaskStatus.DONE:
            self._warn(event, "start after finish")
            return
        if self.submit_seq[i] < 0:  # start seen without its submit: accept it
            self.submit_seq[i] = self._next_seq
            self._next_seq += 1
        self.status[i] = TaskStatus.RUNNING
        self.start_time[i] = event.time
        self.attempts[i] += 1
        if event.host:
            self.host[i] = event.host

    def _finished(self, i: int, event: TaskEvent) -> None:
        if self.status[i] != TaskStatus.RUNNING:
            self._warn(event, "finish without a start")
            return
        self.host.pop(i, None)
        if event.exit_code not in (None, 0):
            # A failed attempt: DAGMan retries it, so it goes back to the queue.
            self.status[i] = TaskStatus.IDLE
            self.start_time[i] = np.nan
            return
        occupancy = max(event.time - self.start_time[i], 0.0)
        execution = occupancy if event.exec_runtime_s is None else min(event.exec_runtime_s, occupancy)
        self.status[i] = TaskStatus.DONE
        self.finish_time[i] = event.time
        self.occupancy_s[i] = occupancy
        self.exec_s[i] = execution
        self.transfer_s[i] = occupancy - execution
        self.completion_order.append(i)

    def _evicted(self, i: int, event: TaskEvent) -> None:
        if self.status[i] != TaskStatus.RUNNING:
            return
        self.lost_s[i] += max(event.time - self.start_time[i], 0.0)
        self.host.pop(i, None)
        self.status[i] = TaskStatus.IDLE
        self.start_time[i] = np.nan

    def _held(self, i: int, event: TaskEvent) -> None:
        if self.status[i] in (TaskStatus.IDLE, TaskStatus.RUNNING):
            self.host.pop(i, None)
            self.status[i] = TaskStatus.HELD
            self.start_time[i] = np.nan

    def _released(self, i: int, event: TaskEvent) -> None:
        if self.status[i] == TaskStatus.HELD:
            self.status[i] = TaskStatus.IDLE

    def _aborted(self, i: int, event: TaskEvent) -> None:
        if self.status[i] != TaskStatus.DONE:
            self.host.pop(i, None)
            self.status[i] = TaskStatus.WAITING
            self.start_time[i] = np.nan

    def _warn(self, event: TaskEvent, why: str) -> None:
        self.warnings += 1
        log.warning("ignored %s event for task %s at t=%.1f: %s", event.kind.value, event.task_id, event.time, why)

    # -- queries --------------------------------------------------------------

    def indices(self, status: TaskStatus) -> np.ndarray:
        return np.flatnonzero(self.status == status)

    def running(self) -> np.ndarray:
        return self.indices(TaskStatus.RUNNING)

    def idle_in_queue_order(self) -> np.ndarray:
        idle = self.indices(TaskStatus.IDLE)
        return idle[np.argsort(self.submit_seq[idle], kind="stable")]

    def is_finished(self) -> bool:
        return bool(np.all(self.status == TaskStatus.DONE))

    def n_done(self) -> int:
        return len(self.completion_order)


_HANDLERS = {
    EventKind.SUBMITTED: RunState._submitted,
    EventKind.STARTED: RunState._started,
    EventKind.FINISHED: RunState._finished,
    EventKind.EVICTED: RunState._evicted,
    EventKind.HELD: RunState._held,
    EventKind.RELEASED: RunState._released,
    EventKind.ABORTED: RunState._aborted,
}
