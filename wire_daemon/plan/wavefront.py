"""Simulate the DAGMan wavefront over the next interval (WIRE's workflow simulator).

Given the task states, the predicted remaining occupancies and the pool, it
plays the next ``interval`` forward: running tasks end at their predicted
times, their children become ready, and freed slots take queued tasks first
come, first served in Condor's order (priority, then submit order). What is
still active when the interval ends is the *upcoming load*. An instance's
restart cost is the largest occupancy a task on it has sunk at the moment its
release would take effect (``release_at``, by default the interval's end).

Decisions where the paper is silent:

* Tasks that become ready during the simulated interval are queued with the
  predictions made for them as not-ready tasks (policy 3): the projection does
  not re-run the predictor mid-interval.
* Queued tasks at the interval's end are part of the upcoming load with their
  full predicted occupancy and no sunk cost: Condor will start them on
  whatever slots exist then.
* Instances still booting join at the interval's end (the interval equals the
  launch lag), so they take no task inside the projection.
* A running task whose host is not in the pool (Condor drift, or a host we do
  not own) keeps running in the projection on no particular instance.
* DAGMan's submit delay is not modelled: it is small next to the interval.
* A task's restart cost also counts the work it already lost to earlier
  evictions (``count_lost_work``, on by default). Without it, a task that
  lands on an instance a few seconds before that instance's unit ends is
  cheap to kill, again and again: on Epigenomics at time scale 10 one task
  was restarted forever and the workflow never finished. With it, every
  task can lose at most about 0.2u in total before it is protected.
* A running task predicted to end now (remaining 0: it has outlasted its
  prediction) frees its slot in the projection, but its instance's restart
  cost counts it as still running: otherwise the instance looks free to
  release and the same overdue task is killed at every unit end (a livelock
  seen on srasearch and cycles at time scale 100).
* Only the wavefront is touched: work is proportional to the running, queued
  and newly-ready tasks, never to the whole DAG.
"""

from __future__ import annotations

import heapq
import math
from dataclasses import dataclass, field
from typing import Sequence

import numpy as np

from wire_daemon.monitor.run_state import RunState, TaskStatus


@dataclass(frozen=True)
class PoolSlots:
    """An instance that can run tasks during the projected interval."""

    instance_id: str
    slots: int


@dataclass
class UpcomingLoad:
    """Tasks active at the start of the next interval, in projected slot order."""

    task: np.ndarray  # int64 task indices
    remaining_s: np.ndarray  # predicted minimum remaining occupancy
    sunk_s: np.ndarray  # occupancy already consumed at the interval start
    restart_cost_s: dict[str, float] = field(default_factory=dict)  # per instance
    projected_done: int = 0  # tasks the projection finishes inside the interval

    def __len__(self) -> int:
        return int(self.task.size)


def simulate_interval(
    state: RunState,
    remaining_s: np.ndarray,
    occupancy_s: np.ndarray,
    pool: Sequence[PoolSlots],
    now: float,
    interval_s: float,
    queue_order: np.ndarray,
    release_at: dict[str, float] | None = None,
    count_lost_work: bool = True,
) -> UpcomingLoad:
    """Project the next ``interval_s`` seconds; see the module notes for the rules."""
    sim = _Projection(state, remaining_s, occupancy_s, pool, now, now + interval_s, release_at or {})
    sim.lost_s = state.lost_s if count_lost_work else np.zeros_like(state.lost_s)
    sim.place_running()
    sim.queue.extend(int(i) for i in queue_order)
    sim.run()
    return sim.upcoming()


class _Projection:
    def __init__(
        self,
        state: RunState,
        remaining_s: np.ndarray,
        occupancy_s: np.ndarray,
        pool: Sequence[PoolSlots],
        now: float,
        horizon: float,
        release_at: dict[str, float],
    ) -> None:
        self.state = state
        self.wf = state.workflow
        self.remaining_s = remaining_s
        self.occupancy_s = occupancy_s
        self.now = now
        self.horizon = horizon
        self.free: list[str] = []  # one entry per free slot, by instance
        self.capacity = {p.instance_id: p.slots for p in pool}
        self.cost_at = {i: min(release_at.get(i, horizon), horizon) for i in self.capacity}
        self.restart_cost: dict[str, float] = {i: 0.0 for i in self.capacity}
        self.ends: list[tuple[float, int, int]] = []  # (end time, order, task)
        self.start: dict[int, float] = {}
        self.where: dict[int, str | None] = {}
        self.queue: list[int] = []
        self.head = 0
        self.pending_parents: dict[int, int] = {}
        self.lost_s = state.lost_s
        self.done = 0
        self._order = 0

    def place_running(self) -> None:
        used: dict[str, int] = {}
        for i in self.state.running():
            i = int(i)
            host = self.state.host.get(i)
            if host in self.capacity and used.get(host, 0) < self.capacity[host]:
                used[host] = used.get(host, 0) + 1
            else:
                host = None
            self.start[i] = float(self.state.start_time[i])
            remaining = float(self.remaining_s[i])
            if host is not None and remaining <= 0.0:
                # Predicted to end now, yet still running: the prediction has been
                # proven short. It frees its slot in the projection, but killing it
                # would lose all it has run so far.
                self._sunk_at_release(i, host, self.start[i], math.inf)
            self._occupy(i, host, self.now + remaining)
        for instance_id, slots in self.capacity.items():
            self.free.extend([instance_id] * (slots - used.get(instance_id, 0)))

    def run(self) -> None:
        t = self.now
        self._fill(t)
        while self.ends and self.ends[0][0] <= self.horizon:
            t, _, task = heapq.heappop(self.ends)
            self._finish(task, t)
            while self.ends and self.ends[0][0] <= t:  # same instant: free all before filling
                self._finish(heapq.heappop(self.ends)[2], t)
            self._fill(t)

    def _finish(self, task: int, t: float) -> None:
        self.done += 1
        host = self.where.pop(task)
        start = self.start.pop(task)
        if host is not None:
            self.free.append(host)
            self._sunk_at_release(task, host, start, t)
        for child in self.wf.children(task):
            self._parent_done(int(child))

    def _parent_done(self, child: int) -> None:
        if child not in self.pending_parents:
            parents = self.wf.parents(child)
            self.pending_parents[child] = int(np.count_nonzero(self.state.status[parents] != TaskStatus.DONE))
        self.pending_parents[child] -= 1
        if self.pending_parents[child] == 0 and self.state.status[child] == TaskStatus.WAITING:
            self.queue.append(child)

    def _fill(self, t: float) -> None:
        while self.head < len(self.queue):
            task = self.queue[self.head]
            if self.wf.on_pool[task]:
                if not self.free:
                    return
                host: str | None = self.free.pop()
            else:
                host = None  # runs on the submit host: needs no slot
            self.head += 1
            self.start[task] = t
            self._occupy(task, host, t + float(self._predicted(task)))

    def _predicted(self, task: int) -> float:
        if self.state.status[task] == TaskStatus.RUNNING:
            return self.remaining_s[task]
        return self.occupancy_s[task]

    def _sunk_at_release(self, task: int, host: str, start: float, end: float) -> None:
        moment = self.cost_at[host]
        if start < moment < end:
            cost = moment - start + float(self.lost_s[task])
            self.restart_cost[host] = max(self.restart_cost[host], cost)

    def _occupy(self, task: int, host: str | None, end: float) -> None:
        self.where[task] = host
        heapq.heappush(self.ends, (end, self._order, task))
        self._order += 1

    def upcoming(self) -> UpcomingLoad:
        running = sorted(self.ends, key=lambda e: e[1])  # slot order = order placed
        queued = [t for t in self.queue[self.head :] if self.wf.on_pool[t]]
        on_pool = [(end, task) for end, _, task in running if self.wf.on_pool[task]]
        tasks = [task for _, task in on_pool] + queued
        remaining = [end - self.horizon for end, _ in on_pool] + [float(self.occupancy_s[t]) for t in queued]
        sunk = [self.horizon - self.start[task] for _, task in on_pool] + [0.0] * len(queued)
        for end, task in on_pool:
            host = self.where[task]
            if host is not None:
                self._sunk_at_release(task, host, self.start[task], end)
        return UpcomingLoad(
            task=np.array(tasks, dtype=np.int64),
            remaining_s=np.array(remaining, dtype=np.float64),
            sunk_s=np.array(sunk, dtype=np.float64),
            restart_cost_s=self.restart_cost,
            projected_done=self.done,
        )
