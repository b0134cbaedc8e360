"""The one place where a scaling policy, its decorators and the MAPE loop are put together.

Every loop the project runs is built here, whatever drives it: the emulated
runtime, the submit-host runtime (again each time a workflow comes or goes)
and a replay. The chain is always the same, innermost first:

1. the policy named in the settings (``runtime.policies``), built from the
   run state and the config sections it reads;
2. shape-aware planning (``shape_aware``): tasks counted by what fits an
   instance, when memory or instance types are configured, else unchanged;
3. the operator's control (``ControlledPolicy``): pause, hold, drain-all,
   terminate-all and the daemon's safe state override its decision. In the
   default mode it passes the decision through untouched, so a replay, which
   has no operator, decides exactly as the bare policy would;
4. the MAPE loop over the world's ports; a policy that buys spot and falls
   back (``spot_falls_back``) reaches the cloud through ``SpotFallback``.

Markets come first: ``with_market`` lets the default and the other
predicting policies choose each launch's market (``plan/placement.py``)
when ``steering.market`` is spot or auto.

A site differs only in what it hands in (``World``, the memory an instance
has, where task shapes come from), never in how the chain is built.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

from pydantic import TypeAdapter
from typing_extensions import TypedDict

from wire_daemon.core.config import EmulationConfig, SteeringConfig
from wire_daemon.core.instances import Lifecycle
from wire_daemon.core.journal import Journal
from wire_daemon.core.pricing import Market
from wire_daemon.core.workflow import Workflow
from wire_daemon.emulated.site import EmulatedSite, spot_market
from wire_daemon.execute.market_fallback import FallbackLedger, FallbackRule, SavedLedger, SpotFallback
from wire_daemon.loop.mape import MapeLoop
from wire_daemon.plan.placement import ReclaimRate
from wire_daemon.ports import Cloud, CondorControl, Observations
from wire_daemon.ports.memory import JobSizer, TaskShapes
from wire_daemon.ports.policy import ScalingPolicy
from wire_daemon.runtime.control import ControlledPolicy, PoolControl
from wire_daemon.runtime.policies import (
    PolicyInputs,
    make_policy,
    policy_entry,
    shape_aware,
    spot_falls_back,
    with_market,
)


@dataclass
class World:
    """What the loop talks to: one object for all three on the emulated site, three on a submit host."""

    observations: Observations
    cloud: Cloud
    condor: CondorControl
    clock: Callable[[], float] = time.time  # the loop's clock (back-off windows of the spot market)


@dataclass
class MarketMemory:
    """What a daemon learns of the spot market, kept across its loops: a new DAG builds a new loop and a new
    policy, not a new market. A replay runs one loop and starts with an empty one."""

    fallback: FallbackLedger = field(default_factory=FallbackLedger)  # reclaims, back-offs, our terminations
    reclaims: ReclaimRate | None = None  # the placement's learned rate, once a policy chooses markets

    def reclaim_rate(self, prior_per_hour: float) -> ReclaimRate:
        if self.reclaims is None:
            self.reclaims = ReclaimRate(prior_per_hour)
        self.reclaims.prior_per_hour = prior_per_hour  # the config's, also for a rate a restart kept
        return self.reclaims

    def to_json(self) -> SavedMarket:
        rate = self.reclaims
        seen = (rate.reclaims, round(rate.spot_seconds)) if rate is not None else (0, 0)
        return {"fallback": self.fallback.to_json(), "reclaims": seen[0], "spot_seconds": seen[1]}

    @classmethod
    def from_json(cls, saved: object, terminating: set[str]) -> MarketMemory:
        """The memory a restart keeps (``to_json``; pydantic's ``ValidationError`` when it is not that);
        ``terminating``: instances the last daemon was ending, whose leaving the listing is no reclaim."""
        valid = _SAVED_MARKET.validate_python(saved)
        rate = ReclaimRate(0.0)  # its prior is the config's, set when a policy asks for it
        rate.reclaims, rate.spot_seconds = valid.get("reclaims", 0), valid.get("spot_seconds", 0.0)
        rate.released(sorted(terminating))
        return cls(FallbackLedger.from_json(valid.get("fallback", {}), terminating), rate)


class SavedMarket(TypedDict, total=False):
    """``MarketMemory.to_json``, as the state file keeps it."""

    fallback: SavedLedger
    reclaims: int
    spot_seconds: float


_SAVED_MARKET = TypeAdapter(SavedMarket)


@dataclass
class LoopOptions:
    """How one site runs the loop; the defaults are a replay's: the mode stays auto, nobody reads the journal."""

    control: PoolControl = field(default_factory=PoolControl)
    lifecycle: Lifecycle = field(default_factory=Lifecycle)  # shared by the loop and the operator's control
    journal: Journal | None = None
    joined: Callable[[str], bool] | None = None  # does HTCondor see the instance's startd? None: running is joined
    memory: JobSizer | None = None  # the request_memory rightsizer, when it is on
    boost: bool = True  # raise the priority of each stage's first ready tasks
    market: MarketMemory = field(default_factory=MarketMemory)


def assemble_policy(
    policy: str, inputs: PolicyInputs, instance_memory_mib: float, shapes: TaskShapes | None, options: LoopOptions
) -> ScalingPolicy:
    """The named policy, choosing markets, shape-aware, under the operator's control."""
    steering = inputs.steering
    reclaims = options.market.reclaim_rate(steering.spot_interruptions_per_hour)
    chosen = with_market(make_policy(policy, inputs), policy_entry(policy), steering, reclaims)
    inner = shape_aware(chosen, steering, instance_memory_mib, shapes)
    return ControlledPolicy(inner, options.control, options.lifecycle, steering)


def assemble_loop(
    policy: str,
    inputs: PolicyInputs,
    world: World,
    instance_memory_mib: float,
    shapes: TaskShapes | None,
    options: LoopOptions | None = None,
) -> MapeLoop:
    """A MAPE loop over ``world`` running ``policy`` wrapped as every site wraps it (module docstring)."""
    options = options or LoopOptions()
    journal = options.journal or Journal()
    cloud = world.cloud
    entry = policy_entry(policy)
    if spot_falls_back(entry, inputs.steering):
        # A policy choosing each launch's market weighs reclaims itself: its fallback backs off on capacity only.
        chooses = entry.market is None and inputs.steering.market == "auto"
        rule = FallbackRule(bursts_count_once=chooses, back_off_on_reclaims=not chooses)
        cloud = SpotFallback(cloud, world.clock, journal, rule, options.market.fallback)
    return MapeLoop(
        inputs.state,
        world.observations,
        cloud,
        world.condor,
        assemble_policy(policy, inputs, instance_memory_mib, shapes, options),
        inputs.steering,
        boost=options.boost,
        journal=journal,
        lifecycle=options.lifecycle,
        joined=options.joined,
        memory=options.memory,
    )


def emulated_site(
    workflow: Workflow, steering: SteeringConfig, emulation: EmulationConfig, initial_market: Market = Market.ON_DEMAND
) -> EmulatedSite:
    """The emulated world a replay or an emulated daemon runs in: its pool, prices and spot market."""
    return EmulatedSite(
        workflow,
        emulation,
        steering.slots_per_instance,
        steering.billing,
        steering.instance_types,
        market=spot_market(workflow, emulation),
        spot_price_ratio=steering.spot_price_ratio,
        initial_market=initial_market,
        price_per_hour=steering.price_per_hour,
    )
