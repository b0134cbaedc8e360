"""A spot instance the cloud takes back is an interruption the guard tells of, not a failure that pauses launches."""

from __future__ import annotations

from tests.execute.memory_cloud import MemoryCloud
from wire_daemon.core.billing import Billing
from wire_daemon.core.instances import LifecycleState
from wire_daemon.core.journal import InstanceReclaimed, Journal
from wire_daemon.core.pricing import Market
from wire_daemon.execute.guarded_cloud import GuardedCloud, SafetyConfig
from wire_daemon.persist.store import StateStore


class Events:
    def __init__(self) -> None:
        self.seen: list[object] = []

    def notify(self, event: object) -> None:
        self.seen.append(event)


CONFIG = SafetyConfig(backoff_initial_s=300.0, died_young_s=600.0)


def _guard(tmp_path, clock, cloud=None):
    cloud = cloud or MemoryCloud(lambda: clock["t"], state="pending", zone="az-1b")
    events, journal = Events(), Journal()
    journal.subscribe(events)
    guard = GuardedCloud(cloud, StateStore(tmp_path / "s.sqlite"), CONFIG, Billing(3600.0), lambda: clock["t"], journal)
    return guard, cloud, events


def test_a_reclaimed_spot_instance_is_told_with_its_type_and_zone_and_launches_go_on(tmp_path):
    clock = {"t": 0.0}
    guard, cloud, events = _guard(tmp_path, clock)
    (spot,) = guard.launch(1, instance_type="c5.large", market=Market.SPOT)
    guard.lifecycle.move(spot.instance_id, LifecycleState.JOINED)  # its worker ran jobs
    clock["t"] = 120.0
    del cloud.live[spot.instance_id]  # the market took it back, two minutes in
    guard.list_instances()
    reclaims = [e for e in events.seen if isinstance(e, InstanceReclaimed)]
    assert reclaims == [InstanceReclaimed(120.0, spot.instance_id, "c5.large", "az-1b")]
    assert len(guard.launch(1, instance_type="c5.large", market=Market.SPOT)) == 1  # no back-off


def test_an_on_demand_instance_dying_young_is_still_a_failure(tmp_path):
    clock = {"t": 0.0}
    guard, cloud, events = _guard(tmp_path, clock)
    (plain,) = guard.launch(1, instance_type="c5.large")
    clock["t"] = 120.0
    del cloud.live[plain.instance_id]
    guard.list_instances()
    assert not any(isinstance(e, InstanceReclaimed) for e in events.seen)
    assert guard.launch(1) == []  # paused: a broken image must not become a redeploy loop


def test_a_spot_instance_gone_before_it_joined_is_judged_as_a_failure(tmp_path):
    clock = {"t": 0.0}
    guard, cloud, events = _guard(tmp_path, clock)
    (spot,) = guard.launch(1, instance_type="c5.large", market=Market.SPOT)
    clock["t"] = 300.0
    del cloud.live[spot.instance_id]  # a broken image powers itself off, or an early reclaim: cannot tell
    guard.list_instances()
    assert not any(isinstance(e, InstanceReclaimed) for e in events.seen)
    assert guard.launch(1, instance_type="c5.large", market=Market.SPOT) == []  # paused, as on-demand


def test_a_spot_instance_gone_while_the_daemon_was_down_is_forgotten_not_counted_as_a_reclaim(tmp_path):
    """Nothing tells a reclaim from the worker's own power-off (its dead-man switch) once the daemon was away:
    a restarted daemon forgets the instance, and neither counts an interruption nor backs off spot launches."""
    clock = {"t": 0.0}
    guard, cloud, _ = _guard(tmp_path, clock)
    (spot,) = guard.launch(1, instance_type="c5.large", market=Market.SPOT)
    guard.lifecycle.move(spot.instance_id, LifecycleState.JOINED)
    clock["t"] = 5000.0
    del cloud.live[spot.instance_id]  # gone while no daemon watched
    again, _, events = _guard(tmp_path, clock, cloud)  # the restarted daemon, on the same state file
    assert again.reconcile().forgotten == [spot.instance_id]
    again.list_instances()
    assert not any(isinstance(e, InstanceReclaimed) for e in events.seen)
    assert len(again.launch(1, instance_type="c5.large", market=Market.SPOT)) == 1  # no back-off


def test_a_spot_worker_gone_while_htcondor_was_away_is_no_reclaim_and_the_excuse_holds_once(tmp_path):
    """HTCondor away past the workers' dead-man switch: they power themselves off, which the cloud shows as it
    shows a reclaim. The first listing after the excuse counts none; a later one counts again."""
    clock = {"t": 0.0}
    guard, cloud, events = _guard(tmp_path, clock)
    first, second = guard.launch(2, instance_type="c5.large", market=Market.SPOT)
    for spot in (first, second):
        guard.lifecycle.move(spot.instance_id, LifecycleState.JOINED)
    guard.excuse_vanished("HTCondor was away")
    clock["t"] = 5000.0
    del cloud.live[first.instance_id]
    guard.list_instances()
    assert not any(isinstance(e, InstanceReclaimed) for e in events.seen)
    assert guard.lifecycle.state_of(first.instance_id) is LifecycleState.VANISHED  # forgotten, not kept
    assert len(guard.launch(1, instance_type="c5.large", market=Market.SPOT)) == 1  # no pause either
    clock["t"] = 5100.0
    del cloud.live[second.instance_id]  # watched again: the market's reclaim is told
    guard.list_instances()
    assert [e.instance_id for e in events.seen if isinstance(e, InstanceReclaimed)] == [second.instance_id]
