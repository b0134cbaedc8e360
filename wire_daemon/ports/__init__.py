"""The ports between the MAPE loop and the world.

The loop only ever talks to these. A real submit host implements them with
the submit-directory readers, a cloud SDK and the HTCondor bindings; the
emulated site implements them over one discrete-event world in virtual time.
The scaling-policy and predictor ports are in ``ports.policy`` and
``ports.prediction``; what a submit host's runtime asks of HTCondor beyond
``CondorControl`` is in ``ports.condor``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from wire_daemon.core.events import TaskEvent
from wire_daemon.core.instances import Instance
from wire_daemon.core.pricing import Market


class Observations(Protocol):
    def poll_events(self) -> Sequence[TaskEvent]:
        """Every task event since the previous call, in time order."""


class Cloud(Protocol):
    """Our worker instances on one cloud: the one cloud interface.

    Implemented by each provider (``execute.providers``), by the guard that
    wraps a provider with limits (``execute.guarded_cloud``), and by the
    emulated site. Launches are idempotent per request id where the cloud
    allows it: a repeated request returns the instances it already made.
    """

    @property
    def slots_per_instance(self) -> int: ...

    def list_instances(self, include_unusable: bool = False) -> Sequence[Instance]:
        """Our pending and running instances; with ``include_unusable`` also stopped and failed ones."""

    def find_request(self, request_id: str) -> Sequence[Instance]:
        """Every instance the cloud still reports for this launch request, in any state."""

    def launch(
        self, count: int, request_id: str | None = None, *, instance_type: str = "", market: Market = Market.ON_DEMAND
    ) -> Sequence[Instance]:
        """Launch ``count`` instances of ``instance_type`` (one of steering.instance_types; "": the configured one).

        On the spot ``market``, a launch the cloud has no room for raises ``CloudCapacityError``
        holding what it did launch (``partial``).
        """

    def terminate(self, instance_ids: Sequence[str]) -> Sequence[str]:
        """Terminate those of ``instance_ids`` that are ours and live; return them."""


class CondorControl(Protocol):
    def set_job_priority(self, task_id: str, priority: int) -> None: ...

    def retire_instance(self, instance_id: str) -> None:
        """Drain a worker: start no new job on it; running jobs go on."""

    def prefer_market(self, task_id: str, market: Market, required: bool = False) -> None:
        """Start the job on a slot of ``market`` when one is free (a rank); ``required``: only there."""


class Clock(Protocol):
    def now(self) -> float: ...

    def sleep_until(self, when: float) -> object:
        """Sleep until ``when``, or less: the caller reads ``now()`` after it (what it returns is its own)."""
