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
  and newly-ready tasks, never to the whole DAG. The per-task steps read
  plain Python numbers (``tolist`` of the slices they need, int status codes,
  RunState's count of unfinished parents) rather than numpy scalars, which
  cost about ten times as much to read one by one.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from wire_daemon.core.run_state import RUNNING, WAITING, RunState
from wire_daemon.ports.policy import UpcomingLoad

_FAN_OUT = 32  # children above which counting them down in numpy beats a Python loop


def _count_distinct(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The distinct values, ascending, and how often each occurs (by sorting: np.unique hashes, slowly)."""
    values = np.sort(values)
    starts = np.flatnonzero(np.concatenate(([values.size > 0], values[1:] != values[:-1])))
    return values[starts], np.diff(np.append(starts, values.size)).astype(np.int32)


@dataclass(frozen=True)
class PoolSlots:
    """An instance that can run tasks during the projected interval."""

    instance_id: str
    slots: int


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
    sim.count_lost = count_lost_work
    sim.place_running()
    sim.queue = np.asarray(queue_order, dtype=np.int64)
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
        # The queue: Condor's order of the idle tasks (an array, read one task at a
        # time as slots free up), then the tasks the projection makes ready.
        self.queue = np.empty(0, dtype=np.int64)
        self.ready: list[int] = []
        self.head = 0
        # Parents left to finish, per task, counted down as the projection
        # finishes tasks. A copy: a flat array is read and written at about a
        # third of the cost of a dict once the DAG outgrows the CPU caches, and
        # copying it is a memcpy (a millisecond at a million tasks).
        self.parents_left = state.unfinished_parents().copy()
        self.count_lost = True
        self.done = 0
        self._order = 0
        # Whether every task runs on the pool (no local-universe jobs): then the
        # per-task on_pool test can be skipped.
        self.all_on_pool = bool(self.wf.on_pool.all())

    def place_running(self) -> None:
        used: dict[str, int] = {}
        running = self.state.running()
        starts = self.state.start_time[running].tolist()
        remainings = self.remaining_s[running].tolist()
        for i, start, remaining in zip(running.tolist(), starts, remainings):
            host = self.state.host.get(i)
            if host in self.capacity and used.get(host, 0) < self.capacity[host]:
                used[host] = used.get(host, 0) + 1
            else:
                host = None
            if host is not None and remaining <= 0.0:
                # Predicted to end now, yet still running: the prediction has been
                # proven short. It frees its slot in the projection, but killing it
                # would lose all it has run so far.
                self._sunk_at_release(i, host, start, math.inf)
            self._push(i, host, start, self.now + remaining)
        for instance_id, slots in self.capacity.items():
            self.free.extend([instance_id] * (slots - used.get(instance_id, 0)))

    def run(self) -> None:
        """Fill the free slots, then play the next instant's finishes, until the horizon.

        At each instant every task ending then frees its slot (in the order the
        tasks were placed) before the queue fills the slots. One tight loop
        with everything in locals: it runs once per projected task, and at the
        start of a run, when no stage is measured yet and every task is
        predicted at 0, the projection plays the whole DAG. Zero-length tasks
        end at the instant they start, so they wait in ``zero`` (already in
        order) instead of the heap; the sequence is the one a single heap keyed
        (end, order) would give.
        """
        if self._drain_at_once():
            return
        ends, where, started, free, ready, pending = (
            self.ends,
            self.where,
            self.start,
            self.free,
            self.ready,
            self.parents_left,
        )
        queue, n_queued = self.queue, self.queue.size
        child_at, child_idx = self.wf.child_ptr.item, self.wf.child_idx
        left_at, status_at = pending.item, self.state.status.item
        occupancy_at, remaining_at, on_pool_at = self.occupancy_s.item, self.remaining_s.item, self.wf.on_pool.item
        all_on_pool, horizon, cost_at = self.all_on_pool, self.horizon, self.cost_at
        head, order, done = self.head, self._order, self.done
        zero: list[tuple[int, int, str | None, float]] = []  # (order, task, host, start), all ending at zero_at
        zero_at = math.nan
        t = self.now
        while True:
            while free or not all_on_pool:  # fill the free slots at t, in queue order
                if head < n_queued:
                    task = queue.item(head)
                    length = remaining_at(task) if status_at(task) == RUNNING else occupancy_at(task)
                elif head - n_queued < len(ready):
                    task = ready[head - n_queued]
                    length = occupancy_at(task)  # made ready here: WAITING, so not running
                else:
                    break
                host: str | None = None  # None: runs on the submit host and needs no slot
                if all_on_pool or on_pool_at(task):
                    if not free:
                        break
                    host = free.pop()
                head += 1
                end = t + length
                if end == t and (not zero or zero_at == t):
                    zero_at = t
                    zero.append((order, task, host, t))
                else:
                    where[task] = host
                    started[task] = t
                    heapq.heappush(ends, (end, order, task))
                order += 1
            if zero and (not ends or zero_at <= ends[0][0]):  # the next instant
                t = zero_at
            elif ends and ends[0][0] <= horizon:
                t = ends[0][0]
            else:
                break
            wave = []
            while ends and ends[0][0] <= t:
                _, placed, task = heapq.heappop(ends)
                wave.append((placed, task, where.pop(task), started.pop(task)))
            if zero and zero_at == t:
                wave = sorted(wave + zero) if wave else zero
                zero = []
            for _, task, host, start in wave:  # finish, in placing order
                done += 1
                if host is not None:
                    free.append(host)
                    if start < cost_at[host] < t:  # released mid-run: restart cost (_sunk_at_release, inlined)
                        self._sunk_at_release(task, host, start, t)
                first, last = child_at(task), child_at(task + 1)
                if last - first == 1:  # one parent fewer to wait for (chains: no slice)
                    child = child_idx.item(first)
                    left = left_at(child) - 1
                    pending[child] = left
                    if left == 0 and status_at(child) == WAITING:
                        ready.append(child)
                elif last - first > _FAN_OUT:
                    ready.extend(self._fan_out(child_idx[first:last]))
                else:
                    for child in child_idx[first:last].tolist():
                        left = left_at(child) - 1
                        pending[child] = left
                        if left == 0 and status_at(child) == WAITING:
                            ready.append(child)
        self.head, self._order, self.done = head, order, done

    def _drain_at_once(self) -> bool:
        """Settle the projection in bulk when every task it can reach ends at this very instant.

        At the start of a run no stage is measured: every task of an unstarted
        stage is predicted at 0, the running ones have run for 0 s, and the
        loop below would play the whole DAG at ``now``, one task at a time
        (seconds at a million tasks). When every running task ends now, a slot
        is there for the queue, and every task reached has zero length, the
        outcome is known without the play: all of them finish, nothing is
        left running or queued, and only the running tasks can cost a
        restart. The tasks reached are found a generation at a time, in
        numpy; if any has a length, the play runs. (The queue holds each task
        once, as RunState's queue does.)
        """
        t, ends = self.now, self.ends
        if not self.all_on_pool or any(end != t for end, _, _ in ends):
            return False
        if not self.free and all(self.where[task] is None for _, _, task in ends):
            return False  # no slot will free up: nothing queued can start
        queue, status = self.queue, self.state.status
        lengths = np.where(status[queue] == RUNNING, self.remaining_s[queue], self.occupancy_s[queue])
        if not np.all(t + lengths == t):
            return False
        finishing = np.concatenate([np.array([task for _, _, task in ends], dtype=np.int64), queue])
        reached = 0
        while finishing.size:
            reached += finishing.size
            children, finished_parents = _count_distinct(self._children_of(finishing))
            self.parents_left[children] -= finished_parents
            finishing = children[(self.parents_left[children] == 0) & (status[children] == WAITING)]
            if not np.all(t + self.occupancy_s[finishing] == t):
                self.parents_left = self.state.unfinished_parents().copy()  # undo: the play starts afresh
                return False
        for _, _, task in ends:  # what the play does when the running tasks end now
            host = self.where.pop(task)
            start = self.start.pop(task)
            if host is not None:
                self._sunk_at_release(task, host, start, t)
        ends.clear()
        self.done += reached
        self.head = queue.size
        return True

    def _children_of(self, tasks: np.ndarray) -> np.ndarray:
        """The children of ``tasks`` (with repeats), gathered from the CSR rows at once."""
        ptr = self.wf.child_ptr
        first = ptr[tasks]
        count = ptr[tasks + 1] - first
        offsets = np.repeat(first - (np.cumsum(count) - count), count) + np.arange(int(count.sum()))
        return self.wf.child_idx[offsets].astype(np.int64)

    def _fan_out(self, children: np.ndarray) -> list[int]:
        """A task with many children finishes: count them down at once; those now ready, ascending."""
        self.parents_left[children] -= 1  # CSR children are distinct
        now_ready = (self.parents_left[children] == 0) & (self.state.status[children] == WAITING)
        return children[now_ready].tolist()

    def _sunk_at_release(self, task: int, host: str, start: float, end: float) -> None:
        moment = self.cost_at[host]
        if start < moment < end:
            lost = float(self.state.lost_s[task]) if self.count_lost else 0.0
            cost = moment - start + lost
            self.restart_cost[host] = max(self.restart_cost[host], cost)

    def _push(self, task: int, host: str | None, start: float, end: float) -> None:
        self.where[task] = host
        self.start[task] = start
        heapq.heappush(self.ends, (end, self._order, task))
        self._order += 1

    def _left_in_queue(self) -> np.ndarray:
        """Queued tasks the projection did not start, in queue order, on the pool only."""
        rest = self.queue[self.head :]
        if self.ready:
            rest = np.concatenate([rest, np.array(self.ready[max(self.head - self.queue.size, 0) :], dtype=np.int64)])
        return rest if self.all_on_pool else rest[self.wf.on_pool[rest]]

    def upcoming(self) -> UpcomingLoad:
        running = sorted(self.ends, key=lambda e: e[1])  # slot order = order placed
        queued = self._left_in_queue()
        on_pool = [(end, task) for end, _, task in running if self.all_on_pool or self.wf.on_pool[task]]
        tasks = np.array([task for _, task in on_pool], dtype=np.int64)
        remaining = np.array([end - self.horizon for end, _ in on_pool], dtype=np.float64)
        sunk = np.array([self.horizon - self.start[task] for _, task in on_pool], dtype=np.float64)
        for end, task in on_pool:
            host = self.where[task]
            if host is not None:
                self._sunk_at_release(task, host, self.start[task], end)
        return UpcomingLoad(
            task=np.concatenate([tasks, queued]),
            remaining_s=np.concatenate([remaining, self.occupancy_s[queued].astype(np.float64)]),
            sunk_s=np.concatenate([sunk, np.zeros(queued.size)]),
            restart_cost_s=self.restart_cost,
            projected_done=self.done,
        )
