"""The scaling policies by name: one registry line per policy.

Building a policy is composition: WIRE needs a predictor (``analyze``) and a
planner (``plan``), two phases that do not know each other. A new policy is a
module in ``plan/`` plus one entry in ``POLICIES``; the entry also carries what
the policy declares to whoever runs it (``PolicyEntry``), so no caller tests a
policy's name. The runtimes and the replay wrap what ``make_policy`` builds in
one place (``runtime.assembly``).
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
from wire_daemon.core.pricing import Market
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


@dataclass(frozen=True)
class PolicyEntry:
    """How a policy is built, and what it declares about itself to whoever runs it."""

    build: Callable[[PolicyInputs], ScalingPolicy]
    # Its pool is max_instances from the first moment: a world that can start with a pool up (the replay's
    # emulated site) starts with this one, rather than the first decision launching it and waiting for boots.
    static_pool: bool = False
    # It reads the world's true task times (PolicyInputs.truth), which only an emulated site knows.
    needs_truth: bool = False
    # It buys this market whatever steering.market says (the spot peers); None: steering.market decides.
    market: Market | None = None
    # Its spot launches fall back to on-demand when the market fails them (execute/market_fallback.py).
    spot_fallback: bool = True


POLICIES: dict[str, PolicyEntry] = {
    "wire": PolicyEntry(_wire),
    "full-site": PolicyEntry(lambda i: FullSitePolicy(i.steering), static_pool=True),
    "pure-reactive": PolicyEntry(lambda i: PureReactivePolicy(i.steering)),
    "reactive-conserving": PolicyEntry(lambda i: ReactiveConservingPolicy(i.steering)),
    "pfa": PolicyEntry(lambda i: PFAPolicy(i.state.workflow, i.steering, i.pfa)),
    "oracle": PolicyEntry(_oracle, needs_truth=True),
    "target-slowdown": PolicyEntry(_target_slowdown),
    # condor_annex's Spot Fleet in maintain mode keeps asking for spot; Karpenter falls back.
    "annex-spot": PolicyEntry(
        lambda i: annex_spot(i.steering), static_pool=True, market=Market.SPOT, spot_fallback=False
    ),
    "reactive-spot": PolicyEntry(lambda i: reactive_spot(i.steering), market=Market.SPOT),
}
POLICY_NAMES = tuple(POLICIES)
# What `wire-daemon run` and `replay --policy` use unless told otherwise. `wire`
# stays the paper's algorithm as written (the reproduction).
DEFAULT_POLICY = "target-slowdown"


def policy_entry(name: str) -> PolicyEntry:
    entry = POLICIES.get(name)
    if entry is None:
        raise ConfigError(f"unknown policy {name!r}; choose one of {', '.join(POLICY_NAMES)}")
    return entry


def make_policy(name: str, inputs: PolicyInputs) -> ScalingPolicy:
    return policy_entry(name).build(inputs)


def with_market(policy: ScalingPolicy, entry: PolicyEntry, steering: SteeringConfig) -> ScalingPolicy:
    """``policy`` choosing each launch's market (steering.market spot or auto), or unchanged.

    Unchanged when launches buy on-demand, and for a policy whose entry names its own market.
    """
    if steering.market == "on-demand" or entry.market is not None:
        return policy
    return MarketPlacement(policy, steering)


def spot_falls_back(entry: PolicyEntry, steering: SteeringConfig) -> bool:
    """Does this policy buy spot, and fall back to on-demand when the market fails it?"""
    buys_spot = entry.market is Market.SPOT or (entry.market is None and steering.market != "on-demand")
    return buys_spot and entry.spot_fallback


def compared_policies(steering: SteeringConfig) -> tuple[str, ...]:
    """What ``replay --compare`` runs: every policy, those that buy only spot where spot is on the table."""
    if steering.market == "on-demand":
        return tuple(name for name, entry in POLICIES.items() if entry.market is not Market.SPOT)
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
