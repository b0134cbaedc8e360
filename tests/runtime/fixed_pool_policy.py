"""A policy that exists only for the tests: a static pool of ``fixed_pool.size`` instances.

It is what a new policy with an option of its own takes: this one module (the
policy and its options section) and one registry entry. The registry entry is
made by the test that uses it (tests/runtime/test_policy_extension.py).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Annotated

import numpy as np

from wire_daemon.core.config import SteeringConfig
from wire_daemon.core.instances import Instance
from wire_daemon.core.run_state import RunState
from wire_daemon.core.sections import AtLeastOne, section
from wire_daemon.ports.policy import PlanResult, SteeringDecision


@section("fixed_pool")
class FixedPoolOptions:
    """The config's ``fixed_pool`` section."""

    size: Annotated[int, AtLeastOne] = 2  # instances kept from start to end


class FixedPoolPolicy:
    name = "fixed-pool"

    def __init__(self, steering: SteeringConfig, options: FixedPoolOptions) -> None:
        self.steering = steering
        self.options = options

    def reconfigure(self, steering: SteeringConfig) -> None:
        self.steering = steering

    def plan(self, now: float, state: RunState, instances: Sequence[Instance], queue_order: np.ndarray) -> PlanResult:
        size = self.options.size
        return PlanResult(SteeringDecision(size, size, launch=max(size - len(instances), 0), rule="fixed pool"))
