"""The instance lifecycle: its transitions, and how a look at the cloud moves it."""

from __future__ import annotations

import pytest

from wire_daemon.core.instances import (
    CloudState,
    Instance,
    InstanceMoved,
    Lifecycle,
    LifecycleError,
    LifecycleState,
    can_move,
)
from wire_daemon.core.journal import Journal

S = LifecycleState


class Seen:
    """An observer of the lifecycle: every move it published, as (instance, old, new)."""

    def __init__(self) -> None:
        self.events: list[InstanceMoved] = []

    def notify(self, event: object) -> None:
        if isinstance(event, InstanceMoved):
            self.events.append(event)

    @property
    def moves(self) -> list[tuple[str, LifecycleState | None, LifecycleState]]:
        return [(e.instance_id, e.old, e.new) for e in self.events]


def test_the_allowed_path_and_a_forbidden_jump():
    life = Lifecycle()
    for state in (S.BOOTING, S.JOINED, S.DRAINING, S.TERMINATING, S.TERMINATED):
        life.move("i-1", state)
    assert life.state_of("i-1") == S.TERMINATED
    with pytest.raises(LifecycleError, match="i-1: no transition from terminated to joined"):
        life.move("i-1", S.JOINED)
    assert not can_move(S.VANISHED, S.BOOTING) and can_move(S.DRAINING, S.JOINED)  # a drain can be given up


def test_sync_adopts_joins_and_tells_terminated_from_vanished():
    journal, seen = Journal(), Seen()
    journal.subscribe(seen)
    life = Lifecycle(journal=journal)
    life.move("asked", S.BOOTING)
    life.move("asked", S.TERMINATING)
    life.move("lost", S.JOINED)
    result = life.sync([Instance("new", 0.0, 4, CloudState.PENDING), Instance("up", 0.0, 4, CloudState.RUNNING)])
    assert result.adopted == ["new", "up"] and result.joined == ["up"]
    assert result.terminated == ["asked"] and result.vanished == ["lost"]
    assert life.state_of("new") == S.BOOTING and ("lost", S.JOINED, S.VANISHED) in seen.moves


def test_a_join_check_holds_a_running_instance_in_booting():
    life = Lifecycle()
    life.sync([Instance("i-1", 0.0, 4, CloudState.RUNNING)], joined=lambda i: False)
    assert life.state_of("i-1") == S.BOOTING
    life.sync([Instance("i-1", 0.0, 4, CloudState.RUNNING)], joined=lambda i: True)
    assert life.state_of("i-1") == S.JOINED


def test_every_move_is_checked_and_published_once():
    journal, seen = Journal(), Seen()
    journal.subscribe(seen)
    life = Lifecycle([("i-1", S.JOINED)], journal=journal)
    life.move("i-1", S.DRAINING)
    life.move("i-1", S.DRAINING)  # staying put publishes nothing
    with pytest.raises(LifecycleError):
        life.move("i-1", S.BOOTING)
    assert seen.moves == [("i-1", S.JOINED, S.DRAINING)] and life.state_of("i-1") == S.DRAINING


def test_an_end_the_cloud_confirms_is_published_even_when_the_state_says_so():
    journal, seen = Journal(), Seen()
    journal.subscribe(seen)
    life = Lifecycle([("i-1", S.VANISHED)], journal=journal)
    life.move("i-1", S.VANISHED, reason="vanished", time=7.0)
    assert [(e.new, e.reason, e.time) for e in seen.events] == [(S.VANISHED, "vanished", 7.0)]


def test_sync_checks_its_moves_too():
    """The listing moves go through the same check as any other: a jump the table forbids raises."""
    life = Lifecycle([("i-1", S.REQUESTED)])
    life.sync([])  # a request has no instance yet: nothing to notice
    assert life.state_of("i-1") == S.REQUESTED
    life = Lifecycle([("i-2", S.TERMINATED)])
    life.sync([Instance("i-2", 0.0, 4, CloudState.RUNNING)])  # ended for us: a listing does not bring it back
    assert life.state_of("i-2") == S.TERMINATED


def test_admit_publishes_the_instance_facts_once():
    journal, seen = Journal(), Seen()
    journal.subscribe(seen)
    life = Lifecycle(journal=journal)
    up = Instance("i-1", 5.0, 4, CloudState.PENDING, address="10.0.0.1")
    assert life.admit(up, "req-1", time=5.0) and not life.admit(up)
    assert [(e.old, e.new, e.instance, e.request_id) for e in seen.events] == [(None, S.BOOTING, up, "req-1")]


def test_cloud_states_are_an_enum_that_reads_as_the_word():
    assert CloudState("running") is CloudState.RUNNING and f"{CloudState.STOPPED}" == "stopped"
    assert Instance("i-1", 0.0, 4).state is CloudState.RUNNING
