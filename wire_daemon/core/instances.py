"""Worker instances: what a cloud reports of one, and the lifecycle we drive it through.

Two views of an instance, kept apart on purpose:

* ``Instance.state`` is what the *cloud* says (pending, running, stopped,
  failed, terminated): a provider's word, refreshed at every listing.
* ``LifecycleState`` is where *we* are with it: requested, booting, joined,
  draining, terminating, terminated, or vanished (gone without us asking).
  Its allowed transitions live here and nowhere else; the state file persists
  it and ``wire-daemon status`` shows it.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from wire_daemon.core.errors import WireError

# Instance.state values the cloud providers report.
PENDING = "pending"  # launched, not running yet
RUNNING = "running"
STOPPED = "stopped"  # exists and may cost money, but cannot run jobs
FAILED = "failed"  # the cloud gave up on it (OpenStack ERROR)
TERMINATED = "terminated"  # gone or going away
LIVE_STATES = frozenset({PENDING, RUNNING})
UNUSABLE_STATES = frozenset({STOPPED, FAILED})


@dataclass(frozen=True)
class Instance:
    instance_id: str
    launch_time: float  # start of the first charging unit
    slots: int
    state: str = RUNNING  # the cloud's word: one of the provider states above
    address: str = ""
    instance_type: str = ""
    request_id: str = ""  # the launch request that created it (idempotent launches, reconcile)


class LifecycleState(str, Enum):
    REQUESTED = "requested"  # a launch request is open; the cloud has not answered yet
    BOOTING = "booting"  # the cloud has it; its startd has not joined the pool yet
    JOINED = "joined"  # its startd is in the pool
    DRAINING = "draining"  # released: no new job starts on it; terminated when its paid unit ends
    TERMINATING = "terminating"  # we asked the cloud to terminate it
    TERMINATED = "terminated"  # gone, because we asked
    VANISHED = "vanished"  # gone without us asking (spot reclaim, a crash, an operator)

    @property
    def is_live(self) -> bool:
        return self not in (LifecycleState.TERMINATED, LifecycleState.VANISHED)


_S = LifecycleState
_ALLOWED: dict[LifecycleState, frozenset[LifecycleState]] = {
    _S.REQUESTED: frozenset({_S.BOOTING, _S.JOINED, _S.TERMINATED}),  # a rolled-back request ends it
    _S.BOOTING: frozenset({_S.JOINED, _S.DRAINING, _S.TERMINATING, _S.VANISHED}),
    _S.JOINED: frozenset({_S.DRAINING, _S.TERMINATING, _S.VANISHED}),
    # A drain can be given up (the plan wants the instance again) or completed.
    _S.DRAINING: frozenset({_S.JOINED, _S.TERMINATING, _S.VANISHED}),
    _S.TERMINATING: frozenset({_S.TERMINATED, _S.VANISHED}),
    _S.TERMINATED: frozenset(),
    _S.VANISHED: frozenset(),
}


class LifecycleError(WireError):
    """A transition the lifecycle does not allow: a bug, never an input problem."""


def can_move(current: LifecycleState, new: LifecycleState) -> bool:
    return new == current or new in _ALLOWED[current]


def check_move(instance_id: str, current: LifecycleState, new: LifecycleState) -> LifecycleState:
    """``new`` if the lifecycle allows it from ``current``; staying put is always allowed."""
    if not can_move(current, new):
        raise LifecycleError(f"instance {instance_id}: no transition from {current.value} to {new.value}")
    return new


class Lifecycle:
    """The lifecycle state of every instance one pool has had, in memory.

    The emulated site and the loop use it as is; on a real cloud the state
    file persists the same states (``core.store``).
    """

    def __init__(self) -> None:
        self._state: dict[str, LifecycleState] = {}

    def state_of(self, instance_id: str) -> LifecycleState | None:
        return self._state.get(instance_id)

    def move(self, instance_id: str, new: LifecycleState) -> LifecycleState:
        current = self._state.get(instance_id)
        self._state[instance_id] = new if current is None else check_move(instance_id, current, new)
        return new

    def observe(self, instance_id: str, new: LifecycleState) -> None:
        """Move if allowed; a late or repeated observation of an older state is ignored."""
        current = self._state.get(instance_id)
        if current is None or can_move(current, new):
            self._state[instance_id] = new

    def in_state(self, state: LifecycleState) -> list[str]:
        return [i for i, s in self._state.items() if s == state]

    def items(self) -> list[tuple[str, LifecycleState]]:
        return list(self._state.items())
