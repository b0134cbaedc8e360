"""Worker instances: what a cloud reports of one, and the lifecycle we drive it through.

Two views of an instance, kept apart on purpose:

* ``Instance.state`` is what the *cloud* says (pending, running, stopped,
  failed, terminated): a provider's word, refreshed at every listing.
* ``LifecycleState`` is where *we* are with it: requested, booting, joined,
  draining, terminating, terminated, or vanished (gone without us asking).
  Its allowed transitions live here and nowhere else. ``Lifecycle`` is its
  one writer: it checks each move and publishes it on the journal, where the
  state file (``persist.recorder``) observes it; ``wire-daemon status`` shows it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from enum import Enum, StrEnum

from wire_daemon.core.errors import WireError
from wire_daemon.core.journal import Journal
from wire_daemon.core.pricing import Market


class CloudState(StrEnum):
    """What a cloud provider reports of an instance; each provider maps its own words onto these."""

    PENDING = "pending"  # launched, not running yet
    RUNNING = "running"  # up: its startd may run jobs
    STOPPED = "stopped"  # exists and may cost money, but cannot run jobs
    FAILED = "failed"  # the cloud gave up on it (OpenStack ERROR)
    TERMINATED = "terminated"  # gone or going away


LIVE_STATES = frozenset({CloudState.PENDING, CloudState.RUNNING})
UNUSABLE_STATES = frozenset({CloudState.STOPPED, CloudState.FAILED})


@dataclass(frozen=True)
class Instance:
    instance_id: str
    launch_time: float  # start of the first charging unit
    slots: int
    state: CloudState = CloudState.RUNNING  # the cloud's word
    address: str = ""
    instance_type: str = ""
    request_id: str = ""  # the launch request that created it (idempotent launches, reconcile)
    market: Market = Market.ON_DEMAND
    zone: str = ""  # the cloud's availability zone ("" where the cloud has none or did not say)


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


@dataclass(frozen=True)
class InstanceMoved:
    """One change of an instance's lifecycle state, as the lifecycle publishes it.

    ``old`` is None for an instance new to us; ``instance`` then carries what
    the cloud told of it (launch time, slots, address) when the guard admitted
    it from a launch or a listing (the loop's own listing only follows: a
    phantom of a dry run gets no record). An end the cloud confirmed
    (terminated, vanished) says why in ``reason``.
    ``time`` is when it was seen (None: the observer's own clock).
    """

    instance_id: str
    old: LifecycleState | None
    new: LifecycleState
    time: float | None = None
    reason: str = ""
    instance: Instance | None = None
    request_id: str | None = None


@dataclass
class SyncResult:
    """What one look at the cloud's listing changed."""

    adopted: list[str] = field(default_factory=list)  # ours, but new to us (launched before a restart)
    joined: list[str] = field(default_factory=list)
    vanished: list[str] = field(default_factory=list)  # gone without us asking
    terminated: list[str] = field(default_factory=list)  # gone after we asked


class Lifecycle:
    """The lifecycle state of every instance one pool has had: its only writer.

    Every change goes through ``move`` (or ``admit`` for an instance new to
    us), which checks it against the allowed transitions and publishes an
    ``InstanceMoved`` on the journal. Observers follow it: on a real site the
    state file persists each move, so a restarted daemon knows which
    instances were draining or being terminated.
    """

    def __init__(self, known: Iterable[tuple[str, LifecycleState]] = (), journal: Journal | None = None) -> None:
        self._state: dict[str, LifecycleState] = dict(known)
        self._journal = journal

    def state_of(self, instance_id: str) -> LifecycleState | None:
        return self._state.get(instance_id)

    def admit(self, instance: Instance, request_id: str | None = None, time: float | None = None) -> bool:
        """Take on an instance new to us (launched, or found in a listing) as booting; False if already known."""
        if instance.instance_id in self._state:
            return False
        self._state[instance.instance_id] = LifecycleState.BOOTING
        self._publish(
            InstanceMoved(
                instance.instance_id, None, LifecycleState.BOOTING, time, instance=instance, request_id=request_id
            )
        )
        return True

    def move(self, instance_id: str, new: LifecycleState, *, reason: str = "", time: float | None = None) -> None:
        """Move one instance, if the lifecycle allows it (``LifecycleError`` if not).

        ``reason`` marks an end the cloud confirmed (released, vanished, ...):
        it is published even when the state already says so, for billing
        stops there. Otherwise staying put publishes nothing.
        """
        current = self._state.get(instance_id)
        if current is not None:
            check_move(instance_id, current, new)
        if current == new and not reason:
            return
        self._state[instance_id] = new
        self._publish(InstanceMoved(instance_id, current, new, time, reason))

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
            if instance.instance_id not in self._state:  # its record is the cloud guard's to make: no facts here
                self.move(instance.instance_id, LifecycleState.BOOTING)
                result.adopted.append(instance.instance_id)
            if (
                self._state[instance.instance_id] == LifecycleState.BOOTING
                and instance.state == CloudState.RUNNING
                and (joined is None or joined(instance.instance_id))
            ):
                self.move(instance.instance_id, LifecycleState.JOINED)
                result.joined.append(instance.instance_id)
        for instance_id, state in list(self._state.items()):
            if instance_id in present or not state.is_live or state == LifecycleState.REQUESTED:
                continue
            gone = LifecycleState.TERMINATED if state == LifecycleState.TERMINATING else LifecycleState.VANISHED
            self.move(instance_id, gone)
            (result.terminated if gone == LifecycleState.TERMINATED else result.vanished).append(instance_id)
        return result

    def in_state(self, state: LifecycleState) -> list[str]:
        return [i for i, s in self._state.items() if s == state]

    def items(self) -> list[tuple[str, LifecycleState]]:
        return list(self._state.items())

    def _publish(self, event: InstanceMoved) -> None:
        if self._journal is not None:
            self._journal.publish(event)
