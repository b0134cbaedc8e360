"""What the loops learn of the spot market outlives a change of DAG, and a restart: the state file keeps it."""

from __future__ import annotations

import pytest

from tests.runtime.fakes import NoCloud
from tests.runtime.test_spot_prices_read import EPOCH, QuotingCloud, _runtime
from wire_daemon.core.instances import Instance, LifecycleState
from wire_daemon.core.pricing import Market
from wire_daemon.execute.market_fallback import SpotFallback
from wire_daemon.persist.store import InstanceRecord
from wire_daemon.plan.placement import MarketPlacement
from wire_daemon.runtime.runtimes import MARKET_KEY


def _placement(loop):
    policy = loop.policy
    while not isinstance(policy, MarketPlacement):
        policy = policy.inner
    return policy


def _fallback(loop) -> SpotFallback:
    assert isinstance(loop.cloud, SpotFallback)
    return loop.cloud


def test_what_the_loops_learn_of_the_market_outlives_a_change_of_dag(tmp_path):
    runtime, _ = _runtime(tmp_path, QuotingCloud(), lambda: EPOCH)
    old = runtime.loop
    _placement(old).rate.reclaims = 3  # as if seen
    _fallback(old).ledger.backed_off_until[""] = EPOCH + 900.0
    runtime.loop = runtime._new_loop(previous=old)  # a workflow came
    assert _placement(runtime.loop).rate is _placement(old).rate
    assert _fallback(runtime.loop).backed_off("")


def test_a_restart_keeps_the_back_off_and_the_learned_reclaim_rate(tmp_path):
    """A daemon restarted within a back-off does not try at once the spot type the market refused; the rate it
    learned from an hour of reclaims is the one the next daemon weighs launches with."""
    now = [EPOCH]
    first, _ = _runtime(tmp_path, NoCloud(), lambda: now[0])
    rate = _placement(first.loop).rate
    rate.reclaims, rate.spot_seconds = 3, 7200.0
    _fallback(first.loop).ledger.backed_off_until["c5.xlarge"] = EPOCH + 900.0
    _fallback(first.loop).ledger.interruptions["c5.xlarge"] = [EPOCH - 60.0]
    learned = rate.per_second
    first.flush_notes()  # the end of an iteration
    first.store.close()
    now[0] += 300.0
    second, _ = _runtime(tmp_path, NoCloud(), lambda: now[0])
    assert _placement(second.loop).rate.per_second == learned
    assert _fallback(second.loop).backed_off("c5.xlarge")
    assert _fallback(second.loop).interruptions == 1
    now[0] += 900.0
    assert not _fallback(second.loop).backed_off("c5.xlarge")  # the back-off ends when it would have


class ListingCloud(NoCloud):
    def __init__(self, *ids: str) -> None:
        self.live = {i: Instance(i, EPOCH - 600.0, 4, market=Market.SPOT) for i in ids}

    def list_instances(self, include_unusable: bool = False) -> list[Instance]:
        return list(self.live.values())


def test_a_spot_instance_the_last_daemon_was_terminating_is_no_reclaim_when_it_goes(tmp_path):
    cloud = ListingCloud("i-ending", "i-kept")
    first, _ = _runtime(tmp_path, cloud, lambda: EPOCH)
    for instance_id, state in (("i-ending", LifecycleState.TERMINATING), ("i-kept", LifecycleState.JOINED)):
        first.store.record_instance(InstanceRecord(instance_id, None, EPOCH - 600.0, EPOCH - 600.0, 4, "", state))
    first.store.close()
    second, _ = _runtime(tmp_path, cloud, lambda: EPOCH + 60.0)
    fallback, rate = _fallback(second.loop), _placement(second.loop).rate
    rate.observe(EPOCH + 60.0, fallback.list_instances())
    del cloud.live["i-ending"]
    rate.observe(EPOCH + 120.0, fallback.list_instances())
    assert fallback.interruptions == 0 and rate.reclaims == 0
    del cloud.live["i-kept"]  # this one the cloud took back
    rate.observe(EPOCH + 180.0, fallback.list_instances())
    assert fallback.interruptions == 1 and rate.reclaims == 1


@pytest.mark.parametrize(
    "saved, why",
    [
        (
            '{"fallback": {"interruptions": {"x": "soon"}}}',
            "market.fallback.interruptions.x has a value that cannot be used (Input should be a valid list)",
        ),
        ("{half", "market is not JSON (Expecting property name enclosed in double quotes: line 1 column 2 (char 1))"),
    ],
)
def test_an_unreadable_market_memory_is_said_once_and_the_daemon_starts_without_it(tmp_path, saved, why):
    first, _ = _runtime(tmp_path, NoCloud(), lambda: EPOCH)
    first.store.set_meta(MARKET_KEY, saved)
    first.store.close()
    second, notes = _runtime(tmp_path, NoCloud(), lambda: EPOCH)
    assert _fallback(second.loop).interruptions == 0
    assert notes == [f"state file: {why}; the daemon starts without its market memory"]


def test_a_dry_run_neither_reads_nor_writes_the_real_pools_market(tmp_path):
    first, _ = _runtime(tmp_path, NoCloud(), lambda: EPOCH)
    _fallback(first.loop).ledger.backed_off_until[""] = EPOCH + 900.0
    first.flush_notes()
    first.store.close()
    dry, _ = _runtime(tmp_path, NoCloud(), lambda: EPOCH, dry_run=True)
    assert not _fallback(dry.loop).backed_off("")  # the phantom pool's market is its own
    _fallback(dry.loop).ledger.interruptions[""] = [EPOCH]
    dry.flush_notes()
    assert '"interruptions": {}' in (dry.store.get_meta(MARKET_KEY) or "")
