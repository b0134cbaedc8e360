"""What a user would run on spot capacity instead of this daemon: the peers of the market study.

* ``annex-spot``: a fixed pool of ``max_instances`` on spot, each reclaimed
  instance replaced at the next decision (condor_annex's Spot Fleet in
  maintain mode). A fleet keeps asking for spot: no on-demand fallback.
* ``reactive-spot``: the pure-reactive policy buying spot, falling back to
  on-demand after a capacity error or repeated reclaims (what Karpenter does
  for a queue of pods). The fallback itself is the cloud decorator
  ``execute.market_fallback.SpotFallback``, which the runtime puts in front of
  the cloud for every policy whose registry entry says ``spot_fallback``.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from wire_daemon.core.config import SteeringConfig
from wire_daemon.core.instances import Instance
from wire_daemon.core.run_state import RunState
from wire_daemon.plan.baselines import FullSitePolicy, PureReactivePolicy
from wire_daemon.ports.policy import PlanResult, ScalingPolicy


class OnSpot:
    """A policy whose every launch buys spot capacity."""

    def __init__(self, inner: ScalingPolicy, name: str) -> None:
        self.inner = inner
        self.name = name

    def reconfigure(self, steering: SteeringConfig) -> None:
        self.inner.reconfigure(steering)

    def plan(self, now: float, state: RunState, instances: Sequence[Instance], queue_order: np.ndarray) -> PlanResult:
        result = self.inner.plan(now, state, instances, queue_order)
        result.decision.spot_launches = result.decision.launch
        return result


def annex_spot(steering: SteeringConfig) -> OnSpot:
    return OnSpot(FullSitePolicy(steering), "annex-spot")


def reactive_spot(steering: SteeringConfig) -> OnSpot:
    return OnSpot(PureReactivePolicy(steering), "reactive-spot")
