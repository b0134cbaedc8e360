"""The emulated spot market: prices, reclaims with a notice, storms and capacity."""

from dataclasses import replace

import pytest

from wire_daemon.core.billing import Billing
from wire_daemon.core.config import EmulationConfig
from wire_daemon.core.errors import CloudCapacityError, ConfigError
from wire_daemon.core.events import EventKind
from wire_daemon.core.pricing import Market
from wire_daemon.core.workflow import TaskSpec, build_workflow
from wire_daemon.emulated.market import SpotMarket
from wire_daemon.emulated.site import EmulatedSite, critical_path_s, spot_market

PER_SECOND = Billing.per_second()


def _site(specs, market=None, billing=PER_SECOND, **overrides):
    config = EmulationConfig(
        **{
            "boot_lag_s": 60.0,
            "negotiation_interval_s": 5.0,
            "submit_delay_s": 1.0,
            "initial_instances": 0,
            **overrides,
        }
    )
    workflow = build_workflow("w", "test", specs)
    return EmulatedSite(workflow, config, slots_per_instance=2, billing=billing, market=market, spot_price_ratio=0.35)


def _tasks(n, runtime_s=600.0):
    return [TaskSpec(f"T{i}", "t", runtime_s=runtime_s) for i in range(n)]


def _run(site, until=100_000.0):
    site.advance_to(until)
    return site


def test_spot_capacity_costs_the_ratio_of_on_demand_when_nothing_is_reclaimed():
    bills = {}
    for market in Market:
        site = _site(_tasks(4))
        site.launch(2, market=market)
        _run(site, 2000.0)
        assert site.finished and site.interruptions == 0
        bills[market] = site.cost_money(site.last_finish)
    assert bills[Market.SPOT] == pytest.approx(0.35 * bills[Market.ON_DEMAND])


def test_a_market_without_interruptions_replays_as_a_site_without_one():
    plain, quiet = _site(_tasks(6)), _site(_tasks(6), market=SpotMarket(seed=3))
    for site in (plain, quiet):
        site.launch(2)
        _run(site)
    assert plain.last_finish == quiet.last_finish and plain.cost_money(1e5) == quiet.cost_money(1e5)


def test_a_reclaim_gives_notice_then_ends_the_instance_and_its_jobs_rerun():
    site = _site(_tasks(2, runtime_s=3600.0), market=SpotMarket(interruptions_per_hour=4.0, seed=0))
    (spot,) = site.launch(1, market=Market.SPOT)
    site.advance_to(20_000.0)
    events = site.poll_events()
    assert site.interruptions >= 1
    evicted = [e for e in events if e.kind is EventKind.EVICTED]
    assert evicted and site.interrupted_slot_s > 0
    assert all(e.host == spot.instance_id for e in events if e.kind is EventKind.STARTED)  # only it existed
    assert not site.list_instances()  # reclaimed, nothing relaunched it
    assert not site.finished  # its tasks wait for capacity: nothing is lost, nothing runs


def test_no_job_starts_on_a_worker_after_its_notice():
    market = SpotMarket(interruptions_per_hour=0.0, notice_s=120.0, storm_at_s=100.0, storm_fraction=1.0)
    site = _site(_tasks(6, runtime_s=50.0), market=market)
    site.launch(1, market=Market.SPOT)
    site.advance_to(100.0)  # booted at 60 s, two tasks started; the storm notices it at 100 s
    started_before = {e.task_id for e in site.poll_events() if e.kind is EventKind.STARTED}
    site.advance_to(400.0)
    later = site.poll_events()
    assert started_before and not [e for e in later if e.kind is EventKind.STARTED]
    assert site.interruptions == 1 and not site.list_instances()  # ended at 220 s


def test_a_storm_reclaims_half_the_spot_capacity_of_the_main_type_at_once():
    market = SpotMarket(storm_at_s=300.0, storm_fraction=0.5, notice_s=120.0)
    site = _site(_tasks(40, runtime_s=3000.0), market=market)
    site.launch(5, market=Market.SPOT)
    site.launch(2, market=Market.ON_DEMAND)
    site.advance_to(299.0)
    assert site.interruptions == 0
    site.advance_to(421.0)
    assert site.interruptions == 3  # ceil(0.5 x 5); on-demand capacity is never reclaimed
    left = site.list_instances()
    assert sum(1 for i in left if i.market is Market.SPOT) == 2 and len(left) == 4


def test_spot_launches_beyond_capacity_fail_like_insufficient_capacity():
    site = _site(_tasks(1), market=SpotMarket(capacity=3))
    with pytest.raises(CloudCapacityError, match="2 of 5") as failed:
        site.launch(5, market=Market.SPOT)
    assert len(failed.value.partial) == 3 and site.capacity_failures == 2  # what fitted was launched
    with pytest.raises(CloudCapacityError):
        site.launch(1, market=Market.SPOT)
    assert len(site.launch(2, market=Market.ON_DEMAND)) == 2  # on-demand is another pool


def test_reclaims_are_deterministic_for_a_seed():
    def run(seed):
        site = _site(_tasks(20, runtime_s=1800.0), market=SpotMarket(interruptions_per_hour=1.0, seed=seed))
        site.launch(4, market=Market.SPOT)
        site.advance_to(3000.0)
        return site.interruptions, site.interrupted_slot_s

    assert run(7) == run(7)


@pytest.mark.parametrize(
    "fields, key",
    [
        ({"interruptions_per_hour": -1.0}, "interruptions"),
        ({"storm_fraction": 0.0}, "storm"),
        ({"capacity": -1}, "capacity"),
    ],
)
def test_a_market_with_impossible_settings_is_refused_in_one_line(fields, key):
    with pytest.raises(ConfigError, match=key):
        SpotMarket(**fields)


def test_an_emulation_config_storm_lands_inside_the_critical_path_and_depends_on_the_seed():
    workflow = build_workflow(
        "w", "test", [TaskSpec("A", "a", runtime_s=100.0), TaskSpec("B", "b", ("A",), runtime_s=300.0)]
    )
    config = EmulationConfig(boot_lag_s=60.0, storm=True, bandwidth_bytes_per_s=1e9)
    assert critical_path_s(workflow, config) == pytest.approx(400.0)
    times = {spot_market(workflow, replace(config, seed=s)).storm_at_s for s in range(5)}
    assert len(times) == 5 and all(60.0 <= t <= 460.0 for t in times)
    assert spot_market(workflow, replace(config, storm=False)).storm_at_s is None


def test_a_job_starts_on_the_market_it_prefers_when_both_have_free_slots():
    site = _site([TaskSpec("L", "long", runtime_s=3000.0), TaskSpec("S", "short", runtime_s=30.0)])
    (spot,) = site.launch(1, market=Market.SPOT)
    (on_demand,) = site.launch(1, market=Market.ON_DEMAND)
    site.prefer_market("L", Market.ON_DEMAND)
    site.prefer_market("S", Market.SPOT)
    site.advance_to(100.0)
    hosts = {e.task_id: e.host for e in site.poll_events() if e.kind is EventKind.STARTED}
    assert hosts == {"L": on_demand.instance_id, "S": spot.instance_id}


def test_a_preference_is_a_rank_not_a_requirement():
    site = _site([TaskSpec("L", "long", runtime_s=3000.0)])
    (spot,) = site.launch(1, market=Market.SPOT)
    site.prefer_market("L", Market.ON_DEMAND)  # no on-demand capacity at all: it runs on spot
    site.advance_to(100.0)
    assert [e.host for e in site.poll_events() if e.kind is EventKind.STARTED] == [spot.instance_id]


def test_a_job_that_requires_on_demand_waits_for_an_on_demand_slot_and_runs_anywhere_once_lifted():
    site = _site([TaskSpec("L", "long", runtime_s=3000.0), TaskSpec("S", "short", runtime_s=30.0)])
    (spot,) = site.launch(1, market=Market.SPOT)
    site.prefer_market("L", Market.ON_DEMAND, required=True)
    site.advance_to(100.0)  # the spot worker is up with a free slot: only S starts
    assert {e.task_id: e.host for e in site.poll_events() if e.kind is EventKind.STARTED} == {"S": spot.instance_id}
    (on_demand,) = site.launch(1, market=Market.ON_DEMAND)
    site.advance_to(200.0)
    assert [(e.task_id, e.host) for e in site.poll_events() if e.kind is EventKind.STARTED] == [
        ("L", on_demand.instance_id)
    ]


def test_a_lifted_requirement_lets_the_waiting_job_start_on_spot():
    site = _site([TaskSpec("L", "long", runtime_s=3000.0)])
    (spot,) = site.launch(1, market=Market.SPOT)
    site.prefer_market("L", Market.ON_DEMAND, required=True)
    site.advance_to(100.0)
    assert not [e for e in site.poll_events() if e.kind is EventKind.STARTED]
    site.prefer_market("L", Market.ON_DEMAND)
    site.advance_to(110.0)
    assert [e.host for e in site.poll_events() if e.kind is EventKind.STARTED] == [spot.instance_id]
