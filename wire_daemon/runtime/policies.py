"""The scaling policies by name: one registry line per policy.

Building a policy is composition: WIRE needs a predictor (``analyze``) and a
planner (``plan``), two phases that do not know each other. A new policy is a
module in ``plan/`` plus one entry in ``POLICIES``. A policy with options of
its own declares them in its module as a config section (``@section("pfa")``)
and names that class in its entry: the config file's section of that key is
then validated by it, and the builder gets it from ``PolicyInputs.options_for``.
The entry also carries what the policy declares to whoever runs it (a static
pool, the world's truth, a market of its own), so no caller tests a policy's
name. The runtimes and the replay wrap what ``make_policy`` builds in one
place (``runtime.assembly``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

import numpy as np

from wire_daemon.analyze.dispatch import DispatchLearner
from wire_daemon.analyze.distribution import DistributionPredictor
from wire_daemon.analyze.predictor import OnlinePredictor, OraclePredictor
from wire_daemon.core.config import PredictionConfig, SteeringConfig
from wire_daemon.core.errors import ConfigError
from wire_daemon.core.pricing import Market
from wire_daemon.core.run_state import RunState
from wire_daemon.core.sections import config_key, parse
from wire_daemon.plan.baselines import FullSitePolicy, PureReactivePolicy, ReactiveConservingPolicy
from wire_daemon.plan.pfa import PFAConfig, PFAPolicy
from wire_daemon.plan.placement import MarketPlacement, ReclaimRate
from wire_daemon.plan.shapes import ShapedPolicy
from wire_daemon.plan.slowdown import SlowdownPolicy
from wire_daemon.plan.spot_peers import annex_spot, reactive_spot
from wire_daemon.plan.wire import WirePolicy
from wire_daemon.ports.memory import TaskShapes
from wire_daemon.ports.policy import ScalingPolicy

# (occupancy, exec) seconds per task: the world's truth, which only an emulated site knows.
Truth = Callable[[], tuple[np.ndarray, np.ndarray]]
Options = TypeVar("Options")


@dataclass(frozen=True)
class PolicyInputs:
    state: RunState
    steering: SteeringConfig
    prediction: PredictionConfig = field(default_factory=PredictionConfig)
    options: Mapping[str, Any] = field(default_factory=dict)  # the config's policy_options, by section key
    truth: Truth | None = None

    def options_for(self, model: type[Options]) -> Options:
        """A policy's own options: the section the config gave, else the model's defaults."""
        given = self.options.get(config_key(model))
        return given if isinstance(given, model) else model()


@dataclass(frozen=True)
class Policy:
    """How a policy is built, its options, and what it declares about itself to whoever runs it."""

    build: Callable[[PolicyInputs], ScalingPolicy]
    options: type | None = None  # its options section, declared in its plan/ module; None: it has none
    # Its pool is max_instances from the first moment: a world that can start with a pool up (the replay's
    # emulated site) starts with this one, rather than the first decision launching it and waiting for boots.
    static_pool: bool = False
    # It reads the world's true task times (PolicyInputs.truth), which only an emulated site knows.
    needs_truth: bool = False
    # It buys this market whatever steering.market says (the spot peers); None: steering.market decides.
    market: Market | None = None
    # Its spot launches fall back to on-demand when the market fails them (execute/market_fallback.py).
    spot_fallback: bool = True


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


POLICIES: dict[str, Policy] = {
    "wire": Policy(_wire),
    "full-site": Policy(lambda i: FullSitePolicy(i.steering), static_pool=True),
    "pure-reactive": Policy(lambda i: PureReactivePolicy(i.steering)),
    "reactive-conserving": Policy(lambda i: ReactiveConservingPolicy(i.steering)),
    "pfa": Policy(lambda i: PFAPolicy(i.state.workflow, i.steering, i.options_for(PFAConfig)), PFAConfig),
    "oracle": Policy(_oracle, needs_truth=True),
    "target-slowdown": Policy(_target_slowdown),
    # condor_annex's Spot Fleet in maintain mode keeps asking for spot; Karpenter falls back.
    "annex-spot": Policy(lambda i: annex_spot(i.steering), static_pool=True, market=Market.SPOT, spot_fallback=False),
    "reactive-spot": Policy(lambda i: reactive_spot(i.steering), market=Market.SPOT),
}
POLICY_NAMES = tuple(POLICIES)
# What `wire-daemon run` and `replay --policy` use unless told otherwise. `wire`
# stays the paper's algorithm as written (the reproduction).
DEFAULT_POLICY = "target-slowdown"


def policy_entry(name: str) -> Policy:
    entry = POLICIES.get(name)
    if entry is None:
        raise ConfigError(f"unknown policy {name!r}; choose one of {', '.join(POLICIES)}")
    return entry


def make_policy(name: str, inputs: PolicyInputs) -> ScalingPolicy:
    return policy_entry(name).build(inputs)


def with_market(
    policy: ScalingPolicy, entry: Policy, steering: SteeringConfig, reclaims: ReclaimRate | None = None
) -> ScalingPolicy:
    """``policy`` choosing each launch's market (steering.market spot or auto), or unchanged.

    Unchanged when launches buy on-demand, and for a policy whose entry names its own market.
    ``reclaims``: the reclaim rate learned so far (None: from the configured prior on).
    """
    if steering.market == "on-demand" or entry.market is not None:
        return policy
    return MarketPlacement(policy, steering, reclaims)


def buys_spot(entry: Policy, steering: SteeringConfig) -> bool:
    """Does this policy's pool buy spot capacity: its own market, else ``steering.market``?"""
    return entry.market is Market.SPOT or (entry.market is None and steering.market != "on-demand")


def spot_falls_back(entry: Policy, steering: SteeringConfig) -> bool:
    """Does this policy buy spot, and fall back to on-demand when the market fails it?"""
    return buys_spot(entry, steering) and entry.spot_fallback


def market_at_submit(entry: Policy, steering: SteeringConfig) -> Market:
    """What the pool up at submit was bought on: the policy's own market, else spot where launches may buy
    it (placement's guess for work not yet measured), else on-demand."""
    if entry.market is not None:
        return entry.market
    return Market.ON_DEMAND if steering.market == "on-demand" else Market.SPOT


def compared_policies(steering: SteeringConfig) -> tuple[str, ...]:
    """What ``replay --compare`` runs: every policy, those that buy only spot where spot is on the table."""
    if steering.market == "on-demand":
        return tuple(name for name, entry in POLICIES.items() if entry.market is not Market.SPOT)
    return POLICY_NAMES


def option_sections() -> dict[str, type]:
    """The policies' options sections by their key (``pfa``): top-level sections of the config file."""
    return {config_key(p.options): p.options for p in POLICIES.values() if p.options is not None}


def parsed_options(raw: Mapping[str, Any]) -> dict[str, Any]:
    """Each policy options section the config gives, validated by its policy's model (errors name the key)."""
    sections = option_sections()
    for key in raw:
        if key not in sections:
            raise ConfigError(f"unknown key {key}: no policy has options of that name (known: {', '.join(sections)})")
    return {key: parse(sections[key], value, "", key) for key, value in raw.items()}


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
