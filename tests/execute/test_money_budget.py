"""``safety.budget_per_hour``: money an hour, counted over what the cloud lists, at each type's and market's price."""

from __future__ import annotations

from tests.execute.memory_cloud import MemoryCloud
from wire_daemon.core.billing import Billing
from wire_daemon.core.instances import Instance
from wire_daemon.core.journal import Journal, LimitHit
from wire_daemon.core.pricing import Market, price_list
from wire_daemon.execute.guarded_cloud import GuardedCloud, SafetyConfig
from wire_daemon.persist.store import StateStore


class Limits:
    def __init__(self) -> None:
        self.hit: list[str] = []

    def notify(self, event: object) -> None:
        if isinstance(event, LimitHit):
            self.hit.append(event.line)


def _guard(tmp_path, clock, billing, budget, **safety):
    cloud, journal, limits = MemoryCloud(lambda: clock["t"]), Journal(), Limits()
    journal.subscribe(limits)
    offers = price_list((), 4, billing, 0.25, price_per_hour=0.4)  # on-demand 0.4 an hour, spot 0.1
    config = SafetyConfig(budget_per_hour=budget, max_launches_per_interval=50, max_instances=50, **safety)
    store = StateStore(tmp_path / "s.sqlite")
    guard = GuardedCloud(cloud, store, config, billing, lambda: clock["t"], journal, offers=offers)
    return guard, cloud, limits


def test_the_pool_costs_at_most_the_budget_an_hour_at_each_markets_price(tmp_path):
    clock = {"t": 0.0}
    guard, cloud, limits = _guard(tmp_path, clock, Billing.per_second(), budget=1.0)
    assert len(guard.launch(5)) == 2  # 2 x 0.4 on-demand
    assert limits.hit == ["limit budget_per_hour: launching 2 of 5"]
    assert len(guard.launch(5, market=Market.SPOT)) == 2  # the 0.2 left buys two at 0.1
    assert guard.launch(1, market=Market.SPOT) == []


def test_instances_the_cloud_lists_and_the_state_file_never_knew_are_counted(tmp_path):
    clock = {"t": 0.0}
    guard, cloud, _ = _guard(tmp_path, clock, Billing.per_second(), budget=1.0)
    cloud.live["i-old"] = Instance("i-old", -600.0, 4, "running")  # a previous life's, on-demand
    assert len(guard.launch(5)) == 1  # 0.4 listed + 0.4: one more fits, not two


def test_under_unit_billing_an_instance_replaced_within_its_hour_is_paid_twice(tmp_path):
    clock = {"t": 0.0}
    guard, cloud, limits = _guard(tmp_path, clock, Billing(3600.0), budget=1.0)
    launched = guard.launch(2)
    clock["t"] = 600.0
    guard.terminate([i.instance_id for i in launched])
    guard.list_instances()
    clock["t"] = 700.0
    assert guard.launch(1) == []  # nothing runs, but 0.8 of the hour's 1.0 is already charged
    clock["t"] = 3601.0
    assert len(guard.launch(2)) == 2  # the charges left the rolling hour


def test_under_per_second_billing_a_released_instance_paid_only_its_seconds(tmp_path):
    clock = {"t": 0.0}
    guard, cloud, _ = _guard(tmp_path, clock, Billing.per_second(), budget=1.0)
    launched = guard.launch(2)
    clock["t"] = 600.0
    guard.terminate([i.instance_id for i in launched])
    guard.list_instances()
    assert len(guard.launch(5)) == 2  # 0.13 charged; the rate bound allows two at 0.4


def test_the_budget_in_units_still_works_beside_it(tmp_path):
    clock = {"t": 0.0}
    guard, cloud, limits = _guard(tmp_path, clock, Billing(900.0), budget=None, budget_units_per_hour=4)
    assert len(guard.launch(3)) == 3
    clock["t"] = 1000.0
    assert guard.launch(3) == [] and "budget_units_per_hour" in limits.hit[-1]
