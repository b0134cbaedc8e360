"""The spot peers and the on-demand fallback, run by the loop on the emulated spot market."""

from wire_daemon.core.billing import Billing
from wire_daemon.core.config import EmulationConfig, SteeringConfig
from wire_daemon.core.journal import Journal, NoticeBox
from wire_daemon.core.pricing import Market
from wire_daemon.core.run_state import RunState
from wire_daemon.core.workflow import TaskSpec, build_workflow
from wire_daemon.emulated.market import SpotMarket
from wire_daemon.emulated.site import EmulatedSite
from wire_daemon.execute.market_fallback import FallbackRule, SpotBackOff, SpotFallback, SpotInterrupted
from wire_daemon.loop.mape import MapeLoop
from wire_daemon.loop.schedule import iteration_times, release_until
from wire_daemon.plan.spot_peers import annex_spot, reactive_spot

STEERING = SteeringConfig(charging_unit_s=1.0, interval_s=180.0, slots_per_instance=2, max_instances=4)


def _run(policy_of, market: SpotMarket, tasks: int = 24, runtime_s: float = 900.0, fallback: bool = True):
    workflow = build_workflow("w", "test", [TaskSpec(f"T{i}", "t", runtime_s=runtime_s) for i in range(tasks)])
    emulation = EmulationConfig(boot_lag_s=180.0, initial_instances=0)
    site = EmulatedSite(workflow, emulation, 2, Billing.per_second(), market=market, spot_price_ratio=0.35)
    journal, notices = Journal(), NoticeBox()
    journal.subscribe(notices)
    policy = policy_of(STEERING)
    cloud = SpotFallback(site, site.now, journal, FallbackRule()) if fallback else site
    loop = MapeLoop(RunState(workflow), site, cloud, site, policy, STEERING, journal=journal)
    times = iteration_times(0.0, STEERING.interval_s)
    now = next(times)
    for _ in range(500):
        site.advance_to(now)
        if site.finished:
            break
        loop.iterate(now)
        now = next(times)
        release_until(loop, site, now)
    return site, notices.take()


def test_reactive_spot_buys_spot_and_every_task_completes_through_reclaims():
    site, notices = _run(reactive_spot, SpotMarket(interruptions_per_hour=1.0, seed=1))
    assert site.finished and site.interruptions > 0 and site.interrupted_slot_s > 0
    assert any(isinstance(n, SpotInterrupted) for n in notices)
    assert {i.market for i in site.all_instances()} >= {Market.SPOT}


def test_a_capacity_error_sends_reactive_spot_to_on_demand_for_a_back_off():
    site, notices = _run(reactive_spot, SpotMarket(capacity=1))
    markets = [i.market for i in site.all_instances()]
    assert site.finished and markets.count(Market.SPOT) >= 1 and Market.ON_DEMAND in markets
    assert any(isinstance(n, SpotBackOff) for n in notices)


def test_annex_spot_keeps_a_full_spot_pool_and_replaces_what_is_reclaimed():
    site, _ = _run(annex_spot, SpotMarket(interruptions_per_hour=2.0, seed=2), fallback=False)
    launched = site.all_instances()
    assert site.finished and all(i.market is Market.SPOT for i in launched)
    assert len(launched) > STEERING.max_instances  # the reclaimed ones were replaced
