"""Condor control on a real pool, through the htcondor2 bindings.

Two duties, both best-effort (a failure is logged and retried next interval,
never fatal to the loop):

* the priority hook: raise JobPrio of the tasks the loop picks (the first
  ready tasks of each stage) with a non-durable ``Schedd.edit``. A DAGMan
  retry submits a new cluster, so the wanted priority is kept per DAG node and
  re-applied whenever the node's current job id changes (``sync``);
* retiring a worker: drain its startd gracefully (running jobs finish, no new
  job starts) and, right before the instance is terminated, check that none of
  its slots is still claimed.

Limits (HTCondor's, not ours): JobPrio orders only the jobs of one user on one
schedd; the negotiator's user priorities decide between users. A non-durable
edit is lost if the schedd restarts; ``sync`` re-applies it at the next
interval because it compares against the schedd's answer.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

log = logging.getLogger(__name__)

_SAFE_ID = re.compile(r"^[A-Za-z0-9._:@-]+$")


class ScheddLike(Protocol):
    def edit(self, job_spec: Any, attr: str, value: str, flags: Any = ...) -> int: ...


class CollectorLike(Protocol):
    def query(
        self, ad_type: Any = ..., constraint: str | None = None, projection: list[str] | None = None
    ) -> list[Any]: ...


@dataclass
class _Boost:
    priority: int
    applied_to: str | None = None  # job id the edit reached last


@dataclass
class HTCondorControl:
    """Implements the CondorControl port against a schedd and a collector.

    ``job_id_of`` maps a DAG node name to the job id (``cluster.proc``) of its
    current attempt, as the event-log reader knows it; None while the node has
    no job in the queue.
    """

    schedd: ScheddLike
    collector: CollectorLike
    job_id_of: Callable[[str], str | None]
    pool_name: str
    startd_factory: Callable[[Any], Any] | None = None
    errors: int = 0
    _boosts: dict[str, _Boost] = field(default_factory=dict)

    # -- priority hook -----------------------------------------------------

    def set_job_priority(self, task_id: str, priority: int) -> None:
        self._boosts[task_id] = _Boost(priority)
        self._apply(task_id)

    def sync(self) -> int:
        """Re-apply wanted priorities to nodes whose job id changed (DAGMan retries)."""
        return sum(self._apply(task_id) for task_id in list(self._boosts))

    def forget(self, task_id: str) -> None:
        """The node is done: stop tracking it."""
        self._boosts.pop(task_id, None)

    def _apply(self, task_id: str) -> bool:
        boost = self._boosts[task_id]
        job_id = self.job_id_of(task_id)
        if job_id is None or job_id == boost.applied_to:
            return False
        try:
            self.schedd.edit([job_id], "JobPrio", str(boost.priority), flags=_non_durable())
        except Exception as exc:  # the bindings raise HTCondorException and friends
            self.errors += 1
            log.warning("could not set JobPrio of %s (job %s): %s", task_id, job_id, exc)
            return False
        boost.applied_to = job_id
        return True

    # -- retiring workers --------------------------------------------------

    def retire_instance(self, instance_id: str) -> None:
        per_machine = {ad.get("Machine"): ad for ad in self._startd_ads(instance_id, ["Machine", "MyAddress", "Name"])}
        for ad in per_machine.values():  # one drain per startd, not per slot
            try:
                self._startd(ad).drainJobs(_graceful(), reason=f"wire-daemon releases {instance_id}")
            except Exception as exc:
                self.errors += 1
                log.warning("could not drain %s (%s): %s", instance_id, ad.get("Machine"), exc)

    def has_joined(self, instance_id: str) -> bool:
        """True when a startd of the instance is in the collector (GuardedCloud's join check)."""
        return bool(self._startd_ads(instance_id, ["Name"]))

    def holds_claims(self, instance_id: str) -> bool:
        """True when a slot of the instance is claimed; asked right before terminating it."""
        ads = self._startd_ads(instance_id, ["Name", "State"])
        return any(ad.get("State") == "Claimed" for ad in ads)

    def _startd_ads(self, instance_id: str, projection: Sequence[str]) -> list[Any]:
        constraint = f'WireInstanceId == "{_checked(instance_id)}" && WirePool == "{_checked(self.pool_name)}"'
        try:
            return list(self.collector.query(_startd_type(), constraint=constraint, projection=list(projection)))
        except Exception as exc:
            self.errors += 1
            log.warning("collector query for %s failed: %s", instance_id, exc)
            return []

    def _startd(self, ad: Any) -> Any:
        if self.startd_factory is not None:
            return self.startd_factory(ad)
        import htcondor2

        return htcondor2.Startd(ad)


def queued_job_id(schedd: Any, wf_uuid: str, node: str) -> str | None:
    """``cluster.proc`` of the job a Pegasus workflow's DAG node has in the queue now, if any.

    Pegasus writes ``+pegasus_wf_uuid`` into every job and DAGMan sets
    ``DAGNodeName``; together they name one node even when several workflows
    on the schedd share node names.
    """
    constraint = f'pegasus_wf_uuid == "{_checked(wf_uuid)}" && DAGNodeName == "{_checked(node)}"'
    try:
        ads = list(schedd.query(constraint=constraint, projection=["ClusterId", "ProcId"]))
    except Exception as exc:
        log.warning("schedd query for node %s failed: %s", node, exc)
        return None
    if not ads:
        return None
    latest = max(ads, key=lambda ad: (int(ad.get("ClusterId", -1)), int(ad.get("ProcId", -1))))
    return f"{int(latest['ClusterId'])}.{int(latest['ProcId'])}"


def _checked(value: str) -> str:
    # Values go into a ClassAd constraint: refuse anything that could break out of the string.
    if not _SAFE_ID.match(value):
        raise ValueError(f"refusing unsafe identifier in a ClassAd constraint: {value!r}")
    return value


def _non_durable() -> Any:
    import htcondor2

    return htcondor2.TransactionFlag.NonDurable


def _graceful() -> Any:
    import htcondor2

    return htcondor2.DrainType.Graceful


def _startd_type() -> Any:
    import htcondor2

    return htcondor2.AdType.Startd


class LoggedCondorControl:
    """Condor control when ``condor.control`` is off: says what it would do, touches nothing.

    For a submit host whose schedd the daemon may not edit, and for rehearsals
    against an emulated submit directory, where no schedd exists.
    """

    def __init__(self) -> None:
        self.notes: list[str] = []

    def set_job_priority(self, task_id: str, priority: int) -> None:
        self.notes.append(f"condor control off: would set JobPrio {priority} on {task_id}")

    def retire_instance(self, instance_id: str) -> None:
        self.notes.append(f"condor control off: would drain {instance_id}")

    def take_notes(self) -> list[str]:
        notes, self.notes = self.notes, []
        return notes
