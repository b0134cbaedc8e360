"""The three ports between the MAPE loop and the world, plus the clock.

The loop only ever talks to these. A real submit host implements them with
the HTCondor bindings, the submit-directory readers and a cloud SDK; the
emulated site implements them over one discrete-event world in virtual time.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import Protocol, Sequence


class EventKind(str, Enum):
    SUBMITTED = "submitted"  # DAGMan handed the node to the schedd: the task is idle, ready to run
    STARTED = "started"  # Condor execute event: slot occupancy begins on ``host``
    TRANSFERRED = "transferred"  # input transfer finished
    FINISHED = "finished"  # terminate event: slot occupancy ends
    EVICTED = "evicted"  # the job lost its slot (e.g. the instance went away); it is idle again
    HELD = "held"
    RELEASED = "released"
    ABORTED = "aborted"


@dataclass(frozen=True)
class TaskEvent:
    time: float
    kind: EventKind
    task_id: str
    host: str | None = None  # instance id, for STARTED
    exec_runtime_s: float | None = None  # the executable's own duration (kickstart), for FINISHED
    exit_code: int | None = None
    input_bytes: int | None = None
    peak_memory_bytes: int | None = None


@dataclass(frozen=True)
class Instance:
    instance_id: str
    launch_time: float  # start of the first charging unit
    slots: int
    state: str = "running"  # pending | running | terminated
    address: str = ""
    instance_type: str = ""
    request_id: str = ""  # the launch request that created it (idempotent launches, reconcile)


class Observations(Protocol):
    def poll_events(self) -> Sequence[TaskEvent]:
        """Every task event since the previous call, in time order."""


class Cloud(Protocol):
    def list_instances(self) -> Sequence[Instance]:
        """Our live (pending or running) instances."""

    def launch(self, count: int) -> Sequence[Instance]: ...

    def terminate(self, instance_ids: Sequence[str]) -> None: ...


class CondorControl(Protocol):
    def set_job_priority(self, task_id: str, priority: int) -> None: ...

    def retire_instance(self, instance_id: str) -> None:
        """Drain a worker: start no new job on it; running jobs go on."""


class Clock(Protocol):
    def now(self) -> float: ...

    def sleep_until(self, when: float) -> None: ...
