"""The paper's baseline policies (§IV-C), beside WIRE on the same world.

* ``full-site``: a static pool of ``max_instances``.
* ``pure-reactive``: enough instances for every idle and running task, now;
  it releases only instances with no running task (it never kills work),
  at once, ignoring charging units.
* ``reactive-conserving``: the steering policy (Algorithms 2 and 3) fed a
  reactive load: every idle and running task, each assumed to occupy its slot
  for one more interval, the only horizon a policy without predictions can
  see. Restart costs use the observed elapsed times of the running tasks,
  assumed still running when the release would take effect.

PFA, the other peer, has its own module (``pfa``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from wire_daemon.core.config import SteeringConfig
from wire_daemon.core.instances import Instance
from wire_daemon.core.run_state import RunState, TaskStatus
from wire_daemon.plan.pool_view import instance_views, release_moments
from wire_daemon.plan.steering import steer
from wire_daemon.ports.policy import PlanResult, SteeringDecision, UpcomingLoad


class FullSitePolicy:
    """A static pool of the maximum size."""

    name = "full-site"

    def __init__(self, config: SteeringConfig) -> None:
        self.config = config

    def reconfigure(self, steering: SteeringConfig) -> None:
        self.config = steering

    def plan(self, now: float, state: RunState, instances: Sequence[Instance], queue_order: np.ndarray) -> PlanResult:
        missing = self.config.max_instances - len(instances)
        decision = SteeringDecision(
            self.config.max_instances, self.config.max_instances, launch=max(missing, 0), rule="static pool"
        )
        return PlanResult(decision)


class PureReactivePolicy:
    """Instances for every idle and running task right now."""

    name = "pure-reactive"

    def __init__(self, config: SteeringConfig) -> None:
        self.config = config

    def reconfigure(self, steering: SteeringConfig) -> None:
        self.config = steering

    def plan(self, now: float, state: RunState, instances: Sequence[Instance], queue_order: np.ndarray) -> PlanResult:
        active = int(np.count_nonzero((state.status == TaskStatus.IDLE) | (state.status == TaskStatus.RUNNING)))
        wanted = math.ceil(active / self.config.slots_per_instance)
        target = min(max(wanted, self.config.min_instances), self.config.max_instances)
        if target >= len(instances):
            return PlanResult(
                SteeringDecision(target, wanted, launch=target - len(instances), rule="reactive: idle+running tasks")
            )
        busy = set(state.host.values())
        idle = [i.instance_id for i in instances if i.instance_id not in busy]
        release = idle[: len(instances) - target]
        decision = SteeringDecision(
            len(instances) - len(release),
            wanted,
            release=release,
            release_at={i: now for i in release},
            rule="reactive: release idle instances",
        )
        return PlanResult(decision)


class ReactiveConservingPolicy:
    """The steering policy on a load of idle+running tasks, one interval each."""

    name = "reactive-conserving"

    def __init__(self, config: SteeringConfig) -> None:
        self.config = config

    def reconfigure(self, steering: SteeringConfig) -> None:
        self.config = steering

    def plan(self, now: float, state: RunState, instances: Sequence[Instance], queue_order: np.ndarray) -> PlanResult:
        running = state.running()
        tasks = np.concatenate([running, queue_order]).astype(np.int64)
        load = np.full(tasks.size, self.config.interval_s)
        moments = release_moments(instances, now, self.config)
        restart: dict[str, float] = {}
        for task in running:  # assumed still running when the release takes effect
            host = state.host.get(int(task))
            if host in moments:
                restart[host] = max(restart.get(host, 0.0), moments[host] - float(state.start_time[task]))
        views = instance_views(instances, now, restart, moments, self.config)
        upcoming = UpcomingLoad(tasks, load, np.zeros(tasks.size), restart)
        return PlanResult(steer(load.tolist(), views, self.config), upcoming)
