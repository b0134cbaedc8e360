"""Scaling policies: WIRE, its oracle, and the baselines of the paper (§IV-C).

Each policy turns what is known now into a ``PlanResult``: a steering decision
plus what it was based on (the upcoming load), for the decisions log. The
policies share the world and the loop; only the plan differs.

* ``wire``: online predictions -> wavefront projection -> Algorithms 2 and 3.
* ``oracle``: the same, fed the true remaining occupancies (the limit that
  better prediction can reach).
* ``full-site``: a static pool of ``max_instances``.
* ``pure-reactive``: enough instances for every idle and running task, now;
  it releases only instances with no running task (it never kills work),
  at once, ignoring charging units.
* ``reactive-conserving``: the steering policy (Algorithms 2 and 3) fed a
  reactive load: every idle and running task, each assumed to occupy its slot
  for one more interval, the only horizon a policy without predictions can
  see. Restart costs use the observed elapsed times of the running tasks,
  assumed still running when the release would take effect.
* ``pfa``: the Performance-Feedback Autoscaler (``plan/pfa.py``): observed
  task throughput and a token-based parallelism estimate, within a budget.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable, Protocol, Sequence

import numpy as np

from wire_daemon.analyze.predictor import OnlinePredictor, OraclePredictor, Prediction, Predictor
from wire_daemon.core.config import PFAConfig, PredictionConfig, SteeringConfig
from wire_daemon.core.run_state import RunState, TaskStatus
from wire_daemon.plan.steering import InstanceView, SteeringDecision, release_time, steer
from wire_daemon.plan.wavefront import PoolSlots, UpcomingLoad, simulate_interval
from wire_daemon.core.instances import Instance

POLICY_NAMES = ("wire", "full-site", "pure-reactive", "reactive-conserving", "pfa", "oracle")


@dataclass
class PlanResult:
    decision: SteeringDecision
    upcoming: UpcomingLoad | None = None
    policy_counts: dict[int, int] = field(default_factory=dict)  # prediction policy -> tasks


class ScalingPolicy(Protocol):
    name: str

    def plan(self, now: float, state: RunState, instances: Sequence[Instance], queue_order: np.ndarray) -> PlanResult: ...


def time_to_next_charge(instance: Instance, now: float, charging_unit_s: float) -> float:
    """r_j: seconds until the instance's current charging unit ends (a new unit starts)."""
    used = (now - instance.launch_time) % charging_unit_s
    if used < 1e-6:  # exactly at a boundary: a release now pays no new unit
        return 0.0
    return charging_unit_s - used


def release_moments(instances: Sequence[Instance], now: float, config: SteeringConfig) -> dict[str, float]:
    """When each instance would be terminated if it were released now."""
    return {
        i.instance_id: release_time(now, time_to_next_charge(i, now, config.charging_unit_s), config.release_guard_s)
        for i in instances
    }


def instance_views(
    instances: Sequence[Instance],
    now: float,
    restart_cost_s: dict[str, float],
    moments: dict[str, float],
    config: SteeringConfig,
) -> list[InstanceView]:
    return [
        InstanceView(
            i.instance_id,
            time_to_next_charge(i, now, config.charging_unit_s),
            restart_cost_s.get(i.instance_id, 0.0),
            moments[i.instance_id],
            age_s=now - i.launch_time,
        )
        for i in instances
    ]


class WirePolicy:
    """WIRE: predict, project the wavefront, steer."""

    def __init__(self, predictor: Predictor, config: SteeringConfig, name: str = "wire") -> None:
        self.predictor = predictor
        self.config = config
        self.name = name
        self.last_prediction: Prediction | None = None

    def plan(self, now: float, state: RunState, instances: Sequence[Instance], queue_order: np.ndarray) -> PlanResult:
        self.predictor.update(state, now)
        prediction = self.predictor.predict(state, now)
        self.last_prediction = prediction
        pool = [PoolSlots(i.instance_id, i.slots) for i in instances if i.state == "running"]
        moments = release_moments(instances, now, self.config)
        upcoming = simulate_interval(
            state,
            prediction.remaining_s,
            prediction.occupancy_s,
            pool,
            now,
            self.config.interval_s,
            queue_order,
            moments,
            self.config.count_lost_work,
        )
        views = instance_views(instances, now, upcoming.restart_cost_s, moments, self.config)
        decision = steer(upcoming.remaining_s.tolist(), views, self.config, work_left=state.n_done() < state.workflow.n_tasks)
        # bincount, not np.unique: no sort of a million-entry array (same keys, ascending).
        per_policy = np.bincount(prediction.policy).tolist()
        counts = {p: c for p, c in enumerate(per_policy) if p > 0 and c > 0}
        return PlanResult(decision, upcoming, counts)


class FullSitePolicy:
    """A static pool of the maximum size."""

    name = "full-site"

    def __init__(self, config: SteeringConfig) -> None:
        self.config = config

    def plan(self, now: float, state: RunState, instances: Sequence[Instance], queue_order: np.ndarray) -> PlanResult:
        missing = self.config.max_instances - len(instances)
        decision = SteeringDecision(self.config.max_instances, self.config.max_instances, launch=max(missing, 0), rule="static pool")
        return PlanResult(decision)


class PureReactivePolicy:
    """Instances for every idle and running task right now."""

    name = "pure-reactive"

    def __init__(self, config: SteeringConfig) -> None:
        self.config = config

    def plan(self, now: float, state: RunState, instances: Sequence[Instance], queue_order: np.ndarray) -> PlanResult:
        active = int(np.count_nonzero((state.status == TaskStatus.IDLE) | (state.status == TaskStatus.RUNNING)))
        wanted = math.ceil(active / self.config.slots_per_instance)
        target = min(max(wanted, self.config.min_instances), self.config.max_instances)
        if target >= len(instances):
            return PlanResult(SteeringDecision(target, wanted, launch=target - len(instances), rule="reactive: idle+running tasks"))
        busy = set(state.host.values())
        idle = [i.instance_id for i in instances if i.instance_id not in busy]
        release = idle[: len(instances) - target]
        decision = SteeringDecision(
            len(instances) - len(release), wanted, release=release, release_at={i: now for i in release}, rule="reactive: release idle instances"
        )
        return PlanResult(decision)


class ReactiveConservingPolicy:
    """The steering policy on a load of idle+running tasks, one interval each."""

    name = "reactive-conserving"

    def __init__(self, config: SteeringConfig) -> None:
        self.config = config

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


def make_policy(
    name: str,
    state: RunState,
    steering: SteeringConfig,
    prediction: PredictionConfig,
    truth: Callable[[], tuple[np.ndarray, np.ndarray]] | None = None,
    pfa: PFAConfig | None = None,
) -> ScalingPolicy:
    """Build a policy by name; ``truth`` gives (occupancy, exec) per task for the oracle."""
    if name == "wire":
        return WirePolicy(OnlinePredictor(state.workflow, prediction), steering)
    if name == "oracle":
        if truth is None:
            raise ValueError("the oracle policy needs the true task times (emulated site only)")
        occupancy, execution = truth()
        return WirePolicy(OraclePredictor(state.workflow, occupancy, execution), steering, name="oracle")
    if name == "full-site":
        return FullSitePolicy(steering)
    if name == "pure-reactive":
        return PureReactivePolicy(steering)
    if name == "reactive-conserving":
        return ReactiveConservingPolicy(steering)
    if name == "pfa":
        from wire_daemon.plan.pfa import PFAPolicy  # pfa builds on this module

        return PFAPolicy(state.workflow, steering, pfa or PFAConfig())
    raise ValueError(f"unknown policy {name!r}; choose one of {', '.join(POLICY_NAMES)}")
