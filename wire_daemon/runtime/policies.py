"""The scaling policies by name: one registry line per policy.

Building a policy is composition: WIRE needs a predictor (``analyze``) and a
planner (``plan``), two phases that do not know each other. A new policy is a
module in ``plan/`` plus one entry in ``POLICIES``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from wire_daemon.analyze.dispatch import DispatchLearner
from wire_daemon.analyze.distribution import DistributionPredictor
from wire_daemon.analyze.predictor import OnlinePredictor, OraclePredictor
from wire_daemon.core.config import PFAConfig, PredictionConfig, SteeringConfig
from wire_daemon.core.errors import ConfigError
from wire_daemon.core.run_state import RunState
from wire_daemon.plan.baselines import FullSitePolicy, PureReactivePolicy, ReactiveConservingPolicy
from wire_daemon.plan.pfa import PFAPolicy
from wire_daemon.plan.placement import MarketPlacement
from wire_daemon.plan.shapes import ShapedPolicy
from wire_daemon.plan.slowdown import SlowdownPolicy
from wire_daemon.plan.spot_peers import annex_spot, reactive_spot
from wire_daemon.plan.wire import WirePolicy
from wire_daemon.ports.memory import TaskShapes
from wire_daemon.ports.policy import ScalingPolicy

# (occupancy, exec) seconds per task: the world's truth, which only an emulated site knows.
Truth = Callable[[], tuple[np.ndarray, np.ndarray]]


@dataclass(frozen=True)
class PolicyInputs:
    state: RunState
    steering: SteeringConfig
    prediction: PredictionConfig = field(default_factory=PredictionConfig)
    pfa: PFAConfig = field(default_factory=PFAConfig)
    truth: Truth | None = None


def _wire(inputs: PolicyInputs) -> ScalingPolicy:
    return WirePolicy(OnlinePredictor(inputs.state.workflow, inputs.prediction), inputs.steering)


def _oracle(inputs: PolicyInputs) -> ScalingPolicy:
    if inputs.truth is None:
        raise ConfigError("the oracle policy needs the true task times (emulated site only)")
    occupancy, execution = inputs.truth()
    return WirePolicy(OraclePredictor(inputs.state.workflow, occupancy, execution), inputs.steering, name="oracle")


def _target_slowdown(inputs: PolicyInputs) -> ScalingPolicy:
    workflow = inputs.state.workflow
    predictor = DistributionPredictor(workflow, inputs.prediction)
    return SlowdownPolicy(predictor, DispatchLearner(workflow, inputs.prediction.dispatch_prior_s), inputs.steering)


POLICIES: dict[str, Callable[[PolicyInputs], ScalingPolicy]] = {
    "wire": _wire,
    "full-site": lambda i: FullSitePolicy(i.steering),
    "pure-reactive": lambda i: PureReactivePolicy(i.steering),
    "reactive-conserving": lambda i: ReactiveConservingPolicy(i.steering),
    "pfa": lambda i: PFAPolicy(i.state.workflow, i.steering, i.pfa),
    "oracle": _oracle,
    "target-slowdown": _target_slowdown,
    "annex-spot": lambda i: annex_spot(i.steering),
    "reactive-spot": lambda i: reactive_spot(i.steering),
}
POLICY_NAMES = tuple(POLICIES)
# The peers that buy spot whatever steering.market says: compared only where spot is on the table.
SPOT_PEERS = ("annex-spot", "reactive-spot")
# What `wire-daemon run` and `replay --policy` use unless told otherwise. `wire`
# stays the paper's algorithm as written (the reproduction).
DEFAULT_POLICY = "target-slowdown"


def make_policy(name: str, inputs: PolicyInputs) -> ScalingPolicy:
    build = POLICIES.get(name)
    if build is None:
        raise ConfigError(f"unknown policy {name!r}; choose one of {', '.join(POLICY_NAMES)}")
    return build(inputs)


def with_market(policy: ScalingPolicy, steering: SteeringConfig) -> ScalingPolicy:
    """``policy`` choosing each launch's market (steering.market spot or auto), or unchanged on-demand.

    A policy that chooses its own market (``chooses_market``: the spot peers) is left as it is.
    """
    if steering.market == "on-demand" or getattr(policy, "chooses_market", False):
        return policy
    return MarketPlacement(policy, steering)


def spot_falls_back(policy: ScalingPolicy) -> bool:
    """Do this policy's spot launches fall back to on-demand when the market fails them?"""
    return bool(getattr(policy, "spot_fallback", False))


def compared_policies(steering: SteeringConfig) -> tuple[str, ...]:
    """What ``replay --compare`` runs: every policy, the spot peers only where spot is on the table."""
    if steering.market == "on-demand":
        return tuple(n for n in POLICY_NAMES if n not in SPOT_PEERS)
    return POLICY_NAMES


def shape_aware(
    policy: ScalingPolicy, steering: SteeringConfig, instance_memory_mib: float, shapes: TaskShapes | None
) -> ScalingPolicy:
    """``policy`` planning in tasks that fit (memory, instance types), or unchanged when neither is set.

    Unchanged, not wrapped, so that the single-type configuration without
    memory decides exactly as before.
    """
    if instance_memory_mib <= 0 and not steering.instance_types:
        return policy
    return ShapedPolicy(policy, steering, instance_memory_mib, shapes)
