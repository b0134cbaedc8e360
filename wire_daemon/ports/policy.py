"""The scaling-policy port: what a policy decides, and what the decision rests on.

Every policy (WIRE, its oracle, the baselines) returns a ``PlanResult``; the
loop executes its ``SteeringDecision`` and the decisions log records the rest.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

import numpy as np

from wire_daemon.core.config import SteeringConfig
from wire_daemon.core.instances import Instance
from wire_daemon.core.pricing import Market
from wire_daemon.core.run_state import RunState
from wire_daemon.ports.prediction import Prediction


@dataclass
class SteeringDecision:
    target: int  # pool size after the decision takes effect
    planned: int  # Algorithm 3's p before clamping
    launch: int = 0
    release: list[str] = field(default_factory=list)
    release_at: dict[str, float] = field(default_factory=dict)  # instance -> termination time
    rule: str = ""  # which rule fired, for the decisions log
    launch_type: str = ""  # the instance type to launch (steering.instance_types); "": the configured one
    spot_launches: int = 0  # how many of ``launch`` buy spot capacity; the rest buy on-demand
    # Instances released earlier whose termination moves later (instance -> new time): still draining,
    # their running tasks would be killed at the time set before.
    postpone: dict[str, float] = field(default_factory=dict)


@dataclass
class UpcomingLoad:
    """Tasks active at the start of the next interval, in projected slot order."""

    task: np.ndarray  # int64 task indices
    remaining_s: np.ndarray  # predicted minimum remaining occupancy
    sunk_s: np.ndarray  # occupancy already consumed at the interval start
    restart_cost_s: dict[str, float] = field(default_factory=dict)  # per instance
    projected_done: int = 0  # tasks the projection finishes inside the interval

    def __len__(self) -> int:
        return int(self.task.size)


@dataclass(frozen=True)
class SizeEstimate:
    """What a policy expects of one pool size: when the workflow ends, and what it still pays."""

    size: int  # instances once the decision has taken effect
    makespan_s: float  # estimated end of the workflow, on the loop's clock
    cost_units: int  # charging units still to pay from this decision on

    def to_json(self, now: float) -> dict[str, float | int]:
        """As a decision record holds it: ``makespan_s`` is the seconds from the decision (at ``now``) to the
        estimated end, the same on the wall clock and on a replay's virtual clock."""
        return {"size": self.size, "makespan_s": round(self.makespan_s - now, 1), "cost_units": self.cost_units}


@dataclass
class PlanResult:
    decision: SteeringDecision
    upcoming: UpcomingLoad | None = None
    policy_counts: dict[int, int] = field(default_factory=dict)  # prediction policy -> tasks
    prediction: Prediction | None = None  # the per-task predictions the plan used, if any
    # Policies that estimate the whole run: the chosen size and one instance
    # either side, and the full pool's estimated makespan (loop clock).
    estimates: list[SizeEstimate] = field(default_factory=list)
    full_pool_makespan_s: float | None = None
    # Policies that place work by market: the market each queued task should start on (task index ->).
    job_markets: dict[int, Market] = field(default_factory=dict)
    # Of those, the tasks that must start on their market (wait for its slot rather than take another).
    job_required: set[int] = field(default_factory=set)


class ScalingPolicy(Protocol):
    name: str

    def plan(
        self, now: float, state: RunState, instances: Sequence[Instance], queue_order: np.ndarray
    ) -> PlanResult: ...

    def reconfigure(self, steering: SteeringConfig) -> None:
        """Take reloaded steering settings (SIGHUP) from the next plan on."""


@runtime_checkable
class LetsGo(Protocol):
    """A policy that counts an instance out of its pool from a given time: released, terminated at ``at``."""

    def let_go(self, instance_id: str, at: float) -> None: ...


def tell_let_go(policy: object, instance_id: str, at: float) -> None:
    """Tell the first policy down a chain of wrappers (each holding the next as ``inner``) that counts
    instances out of its pool; none may (WIRE and the baselines keep no such count)."""
    while policy is not None:
        if isinstance(policy, LetsGo):
            policy.let_go(instance_id, at)
            return
        policy = getattr(policy, "inner", None)
