"""What happened, as typed events, and the observers that listen to them.

The loop, the guarded cloud, the monitor and the instance lifecycle
(``core.instances.InstanceMoved``) publish events here; the decisions log,
the metrics endpoint, status and the state file subscribe (plugins as
observers). An event is a small frozen dataclass; ``line`` is how it reads in
the decisions log, and nothing downstream parses that text back.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol


class Observer(Protocol):
    def notify(self, event: object) -> None: ...


class Journal:
    """Publishes each event to every subscribed observer, in subscription order."""

    def __init__(self) -> None:
        self._observers: list[Observer] = []

    def subscribe(self, observer: Observer) -> None:
        self._observers.append(observer)

    def publish(self, event: object) -> None:
        for observer in self._observers:
            observer.notify(event)


class NoticeBox:
    """Collects the notices published since the last ``take``: what one decision record lists."""

    def __init__(self) -> None:
        self._notices: list[Notice] = []

    def notify(self, event: object) -> None:
        if isinstance(event, Notice):
            self._notices.append(event)

    def take(self) -> list[Notice]:
        notices, self._notices = self._notices, []
        return notices


# -- notices: one line each for the decisions log ---------------------------------


@dataclass(frozen=True)
class Notice:
    """Anything an operator should read beside a decision (dry-run calls, reconcile, input problems)."""

    text: str

    @property
    def line(self) -> str:
        return self.text


@dataclass(frozen=True)
class CloudErrorNotice(Notice):
    """A cloud call failed after its retries; the loop went on."""

    kind: str = "cloud"  # CloudError.kind: throttled, auth, quota, ...


@dataclass(frozen=True)
class LimitHit(Notice):
    """A safety limit cut a launch short (or the back-off stopped it)."""

    limit: str = ""  # max_instances | max_launches_per_interval | budget_units_per_hour | budget_per_hour | back_off


def cloud_error(action: str, kind: str, message: object) -> CloudErrorNotice:
    return CloudErrorNotice(f"cloud error ({kind}) {action}: {message}", kind=kind)


def limit_hit(limit: str, allowed: int, wanted: int) -> LimitHit:
    return LimitHit(f"limit {limit}: launching {allowed} of {wanted}", limit=limit)


def back_off(until: float) -> LimitHit:
    return LimitHit(f"back-off: no launch until t={until:.0f} (instances died young or never joined)", limit="back_off")


# -- the pool changing ---------------------------------------------------------------


@dataclass(frozen=True)
class InstancesLaunched:
    time: float
    instance_ids: tuple[str, ...]


@dataclass(frozen=True)
class InstanceReleased:
    """Drained now; terminated at ``terminate_at``, just before its paid unit ends."""

    time: float
    instance_id: str
    terminate_at: float


@dataclass(frozen=True)
class ReleasePostponed:
    """A drained instance's termination moved to ``terminate_at``: its running tasks would have been killed."""

    time: float
    instance_id: str
    terminate_at: float


@dataclass(frozen=True)
class InstancesTerminated:
    time: float
    instance_ids: tuple[str, ...]


@dataclass(frozen=True)
class InstanceReclaimed:
    """The cloud took back one of our spot instances: an interruption, not a failure.

    ``lost_slot_s`` is the work its running tasks lost, when the site measured it (the emulated site);
    None where it must be read from the tasks' own events (a real pool: ``service.interruptions``).
    """

    time: float
    instance_id: str
    instance_type: str = ""
    zone: str = ""
    lost_slot_s: float | None = None


# -- the operator --------------------------------------------------------------------


@dataclass(frozen=True)
class ControlChanged:
    """An operator's command took effect: how the pool is steered from now on.

    ``mode`` is ``auto`` (the policy decides), ``paused`` (no change to the
    pool) or ``hold`` (the pool is kept at ``count`` instances; drain-all and
    terminate-all leave it held at 0).
    """

    time: float  # the loop's clock when it took effect
    command: str  # pause | resume | hold | drain-all | terminate-all
    mode: str
    count: int | None = None
    requested_at: float = 0.0  # wall clock
    requested_by: str = ""
    outcome: str = ""  # what the command did, in words (for the commands that set a value, not a mode)

    @property
    def line(self) -> str:
        held = f" at {self.count} instance(s)" if self.mode == "hold" else ""
        by = f" (by {self.requested_by})" if self.requested_by else ""
        what = {
            "pause": "scaling paused: the pool is kept as it is",
            "resume": "scaling resumed: the policy decides again",
            "hold": f"pool held{held}",
            "drain-all": "draining every instance (each terminated when its paid unit ends); pool held at 0",
            "terminate-all": "terminating every instance now; pool held at 0",
        }.get(self.command, self.outcome or f"{self.command}: mode {self.mode}{held}")
        return f"operator: {what}{by}"

    def to_json(self) -> dict[str, object]:
        return {
            "time": self.time,
            "event": "control",
            "command": self.command,
            "mode": self.mode,
            "count": self.count,
            "requested_at": self.requested_at,
            "requested_by": self.requested_by,
            "rule": self.line,
        }


@dataclass(frozen=True)
class TasksBoosted:
    """The priority boost raised these tasks' JobPrio by ``priority`` (the first ready tasks of their stages)."""

    time: float
    task_ids: tuple[str, ...]
    priority: int
