"""WIRE (and its oracle): predict, project the wavefront over the next interval, steer (Algorithms 2 and 3)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from wire_daemon.core.config import SteeringConfig
from wire_daemon.core.instances import CloudState, Instance
from wire_daemon.core.run_state import RunState
from wire_daemon.plan.pool_view import instance_views, release_moments
from wire_daemon.plan.steering import steer
from wire_daemon.plan.wavefront import PoolSlots, simulate_interval
from wire_daemon.ports.policy import PlanResult
from wire_daemon.ports.prediction import Predictor


class WirePolicy:
    """The policy of the paper; fed the true task times, it is the oracle."""

    def __init__(self, predictor: Predictor, config: SteeringConfig, name: str = "wire") -> None:
        self.predictor = predictor
        self.config = config
        self.name = name

    def reconfigure(self, steering: SteeringConfig) -> None:
        self.config = steering

    def plan(self, now: float, state: RunState, instances: Sequence[Instance], queue_order: np.ndarray) -> PlanResult:
        self.predictor.update(state, now)
        prediction = self.predictor.predict(state, now)
        pool = [PoolSlots(i.instance_id, i.slots) for i in instances if i.state == CloudState.RUNNING]
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
        work_left = state.n_done() < state.workflow.n_tasks
        decision = steer(upcoming.remaining_s.tolist(), views, self.config, work_left=work_left)
        # bincount, not np.unique: no sort of a million-entry array (same keys, ascending).
        per_policy = np.bincount(prediction.policy).tolist()
        counts = {p: c for p, c in enumerate(per_policy) if p > 0 and c > 0}
        return PlanResult(decision, upcoming, counts, prediction)
