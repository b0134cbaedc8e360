"""The state file as the lifecycle's observer: it persists what the lifecycle publishes, and nothing else."""

from __future__ import annotations

from wire_daemon.core.instances import CloudState, Instance, Lifecycle, LifecycleState
from wire_daemon.core.journal import InstanceReleased, Journal, ReleasePostponed
from wire_daemon.persist.recorder import StoreRecorder
from wire_daemon.persist.store import StateStore

S = LifecycleState


def test_each_published_move_is_persisted(tmp_path):
    store = StateStore(tmp_path / "state.sqlite")
    journal = Journal()
    journal.subscribe(StoreRecorder(store))
    life = Lifecycle(journal=journal)
    life.admit(Instance("i-1", 10.0, 4, CloudState.PENDING, "10.0.0.1"), "req-1", time=10.0)
    (record,) = store.instances()
    assert (record.request_id, record.launch_time, record.slots, record.address, record.state) == (
        "req-1",
        10.0,
        4,
        "10.0.0.1",
        S.BOOTING,
    )
    life.move("i-1", S.JOINED)
    life.move("i-1", S.DRAINING)
    journal.publish(InstanceReleased(20.0, "i-1", 3590.0))
    assert (store.instances()[0].state, store.instances()[0].release_at) == (S.DRAINING, 3590.0)
    journal.publish(ReleasePostponed(3500.0, "i-1", 7190.0))  # its tasks would have been killed
    assert (store.instances()[0].state, store.instances()[0].release_at) == (S.DRAINING, 7190.0)
    life.move("i-1", S.TERMINATING)
    life.move("i-1", S.TERMINATED, reason="released", time=7190.0)
    assert store.instances() == []
    (ended,) = store.instances(live_only=False)
    assert (ended.state, ended.end_reason, ended.ended_at) == (S.TERMINATED, "released", 7190.0)
    store.close()


def test_a_move_without_facts_changes_no_row_it_does_not_have(tmp_path):
    """An instance known only to the loop (a dry run's phantom) never reaches the state file."""
    store = StateStore(tmp_path / "state.sqlite")
    journal = Journal()
    journal.subscribe(StoreRecorder(store))
    life = Lifecycle(journal=journal)
    life.sync([Instance("dry-run-0001", 0.0, 4)])
    journal.publish(InstanceReleased(1.0, "dry-run-0001", 50.0))
    assert store.instances(live_only=False) == []
    store.close()
