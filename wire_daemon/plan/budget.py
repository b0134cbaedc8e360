"""A workflow's money budget as target-slowdown counts it: every instance the cloud listed, and the cut a
decision takes when what it would commit exceeds the money left.

The bill counts what the cloud lists, not what the policy launched: an
instance launched by hand, or one a decision released that is still up,
costs money all the same. The policy owns which instances it has let go
(``released``) and gives that to the bill; the cut returns the instances it
lets go so the policy records them.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import replace

from wire_daemon.core.config import SteeringConfig
from wire_daemon.core.instances import CloudState, Instance
from wire_daemon.core.pricing import SECONDS_PER_HOUR, Bill, Market, Span, bill, money
from wire_daemon.plan.steering import release_time
from wire_daemon.ports.policy import SteeringDecision


def instance_price(config: SteeringConfig, instance: Instance) -> float:
    """The price per hour an instance pays: its type's, in its market (on-demand where the type has no other)."""
    offers = config.offers()
    offer = offers.get(instance.instance_type) or next(iter(offers.values()))
    return offer.price_per_hour(instance.market) if offer.offers(instance.market) else offer.on_demand_per_hour


def launch_price(config: SteeringConfig) -> float:
    """A launch priced on-demand, the dearest market: the budget is never counted on a cheaper one."""
    return next(iter(config.offers().values())).price_per_hour(Market.ON_DEMAND)


def unit_money(config: SteeringConfig) -> float:
    """What one of the model's charging units of a new instance costs."""
    return launch_price(config) * config.billing.charging_unit_s / SECONDS_PER_HOUR


class WorkflowBill:
    """Every instance the cloud listed for this workflow, with when it started and stopped paying."""

    def __init__(self) -> None:
        self._spans: dict[str, Span] = {}

    def track(
        self, config: SteeringConfig, instances: Sequence[Instance], released: Mapping[str, float], now: float
    ) -> None:
        """Add the instances listed for the first time; end those no longer listed, when they were to be
        terminated (``released``) or at the latest now."""
        listed = {i.instance_id for i in instances}
        for iid, span in list(self._spans.items()):
            if span.end is None and iid not in listed:
                self._spans[iid] = replace(span, end=min(released.get(iid, now), now))
        for i in instances:
            if i.instance_id not in self._spans and i.state in (CloudState.RUNNING, CloudState.PENDING):
                self._spans[i.instance_id] = Span(instance_price(config, i), i.launch_time, None)

    def at(self, config: SteeringConfig, now: float) -> Bill:
        """What the instances tracked have cost, spent and committed, at ``now``."""
        return bill(list(self._spans.values()), config.billing, now)


def cut_to_budget(
    config: SteeringConfig, now: float, decision: SteeringDecision, pool: Sequence[Instance], money_left: float
) -> bool:
    """Cut what ``decision`` would commit by the next decision to ``money_left``; True if anything was cut.

    Launches go first; then instances whose paid time runs out before the next decision are let go
    (those whose unit ends first), since keeping them commits their next charge; each is added to the
    decision's releases with its termination time. The minimal pool (``min_instances``) is kept whatever
    the budget, as PFA keeps it: a workflow cannot end on no instance. With ``min_instances: 0`` the pool
    goes, and the workflow waits for a larger budget.
    """
    billing = config.billing
    horizon = now + config.interval_s
    going = set(decision.release)
    renewing = [
        (
            money(billing, instance_price(config, i), i.launch_time, horizon)
            - money(billing, instance_price(config, i), i.launch_time, now),
            i,
        )
        for i in pool
        if i.instance_id not in going
    ]
    renewing = [(m, i) for m, i in renewing if m > 1e-12]
    keep_cost = sum(m for m, _ in renewing)
    one_launch = money(billing, launch_price(config), now, horizon)
    affordable = max(math.floor((money_left - keep_cost) / one_launch + 1e-9), 0) if one_launch > 0 else decision.launch
    staying = len(pool) - len(going & {i.instance_id for i in pool})
    affordable = max(affordable, config.min_instances - staying)
    cut = False
    if decision.launch > affordable:
        decision.launch, cut = affordable, True
    over = keep_cost - money_left
    for m, i in sorted(renewing, key=lambda x: (billing.time_to_next_charge(x[1].launch_time, now), x[1].instance_id)):
        if over <= 1e-9 or staying + decision.launch <= config.min_instances:
            break
        staying -= 1
        decision.release.append(i.instance_id)
        decision.release_at[i.instance_id] = release_time(
            now, billing.time_to_next_charge(i.launch_time, now), config.release_guard_s
        )
        over, cut = over - m, True
    if cut:
        decision.target = len(pool) + decision.launch - len(set(decision.release) & {i.instance_id for i in pool})
    return cut
