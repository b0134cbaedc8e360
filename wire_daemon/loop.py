"""The MAPE loop: Monitor, Analyze, Plan, Execute, once per interval.

It knows the world only through the ports in ``sites.ports``: the same code
drives the emulated site and a real submit host.
"""

from __future__ import annotations

import logging
import time
from dataclasses import asdict, dataclass, field

import numpy as np

from wire_daemon.config import SteeringConfig
from wire_daemon.monitor.run_state import RunState, TaskStatus
from wire_daemon.plan.policies import PlanResult, ScalingPolicy
from wire_daemon.sites.ports import Cloud, CondorControl, Observations

log = logging.getLogger(__name__)


@dataclass
class DecisionRecord:
    """One iteration, as the decisions log keeps it."""

    time: float
    policy: str
    done: int
    running: int
    idle: int
    pool: int
    target: int
    planned: int
    launched: list[str] = field(default_factory=list)
    released: list[str] = field(default_factory=list)
    rule: str = ""
    upcoming_tasks: int = 0
    upcoming_load_s: float = 0.0
    prediction_policies: dict[int, int] = field(default_factory=dict)
    boosted: int = 0
    decision_s: float = 0.0

    def to_json(self) -> dict:
        return asdict(self)


class PriorityBoost:
    """Raise JobPrio of the first N ready tasks of every stage, so each stage is measured early.

    "Ready" means idle in the queue when the loop looks: a task that was
    matched before the loop saw it idle is not boosted and does not count, so
    every stage gets N boosted tasks whatever the interval.
    """

    def __init__(self, state: RunState, first_n: int, priority: int) -> None:
        self.first_n = first_n
        self.priority = priority
        self.priority_of = np.zeros(state.workflow.n_tasks, dtype=np.int64)
        self.used = np.zeros(len(state.workflow.stages), dtype=np.int64)

    def apply(self, state: RunState, condor: CondorControl) -> int:
        if self.first_n <= 0:
            return 0
        boosted = 0
        for task in state.idle_in_queue_order():
            stage = state.workflow.stage_of[task]
            if self.used[stage] >= self.first_n or self.priority_of[task] > 0:
                continue
            condor.set_job_priority(state.workflow.task_ids[task], self.priority)
            self.priority_of[task] = self.priority
            self.used[stage] += 1
            boosted += 1
        return boosted

    def queue_order(self, state: RunState) -> np.ndarray:
        """Idle tasks in the order Condor will start them: JobPrio, then submit order."""
        idle = state.idle_in_queue_order()
        return idle[np.argsort(-self.priority_of[idle], kind="stable")]


class MapeLoop:
    def __init__(
        self,
        state: RunState,
        observations: Observations,
        cloud: Cloud,
        condor: CondorControl,
        policy: ScalingPolicy,
        steering: SteeringConfig,
        boost: bool = True,
    ) -> None:
        self.state = state
        self.observations = observations
        self.cloud = cloud
        self.condor = condor
        self.policy = policy
        self.steering = steering
        self.boost = PriorityBoost(state, steering.boost_first_tasks if boost else 0, steering.boost_priority)
        self.last_plan: PlanResult | None = None
        self.pending_releases: dict[str, float] = {}  # drained instance -> termination time

    def iterate(self, now: float) -> DecisionRecord:
        for event in self.observations.poll_events():  # Monitor
            self.state.apply(event)
        instances = list(self.cloud.list_instances())
        started = time.perf_counter()
        plan = self.policy.plan(now, self.state, instances, self.boost.queue_order(self.state))  # Analyze + Plan
        decision_s = time.perf_counter() - started
        self.last_plan = plan
        decision = plan.decision
        launched = [i.instance_id for i in self.cloud.launch(decision.launch)] if decision.launch else []  # Execute
        for instance_id in decision.release:
            self.condor.retire_instance(instance_id)
            self.pending_releases[instance_id] = decision.release_at.get(instance_id, now)
        self.release_due(now)
        boosted = self.boost.apply(self.state, self.condor)
        return self._record(now, plan, len(instances), launched, boosted, decision_s)

    def next_release(self) -> float | None:
        return min(self.pending_releases.values(), default=None)

    def release_due(self, now: float) -> list[str]:
        """Terminate the drained instances whose time has come."""
        due = [i for i, at in self.pending_releases.items() if at <= now]
        if due:
            self.cloud.terminate(due)
            for instance_id in due:
                del self.pending_releases[instance_id]
        return due

    def _record(
        self, now: float, plan: PlanResult, pool: int, launched: list[str], boosted: int, decision_s: float
    ) -> DecisionRecord:
        status = self.state.status
        upcoming = plan.upcoming
        return DecisionRecord(
            time=now,
            policy=self.policy.name,
            done=self.state.n_done(),
            running=int(np.count_nonzero(status == TaskStatus.RUNNING)),
            idle=int(np.count_nonzero(status == TaskStatus.IDLE)),
            pool=pool,
            target=plan.decision.target,
            planned=plan.decision.planned,
            launched=launched,
            released=list(plan.decision.release),
            rule=plan.decision.rule,
            upcoming_tasks=len(upcoming) if upcoming is not None else 0,
            upcoming_load_s=float(upcoming.remaining_s.sum()) if upcoming is not None else 0.0,
            prediction_policies=plan.policy_counts,
            boosted=boosted,
            decision_s=decision_s,
        )
