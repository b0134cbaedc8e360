"""Remaining makespan and cost by scheduling what is left of the DAG on a candidate pool.

Where the level-based model (``makespan.py``) sums per-level bounds, this
estimator plays the remaining workflow out, task by task, the way the pool
would run it:

* a task is submitted ``submit_latency_s`` after its last parent ends and can
  start ``start_latency_s`` later (DAGMan's delay, then a negotiation); a task
  already in the queue can start after the start latency from now, a running
  one holds its slot for its remaining time;
* a pool task starts when it is ready and a slot is free, first ready first
  served (Condor's submit order); a submit-host task needs no slot;
* a slot a task leaves is free again the stage's dispatch gap later (the
  negotiation wait the dispatch learner measures between two jobs on a busy
  slot);
* the slots come from a capacity profile (``makespan.Slots``): the instances
  up now, the others when they have booted, released ones until they go.

Every task's duration is its prediction, so narrow tails, lanes of unequal
length and a level's longest task fall out of the schedule rather than from
a bound. The cost of a pool follows the one billing rule (``core.billing``):
each of its instances pays every started unit from when it is paid from to
the end it would be kept for.

One event per task: an estimate costs O(tasks x log slots) in Python, which
is fine for ``plan`` and for workflows of thousands of tasks. Above
``MAX_EXACT_TASKS`` unfinished tasks, tasks of one stage and level that
become ready together are moved as one batch (``_Cohorts``): an event then
starts or ends a count of tasks sharing the batch's mean duration, so the
cost grows with stages x levels x pool size, not with tasks.
"""

from __future__ import annotations

import heapq
import math
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from wire_daemon.core.run_state import DONE, RUNNING, WAITING, RunState
from wire_daemon.core.workflow import Workflow
from wire_daemon.plan.makespan import Schedule, Slots, top_down_levels
from wire_daemon.ports.prediction import DispatchEstimate

MAX_EXACT_TASKS = 20_000  # unfinished tasks above which batches replace single tasks

_FINISH, _SLOT, _CAPACITY = 0, 1, 2  # event kinds; at equal times a finish is seen before a slot frees


@dataclass(frozen=True)
class Remaining:
    """The unfinished part of the workflow at ``now``, in the terms the simulation needs."""

    now: float
    tasks: np.ndarray  # unfinished task indices
    pending: np.ndarray  # per task of the workflow: unfinished parents (only meaningful for unfinished tasks)
    running: np.ndarray  # bool per unfinished task
    queued: np.ndarray  # bool per unfinished task: submitted, not running (its start latency ahead)
    submitting: np.ndarray  # bool per unfinished task: not submitted, every parent done (submit delay ahead)


def remaining_of(state: RunState, now: float) -> Remaining:
    """Which tasks are left at ``now``, and how far each is from starting."""
    wf = state.workflow
    status = state.status
    left = np.flatnonzero(status != DONE)
    done = (status == DONE).astype(np.int32)
    counts = np.diff(wf.parent_ptr)
    finished = np.zeros(wf.n_tasks, dtype=np.int64)
    has = np.flatnonzero(counts)
    if has.size:
        finished[has] = np.add.reduceat(done[wf.parent_idx], wf.parent_ptr[has])
    pending = (counts - finished).astype(np.int64)
    st = status[left]
    running = st == RUNNING
    waiting = st == WAITING
    return Remaining(now, left, pending, running, ~running & ~waiting, waiting & (pending[left] == 0))


@dataclass(frozen=True)
class SimResult:
    """One pool's schedule: when it ends, and how many slots were busy when (for the cost)."""

    end: float
    busy_until: float  # when the last pool slot is left (the pool is needed until then)
    busy: Sequence[tuple[float, int]] = ()  # (time, slots taken (+) or left (-)), pool slots only

    def as_levels(self, start: float, slots_per_instance: int) -> Schedule:
        """The busy slots as spans of constant instance count: the level model's ``Schedule``, for its cost rule.

        ``plan_instances`` prices a schedule span by span, the first
        ``instances_used`` instances busy through each; a span here is a
        stretch of time through which the simulated pool keeps the same
        number of instances busy (busy slots, rounded up to instances).
        """
        if not self.busy or not math.isfinite(self.end):
            return Schedule(self.end, np.empty(0), np.empty(0), np.zeros(0, dtype=np.int64))
        at = np.array([b[0] for b in self.busy])
        delta = np.array([b[1] for b in self.busy], dtype=np.int64)
        order = np.argsort(at, kind="stable")
        at, delta = at[order], delta[order]
        level = np.cumsum(delta)
        last = np.r_[at[1:] != at[:-1], True]  # the count after every change made at one instant
        at, level = at[last], level[last]
        used = -(-np.maximum(level, 0) // slots_per_instance)
        keep = np.r_[True, used[1:] != used[:-1]]
        begins, used = at[keep], used[keep]
        ends = np.r_[begins[1:], max(self.end, float(begins[-1]))]
        some = used > 0
        return Schedule(self.end, np.maximum(begins[some], start), ends[some], used[some].astype(np.int64))


class Simulator:
    """Plays a workflow's remaining tasks on capacity profiles: one ``run`` per pool and set of task times."""

    def __init__(self, workflow: Workflow, dispatch: DispatchEstimate, max_exact_tasks: int = MAX_EXACT_TASKS) -> None:
        self.workflow = workflow
        self.max_exact_tasks = max_exact_tasks
        self._child_ptr = workflow.child_ptr.tolist()
        self._child_idx = workflow.child_idx.tolist()
        self._on_pool = workflow.on_pool.tolist()
        self._levels: np.ndarray | None = None
        self._cohorts: _Cohorts | None = None
        self.use(dispatch)

    def use(self, dispatch: DispatchEstimate) -> None:
        """Schedule with these dispatch costs from now on (the learner's estimate changes every decision)."""
        self.dispatch = dispatch
        gaps = dispatch.gap_per_task(self.workflow.stage_of)
        if dispatch.gap_observations == 0:  # only a prior: no measured loss between jobs yet
            gaps = np.zeros(self.workflow.n_tasks)
        self.gap = np.maximum(np.nan_to_num(gaps), 0.0)
        self._cohorts = None  # batches carry the gaps

    def levels(self) -> np.ndarray:
        if self._levels is None:
            self._levels = top_down_levels(self.workflow)
        return self._levels

    def run(self, left: Remaining, remaining_s: np.ndarray, capacity: Sequence[Slots]) -> SimResult:
        """The remaining schedule with ``remaining_s`` (per task of the workflow) as each unfinished task's time."""
        times = np.maximum(np.nan_to_num(remaining_s[left.tasks], nan=0.0, posinf=0.0), 0.0)
        if left.tasks.size > self.max_exact_tasks:
            if self._cohorts is None or self._cohorts.left is not left:  # the batches depend on the tasks left only
                self._cohorts = _Cohorts(self, left)
            return self._cohorts.with_times(times).run(capacity)
        return self._exact(left, times, capacity)

    def _exact(self, left: Remaining, times: np.ndarray, capacity: Sequence[Slots]) -> SimResult:
        now = left.now
        d = self.dispatch
        to_submit = d.submit_latency_s + d.start_latency_s
        duration = dict(zip(left.tasks.tolist(), times.tolist()))
        gap = self.gap
        on_pool, cptr, cidx = self._on_pool, self._child_ptr, self._child_idx
        pending = left.pending  # read only: a copy of the counts the run decrements
        counts: dict[int, int] = {}
        events: list[tuple[float, int, int]] = []  # (time, kind, task or slot delta)
        free = 0
        for step in capacity:
            if step.time <= now:
                free += step.delta
            else:
                events.append((step.time, _CAPACITY, step.delta))
        ready: deque[tuple[float, int]] = deque()
        ready_sorted: list[tuple[float, int]] = []
        busy: list[tuple[float, int]] = []  # (time, slots taken or left)
        for task, run, queued, submitting in zip(
            left.tasks.tolist(), left.running.tolist(), left.queued.tolist(), left.submitting.tolist()
        ):
            if run:
                events.append((now + duration[task], _FINISH, task))
                free -= on_pool[task]
                if on_pool[task]:
                    busy.append((now, 1))
            elif queued or submitting:
                at = now + (d.start_latency_s if queued else to_submit)
                if on_pool[task]:
                    ready_sorted.append((at, task))
                else:
                    events.append((at + duration[task], _FINISH, task))
        ready.extend(sorted(ready_sorted))
        heapq.heapify(events)
        end = busy_until = clock = now
        while True:
            horizon = events[0][0] if events else math.inf
            if ready and free > 0 and ready[0][0] <= horizon:
                at, task = ready.popleft()
                free -= 1
                begin = max(at, clock)
                busy.append((begin, 1))
                heapq.heappush(events, (begin + duration[task], _FINISH, task))
                continue
            if not events:
                break
            t, kind, what = heapq.heappop(events)
            clock = t
            if kind == _CAPACITY:
                free += what
                continue
            if kind == _SLOT:
                free += 1
                busy.append((t, -1))
                continue
            end = t
            if on_pool[what]:
                busy_until = t
                lost = float(gap[what])
                if lost > 0.0:
                    heapq.heappush(events, (t + lost, _SLOT, what))
                else:
                    free += 1
                    busy.append((t, -1))
            for k in range(cptr[what], cptr[what + 1]):
                child = cidx[k]
                if child not in duration:  # already finished (an event log may say so out of order)
                    continue
                n = counts.get(child, int(pending[child])) - 1
                counts[child] = n
                if n == 0:
                    at = t + to_submit
                    if on_pool[child]:
                        ready.append((at, child))  # finishes come in time order: the queue stays sorted
                    else:
                        heapq.heappush(events, (at + duration[child], _FINISH, child))
        if ready:  # no slot will ever come for them
            return SimResult(math.inf, math.inf)
        return SimResult(end, busy_until, busy)


class _Cohorts:
    """The simulation over batches: tasks of one stage and level that become ready together move as one count.

    A batch is ready when every parent batch has ended (finer than a level:
    a stage waits only for the stages it depends on); its tasks start as slots
    free, each taking the batch's mean time, and the batch has ended when its
    last task has, at least its longest task's time after its first start.
    """

    def __init__(self, sim: Simulator, left: Remaining) -> None:
        wf = sim.workflow
        self.sim, self.left = sim, left
        level = sim.levels()
        tasks = left.tasks
        # A batch: (stage, level, how far from starting) among the unfinished tasks.
        phase = np.where(left.running, 0, np.where(left.queued, 1, np.where(left.submitting, 2, 3)))
        key = (wf.stage_of[tasks].astype(np.int64) * (int(level.max()) + 1) + level[tasks]) * 4 + phase
        uniq, batch_of = np.unique(key, return_inverse=True)
        self.n = uniq.size
        self.batch_of = batch_of
        self.phase = (uniq % 4).astype(np.int64)
        self.count = np.bincount(batch_of, minlength=self.n).astype(np.int64)
        self.pool = np.bincount(batch_of, weights=wf.on_pool[tasks], minlength=self.n) > 0
        self.gap = np.bincount(batch_of, weights=sim.gap[tasks], minlength=self.n) / np.maximum(self.count, 1)
        self.mean = np.zeros(self.n)
        self.longest = np.zeros(self.n)
        # Parent batches: the batches of an unfinished task's unfinished parents.
        owner = np.full(wf.n_tasks, -1, dtype=np.int64)
        owner[tasks] = batch_of
        child_counts = np.diff(wf.child_ptr)[tasks]
        src = np.repeat(batch_of, child_counts)
        dst = owner[wf.child_idx[_gather(wf.child_ptr[tasks], child_counts)]]
        keep = (dst >= 0) & (dst != src)
        edges = np.unique(src[keep] * self.n + dst[keep])  # one edge per pair of batches
        self.children: list[list[int]] = [[] for _ in range(self.n)]
        self.parents_left = np.zeros(self.n, dtype=np.int64)
        for edge in edges.tolist():
            a, b = divmod(edge, self.n)
            self.children[a].append(b)
            self.parents_left[b] += 1

    def with_times(self, times: np.ndarray) -> _Cohorts:
        """Each batch's mean and longest task time, from the unfinished tasks' times."""
        self.mean = np.bincount(self.batch_of, weights=times, minlength=self.n) / np.maximum(self.count, 1)
        longest = np.zeros(self.n)
        np.maximum.at(longest, self.batch_of, times)
        self.longest = longest
        return self

    def run(self, capacity: Sequence[Slots]) -> SimResult:
        d = self.sim.dispatch
        now = self.left.now
        to_submit = d.submit_latency_s + d.start_latency_s
        events: list[tuple[float, int, int, int]] = []  # (time, kind, batch or delta, count)
        free = 0
        for step in capacity:
            if step.time <= now:
                free += step.delta
            else:
                events.append((step.time, _CAPACITY, step.delta, 0))
        parents_left = self.parents_left.copy()
        unstarted = self.count.copy()
        unended = self.count.copy()
        first_start = np.full(self.n, math.inf)
        ready: list[tuple[float, int]] = []  # (ready time, batch), a heap
        busy: list[tuple[float, int]] = []
        for b in range(self.n):
            phase = int(self.phase[b])
            if phase == 0:
                events.append((now + self.mean[b], _FINISH, b, int(self.count[b])))
                unstarted[b] = 0
                first_start[b] = now
                if self.pool[b]:
                    free -= int(self.count[b])
                    busy.append((now, int(self.count[b])))
            elif parents_left[b] == 0:
                at = now + (d.start_latency_s if phase == 1 else to_submit)
                ready.append((at, b))
        heapq.heapify(ready)
        heapq.heapify(events)
        end = busy_until = clock = now
        while True:
            horizon = events[0][0] if events else math.inf
            if ready and ready[0][0] <= horizon and (free > 0 or not self.pool[ready[0][1]]):
                at, b = ready[0]
                at = max(at, clock)
                take = int(unstarted[b]) if not self.pool[b] else min(free, int(unstarted[b]))
                if self.pool[b]:
                    free -= take
                    busy.append((at, take))
                unstarted[b] -= take
                first_start[b] = min(first_start[b], at)
                heapq.heappush(events, (at + float(self.mean[b]), _FINISH, b, take))
                if unstarted[b] == 0:
                    heapq.heappop(ready)
                continue
            if not events:
                break
            t, kind, what, n = heapq.heappop(events)
            clock = t
            if kind == _CAPACITY:
                free += what
                continue
            if kind == _SLOT:
                free += n
                busy.append((t, -n))
                continue
            if self.pool[what]:
                busy_until = max(busy_until, t)
                lost = float(self.gap[what])
                if lost > 0.0:
                    heapq.heappush(events, (t + lost, _SLOT, what, n))
                else:
                    free += n
                    busy.append((t, -n))
            unended[what] -= n
            if unended[what] > 0:
                end = max(end, t)
                continue
            # The batch's longest task ends no sooner than its time after the batch's first start.
            done_at = max(t, float(first_start[what]) + float(self.longest[what]))
            end = max(end, done_at)
            for child in self.children[what]:
                parents_left[child] -= 1
                if parents_left[child] == 0:
                    heapq.heappush(ready, (done_at + to_submit, child))
        if ready:
            return SimResult(math.inf, math.inf)
        return SimResult(end, busy_until, busy)


def _gather(starts: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """The positions starts[i] .. starts[i] + counts[i] - 1 for every i, concatenated."""
    total = int(counts.sum())
    if total == 0:
        return np.empty(0, dtype=np.int64)
    offsets = np.repeat(starts - np.concatenate(([0], np.cumsum(counts)[:-1])), counts)
    return np.arange(total, dtype=np.int64) + offsets
