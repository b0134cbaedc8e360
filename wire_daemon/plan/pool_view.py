"""The pool as a policy sees it: when each instance's paid unit ends, and when a release would take effect."""

from __future__ import annotations

from collections.abc import Sequence

from wire_daemon.core.config import SteeringConfig
from wire_daemon.core.instances import Instance
from wire_daemon.plan.shapes import dearness
from wire_daemon.plan.steering import InstanceView, release_time


def release_moments(instances: Sequence[Instance], now: float, config: SteeringConfig) -> dict[str, float]:
    """When each instance would be terminated if it were released now."""
    billing = config.billing
    return {
        i.instance_id: release_time(now, billing.time_to_next_charge(i.launch_time, now), config.release_guard_s)
        for i in instances
    }


def instance_views(
    instances: Sequence[Instance],
    now: float,
    restart_cost_s: dict[str, float],
    moments: dict[str, float],
    config: SteeringConfig,
) -> list[InstanceView]:
    billing = config.billing
    return [
        InstanceView(
            i.instance_id,
            billing.time_to_next_charge(i.launch_time, now),
            restart_cost_s.get(i.instance_id, 0.0),
            moments[i.instance_id],
            age_s=now - i.launch_time,
            dearness=dearness(config, i),
        )
        for i in instances
    ]
