"""What a submit host's runtime asks of HTCondor, beyond the loop's ``CondorControl``.

The loop needs only priorities and drains (``CondorControl``), the
rightsizer only memory requests (``MemoryControl``). The runtime on a submit
host also asks the pool who has joined, who still holds a claim, where each
worker's startd is, and which job a DAG node has in the queue. Two
implementations exist (``execute.condor_control``): the one over the
htcondor2 bindings, and the one for ``condor.control: off``, which changes
nothing and answers as if no pool could be asked. The runtime calls either
the same way.
"""

from __future__ import annotations

from typing import Protocol

from wire_daemon.ports import CondorControl
from wire_daemon.ports.memory import MemoryControl


class SubmitHostCondor(CondorControl, MemoryControl, Protocol):
    def has_joined(self, instance_id: str) -> bool:
        """A startd of the instance is in the pool; with no pool to ask, True (a running instance counts as joined)."""

    def holds_claims(self, instance_id: str) -> bool:
        """A slot of the instance still runs a job or holds a claim; with no pool to ask, False."""

    def worker_addresses(self) -> dict[str, str]:
        """Each of our workers' startd address by instance id; empty with no pool to ask."""

    def queued_job_id(self, wf_uuid: str, node: str) -> str | None:
        """``cluster.proc`` of the job a workflow's DAG node has in the queue now; None with no schedd to ask."""

    def probe(self) -> None:
        """Raise ``CondorUnreachable`` when the pool's collector or schedd does not answer; with no pool, never."""

    def sync(self) -> int:
        """Re-apply wanted edits to nodes whose job changed (DAGMan retries); how many were applied."""

    def take_notes(self) -> list[str]:
        """What was left undone since the last call because control is off, one line each; empty otherwise."""
