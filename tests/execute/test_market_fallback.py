"""The on-demand fallback in front of a cloud: which reclaims start a back-off."""

from collections.abc import Sequence

from tests.execute.memory_cloud import MemoryCloud
from wire_daemon.core.errors import CloudCapacityError
from wire_daemon.core.instances import Instance
from wire_daemon.core.journal import Journal
from wire_daemon.core.pricing import Market
from wire_daemon.execute.market_fallback import FallbackLedger, FallbackRule, SpotFallback


def _after_two_reclaims(rule: FallbackRule) -> tuple[SpotFallback, Sequence[Instance]]:
    cloud = MemoryCloud(lambda: 0.0)
    fallback = SpotFallback(cloud, lambda: 100.0, Journal(), rule)
    fallback.launch(3, market=Market.SPOT)
    fallback.list_instances()
    cloud.reclaim(2)
    fallback.list_instances()
    return fallback, fallback.launch(1, market=Market.SPOT)


def test_two_reclaims_send_spot_launches_on_demand_by_default():
    fallback, made = _after_two_reclaims(FallbackRule())
    assert fallback.interruptions == 2 and fallback.backed_off("")
    assert [i.market for i in made] == [Market.ON_DEMAND]


def test_reclaims_seen_together_count_once_when_the_rule_says_so():
    fallback, made = _after_two_reclaims(FallbackRule(bursts_count_once=True))
    assert fallback.interruptions == 2 and not fallback.backed_off("")
    assert [i.market for i in made] == [Market.SPOT]


def _after_two_separate_reclaims(rule: FallbackRule) -> tuple[SpotFallback, MemoryCloud]:
    """Three spot instances, then two reclaims, each seen in a listing of its own."""
    cloud = MemoryCloud(lambda: 0.0)
    fallback = SpotFallback(cloud, lambda: 100.0, Journal(), rule)
    fallback.launch(3, market=Market.SPOT)
    for _ in range(2):
        fallback.list_instances()
        cloud.reclaim(1)
    fallback.list_instances()
    return fallback, cloud


def test_separate_reclaims_still_back_off_when_bursts_count_once():
    fallback, _ = _after_two_separate_reclaims(FallbackRule(bursts_count_once=True))
    assert fallback.interruptions == 2 and fallback.backed_off("")


def test_with_back_off_on_reclaims_off_only_a_capacity_error_backs_off():
    fallback, cloud = _after_two_separate_reclaims(FallbackRule(back_off_on_reclaims=False))
    assert fallback.interruptions == 2 and not fallback.backed_off("")
    assert [i.market for i in fallback.launch(1, market=Market.SPOT)] == [Market.SPOT]
    cloud.launch = _short_of_spot(cloud.launch)
    assert [i.market for i in fallback.launch(1, market=Market.SPOT)] == [Market.ON_DEMAND]
    assert fallback.backed_off("")


def _short_of_spot(launch):
    def refusing(count, request_id=None, *, instance_type="", market=Market.ON_DEMAND):
        if market is Market.SPOT:
            raise CloudCapacityError("test", "launch", "InsufficientInstanceCapacity")
        return launch(count, request_id, instance_type=instance_type, market=market)

    return refusing


def test_spot_instances_gone_while_the_pool_was_unwatched_neither_count_nor_back_off():
    cloud = MemoryCloud(lambda: 0.0)
    fallback = SpotFallback(cloud, lambda: 100.0, Journal(), FallbackRule())
    fallback.launch(3, market=Market.SPOT)
    fallback.list_instances()
    fallback.excuse_vanished("HTCondor was away")
    cloud.reclaim(2)  # or powered off by their dead-man switch: nobody watched
    fallback.list_instances()
    assert fallback.interruptions == 0 and not fallback.backed_off("")
    cloud.reclaim(1)  # watched again
    fallback.list_instances()
    assert fallback.interruptions == 1


def test_a_ledger_handed_to_a_new_fallback_keeps_its_back_off_and_what_we_terminated():
    cloud = MemoryCloud(lambda: 0.0)
    ledger = FallbackLedger()
    first = SpotFallback(cloud, lambda: 100.0, Journal(), FallbackRule(), ledger)
    made = first.launch(3, market=Market.SPOT)
    first.list_instances()
    first.terminate([made[0].instance_id])  # ours, gone before the next listing
    cloud.reclaim(1)
    cloud.launch = _short_of_spot(cloud.launch)
    first.launch(1, market=Market.SPOT)  # a capacity error: a back-off
    second = SpotFallback(cloud, lambda: 200.0, Journal(), FallbackRule(), ledger)  # a new DAG, a new loop
    second.list_instances()
    assert second.backed_off("")
    assert second.interruptions == 1  # the instance reclaimed, not the one the last loop terminated


def test_the_back_offs_in_force_are_those_not_yet_over():
    ledger = FallbackLedger(backed_off_until={"c5.large": 1_000.0, "m5.large": 2_000.0})
    clock = lambda: 1_500.0  # noqa: E731
    fallback = SpotFallback(MemoryCloud(clock), clock, Journal(), FallbackRule(), ledger)
    assert fallback.back_offs() == {"m5.large": 2_000.0}
