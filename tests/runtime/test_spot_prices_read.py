"""A submit host whose cloud quotes spot prices reads them at the refresh period, and the guard bills with them."""

from __future__ import annotations

import pytest

from tests.runtime.fakes import NoCloud
from wire_daemon.core.config import SteeringConfig
from wire_daemon.core.journal import Journal, Notice
from wire_daemon.core.pricing import Market
from wire_daemon.execute.guarded_cloud import SafetyConfig
from wire_daemon.persist.store import StateStore
from wire_daemon.runtime import runtimes
from wire_daemon.runtime.settings import CloudSettings, CondorSettings, Settings, SiteSettings

EPOCH = 1_800_000_000.0


class QuotingCloud(NoCloud):
    """A cloud that quotes one spot price per hour for its one type, or fails."""

    def __init__(self) -> None:
        self.price = 0.03
        self.fail = False
        self.reads = 0

    def spot_price_source(self):
        return self.read, 3600.0

    def read(self, names):
        self.reads += 1
        if self.fail:
            raise OSError("connection reset")
        return {n: self.price for n in names}


class Lines:
    def __init__(self, into: list[str]) -> None:
        self.into = into

    def notify(self, event: object) -> None:
        if isinstance(event, Notice):
            self.into.append(event.line)


def _runtime(tmp_path, cloud, clock, dry_run=False):
    settings = Settings(
        policy="pure-reactive",
        steering=SteeringConfig(price_per_hour=0.085, currency="USD", market="spot"),
        site=SiteSettings(kind="condor", submit_root=str(tmp_path / "submit")),
        cloud=CloudSettings(kind="ec2"),
        condor=CondorSettings(control="off", settle_s=0.0),
        safety=SafetyConfig(dry_run=dry_run),
    )
    journal = Journal()
    notes: list[str] = []
    journal.subscribe(Lines(notes))
    store = StateStore(tmp_path / "state.sqlite")
    return runtimes.SubmitHostRuntime(settings, store, journal, driver=cloud, clock=clock), notes


def test_prices_are_read_at_the_first_refresh_then_hourly_and_a_failure_keeps_the_last(tmp_path):
    now = [EPOCH]
    cloud = QuotingCloud()
    runtime, notes = _runtime(tmp_path, cloud, lambda: now[0])
    assert runtime.cloud.offers[""].spot_per_hour == 0.085 * 0.35  # before any read: the config's
    runtime.refresh()
    assert cloud.reads == 1 and runtime.cloud.offers[""].price_per_hour(Market.SPOT) == 0.03
    now[0] += 180.0
    cloud.price = 0.05
    runtime.refresh()
    assert cloud.reads == 1  # not every interval
    now[0] += 3600.0
    cloud.fail = True
    runtime.refresh()
    assert cloud.reads == 2 and runtime.cloud.offers[""].spot_per_hour == 0.03
    assert [n for n in notes if n.startswith("spot prices:")] == [
        "spot prices: reading them from the cloud failed (connection reset); keeping the last prices read"
    ]
    runtime.reconfigure(runtime.settings)  # a reload keeps the prices read
    assert runtime.cloud.offers[""].spot_per_hour == 0.03
    assert runtime.cloud.offers[""].on_demand_per_hour == 0.085


def test_a_cloud_that_does_not_quote_keeps_the_configured_prices(tmp_path):
    runtime, _ = _runtime(tmp_path, NoCloud(), lambda: EPOCH)
    runtime.refresh()
    assert runtime.spot_prices is None and abs(runtime.cloud.offers[""].spot_per_hour - 0.085 * 0.35) < 1e-12


def test_the_policy_weighs_spot_at_the_ratio_the_cloud_quotes_for_the_main_type(tmp_path):
    now = [EPOCH]
    cloud = QuotingCloud()
    runtime, _ = _runtime(tmp_path, cloud, lambda: now[0])
    assert runtime.loop.steering.spot_price_ratio == 0.35  # nothing read yet: the configured ratio
    runtime.refresh()
    assert runtime.loop.steering.spot_price_ratio == pytest.approx(0.03 / 0.085)
    runtime.reconfigure(runtime.settings)  # a reload keeps what was read
    assert runtime.loop.steering.spot_price_ratio == pytest.approx(0.03 / 0.085)
    runtime.loop = runtime._new_loop(previous=runtime.loop)  # a workflow came: the rebuilt loop too
    assert runtime.loop.steering.spot_price_ratio == pytest.approx(0.03 / 0.085)
    now[0] += 3600.0
    cloud.price = 0.2  # dearer than on-demand: spot buys nothing
    runtime.refresh()
    assert runtime.loop.steering.spot_price_ratio == 1.0
