"""Task and instance shapes in the plan: how many tasks fit, and which type to launch.

With partitionable slots a job needs a core and its ``request_memory``, so an
instance of ``c`` cores and ``M`` MiB runs ``min(c, floor(M / r))`` jobs of
request ``r`` at once, not a fixed ``steering.slots_per_instance``.
``ShapedPolicy`` wraps any policy and, once per decision:

* takes the typical request ``r`` of the upcoming load: the mean request of
  the running and queued tasks (the tasks the next interval will pack; the
  mean because an instance holds jobs until their requests sum to its
  memory). Their requests are read from ``TaskShapes``: the job's current
  request, which the rightsizer has already lowered to its prediction when
  right-sizing is on;
* gives the policy every instance with its slots set to what fits on it, and
  ``slots_per_instance`` set to what fits on the pool's own type (the one
  configured, or the first of ``steering.instance_types``), so the wavefront
  projection and the pool sizing count tasks that can run, and the full pool
  a target is set against is ``max_instances`` of that type whatever a
  decision launches;
* with several instance types, turns the policy's launch (so many
  instances of the pool's own type, that is so many slots) into the type
  cheapest in money per slot-second the predicted work can use
  (``choose_launch``), as Karpenter and cluster-autoscaler's price expander
  choose, and as many of it as give those slots. The policies release the
  dearest instances first (``dearness``).

The work is one gather over the running and queued tasks and the children of
the tasks about to end: linear in the frontier, like the rest of a decision.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

import numpy as np

from wire_daemon.core.billing import Billing
from wire_daemon.core.config import InstanceType, SteeringConfig
from wire_daemon.core.instances import CloudState, Instance
from wire_daemon.core.pricing import SECONDS_PER_HOUR
from wire_daemon.core.run_state import WAITING, RunState
from wire_daemon.ports.memory import TaskShapes
from wire_daemon.ports.policy import PlanResult, ScalingPolicy
from wire_daemon.ports.prediction import (
    POLICY_GRADIENT,
    POLICY_ORACLE,
    POLICY_SAME_INPUT,
    POLICY_STAGE_MEDIAN,
    Prediction,
)


def fitting(cores: int, memory_mib: float, request_mib: float) -> int:
    """Jobs of ``request_mib`` one instance runs at once: its cores, fewer when memory runs out first.

    At least one: a job larger than the instance is refused or held by Condor,
    not a reason to plan an empty pool. Memory 0 or an unknown request: cores.
    """
    if memory_mib <= 0 or not request_mib > 0:
        return cores
    return max(1, min(cores, int(memory_mib // request_mib)))


def typical_request_mib(state: RunState, queue_order: np.ndarray, shapes: TaskShapes | None) -> float:
    """The mean request of the running and queued tasks; NaN when none is known."""
    if shapes is None:
        return math.nan
    active = np.concatenate([state.running(), np.asarray(queue_order, dtype=np.int64)])
    if active.size == 0:
        return math.nan
    requests = shapes.task_request_mib(active)
    known = requests[np.isfinite(requests) & (requests > 0)]
    return float(known.mean()) if known.size else math.nan


def dearness(steering: SteeringConfig, instance: Instance) -> float:
    """Price per task that fits, for choosing which instance to let go first; 0 without listed types.

    ``instance.slots`` is what fits on it (``ShapedPolicy`` sets it). Rounded to nine significant digits so
    that proportional prices tie exactly and the policies' own order decides.
    """
    kind = steering.instance_type(instance.instance_type)
    if kind is None:
        return 0.0
    return float(f"{kind.price / max(instance.slots, 1):.9g}")


@dataclass(frozen=True)
class Work:
    """The predicted work the next launch would carry: its slot-seconds, its mean and its longest task."""

    slot_s: float = 0.0
    mean_s: float = 0.0
    longest_s: float = 0.0


@dataclass(frozen=True)
class Launch:
    """``count`` instances of ``kind``, ``fit`` tasks fitting on each, and the money per slot-second used."""

    kind: InstanceType
    count: int
    fit: int
    per_used_slot_s: float


def launch_of(
    kind: InstanceType, fit: int, per_hour: float, slots: int, room: int, work: Work, billing: Billing
) -> Launch:
    """``slots`` slots bought as instances of ``kind`` (at most ``room``), priced per slot-second the work uses.

    The instances are held while their slots drain the work, at least as long
    as its longest task, and paid as the billing rule charges that hold (a
    whole unit, or the minimum charge). An instance ends with its last task:
    while that runs, half its other slots are idle on average, for a mean
    task, so a larger instance pays a longer tail. Of the slot-seconds paid,
    only those the work fills count: slots that ``work`` leaves idle over the
    paid time are paid for nothing. Without work to fill them the money of the
    launch decides (infinite per used slot-second, compared by
    ``choose_launch``).
    """
    count = max(1, min(math.ceil(slots / fit), room))
    capacity = count * fit
    tail = (capacity - count) * work.mean_s / 2
    hold = max((work.slot_s + tail) / capacity, work.longest_s)
    paid = billing.billed_seconds(0.0, hold)
    used = min(capacity * paid, work.slot_s)
    spent = count * per_hour * paid / SECONDS_PER_HOUR
    return Launch(kind, count, fit, spent / used if used > 0 else math.inf)


def choose_launch(
    types: Sequence[InstanceType],
    prices_per_hour: Mapping[str, float],
    request_mib: float,
    slots: int,
    room: int,
    work: Work,
    billing: Billing,
) -> Launch:
    """The cheapest way to add ``slots`` slots for ``work``: the lowest money per slot-second it uses.

    Slots fit by memory as well as cores (``fitting``). When the work is too
    small to tell (nothing predicted yet), the launch that costs least; ties go
    to the smaller type (fewer cores, then the first listed).
    """
    options = [
        launch_of(k, fitting(k.cores, k.memory_mib, request_mib), prices_per_hour[k.name], slots, room, work, billing)
        for k in types
    ]

    cheapest = min(o.per_used_slot_s for o in options)
    least = min(o.count * prices_per_hour[o.kind.name] for o in options)

    def key(o: Launch) -> tuple[float, float, int, int]:
        # Relative to the best, to nine digits: prices per slot-second are tiny numbers, and
        # proportional prices must tie exactly so that the smaller type wins.
        used = round(o.per_used_slot_s / cheapest, 9) if math.isfinite(cheapest) else 0.0
        money = round(o.count * prices_per_hour[o.kind.name] / least, 9) if least > 0 else 0.0
        return used, money, o.kind.cores, types.index(o.kind)

    return min(options, key=key)


def coming_tasks(state: RunState, remaining_s: np.ndarray, horizon_s: float) -> np.ndarray:
    """Pool tasks not yet submitted whose unfinished parents all run and are predicted to end within ``horizon_s``."""
    wf = state.workflow
    running = state.running()
    soon = running[remaining_s[running] <= horizon_s]
    if soon.size == 0:
        return np.empty(0, dtype=np.int64)
    first = wf.child_ptr[soon]
    count = wf.child_ptr[soon + 1] - first
    # The children of every task about to end, gathered from the CSR rows in one go.
    offsets = np.repeat(first - (np.cumsum(count) - count), count) + np.arange(int(count.sum()))
    children, hits = np.unique(wf.child_idx[offsets], return_counts=True)
    ready = (hits == state.unfinished_parents()[children]) & (state.status[children] == WAITING)
    return children[ready & wf.on_pool[children]].astype(np.int64)


def predicted_work(
    state: RunState, prediction: Prediction | None, queue_order: np.ndarray, horizon_s: float, share: float
) -> Work:
    """The work queued or coming within ``horizon_s``, ``share`` of it for the launch: by each task's prediction.

    Only tasks predicted from their own stage's measurements (or the oracle)
    count: a prior from other stages says little about how long a slot stays
    busy. With none, the launch is judged by its money alone.
    """
    if prediction is None:
        return Work()
    remaining = prediction.mean_remaining()
    tasks = np.concatenate([np.asarray(queue_order, dtype=np.int64), coming_tasks(state, remaining, horizon_s)])
    left = remaining[tasks]
    measured = np.isin(prediction.policy[tasks], MEASURED)
    known = left[measured & np.isfinite(left) & (left > 0)]
    if known.size == 0:
        return Work()
    return Work(float(known.sum()) * share, float(known.mean()), float(known.max()))


class ShapedPolicy:
    """A ``ScalingPolicy`` decorator: the wrapped policy plans in tasks that fit, and launches the cheapest type."""

    def __init__(
        self, inner: ScalingPolicy, steering: SteeringConfig, instance_memory_mib: float, shapes: TaskShapes | None
    ) -> None:
        self.inner = inner
        self.name = inner.name
        self.steering = steering
        self.instance_memory_mib = instance_memory_mib  # the single type's, and an unlisted instance's
        self.shapes = shapes
        self.last_request_mib = math.nan  # what the last decision packed, for tests and status
        self.last_work = Work()  # what the last type choice weighed, for tests

    def reconfigure(self, steering: SteeringConfig) -> None:
        self.steering = steering  # handed to the wrapped policy, with the fitted slot count, at each plan

    def plan(self, now: float, state: RunState, instances: Sequence[Instance], queue_order: np.ndarray) -> PlanResult:
        request = typical_request_mib(state, queue_order, self.shapes)
        self.last_request_mib = request
        steering = self.steering
        if steering.instance_types:
            own = steering.instance_types[0]
            per_launch = fitting(own.cores, own.memory_mib, request)
        else:
            per_launch = fitting(steering.slots_per_instance, self.instance_memory_mib, request)
        fitted = [replace(i, slots=self._fit(i, request)) for i in instances]
        self.inner.reconfigure(replace(steering, slots_per_instance=per_launch))
        result = self.inner.plan(now, state, fitted, queue_order)
        if steering.instance_types:
            self._choose_type(result, state, fitted, queue_order, per_launch, request)
        return result

    def _choose_type(
        self,
        result: PlanResult,
        state: RunState,
        fitted: Sequence[Instance],
        queue_order: np.ndarray,
        per_launch: int,
        request: float,
    ) -> None:
        """Buy the slots the policy's launch stands for as the type cheapest per slot-second the work uses."""
        steering, decision = self.steering, result.decision
        types = steering.instance_types
        decision.launch_type = types[0].name
        if decision.launch <= 0:
            return
        slots = decision.launch * per_launch
        if len(types) > 1:
            going = set(decision.release)
            staying = sum(i.slots for i in fitted if i.instance_id not in going and i.state in _SERVING)
            # Never past the full pool the target is set against: max_instances of the pool's own type.
            slots = min(slots, steering.max_instances * per_launch - staying)
            if slots <= 0:
                decision.target -= decision.launch
                decision.launch = decision.spot_launches = 0
                decision.rule += "; no launch: the pool holds the full pool's slots"
                return
            work = predicted_work(state, result.prediction, queue_order, steering.interval_s, slots / (slots + staying))
            self.last_work = work
            room = max(steering.max_instances - (decision.target - decision.launch), 1)
            prices = {name: offer.on_demand_per_hour for name, offer in steering.offers().items()}
            chosen = choose_launch(types, prices, request, slots, room, work, steering.billing)
            kind, count, fit = chosen.kind, chosen.count, chosen.fit
        else:
            kind, count, fit = types[0], decision.launch, per_launch
        if decision.spot_launches:  # the market layer's share of spot, kept for the converted count
            decision.spot_launches = min(count, math.ceil(decision.spot_launches * count / decision.launch))
        decision.target += count - decision.launch
        decision.launch = count
        decision.launch_type = kind.name
        decision.rule += f"; launch {kind.name} ({fit} tasks fit)"

    def _fit(self, instance: Instance, request_mib: float) -> int:
        kind = self.steering.instance_type(instance.instance_type)
        if kind is not None:
            return fitting(kind.cores, kind.memory_mib, request_mib)
        return fitting(instance.slots, self.instance_memory_mib, request_mib)


_SERVING = (CloudState.RUNNING, CloudState.PENDING)
# Predicted from the task's own stage's measurements (WIRE's policies 3-5), or known (the oracle).
MEASURED = np.array([POLICY_STAGE_MEDIAN, POLICY_SAME_INPUT, POLICY_GRADIENT, POLICY_ORACLE])
