"""Which market each launch buys: spot where rework is cheap, on-demand where it is not.

A workflow is a DAG, and that is what no spot tool knows. A reclaimed spot
instance loses the work its running tasks had done (Condor reruns them from
the start), so what a reclaim costs depends on the tasks it carries: a wide
stage of short tasks loses seconds, a long task on the critical path loses
hours and delays the whole workflow. ``MarketPlacement`` decorates any
policy that predicts: for each instance its decision launches, it looks at
the tasks that instance would take (the queue's next tasks past the free
slots, ``slots_per_instance`` per instance) and buys spot when

    ratio x m(d)  +  critical x P(reclaim within d) x late_weight  <  1

in units of the on-demand price of the same work, where

* ``d`` is the longest predicted remaining time among those tasks;
* ``m(d) = (exp(l d) - 1) / (l d)`` is how much longer work of length d
  takes on capacity reclaimed at rate l, each reclaim restarting it from zero
  (the expected completion time of a restart-from-zero job, over d);
* a task is *critical* when its remaining time plus the longest chain of
  stages after it reaches ``CRITICAL_SHARE`` of the longest such path left;
* ``late_weight = max_instances x (d / 2 + lag) / d``: a reclaim delays a
  critical chain by about half the task plus a launch lag, and lateness is
  priced at the full pool's price, as the default policy prices it.

With ``steering.market: spot`` every launch buys spot; with ``on-demand``
this decorator is not used. The rate l is learned: ``ReclaimRate`` starts from
``steering.spot_interruptions_per_hour`` as if it had watched
``PRIOR_SPOT_HOURS`` spot instance-hours, and adds every spot instance-hour
and every reclaim it sees (a spot instance that left the pool without this
policy releasing it).

Launching is half of placement; the other half is where each queued task
starts. The same rule, task by task, gives each of the queue's next tasks
(a full pool's worth) a market, which the loop hands to Condor as the job's
Rank (``CondorControl.prefer_market``): long critical work ranks on-demand
slots first, the rest spot slots. A task that already lost work to an
eviction (a reclaim) is judged as critical, and at least as long as the
attempt it lost: its retry should not land on spot again when the work it
would repeat is long. A Rank is only a preference, so when more queued
tasks rank on-demand first than the on-demand slots free or booting can
take, the decision launches on-demand instances for them (the *shield*),
within ``max_instances``; and those tasks *require* on-demand (a clause of
the job's Requirements), as many as on-demand slots are free or coming, so
that they wait for one rather than start on a free spot slot. Condor reruns
a reclaimed task at once, before this policy sees it queued: a task running
on spot whose rerun would be judged on-demand requires it while it runs.

An on-demand instance bought for such work stays in the pool once the work
is done, and the scaling policy keeps it for whatever comes next, at about
three times a spot instance's price. The *swap* lets it go when no
on-demand capacity is wanted: no task queued or still to be submitted is
judged on-demand, none of its running tasks is, and their ends are
predicted from measurements and not yet overdue. It goes at its paid unit's
end: drained, so that no new job starts on it, its running tasks end there
(never killed: while one runs, its termination is set past the task's
predicted end and set again at every decision), and it is terminated at the
first decision that finds it idle. A spot instance is launched in its place
at once when it is idle (the policy kept it, so the capacity is wanted) or
when tasks are queued; otherwise the policy launches when capacity is
wanted. A swap is made only when it pays: the longest chain of work left,
less its running tasks' time, at the price difference, must exceed the
replacement's spot price over its running tasks' time plus
``SWAP_MIN_LAGS`` launch lags of on-demand time; and only within
``max_instances``, and for a policy that can count an instance out of its
pool (``let_go``).

A new loop (a restart, a change of the followed DAG) builds a new placement
and tells it the releases under way (``let_go``). A spot instance among them
ends by our hand, not by a reclaim. Whether an on-demand one was let go for
a swap or by the scaling policy is not recorded; it is held as a swap under
way, the safe reading: its slots are no room for on-demand work, it is not
swapped a second time (a second spot instance launched for it), and its
termination follows its running tasks rather than killing them.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TypeVar

import numpy as np

from wire_daemon.core.config import SteeringConfig
from wire_daemon.core.instances import CloudState, Instance
from wire_daemon.core.pricing import Market
from wire_daemon.core.run_state import RunState, TaskStatus
from wire_daemon.core.workflow import Workflow
from wire_daemon.plan.slowdown import MEASURED
from wire_daemon.plan.steering import release_time
from wire_daemon.ports.policy import LetsGo, PlanResult, ScalingPolicy, SteeringDecision, tell_let_go
from wire_daemon.ports.prediction import Prediction

CRITICAL_SHARE = 0.8
_D = TypeVar("_D", float, np.ndarray)  # one piece of work's length, or many
PRIOR_SPOT_HOURS = 4.0  # how much the configured rate weighs against what is seen
SWAP_MIN_LAGS = 4.0  # a swap must save more than this many launch lags of on-demand time
SWAP_HOLD_INTERVALS = 2.0  # a drained instance's termination is set this many intervals past its tasks' end


class ReclaimRate:
    """Reclaims per spot instance-second: the configured prior, then what the pool shows.

    Reclaims seen at one observation count as one event. A storm (a zone short
    of a type takes many instances at once) is one event of the market, not
    many independent ones: counted one by one, it would read as a rate many
    times the real one for the rest of the run, and every later launch would
    buy on-demand at the full price against reclaims that do not come.
    """

    def __init__(self, prior_per_hour: float) -> None:
        self.prior_per_hour = prior_per_hour
        self.reclaims = 0  # events: a batch of reclaims seen together counts once
        self.spot_seconds = 0.0
        self._seen: dict[str, float] = {}  # live spot instance -> when last seen
        self._released: set[str] = set()

    def released(self, instance_ids: Sequence[str]) -> None:
        self._released.update(instance_ids)

    def observe(self, now: float, instances: Sequence[Instance]) -> None:
        live = {i.instance_id for i in instances if i.market is Market.SPOT}
        reclaimed = False
        for instance_id, last in list(self._seen.items()):
            self.spot_seconds += max(now - last, 0.0)  # a reclaimed one: up to now, a little over
            if instance_id not in live:
                del self._seen[instance_id]
                reclaimed = reclaimed or instance_id not in self._released
        self.reclaims += reclaimed
        self._seen.update({i: now for i in live})

    @property
    def per_second(self) -> float:
        events = self.prior_per_hour * PRIOR_SPOT_HOURS + self.reclaims
        return events / (PRIOR_SPOT_HOURS * 3600.0 + self.spot_seconds)


def rework_factor(d: float, rate_per_s: float) -> float:
    """m(d): expected time to finish work of length d when reclaims restart it, over d."""
    x = rate_per_s * d
    return 1.0 if x < 1e-12 else math.expm1(x) / x


def spot_worth(d: float, rate_per_s: float, ratio: float, critical: bool, late_weight: float) -> bool:
    """Is spot cheaper than on-demand for work of length ``d``, rework and (if critical) delay counted?"""
    cost = ratio * rework_factor(d, rate_per_s)
    if critical:
        cost += -math.expm1(-rate_per_s * d) * late_weight
    return cost < 1.0


def spot_worth_each(
    d: np.ndarray, rate_per_s: float, ratio: float, critical: np.ndarray, late_weight: np.ndarray
) -> np.ndarray:
    """``spot_worth`` for many pieces of work at once (the same sums, elementwise): a wide workflow has
    thousands of tasks to judge at every decision, where the scalar form serves a few at a time."""
    x = rate_per_s * d
    rework = np.where(x < 1e-12, 1.0, np.expm1(x) / np.maximum(x, 1e-300))
    cost = ratio * rework + np.where(critical, -np.expm1(-x) * late_weight, 0.0)
    return np.asarray(cost < 1.0)


def critical_paths(workflow: Workflow, remaining: np.ndarray, unfinished: np.ndarray) -> np.ndarray:
    """Per task, its remaining time plus the longest chain of stages after it (NaN-free, 0 where done).

    Per stage, not per task: a stage's length is its longest predicted remaining
    task, so the walk is over the few stages, and the per-task part is one
    vector operation whatever the workflow's size.
    """
    n_stages = len(workflow.stages)
    rem = np.where(unfinished, np.nan_to_num(remaining, nan=0.0), 0.0)
    length = np.zeros(n_stages)
    np.maximum.at(length, workflow.stage_of, rem)
    children: list[list[int]] = [[] for _ in range(n_stages)]
    for stage in workflow.stages:
        for parent in stage.predecessor_stages:
            children[parent].append(stage.stage_id)
    tail = np.full(n_stages, -1.0)

    def after(s: int) -> float:  # the longest chain of stages after s
        if tail[s] < 0:
            tail[s] = max((length[c] + after(c) for c in children[s]), default=0.0)
        return float(tail[s])

    for s in range(n_stages):
        after(s)
    return rem + tail[workflow.stage_of]


class MarketPlacement:
    """Decorates a policy: each instance it launches buys spot or on-demand (see the module)."""

    def __init__(self, inner: ScalingPolicy, steering: SteeringConfig, rate: ReclaimRate | None = None) -> None:
        self.inner = inner
        self.config = steering
        self.name = inner.name
        # A daemon hands in the rate its earlier loops learned: a new DAG is not a new market.
        self.rate = rate if rate is not None else ReclaimRate(steering.spot_interruptions_per_hour)
        self.rate.prior_per_hour = steering.spot_interruptions_per_hour
        self._swaps: dict[str, float] = {}  # on-demand instance drained for a swap -> when it is terminated
        self._taken_over: dict[str, float] = {}  # releases an earlier loop decided, until the next plan

    def reconfigure(self, steering: SteeringConfig) -> None:
        self.config = steering
        self.rate.prior_per_hour = steering.spot_interruptions_per_hour  # what was seen stays counted
        self.inner.reconfigure(steering)

    def let_go(self, instance_id: str, at: float) -> None:
        """A release an earlier loop decided, terminated at ``at`` (see the module)."""
        self.rate.released([instance_id])
        self._taken_over[instance_id] = at
        tell_let_go(self.inner, instance_id, at)

    def plan(self, now: float, state: RunState, instances: Sequence[Instance], queue_order: np.ndarray) -> PlanResult:
        on_demand = {i.instance_id for i in instances if i.market is Market.ON_DEMAND}
        self._swaps = {i: at for i, at in (self._swaps | self._taken_over).items() if i in on_demand}
        self._taken_over.clear()
        self.rate.observe(now, instances)
        result = self.inner.plan(now, state, instances, queue_order)
        decision = result.decision
        self.rate.released(decision.release)
        if self.config.market == "spot":
            decision.spot_launches = decision.launch
            return result
        if result.prediction is None:
            return result
        work = _Work.of(state, result.prediction, self.config.interval_s)
        queue = np.asarray(queue_order, dtype=np.int64)
        if decision.launch > 0:
            decision.spot_launches = self._spot_count(work, state, instances, queue, decision.launch)
        head = queue[: self.config.max_instances * self.config.slots_per_instance]
        retried = state.lost_s > 0
        result.job_markets = {
            int(t): Market.SPOT if self._worth(work, head[i : i + 1], bool(retried[t])) else Market.ON_DEMAND
            for i, t in enumerate(head.tolist())
        }
        if isinstance(self.inner, LetsGo):
            self._swap(now, decision, state, instances, work, result.job_markets, result.prediction)
        self._shield(decision, state, instances, result.job_markets)
        result.job_required = self._required(decision, state, instances, result.job_markets, head)
        reruns = self._reruns(now, work, state, instances)
        result.job_markets.update(dict.fromkeys(reruns, Market.ON_DEMAND))
        result.job_required |= reruns
        return result

    def _reruns(self, now: float, work: _Work, state: RunState, instances: Sequence[Instance]) -> set[int]:
        """Tasks running on spot whose rerun, should a reclaim cut them short, must wait for on-demand.

        Condor reruns a reclaimed task at the next negotiation, before this
        policy sees it queued: its market is set while it runs. The rerun is
        judged as a retried task whose work is the whole task (what has run,
        plus what is predicted to remain).
        """
        spot = {i.instance_id for i in instances if i.market is Market.SPOT}
        config, rate = self.config, self.rate.per_second
        chosen = set()
        for task, host in state.host.items():
            if host not in spot or not np.isfinite(state.start_time[task]):
                continue
            left = float(work.remaining[task])
            d = max(now - float(state.start_time[task]) + (left if math.isfinite(left) else 0.0), 1.0)
            if not spot_worth(d, rate, config.spot_price_ratio, True, self._late_weight(d)):
                chosen.add(task)
        return chosen

    def _required(
        self,
        decision: SteeringDecision,
        state: RunState,
        instances: Sequence[Instance],
        markets: dict[int, Market],
        head: np.ndarray,
    ) -> set[int]:
        """The queued tasks that must wait for an on-demand slot: as many as such slots are free or coming.

        A Rank lets a long task start on a free spot slot rather than wait a
        boot lag for the on-demand one the shield launched for it. The first
        queued tasks that rank on-demand require it, up to the on-demand slots
        free, booting or launched by this decision: never more, so no job waits
        for capacity that is not coming.
        """
        slots = self.config.slots_per_instance
        leaving = set(decision.release) | self._swaps.keys()
        od = {i.instance_id: i.slots for i in instances if i.market is Market.ON_DEMAND}
        od = {instance_id: n for instance_id, n in od.items() if instance_id not in leaving}
        od_busy = sum(1 for host in state.host.values() if host in od)
        room = sum(od.values()) - od_busy + (decision.launch - decision.spot_launches) * slots
        queued = state.status == TaskStatus.IDLE
        wanting = [t for t in head.tolist() if markets.get(t) is Market.ON_DEMAND and queued[t]]
        return set(wanting[: max(room, 0)])

    def _shield(
        self, decision: SteeringDecision, state: RunState, instances: Sequence[Instance], markets: dict[int, Market]
    ) -> None:
        """Launch on-demand capacity for queued work that ranks on-demand first and has no such slot to go to.

        A Rank is a preference: a job whose market has no free slot takes
        any, and long critical work or a reclaimed task's retry would start on
        spot again. One on-demand instance per ``slots_per_instance`` such tasks
        beyond the free on-demand slots, booting ones counted, within
        ``max_instances``.
        """
        config = self.config
        od = {
            i.instance_id: i.slots
            for i in instances
            if i.market is Market.ON_DEMAND and i.instance_id not in self._swaps
        }
        od_busy = sum(1 for host in state.host.values() if host in od)
        queued = state.status == TaskStatus.IDLE
        wanting = sum(1 for t, m in markets.items() if m is Market.ON_DEMAND and queued[t])
        launching = decision.launch - decision.spot_launches
        short = wanting - (sum(od.values()) - od_busy) - launching * config.slots_per_instance
        if short <= 0:
            return
        room = config.max_instances - len(instances) - decision.launch + len(set(decision.release) - self._swaps.keys())
        extra = min(math.ceil(short / config.slots_per_instance), max(room, 0))
        if extra > 0:
            decision.launch += extra
            decision.target += extra
            decision.rule += f"; {extra} on-demand for work that a reclaim would set back"

    def _swap(
        self,
        now: float,
        decision: SteeringDecision,
        state: RunState,
        instances: Sequence[Instance],
        work: _Work,
        markets: dict[int, Market],
        prediction: Prediction,
    ) -> None:
        """Let on-demand instances no shielded work needs go, a spot instance launched in the place of each.

        The swaps under way are renewed first: a drained instance still running
        work has its termination put off, one found idle is terminated at its
        unit's end. No new swap while a task queued or still to come is judged
        on-demand; each on-demand instance is then judged by ``_swap_worth``.
        """
        config = self.config
        live = {i.instance_id: i for i in instances}
        hosted: dict[str, list[int]] = defaultdict(list)
        for task, host in state.host.items():
            hosted[host].append(task)
        for instance_id in sorted(self._swaps):
            self._drain(now, decision, live[instance_id], hosted[instance_id], prediction)
        queued = state.status == TaskStatus.IDLE
        if any(m is Market.ON_DEMAND and queued[t] for t, m in markets.items()):
            return
        if self._on_demand_ahead(work, state):
            return
        waiting = bool(queued.any())
        going = set(decision.release)
        room = config.max_instances - (len(instances) - len(going - self._swaps.keys())) - decision.launch
        candidates = [
            i
            for i in instances
            if i.market is Market.ON_DEMAND and i.state is CloudState.RUNNING and i.instance_id not in going
        ]
        for i in sorted(candidates, key=lambda i: (i.launch_time, i.instance_id)):
            if room <= 0:
                return
            tasks = hosted[i.instance_id]
            if not self._swap_worth(now, i, tasks, state, work, prediction):
                continue
            self._drain(now, decision, i, tasks, prediction)
            decision.rule += f"; swap: {i.instance_id} (on-demand) let go"
            if tasks and not waiting:
                decision.target -= 1
                continue  # its capacity is not wanted now: the policy launches when it is
            decision.launch += 1
            decision.spot_launches += 1
            room -= 1
            decision.rule += " for a spot instance"

    def _on_demand_ahead(self, work: _Work, state: RunState) -> bool:
        """Is a task not yet started judged on-demand (``_worth``'s rule, each task on its own)?

        ``spot_worth`` over every such task at once: a wide workflow has thousands, judged at every decision.
        """
        config = self.config
        ahead = ((state.status == TaskStatus.WAITING) | (state.status == TaskStatus.IDLE)) & state.workflow.on_pool
        if not ahead.any():
            return False
        remaining = work.remaining[ahead]
        lost = work.lost[ahead]
        d = np.maximum(np.maximum(np.where(np.isfinite(remaining), remaining, work.typical), lost), 1.0)
        critical = (lost > 0) | (work.paths[ahead] >= CRITICAL_SHARE * work.longest)
        worth = spot_worth_each(d, self.rate.per_second, config.spot_price_ratio, critical, self._late_weight(d))
        return not bool(worth.all())

    def _swap_worth(
        self, now: float, instance: Instance, tasks: list[int], state: RunState, work: _Work, prediction: Prediction
    ) -> bool:
        """May ``instance`` (on-demand, running ``tasks``) be swapped for spot now, and does it pay?"""
        config = self.config
        if config.billing.time_to_next_charge(instance.launch_time, now) > config.interval_s:
            return False  # paid beyond the next decision: nothing to save before then
        retried = state.lost_s > 0
        if any(not self._worth(work, np.array([t]), bool(retried[t])) for t in tasks):
            return False  # shielded work runs there
        p90 = prediction.p90_remaining()
        busy = 0.0
        for t in tasks:  # an overdue task, or one predicted from a prior only, is never counted on to end
            if int(prediction.policy[t]) not in MEASURED or now - state.start_time[t] > prediction.occupancy_s[t]:
                return False
            busy = max(busy, float(p90[t]))
        ratio = config.spot_price_ratio
        saved = (1.0 - ratio) * (work.longest - busy)
        return saved > ratio * busy + SWAP_MIN_LAGS * config.interval_s

    def _drain(
        self, now: float, decision: SteeringDecision, instance: Instance, tasks: list[int], prediction: Prediction
    ) -> None:
        """Release a swapped instance: terminated at its unit's end when idle, never while a task runs there.

        While a task runs there, the termination is set ``SWAP_HOLD_INTERVALS``
        intervals past the tasks' predicted end (90th percentile), and set
        again at every decision: it always lies at least that long after the
        latest decision, so a decision finds the instance idle before then.
        """
        config = self.config
        if tasks:
            p90 = prediction.p90_remaining()
            left = np.nan_to_num(p90[np.asarray(tasks)], nan=0.0, posinf=0.0).clip(min=0.0)
            at = now + float(left.max()) + SWAP_HOLD_INTERVALS * config.interval_s
        else:
            to_charge = config.billing.time_to_next_charge(instance.launch_time, now)
            at = release_time(now, to_charge, config.release_guard_s)
        if self._swaps.get(instance.instance_id) == at:
            return
        self._swaps[instance.instance_id] = at
        if instance.instance_id not in decision.release:
            decision.release.append(instance.instance_id)
        decision.release_at[instance.instance_id] = at
        assert isinstance(self.inner, LetsGo)
        self.inner.let_go(instance.instance_id, at)

    def _spot_count(
        self, work: _Work, state: RunState, instances: Sequence[Instance], queue: np.ndarray, launch: int
    ) -> int:
        """How many of ``launch`` new instances buy spot: each judged by the tasks it would take."""
        free = sum(i.slots for i in instances) - int(np.count_nonzero(state.status == TaskStatus.RUNNING))
        carried = queue[max(free, 0) :]
        slots = self.config.slots_per_instance
        retried = state.lost_s > 0
        return sum(
            self._worth(work, tasks, bool(retried[tasks].any()))
            for tasks in (carried[j * slots : (j + 1) * slots] for j in range(launch))
        )

    def _worth(self, work: _Work, tasks: np.ndarray, retried: bool = False) -> bool:
        """Is spot worth it for capacity that would run ``tasks`` (none known: a typical task)?

        Capacity for a task an eviction already restarted (``retried``) is
        judged as for critical work: the task is late already, and a second
        reclaim of the same work pushes the workflow's end back where a
        sibling's first one would not.
        """
        config = self.config
        known = work.remaining[tasks][np.isfinite(work.remaining[tasks])]
        d = max(float(known.max()) if known.size else work.typical, 1.0)
        if retried:  # a rerun takes at least as long as the attempt a reclaim cut short
            d = max(d, float(work.lost[tasks].max()))
        critical = retried or (bool(tasks.size) and float(work.paths[tasks].max()) >= CRITICAL_SHARE * work.longest)
        return spot_worth(d, self.rate.per_second, config.spot_price_ratio, critical, self._late_weight(d))

    def _late_weight(self, d: _D) -> _D:
        """What a reclaim's delay to critical work of length ``d`` costs, per unit of on-demand price: the full
        pool waiting half the work and a relaunch interval, spread over the work."""
        config = self.config
        return config.max_instances * (d / 2 + config.interval_s) / d


@dataclass(frozen=True)
class _Work:
    """What is left, as placement reads it: remaining times, critical paths, a typical task."""

    remaining: np.ndarray
    lost: np.ndarray  # per task, the work evictions threw away
    paths: np.ndarray
    longest: float
    typical: float

    @classmethod
    def of(cls, state: RunState, prediction: Prediction, default_s: float) -> _Work:
        remaining = prediction.mean_remaining()
        unfinished = state.status != TaskStatus.DONE
        paths = critical_paths(state.workflow, remaining, unfinished)
        longest = float(paths.max()) if paths.size else 0.0
        return cls(remaining, state.lost_s, paths, longest, _typical(remaining, unfinished, default_s))


def _typical(remaining: np.ndarray, unfinished: np.ndarray, default: float) -> float:
    """What an instance launched for work not yet queued is likely to run: the median remaining task."""
    known = remaining[unfinished & np.isfinite(remaining)]
    return float(np.median(known)) if known.size else default
