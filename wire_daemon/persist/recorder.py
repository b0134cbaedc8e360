"""The state file as an observer of the instance lifecycle.

``Lifecycle`` (``core.instances``) is the one writer of an instance's life;
it publishes each move on the journal, and ``StoreRecorder`` persists what it
publishes: a new instance's record, each change of state, the end the cloud
confirmed (billing stops there), and the planned end of a drained instance
(``InstanceReleased.terminate_at``, moved by ``ReleasePostponed``), so a
restarted daemon still terminates it at that time.
"""

from __future__ import annotations

from wire_daemon.core.instances import InstanceMoved
from wire_daemon.core.journal import InstanceReleased, ReleasePostponed
from wire_daemon.persist.store import InstanceRecord, StateStore


class StoreRecorder:
    """Persists the lifecycle's moves and the planned ends in one state store."""

    def __init__(self, store: StateStore) -> None:
        self.store = store

    def notify(self, event: object) -> None:
        if isinstance(event, InstanceMoved):
            self._moved(event)
        elif isinstance(event, (InstanceReleased, ReleasePostponed)):
            self.store.set_release_at(event.instance_id, event.terminate_at)

    def _moved(self, event: InstanceMoved) -> None:
        if event.old is None and event.instance is not None:
            i = event.instance
            record = InstanceRecord(
                i.instance_id, event.request_id, i.launch_time, i.launch_time, i.slots, i.address, event.new
            )
            self.store.record_instance(record)
        elif event.reason:  # an end the cloud confirmed
            self.store.mark_ended(event.instance_id, event.reason, now=event.time, state=event.new)
        else:
            self.store.set_lifecycle(event.instance_id, event.new)
