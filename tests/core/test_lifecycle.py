"""The instance lifecycle: its transitions, and how a look at the cloud moves it."""

from __future__ import annotations

import pytest

from wire_daemon.core.instances import (
    PENDING,
    RUNNING,
    Instance,
    Lifecycle,
    LifecycleError,
    LifecycleState,
    can_move,
)

S = LifecycleState


def test_the_allowed_path_and_a_forbidden_jump():
    life = Lifecycle()
    for state in (S.BOOTING, S.JOINED, S.DRAINING, S.TERMINATING, S.TERMINATED):
        life.move("i-1", state)
    assert life.state_of("i-1") == S.TERMINATED
    with pytest.raises(LifecycleError, match="i-1: no transition from terminated to joined"):
        life.move("i-1", S.JOINED)
    assert not can_move(S.VANISHED, S.BOOTING) and can_move(S.DRAINING, S.JOINED)  # a drain can be given up


def test_sync_adopts_joins_and_tells_terminated_from_vanished():
    moves: list[tuple[str, LifecycleState]] = []
    life = Lifecycle(on_move=lambda i, s: moves.append((i, s)))
    life.move("asked", S.BOOTING)
    life.move("asked", S.TERMINATING)
    life.move("lost", S.JOINED)
    result = life.sync([Instance("new", 0.0, 4, PENDING), Instance("up", 0.0, 4, RUNNING)])
    assert result.adopted == ["new", "up"] and result.joined == ["up"]
    assert result.terminated == ["asked"] and result.vanished == ["lost"]
    assert life.state_of("new") == S.BOOTING and ("lost", S.VANISHED) in moves


def test_a_join_check_holds_a_running_instance_in_booting():
    life = Lifecycle()
    life.sync([Instance("i-1", 0.0, 4, RUNNING)], joined=lambda i: False)
    assert life.state_of("i-1") == S.BOOTING
    life.sync([Instance("i-1", 0.0, 4, RUNNING)], joined=lambda i: True)
    assert life.state_of("i-1") == S.JOINED
