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
  ``slots_per_instance`` set to what fits on the type it would launch, so the
  wavefront projection and the pool sizing count tasks that can run;
* with several instance types (``steering.instance_types``), launches the one
  cheapest per task that fits (price / fitting tasks; the first listed on a
  tie). The policies release the dearest instances first (``dearness``).

The work is one gather over the running and queued tasks: linear in the
frontier, like the rest of a decision.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import replace

import numpy as np

from wire_daemon.core.config import InstanceType, SteeringConfig
from wire_daemon.core.instances import Instance
from wire_daemon.core.run_state import RunState
from wire_daemon.ports.memory import TaskShapes
from wire_daemon.ports.policy import PlanResult, ScalingPolicy


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

    ``instance.slots`` is what fits on it (``ShapedPolicy`` sets it). Rounded so
    that proportional prices tie exactly and the policies' own order decides.
    """
    kind = steering.instance_type(instance.instance_type)
    if kind is None:
        return 0.0
    return round(kind.price / max(instance.slots, 1), 9)


def cheapest_type(types: Sequence[InstanceType], request_mib: float) -> tuple[InstanceType, int]:
    """The type with the lowest price per fitting task (the first listed on a tie), and what fits on it."""
    best, best_fit = types[0], fitting(types[0].cores, types[0].memory_mib, request_mib)
    for kind in types[1:]:
        fit = fitting(kind.cores, kind.memory_mib, request_mib)
        if kind.price * best_fit < best.price * fit * (1 - 1e-9):
            best, best_fit = kind, fit
    return best, best_fit


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

    def reconfigure(self, steering: SteeringConfig) -> None:
        self.steering = steering  # handed to the wrapped policy, with the fitted slot count, at each plan

    def plan(self, now: float, state: RunState, instances: Sequence[Instance], queue_order: np.ndarray) -> PlanResult:
        request = typical_request_mib(state, queue_order, self.shapes)
        self.last_request_mib = request
        steering = self.steering
        launch_type = ""
        if steering.instance_types:
            kind, per_launch = cheapest_type(steering.instance_types, request)
            launch_type = kind.name
        else:
            per_launch = fitting(steering.slots_per_instance, self.instance_memory_mib, request)
        fitted = [replace(i, slots=self._fit(i, request)) for i in instances]
        self.inner.reconfigure(replace(steering, slots_per_instance=per_launch))
        result = self.inner.plan(now, state, fitted, queue_order)
        result.decision.launch_type = launch_type
        if launch_type and result.decision.launch:
            result.decision.rule += f"; launch {launch_type} ({per_launch} tasks fit)"
        return result

    def _fit(self, instance: Instance, request_mib: float) -> int:
        kind = self.steering.instance_type(instance.instance_type)
        if kind is not None:
            return fitting(kind.cores, kind.memory_mib, request_mib)
        return fitting(instance.slots, self.instance_memory_mib, request_mib)
