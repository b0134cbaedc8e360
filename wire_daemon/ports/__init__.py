"""The three ports between the MAPE loop and the world, plus the clock.

The loop only ever talks to these. A real submit host implements them with
the HTCondor bindings, the submit-directory readers and a cloud SDK; the
emulated site implements them over one discrete-event world in virtual time.
"""

from __future__ import annotations

from typing import Protocol, Sequence

from wire_daemon.core.events import TaskEvent
from wire_daemon.core.instances import Instance


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
