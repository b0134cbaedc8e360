"""Condor control on a real pool, through the htcondor2 bindings.

Two duties, both best-effort (a failure is logged and retried next interval,
never fatal to the loop):

* the priority hook: raise JobPrio of the tasks the loop picks (the first
  ready tasks of each stage) with a non-durable ``Schedd.edit``. A DAGMan
  retry submits a new cluster, so the wanted priority is kept per DAG node and
  re-applied whenever the node's current job id changes (``sync``);
* right-sizing memory (when ``memory.rightsizing`` is on): read a
  node's ``RequestMemory``, set a new one with a durable ``Schedd.edit`` (kept
  per DAG node and re-applied by ``sync`` to a DAGMan retry's new cluster,
  which comes back with the submit file's request), and release a job held
  for memory;
* retiring a worker: drain its startd gracefully (running jobs finish, no new
  job starts, no claim is reused) and, right before the instance is
  terminated, check that none of its slots still holds a claim.

Draining needs ADMINISTRATOR on the worker, which verifies the daemon's token
with the workers' own signing key (never the pool's, which workers must not
hold): the daemon's token directory holds one token for the central manager
and one for the workers, and HTCondor presents each daemon the token it can
verify (docs/cloud.md, "Retiring a worker").

Condor going away (a restart, a boot-order race) is weather: ``probe`` asks
the collector and the schedd before each iteration and raises
``CondorUnreachable`` in one line when either does not answer, so the daemon
holds the pool still until both do. The schedd is located when first needed
and located again after a failed probe (a restarted schedd may listen on
another port). A question asked while Condor is away is answered the way
that changes nothing: an instance whose startd cannot be looked up counts as
joined and as holding a claim, so it is neither terminated as a worker that
never joined nor released under a running job.

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

from wire_daemon.core.errors import CondorUnreachable
from wire_daemon.core.pricing import Market

log = logging.getLogger(__name__)

_SAFE_ID = re.compile(r"^[A-Za-z0-9._:@-]+$")

# Slot states in which the instance must not be terminated: a job runs or is being vacated (Claimed, Preempting),
# or a claim is about to start one (Matched). A drained slot is "Drained"; a free one "Unclaimed" or "Owner".
CLAIM_STATES = frozenset({"Claimed", "Preempting", "Matched"})


class ScheddLike(Protocol):
    def edit(self, job_spec: Any, attr: str, value: str, flags: Any = ...) -> int: ...

    def query(self, constraint: str = ..., projection: list[str] = ...) -> list[Any]: ...

    def act(self, action: Any, job_spec: Any, reason: str | None = ...) -> Any: ...


class CollectorLike(Protocol):
    def query(
        self, ad_type: Any = ..., constraint: str | None = None, projection: list[str] | None = None
    ) -> list[Any]: ...


@dataclass
class _Boost:
    priority: int
    applied_to: str | None = None  # job id the edit reached last


@dataclass
class _Rank:
    market: Market
    applied_to: str | None = None  # job id the edit reached last
    required: bool = False  # the job runs only on ``market`` (WireRequiredMarket, checked by its Requirements)
    lifts: bool = False  # the node's job was required a market before: undo it


# Neutral until the job's WireRequiredMarket names a market: then only a worker advertising it matches.
REQUIRE_CLAUSE = "(MY.WireRequiredMarket =?= undefined || TARGET.WireMarket =?= MY.WireRequiredMarket)"


@dataclass
class _Request:
    mib: int
    applied_to: str | None = None  # job id the edit reached last


@dataclass
class HTCondorControl:
    """Implements the CondorControl port against a schedd and a collector.

    ``job_id_of`` maps a DAG node name to the job id (``cluster.proc``) of its
    current attempt, as the event-log reader knows it; None while the node has
    no job in the queue.
    """

    schedd: ScheddLike | None  # None: located by ``locate_schedd`` when first needed
    collector: CollectorLike
    job_id_of: Callable[[str], str | None]
    pool_name: str
    startd_factory: Callable[[Any], Any] | None = None
    errors: int = 0
    locate_schedd: Callable[[], ScheddLike] | None = None  # how to find the schedd again after it went away
    _collector_failing: bool = False  # said once per outage, not once per instance asked about
    _boosts: dict[str, _Boost] = field(default_factory=dict)
    _requests: dict[str, _Request] = field(default_factory=dict)  # wanted RequestMemory per node
    _ranks: dict[str, _Rank] = field(default_factory=dict)  # the market each node's job ranks first

    # -- is Condor there? ---------------------------------------------------

    def probe(self) -> None:
        """Raise ``CondorUnreachable`` (one line) unless both the collector and the schedd answer a query."""
        try:
            list(self.collector.query(_startd_type(), constraint="false", projection=["Name"]))
        except Exception as exc:  # the bindings raise HTCondorException and friends
            raise CondorUnreachable(f"the collector does not answer: {_first_line(exc)}") from None
        try:
            list(self._schedd().query(constraint="false", projection=["ClusterId"]))
        except Exception as exc:
            if self.locate_schedd is not None:
                self.schedd = None  # found again next time: a restarted schedd may have a new address
            raise CondorUnreachable(f"the schedd does not answer: {_first_line(exc)}") from None

    def _schedd(self) -> ScheddLike:
        if self.schedd is None:
            if self.locate_schedd is None:
                raise CondorUnreachable("no schedd to ask")
            self.schedd = self.locate_schedd()
        return self.schedd

    # -- priority hook -----------------------------------------------------

    def set_job_priority(self, task_id: str, priority: int) -> None:
        self._boosts[task_id] = _Boost(priority)
        self._apply(task_id)

    def sync(self) -> int:
        """Re-apply wanted priorities, ranks and memory requests to nodes whose job id changed (DAGMan retries)."""
        boosts = sum(self._apply(task_id) for task_id in list(self._boosts))
        ranks = sum(self._apply_rank(task_id) for task_id in list(self._ranks))
        return boosts + ranks + sum(self._apply_request(task_id) for task_id in list(self._requests))

    def forget(self, task_id: str) -> None:
        """The node is done: stop tracking it."""
        self._boosts.pop(task_id, None)
        self._requests.pop(task_id, None)
        self._ranks.pop(task_id, None)

    # -- market placement ----------------------------------------------------

    def prefer_market(self, task_id: str, market: Market, required: bool = False) -> None:
        """Rank slots of ``market`` first for the node's job: workers advertise ``WireMarket`` (their boot
        reads it from the metadata service); a job whose market has no free slot still runs elsewhere,
        unless ``required``: then its Requirements match only workers of ``market``."""
        before = self._ranks.get(task_id)
        lifts = before is not None and (before.required or before.lifts)
        self._ranks[task_id] = _Rank(market, required=required, lifts=lifts)
        self._apply_rank(task_id)

    def _apply_rank(self, task_id: str) -> bool:
        rank = self._ranks[task_id]
        job_id = self.job_id_of(task_id)
        if job_id is None or job_id == rank.applied_to:
            return False
        try:
            self._schedd().edit([job_id], "Rank", f'TARGET.WireMarket =?= "{rank.market.value}"', flags=_non_durable())
            if rank.required or rank.lifts:
                self._require(job_id, rank)
        except Exception as exc:  # the bindings raise HTCondorException and friends
            self.errors += 1
            log.warning("could not set the Rank of %s (job %s): %s", task_id, job_id, exc)
            return False
        rank.applied_to = job_id
        return True

    def _require(self, job_id: str, rank: _Rank) -> None:
        """Name the required market on the job (undefined: none), with the clause that checks it added once."""
        value = f'"{rank.market.value}"' if rank.required else "undefined"
        schedd = self._schedd()
        schedd.edit([job_id], "WireRequiredMarket", value, flags=_non_durable())
        if rank.required:
            cluster, _, proc = job_id.partition(".")
            where = f"ClusterId == {int(cluster)} && ProcId == {int(proc)}"
            ads = list(schedd.query(constraint=where, projection=["Requirements"]))
            current = str(ads[0].get("Requirements", "true")) if ads else "true"
            if "WireRequiredMarket" not in current:  # the schedd may print the clause its own way
                schedd.edit([job_id], "Requirements", f"({current}) && {REQUIRE_CLAUSE}", flags=_non_durable())

    def _apply(self, task_id: str) -> bool:
        boost = self._boosts[task_id]
        job_id = self.job_id_of(task_id)
        if job_id is None or job_id == boost.applied_to:
            return False
        try:
            # Raised above the job's own priority: Pegasus gives every job one (10 per level), and an
            # absolute value would lower the deep stages' jobs it is meant to hurry.
            own = self._own_priority(job_id)
            self._schedd().edit([job_id], "JobPrio", str(own + boost.priority), flags=_non_durable())
        except Exception as exc:  # the bindings raise HTCondorException and friends
            self.errors += 1
            log.warning("could not set JobPrio of %s (job %s): %s", task_id, job_id, exc)
            return False
        boost.applied_to = job_id
        return True

    def _own_priority(self, job_id: str) -> int:
        cluster, _, proc = job_id.partition(".")
        ads = list(
            self._schedd().query(
                constraint=f"ClusterId == {int(cluster)} && ProcId == {int(proc)}", projection=["JobPrio"]
            )
        )
        return int(ads[0].get("JobPrio", 0)) if ads else 0

    # -- memory requests -----------------------------------------

    def request_memory_mib(self, task_id: str) -> float | None:
        """RequestMemory of the node's queued job, None if it has none or it is an expression we cannot read."""
        job_id = self.job_id_of(task_id)
        if job_id is None:
            return None
        try:
            ads = self._job_ads(job_id, ["RequestMemory"])
            return float(ads[0]["RequestMemory"]) if ads else None
        except (KeyError, TypeError, ValueError):
            return None  # e.g. an ifThenElse on MemoryUsage: left as the user wrote it
        except Exception as exc:
            self.errors += 1
            log.warning("could not read RequestMemory of %s (job %s): %s", task_id, job_id, exc)
            return None

    def set_request_memory(self, task_id: str, mib: int) -> bool:
        self._requests[task_id] = _Request(int(mib))  # a new value reaches the current job too
        return self._apply_request(task_id)

    def release_job(self, task_id: str) -> bool:
        job_id = self.job_id_of(task_id)
        if job_id is None:
            return False
        try:
            self._schedd().act(_release(), [job_id], reason="wire-daemon: request_memory raised after a memory hold")
        except Exception as exc:
            self.errors += 1
            log.warning("could not release %s (job %s): %s", task_id, job_id, exc)
            return False
        return True

    def _apply_request(self, task_id: str) -> bool:
        wanted = self._requests[task_id]
        job_id = self.job_id_of(task_id)
        if job_id is None or job_id == wanted.applied_to:
            return False
        try:
            # Durable: a schedd restart must not give a grown job back the request it was held at.
            self._schedd().edit([job_id], "RequestMemory", str(wanted.mib))
        except Exception as exc:
            self.errors += 1
            log.warning("could not set RequestMemory of %s (job %s): %s", task_id, job_id, exc)
            return False
        wanted.applied_to = job_id
        return True

    def _job_ads(self, job_id: str, projection: list[str]) -> list[Any]:
        cluster, _, proc = job_id.partition(".")
        constraint = f"ClusterId == {int(cluster)} && ProcId == {int(proc)}"
        return list(self._schedd().query(constraint=constraint, projection=projection))

    # -- retiring workers --------------------------------------------------

    def retire_instance(self, instance_id: str) -> None:
        """Drain the instance's startd gracefully: running jobs finish, no job starts, no claim is reused."""
        ads = self._startd_ads(instance_id, ["Machine", "MyAddress", "Name"]) or []
        per_startd = {ad.get("MyAddress") or ad.get("Machine"): ad for ad in ads}
        for where, ad in per_startd.items():  # one drain per startd, not per slot
            try:
                self._startd(ad).drainJobs(_graceful(), reason=f"wire-daemon releases {instance_id}")
            except Exception as exc:
                self.errors += 1
                log.warning("could not drain %s (%s): %s", instance_id, where, exc)

    def has_joined(self, instance_id: str) -> bool:
        """True when a startd of the instance is in the collector (GuardedCloud's join check); True as well when
        the collector does not answer: an unanswered question never makes a worker one that never joined."""
        ads = self._startd_ads(instance_id, ["Name"])
        return ads is None or bool(ads)

    def holds_claims(self, instance_id: str) -> bool:
        """True while a slot of the instance runs a job or holds a claim; asked right before terminating it.

        From the collector's slot ads (a partitionable slot's jobs are in its dynamic slots' ads), which may be
        an update interval late. After a drain no claim starts, so lateness only keeps a finished job counted.
        """
        ads = self._startd_ads(instance_id, ["Name", "State"])
        if ads is None:  # the collector does not answer: the instance may run a job, so it is kept
            return True
        return any(ad.get("State") in CLAIM_STATES for ad in ads)

    def worker_addresses(self) -> dict[str, str]:
        """Each of our workers' startd address, by instance id, as the pool's collector knows it.

        The job event log names an execute host by its startd address; behind
        NAT, on several interfaces, or when the cloud reports another address,
        only the startd's own ad ties that address to the instance.
        """
        constraint = f'WirePool == "{_checked(self.pool_name)}" && WireInstanceId isnt undefined'
        ads = self._query(constraint, ["WireInstanceId", "MyAddress"], "the pool's workers") or []
        return {str(ad["WireInstanceId"]): str(ad["MyAddress"]) for ad in ads if "MyAddress" in ad}

    def queued_job_id(self, wf_uuid: str, node: str) -> str | None:
        try:
            schedd = self._schedd()
        except Exception as exc:
            log.warning("no schedd to look up node %s: %s", node, _first_line(exc))
            return None
        return queued_job_id(schedd, wf_uuid, node)

    def take_notes(self) -> list[str]:
        return []  # it does what it is asked: nothing is left to say

    def _startd_ads(self, instance_id: str, projection: Sequence[str]) -> list[Any] | None:
        constraint = f'WireInstanceId == "{_checked(instance_id)}" && WirePool == "{_checked(self.pool_name)}"'
        return self._query(constraint, projection, instance_id)

    def _query(self, constraint: str, projection: Sequence[str], what: str) -> list[Any] | None:
        """The startd ads the constraint selects; None when the collector does not answer."""
        try:
            ads = list(self.collector.query(_startd_type(), constraint=constraint, projection=list(projection)))
        except Exception as exc:
            self.errors += 1
            level = logging.DEBUG if self._collector_failing else logging.WARNING
            log.log(level, "collector query for %s failed: %s", what, _first_line(exc))
            self._collector_failing = True
            return None
        self._collector_failing = False
        return ads

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


def _first_line(exc: BaseException) -> str:
    """An exception in one line: the bindings' messages may run over several."""
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def _checked(value: str) -> str:
    # Values go into a ClassAd constraint: refuse anything that could break out of the string.
    if not _SAFE_ID.match(value):
        raise ValueError(f"refusing unsafe identifier in a ClassAd constraint: {value!r}")
    return value


def _non_durable() -> Any:
    import htcondor2

    return htcondor2.TransactionFlag.NonDurable


def _release() -> Any:
    import htcondor2

    return htcondor2.JobAction.Release


def _graceful() -> Any:
    import htcondor2

    return htcondor2.DrainType.Graceful


def _startd_type() -> Any:
    import htcondor2

    return htcondor2.AdType.Startd


class LoggedCondorControl:
    """Condor control when ``condor.control`` is off: says what it would do, touches nothing.

    For a submit host whose schedd the daemon may not edit, and for rehearsals
    against an emulated submit directory, where no schedd exists. It answers
    the pool's questions as if there were no pool to ask: every running
    instance counts as joined, none holds a claim, no startd address or
    queued job is known. So the runtime and the guard call it as they call
    ``HTCondorControl``, and act as they would with no HTCondor check at all.
    """

    def __init__(self) -> None:
        self.notes: list[str] = []

    def set_job_priority(self, task_id: str, priority: int) -> None:
        self.notes.append(f"condor control off: would set JobPrio {priority} on {task_id}")

    def retire_instance(self, instance_id: str) -> None:
        self.notes.append(f"condor control off: would drain {instance_id}")

    def prefer_market(self, task_id: str, market: Market, required: bool = False) -> None:
        wish = f"require {market} slots" if required else f"rank {market} slots first"
        self.notes.append(f"condor control off: would {wish} for {task_id}")

    def request_memory_mib(self, task_id: str) -> float | None:
        return None  # no schedd to read: the rightsizer leaves every job as it is

    def set_request_memory(self, task_id: str, mib: int) -> bool:
        self.notes.append(f"condor control off: would set request_memory of {task_id} to {mib} MiB")
        return True

    def release_job(self, task_id: str) -> bool:
        self.notes.append(f"condor control off: would release {task_id}")
        return True

    def has_joined(self, instance_id: str) -> bool:
        return True

    def holds_claims(self, instance_id: str) -> bool:
        return False

    def worker_addresses(self) -> dict[str, str]:
        return {}

    def queued_job_id(self, wf_uuid: str, node: str) -> str | None:
        return None

    def sync(self) -> int:
        return 0  # no edit was made, so none is re-applied

    def probe(self) -> None:
        pass  # no pool is asked, so none can be away

    def take_notes(self) -> list[str]:
        notes, self.notes = self.notes, []
        return notes
