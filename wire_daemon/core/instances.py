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

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from enum import Enum

from wire_daemon.core.errors import WireError
from wire_daemon.core.pricing import Market

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
    market: Market = Market.ON_DEMAND


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


@dataclass
class SyncResult:
    """What one look at the cloud's listing changed."""

    adopted: list[str] = field(default_factory=list)  # ours, but new to us (launched before a restart)
    joined: list[str] = field(default_factory=list)
    vanished: list[str] = field(default_factory=list)  # gone without us asking
    terminated: list[str] = field(default_factory=list)  # gone after we asked


class Lifecycle:
    """The lifecycle state of every instance one pool has had.

    ``on_move`` is called on every change: on a real site it persists the
    state in the state file, so a restarted daemon knows which instances were
    draining or being terminated.
    """

    def __init__(
        self,
        known: Iterable[tuple[str, LifecycleState]] = (),
        on_move: Callable[[str, LifecycleState], None] | None = None,
    ) -> None:
        self._state: dict[str, LifecycleState] = dict(known)
        self._on_move = on_move

    def state_of(self, instance_id: str) -> LifecycleState | None:
        return self._state.get(instance_id)

    def move(self, instance_id: str, new: LifecycleState) -> None:
        current = self._state.get(instance_id)
        if current is not None:
            check_move(instance_id, current, new)
        self._set(instance_id, new)

    def move_all(self, instance_ids: Iterable[str], new: LifecycleState) -> None:
        for instance_id in instance_ids:
            self.move(instance_id, new)

    def sync(self, listed: Sequence[Instance], joined: Callable[[str], bool] | None = None) -> SyncResult:
        """Follow the cloud's listing: adopt the unknown, notice joins, and who is gone.

        ``joined`` asks HTCondor whether an instance's startd is in the pool;
        without it (the emulated site) a running instance counts as joined.
        """
        result = SyncResult()
        present = {i.instance_id for i in listed}
        for instance in listed:
            state = self._state.get(instance.instance_id)
            if state is None:
                self._set(instance.instance_id, LifecycleState.BOOTING)
                result.adopted.append(instance.instance_id)
                state = LifecycleState.BOOTING
            if (
                state == LifecycleState.BOOTING
                and instance.state == RUNNING
                and (joined is None or joined(instance.instance_id))
            ):
                self._set(instance.instance_id, LifecycleState.JOINED)
                result.joined.append(instance.instance_id)
        for instance_id, state in list(self._state.items()):
            if instance_id in present or not state.is_live or state == LifecycleState.REQUESTED:
                continue
            gone = LifecycleState.TERMINATED if state == LifecycleState.TERMINATING else LifecycleState.VANISHED
            self._set(instance_id, gone)
            (result.terminated if gone == LifecycleState.TERMINATED else result.vanished).append(instance_id)
        return result

    def in_state(self, state: LifecycleState) -> list[str]:
        return [i for i, s in self._state.items() if s == state]

    def items(self) -> list[tuple[str, LifecycleState]]:
        return list(self._state.items())

    def _set(self, instance_id: str, new: LifecycleState) -> None:
        if self._state.get(instance_id) == new:
            return
        self._state[instance_id] = new
        if self._on_move is not None:
            self._on_move(instance_id, new)
