"""PFA: the Performance-Feedback Autoscaler, as a baseline (PFA paper §3.3).

Every interval PFA

1. measures the task throughput of the pool: tasks completed per slot over the
   interval just ended, smoothed over intervals with a moving average (MA) or
   an exponentially weighted moving average (EWMA);
2. turns the budget into a supply: the instances the budget pays for;
3. estimates the demand with the token-based approximator (TBA): tokens walk
   the DAG of unfinished tasks one "wave" (future eligible set) at a time, for
   as many waves as a slot completes tasks per interval; the widest wave is
   the level of parallelism (LoP), the number of tasks visited is the work;
4. scales the supply down to the demand;
5. launches what is missing;
6. releases the idle instances in excess, longest idle first, and only those
   whose paid unit is about to end.

How the paper's multi-user, multi-type model maps onto one workflow on one
instance type (docs/decisions.md, "PFA baseline", has the reasons):

* A PFA *resource* runs one task at a time: here it is a slot. Throughput is
  per slot, the demand is in slots, and it becomes ceil(slots / l) instances.
* With a single instance type the resource profile (§3.3.1, §3.3.3) is one
  type with ratio 1: the supply is the budget's instance count, and "scale
  down or inflate" is min(supply, demand).
* The demand is min(LoP, ceil(work / throughput)): the slots that clear the
  visited waves within one interval at the observed rate, never more than
  the widest wave can use. Before any task has completed there is no
  throughput: the lookup depth is one wave (the eligible and running tasks)
  and the demand is its size, i.e. PFA starts out purely reactive.
"""

from __future__ import annotations

import math
from collections import defaultdict, deque
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Annotated

import numpy as np
from pydantic import Field

from wire_daemon.core.billing import Billing
from wire_daemon.core.config import SteeringConfig
from wire_daemon.core.instances import CloudState, Instance
from wire_daemon.core.run_state import RunState, TaskStatus
from wire_daemon.core.sections import AtLeastOne, AtLeastZero, one_of, section
from wire_daemon.core.workflow import Workflow
from wire_daemon.plan.steering import release_time
from wire_daemon.ports.policy import PlanResult, SteeringDecision


@section("pfa")
class PFAConfig:
    """The PFA baseline's options, the config's ``pfa`` section (performance feedback + token-based parallelism)."""

    # How the per-slot task throughput is smoothed over intervals: "ewma" or "ma".
    smoothing: Annotated[str, one_of("ewma", "ma")] = "ewma"
    # MA: mean over this many of the latest intervals that completed a task.
    ma_window: Annotated[int, AtLeastOne] = 5
    # EWMA: weight of the past, s = alpha * s_prev + (1 - alpha) * x (the PFA
    # paper's convention: alpha near 0 follows the last interval).
    ewma_alpha: Annotated[float, Field(ge=0.0, lt=1.0)] = 0.5
    # Charging units the pool may cost per interval (an instance costs
    # interval / u of them); None: no cap beyond steering.max_instances.
    budget_units_per_interval: Annotated[float | None, AtLeastZero] = None
    # An idle instance is "near the end of its billing period" when its unit
    # ends within this many seconds; None: within one interval.
    release_near_end_s: Annotated[float | None, AtLeastZero] = None


# --- throughput feedback -------------------------------------------------------


class MovingAverage:
    """Mean of the latest ``window`` observations."""

    def __init__(self, window: int) -> None:
        self.history: deque[float] = deque(maxlen=window)

    def update(self, x: float) -> None:
        self.history.append(x)

    @property
    def value(self) -> float | None:
        return sum(self.history) / len(self.history) if self.history else None


class Ewma:
    """s_k = alpha * s_{k-1} + (1 - alpha) * x_k, seeded with the first observation."""

    def __init__(self, alpha: float) -> None:
        self.alpha = alpha
        self._value: float | None = None

    def update(self, x: float) -> None:
        self._value = x if self._value is None else self.alpha * self._value + (1.0 - self.alpha) * x

    @property
    def value(self) -> float | None:
        return self._value


class ThroughputFeedback:
    """Tasks completed per slot per interval, smoothed over the intervals that completed any."""

    def __init__(self, config: PFAConfig) -> None:
        self.smoother = MovingAverage(config.ma_window) if config.smoothing == "ma" else Ewma(config.ewma_alpha)

    def observe(self, completed: int, slots: float) -> None:
        # An interval with no completion is skipped (the paper's rule for MA, applied
        # to EWMA too): it says "nothing has finished yet", not "slots do no work".
        if completed > 0 and slots > 0:
            self.smoother.update(completed / slots)

    @property
    def per_slot(self) -> float | None:
        return self.smoother.value


# --- token-based approximator --------------------------------------------------


@dataclass(frozen=True)
class TokenEstimate:
    waves: tuple[int, ...]  # pool tasks in each visited wave, wave 0 = eligible now

    @property
    def lop(self) -> int:
        """The level of parallelism: the widest visited wave."""
        return max(self.waves, default=0)

    @property
    def tasks(self) -> int:
        """Token movements: the pool tasks in the visited waves."""
        return sum(self.waves)


class TokenApproximator:
    """Propagate tokens through the unfinished part of the DAG, one wave per step.

    Wave 0 holds every unfinished task whose parents have all finished (idle,
    running, held, or about to be submitted). Wave k+1 holds the tasks all of
    whose unfinished parents hold a token. Tasks that take no pool slot (local
    universe) carry tokens through the DAG but are not counted.
    """

    def __init__(self, workflow: Workflow) -> None:
        self.wf = workflow
        # the child end of every parent edge, in parent_idx order (built once: O(E))
        self.edge_child = np.repeat(np.arange(workflow.n_tasks), workflow.n_parents())

    def estimate(self, done: np.ndarray, depth: int) -> TokenEstimate:
        unfinished = ~done
        pending = np.bincount(self.edge_child, weights=unfinished[self.wf.parent_idx], minlength=self.wf.n_tasks)
        pending = pending.astype(np.int64)
        wave = np.flatnonzero(unfinished & (pending == 0))
        sizes: list[int] = []
        while wave.size and len(sizes) < depth:
            sizes.append(int(np.count_nonzero(self.wf.on_pool[wave])))
            children = self._children(wave)
            np.subtract.at(pending, children, 1)
            wave = np.unique(children[pending[children] == 0])
        return TokenEstimate(tuple(sizes))

    def _children(self, tasks: np.ndarray) -> np.ndarray:
        starts = self.wf.child_ptr[tasks]
        lengths = self.wf.child_ptr[tasks + 1] - starts
        before = np.cumsum(lengths) - lengths
        return self.wf.child_idx[np.repeat(starts - before, lengths) + np.arange(int(lengths.sum()))]


def lookup_depth(per_slot: float | None) -> int:
    """Waves that finish within an interval: a slot completes ``per_slot`` tasks per interval."""
    return 1 if per_slot is None else max(1, math.ceil(per_slot - 1e-9))


def slot_demand(estimate: TokenEstimate, per_slot: float | None) -> int:
    """Slots that clear the visited waves within one interval, at most the LoP."""
    if per_slot is None:
        return estimate.lop
    return min(estimate.lop, math.ceil(estimate.tasks / per_slot - 1e-9))


def affordable_instances(budget_units: float | None, interval_s: float, billing: Billing) -> int | None:
    """Instances whose cost over one interval fits the budget (None: no budget).

    An instance costs interval / u charging units per interval: its unit's price
    spread over the intervals the unit lasts (with u shorter than the interval,
    several units per interval).
    """
    if budget_units is None:
        return None
    return math.floor(budget_units / billing.units_per(interval_s) + 1e-9)


# --- deallocation --------------------------------------------------------------


class IdleTracker:
    """Since when each booted instance has had no running task.

    The policy sees the pool once per interval. An instance busy at the last
    look and idle now became idle when the last of the tasks seen on it
    finished; an instance never seen busy is idle since the first look that
    found it idle. Tasks that start and end between two looks are not seen.
    """

    def __init__(self) -> None:
        self.idle_since: dict[str, float] = {}
        self._tasks_on: dict[str, list[int]] = {}

    def update(self, now: float, state: RunState, instances: Sequence[Instance]) -> dict[str, float]:
        tasks_on: dict[str, list[int]] = defaultdict(list)
        for task, host in state.host.items():
            tasks_on[host].append(task)
        idle_since: dict[str, float] = {}
        for inst in instances:
            if inst.state != CloudState.RUNNING or inst.instance_id in tasks_on:
                continue  # booting, or busy
            known = self.idle_since.get(inst.instance_id)
            idle_since[inst.instance_id] = (
                known if known is not None else self._became_idle(inst.instance_id, state, now)
            )
        self.idle_since = idle_since
        self._tasks_on = dict(tasks_on)
        return idle_since

    def _became_idle(self, instance_id: str, state: RunState, now: float) -> float:
        ends = [state.finish_time[t] for t in self._tasks_on.get(instance_id, ()) if state.status[t] == TaskStatus.DONE]
        return float(max(ends)) if ends else now


def choose_idle_releases(
    instances: Sequence[Instance],
    idle_since: dict[str, float],
    excess: int,
    now: float,
    billing: Billing,
    near_end_s: float,
) -> list[str]:
    """At most ``excess`` idle instances whose unit ends within ``near_end_s``: longest idle first.

    Ties (idle since the same look) go to the instance whose unit ends first.
    """
    if excess <= 0:
        return []
    near = [
        (idle_since[i.instance_id], billing.time_to_next_charge(i.launch_time, now), i.instance_id)
        for i in instances
        if i.instance_id in idle_since and billing.time_to_next_charge(i.launch_time, now) <= near_end_s
    ]
    return [instance_id for _, _, instance_id in sorted(near)[:excess]]


# --- the policy ----------------------------------------------------------------


class PFAPolicy:
    """Throughput feedback + token-based parallelism, within a budget per interval."""

    name = "pfa"

    def __init__(self, workflow: Workflow, steering: SteeringConfig, config: PFAConfig) -> None:
        self.wf = workflow
        self.steering = steering
        self.config = config
        self.tokens = TokenApproximator(workflow)
        self.feedback = ThroughputFeedback(config)
        self.idle = IdleTracker()
        self._completed_seen = 0
        self._slots_then: float | None = None  # booted slots at the previous look
        self._draining: dict[str, float] = {}  # released instance -> termination time

    def reconfigure(self, steering: SteeringConfig) -> None:
        self.steering = steering

    def plan(self, now: float, state: RunState, instances: Sequence[Instance], queue_order: np.ndarray) -> PlanResult:
        self._observe_throughput(state, instances)
        per_slot = self.feedback.per_slot
        estimate = self.tokens.estimate(state.status == TaskStatus.DONE, lookup_depth(per_slot))
        wanted = math.ceil(slot_demand(estimate, per_slot) / self.steering.slots_per_instance)
        target = self._bounded(wanted)
        self._draining = {i: t for i, t in self._draining.items() if t >= now}
        live = [i for i in instances if i.instance_id not in self._draining]  # released ones are on their way out
        idle_since = self.idle.update(now, state, live)
        why = self._explain(per_slot, estimate)
        if target > len(live):
            return PlanResult(SteeringDecision(target, wanted, launch=target - len(live), rule=f"pfa grow: {why}"))
        release = choose_idle_releases(
            live, idle_since, len(live) - target, now, self.steering.billing, self._near_end_s()
        )
        if not release:
            return PlanResult(SteeringDecision(len(live), wanted, rule=f"pfa hold: {why}"))
        when = {i.instance_id: self._release_at(i, now) for i in live if i.instance_id in release}
        self._draining.update(when)
        decision = SteeringDecision(
            len(live) - len(release), wanted, release=release, release_at=when, rule=f"pfa shrink: {why}"
        )
        return PlanResult(decision)

    def _observe_throughput(self, state: RunState, instances: Sequence[Instance]) -> None:
        """Feed the completions of the interval just ended, per slot the pool had."""
        new = state.completion_order[self._completed_seen :]
        self._completed_seen += len(new)
        completed = int(np.count_nonzero(self.wf.on_pool[new])) if new else 0
        slots_now = float(sum(i.slots for i in instances if i.state == CloudState.RUNNING))
        if self._slots_then is not None:
            # the pool changes inside an interval (boots, releases): average its two ends
            self.feedback.observe(completed, (self._slots_then + slots_now) / 2.0)
        self._slots_then = slots_now

    def _bounded(self, wanted: int) -> int:
        target = min(wanted, self.steering.max_instances)
        affordable = affordable_instances(
            self.config.budget_units_per_interval, self.steering.interval_s, self.steering.billing
        )
        if affordable is not None:
            target = min(target, affordable)
        # the minimal pool wins over the budget: a workflow cannot progress on no instance
        return max(target, self.steering.min_instances)

    def _near_end_s(self) -> float:
        near = self.config.release_near_end_s
        return self.steering.interval_s if near is None else near

    def _release_at(self, instance: Instance, now: float) -> float:
        """Terminate just before the paid unit ends, as every policy here does (steering.release_guard_s)."""
        left = self.steering.billing.time_to_next_charge(instance.launch_time, now)
        return release_time(now, left, self.steering.release_guard_s)

    @staticmethod
    def _explain(per_slot: float | None, estimate: TokenEstimate) -> str:
        rate = "no throughput yet" if per_slot is None else f"{per_slot:.2f} tasks/slot/interval"
        return f"{rate}, {len(estimate.waves)} wave(s), LoP {estimate.lop}, {estimate.tasks} tasks"
