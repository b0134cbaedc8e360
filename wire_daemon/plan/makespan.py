"""Whole-DAG makespan and cost estimates per pool size: the level-based model, fed online.

The level-based model (Pietri et al., the makespan-model paper in
``shared/papers``) groups tasks by their depth in the DAG (top-down: one more
than the deepest parent) and lets each level take

    max(work of the level / min(slots, tasks of the level), its longest task)

plus a fixed per-level latency; the workflow takes the sum over its levels.
Here it runs every interval on what is left, with the online predictions:

* a level's work is the expected remaining occupancy of its unfinished pool
  tasks plus, per task, the slot gap the dispatch learner measured (a
  thousand half-second jobs are a thousand negotiation waits, not 500 s);
* its longest task is the 90th percentile of the remaining occupancy of its
  unfinished tasks (pool or submit host), a running task's conditioned on
  what it has already run;
* a level none of whose tasks has been submitted yet still has the level
  latency ahead (DAGMan's submit delay plus the start latency);
* the slots are not constant: a capacity profile says how many slots exist
  from when (the instances up now, the booting ones when they boot, new ones
  a launch lag from their launch, released ones until their termination).
  A level runs at min(slots, its tasks) through the profile's steps.
  Asked for whole tasks (a deadline's promise), the frontier runs in rounds:
  its tasks are there now, and n of them on s slots take ceil(n / s) rounds
  of its mean task, not n / s of one.

The full-pool estimate (what ``max_instances`` up from the start would take)
is the same model over every task of the workflow, the finished ones with
their measured occupancy. Finished tasks' sums are kept per level as they
finish, so an estimate costs in proportion to the unfinished tasks.

Cost follows the one billing rule (``core.billing``). Each level uses
ceil(min(slots it has, its tasks) / slots per instance) instances; instance
j, ranked with the instances already paid furthest ahead first, is needed
until the last level that uses j instances ends. Keeping it that long costs
the units beyond what it has already paid; a new instance pays from its
launch, its boot included.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from wire_daemon.core.billing import Billing
from wire_daemon.core.run_state import DONE, RUNNING, WAITING, RunState
from wire_daemon.core.workflow import Workflow
from wire_daemon.ports.prediction import DispatchEstimate, Prediction


def top_down_levels(workflow: Workflow) -> np.ndarray:
    """Each task's level: 0 for a root, else one more than its deepest parent (tasks are in topological order)."""
    n = workflow.n_tasks
    level = np.zeros(n, dtype=np.int32)
    counts = np.diff(workflow.parent_ptr)
    has = np.flatnonzero(counts)
    if has.size == 0:
        return level
    starts = workflow.parent_ptr[has]
    parents = workflow.parent_idx
    while True:  # one pass per level of depth: each pass settles at least one more level
        deepest = np.maximum.reduceat(level[parents], starts) + 1
        if np.array_equal(deepest, level[has]):
            return level
        level[has] = deepest


@dataclass
class Levels:
    """What is left of each level: arrays indexed by level."""

    work_s: np.ndarray  # slot-seconds still to run on the pool
    tasks: np.ndarray  # pool tasks still to run (the most slots the level can use)
    longest_s: np.ndarray  # the level's longest remaining task (90th percentile)
    waiting: np.ndarray  # bool: no task of the level submitted yet (the level latency is ahead)


@dataclass(frozen=True)
class Slots:
    """A step of the capacity profile: from ``time`` on, ``delta`` slots more (or fewer)."""

    time: float
    delta: int


@dataclass(frozen=True)
class Schedule:
    """How the levels play out on one capacity profile."""

    end: float  # when the last level ends
    level_start: np.ndarray  # per remaining level, in order
    level_end: np.ndarray
    instances_used: np.ndarray  # per remaining level: instances busy at its widest
    # Per remaining level: slots busy at its widest. Instances of several types hold different slot counts,
    # so which instances a level keeps busy is counted in slots; None (the simulation): in instances.
    slots_used: np.ndarray | None = None


class LevelModel:
    """Per-level aggregates of the workflow, and the level-based estimate on a capacity profile."""

    def __init__(self, workflow: Workflow) -> None:
        self.workflow = workflow
        self.level = top_down_levels(workflow)
        self.n_levels = int(self.level.max()) + 1 if workflow.n_tasks else 0
        self.pool_per_level = np.bincount(self.level, weights=workflow.on_pool, minlength=self.n_levels)
        n_stages = len(workflow.stages)
        self._done_work = np.zeros(self.n_levels)  # measured occupancy of the finished pool tasks
        self._done_longest = np.zeros(self.n_levels)
        self._done_count = np.zeros((self.n_levels, n_stages))  # finished pool tasks, by level and stage
        self._cursor = 0

    def learn(self, state: RunState) -> None:
        """Fold the tasks finished since the last call into the per-level sums."""
        new = np.asarray(state.completion_order[self._cursor :], dtype=np.int64)
        self._cursor = len(state.completion_order)
        if new.size == 0:
            return
        occupancy = state.occupancy_s[new]
        lvl = self.level[new]
        np.maximum.at(self._done_longest, lvl, occupancy)
        pool = self.workflow.on_pool[new]
        np.add.at(self._done_work, lvl[pool], occupancy[pool])
        np.add.at(self._done_count, (lvl[pool], self.workflow.stage_of[new][pool]), 1.0)

    def remaining(self, state: RunState, prediction: Prediction, dispatch: DispatchEstimate) -> Levels:
        """The unfinished work, as a frontier followed by levels.

        Entry 0 is the frontier: every task already submitted (queued or
        running), whatever its level, since it can run now. Entry k + 1 holds
        the tasks of level k not submitted yet; each still has the level
        latency ahead. Finer than the static levels alone: a task whose
        parents are done does not wait for the rest of its level's
        predecessors.
        """
        wf, status = self.workflow, state.status
        left = np.flatnonzero(status != DONE)
        waiting = status[left] == WAITING
        slot = np.where(waiting, self.level[left] + 1, 0)
        size = self.n_levels + 1
        mean = prediction.mean_remaining()[left]
        p90 = prediction.p90_remaining()[left]
        pool = wf.on_pool[left]
        gap = dispatch.gap_per_task(wf.stage_of[left])
        if dispatch.gap_observations == 0:  # only a prior: charged to the jobs already queued, not to the DAG
            gap = np.where(waiting, 0.0, gap)
        work = np.bincount(slot, weights=np.where(pool, mean + gap, 0.0), minlength=size)
        tasks = np.bincount(slot, weights=pool, minlength=size)
        longest = np.zeros(size)
        np.maximum.at(longest, slot, np.nan_to_num(p90))
        present = np.bincount(slot, minlength=size) > 0
        ahead = present.copy()
        ahead[0] = False
        return Levels(work, tasks, np.where(present, longest, 0.0), ahead)

    def full_pool(
        self, state: RunState, prediction: Prediction, dispatch: DispatchEstimate, slots: int, now: float
    ) -> float:
        """The makespan the full pool would have had from the workflow's start, with what is known now."""
        wf = self.workflow
        left = np.flatnonzero(state.status != DONE)
        lvl = self.level[left]
        pool = wf.on_pool[left]
        mean, p90 = prediction.mean_remaining()[left], np.nan_to_num(prediction.p90_remaining()[left])
        running = state.status[left] == RUNNING
        # A running task has run part of its occupancy already; the full pool would have run all of it.
        elapsed = np.nan_to_num(np.where(running, np.maximum(now - state.start_time[left], 0.0), 0.0))
        gap = dispatch.gap_per_task(wf.stage_of[left])
        if dispatch.gap_observations == 0:
            gap = np.where(state.status[left] == WAITING, 0.0, gap)
        stage_gap = np.where(np.isnan(dispatch.gap_s), dispatch.default_gap_s, dispatch.gap_s)
        work = self._done_work + self._done_count @ stage_gap
        work = work + np.bincount(lvl, weights=np.where(pool, mean + elapsed + gap, 0.0), minlength=self.n_levels)
        longest = self._done_longest.copy()
        np.maximum.at(longest, lvl, p90 + elapsed)
        total = 0.0
        for level in range(self.n_levels):
            n = self.pool_per_level[level]
            body = work[level] / min(slots, n) if n > 0 else 0.0
            total += dispatch.level_latency_s + max(body, longest[level])
        return total

    def schedule(
        self,
        levels: Levels,
        start: float,
        capacity: Sequence[Slots],
        slots_per_instance: int,
        latency_s: float,
        whole_frontier: bool = False,
    ) -> Schedule:
        """Play the remaining levels from ``start`` on a capacity profile; ``latency_s`` per waiting level.

        ``whole_frontier``: the frontier's tasks in whole rounds on the most slots the profile reaches.
        """
        order = np.flatnonzero((levels.tasks > 0) | (levels.longest_s > 0) | levels.waiting)
        steps = sorted(capacity, key=lambda s: s.time)
        # Fold the steps at or before ``start`` into the starting capacity.
        cap = sum(s.delta for s in steps if s.time <= start)
        future = [(s.time, s.delta) for s in steps if s.time > start]
        t = start
        k = 0  # next future step
        latency = latency_s
        peak = max(itertools.accumulate([cap, *(delta for _, delta in future)])) if whole_frontier else 0
        ends = np.empty(order.size)
        starts = np.empty(order.size)
        used = np.zeros(order.size, dtype=np.int64)
        busy = np.zeros(order.size)
        for pos, level in enumerate(order.tolist()):
            if levels.waiting[level]:
                t += latency
                while k < len(future) and future[k][0] <= t:
                    cap += future[k][1]
                    k += 1
            n = float(levels.tasks[level])
            work = float(levels.work_s[level])
            if whole_frontier and level == 0 and n > peak > 0:
                work *= math.ceil(n / peak) * peak / n
            began = starts[pos] = t
            widest = max(cap, 0)
            if n > 0 and work > 0:
                # Run the work at min(slots, tasks) through the profile's steps.
                while True:
                    rate = min(max(cap, 0), n)
                    horizon = future[k][0] if k < len(future) else math.inf
                    if rate > 0 and t + work / rate <= horizon:
                        t += work / rate
                        break
                    if horizon == math.inf:  # no slot will ever come: never ends
                        t = math.inf
                        break
                    work -= rate * (horizon - t)
                    t = horizon
                    cap += future[k][1]
                    k += 1
                    widest = max(widest, cap)
            t = max(t, began + float(levels.longest_s[level]))
            while k < len(future) and future[k][0] <= t:
                cap += future[k][1]
                k += 1
            ends[pos] = t
            busy[pos] = min(widest, n) if n > 0 else 0.0
            used[pos] = math.ceil(busy[pos] / slots_per_instance)
            if t == math.inf:
                ends[pos:] = math.inf
                starts[pos:] = math.inf
                break
        return Schedule(float(ends[-1]) if ends.size else start, starts, ends, used, busy)


@dataclass(frozen=True)
class PoolMember:
    """An instance as the cost model sees it."""

    instance_id: str
    slots: int
    ready_at: float  # when its slots can run tasks
    paid_until: float  # end of the unit it has paid (a new one: its launch, nothing paid yet)
    launch_time: float
    gone_at: float = math.inf  # leaves then (released, or beyond the size considered)
    releasable: bool = True  # may go at the end of its unit (restart cost and age allow it)
    let_go: bool = False  # already released: it serves until ``gone_at`` and pays nothing more
    dearness: float = 0.0  # price per task that fits (several instance types); 0 for all otherwise
    running_work: bool = False  # runs tasks now: the work now is on it

    @property
    def new(self) -> bool:
        return self.paid_until <= self.launch_time


def capacity_of(members: Sequence[PoolMember]) -> list[Slots]:
    steps = [Slots(m.ready_at, m.slots) for m in members if m.ready_at < m.gone_at]
    steps += [Slots(m.gone_at, -m.slots) for m in members if m.gone_at < math.inf and m.ready_at < m.gone_at]
    return steps


def rank_members(members: Sequence[PoolMember]) -> list[PoolMember]:
    """The order in which levels use instances: those running tasks now first (the work is on them), then
    those paid furthest ahead, new ones last.

    With several instance types the cheapest per task come before those paid further ahead, so the
    dearest idle ones are left unused and let go (a dear instance paid ahead idles until its unit ends
    rather than being renewed).
    """
    return sorted(members, key=lambda m: (m.new, not m.running_work, m.dearness, -m.paid_until, m.launch_time))


@dataclass(frozen=True)
class InstancePlan:
    """What a pool size means now, and what it costs from now on."""

    cost_units: int
    launch_now: int
    release_now: tuple[str, ...]


def drains_now(paid_until: float, now: float, interval: float, drain_lead_s: float) -> bool:
    """Is an instance paid until ``paid_until`` let go now, if let go at all: its unit ends before the next
    decision, or so soon after it that a job started on it now would outlast the unit. The loop drains a
    released instance at once (no new job starts on it) and terminates it at its unit's end."""
    return paid_until <= now + interval + drain_lead_s


def plan_instances(
    members: Sequence[PoolMember],
    schedule: Schedule,
    billing: Billing,
    now: float,
    lag: float,
    interval: float,
    min_instances: int = 0,
    drain_lead_s: float = 0.0,
    ranked: bool = False,
    pool_ends_at: float = math.inf,
) -> InstancePlan:
    """Which instances each level uses, and the cheapest way to have them there.

    Instances are ranked as ``rank_members`` does: those running tasks, those
    paid furthest ahead, then the new ones (``ranked``: ``members`` are in
    that order already); level by level the first of them that hold its busy
    slots are busy. An instance idle for longer than a launch lag plus an
    interval is cheaper let go at its unit's end and launched again in time
    (a later decision can do that); otherwise it is kept and renewed. A new instance is
    launched now only if its first use starts before a launch made at the
    next decision could be ready. An instance whose unit ends before the
    next decision, or within ``drain_lead_s`` after it (a job started on it
    would outlast the unit), is released now (drained at once, terminated at
    its unit's end) if it has no use before it could come back. The pool
    goes when the workflow ends (a decision is taken at once then): an
    instance kept to the next decision pays only up to ``pool_ends_at``, if
    that is sooner.
    """
    order = list(members) if ranked else rank_members(members)
    uses: list[list[tuple[float, float]]] = [[] for _ in order]
    gone = [m.gone_at for m in order]
    for pos, (begin, end) in enumerate(zip(schedule.level_start.tolist(), schedule.level_end.tolist())):
        # The first instances still there when the level begins (one gone by then serves none).
        for j in _busy_members(order, gone, begin, schedule, pos):
            uses[j].append((begin, end))
    u = billing.charging_unit_s
    comeback = lag + interval  # an idle gap at least this long: go, and come back in time
    next_decision = now + interval
    renewed_to = min(next_decision, pool_ends_at)
    cost, launch, release = 0, 0, []
    staying = sum(1 for m in order if not m.new and not m.let_go)  # may not fall below min_instances
    for member, spans in zip(order, uses):
        spans = [(b, e) for b, e in spans if e > now]
        if member.new:
            if not spans:
                continue
            first = spans[0][0]
            launched = now if first < next_decision + lag else first - lag
            launch += launched == now
            paid = launched
        else:
            paid = member.paid_until
            expiring = drains_now(paid, now, interval, drain_lead_s)
            needed_soon = bool(spans) and spans[0][0] < paid + comeback
            going = expiring and member.releasable and (not needed_soon or member.gone_at < math.inf)
            if going and staying > min_instances:
                release.append(member.instance_id)
                staying -= 1
            elif member.gone_at < math.inf or not going:
                pass
            else:
                needed_soon = True  # kept for the minimal pool: renewed like a needed instance
            if member.gone_at < math.inf:
                continue
            if expiring and (needed_soon or not member.releasable):  # renewed to the next decision or the end
                units = math.ceil((renewed_to - paid) / u - 1e-9) if renewed_to > paid else 0
                cost += units
                paid += units * u
        for begin, end in spans:
            if begin - paid >= comeback:  # let it go at the unit's end, launch again in time
                paid = begin - lag
            if end > paid:
                units = math.ceil((end - paid) / u - 1e-9)
                cost += units
                paid += units * u
    return InstancePlan(cost, launch, tuple(release))


def _busy_members(
    order: Sequence[PoolMember], gone: list[float], begin: float, schedule: Schedule, pos: int
) -> list[int]:
    """The ranked members a level keeps busy: the first ones present, as many as hold its slots."""
    present = [j for j, at in enumerate(gone) if at > begin]
    if schedule.slots_used is None:
        return present[: int(schedule.instances_used[pos])]
    need, out = float(schedule.slots_used[pos]), []
    for j in present:
        if need <= 0:
            break
        out.append(j)
        need -= order[j].slots
    return out
