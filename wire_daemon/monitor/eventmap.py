"""Turn job events (``eventlog.LogEvent``) into the loop's task events (``TaskEvent``).

Task identity. DAGMan writes ``DAG Node: <name>`` into the notes of every
submit event of a node job (``LogNotes``; HTCondor 23+ also ``StructuredNotes``
with ``DAGNodeName``). The mapper remembers cluster -> node from those submit
events and names every later event of that cluster by the node. All procs of
a cluster belong to the node (Pegasus queues one proc per job). Events of a
cluster whose submit event was not seen, or carried no node name, are skipped
with one warning per cluster. For plain (non-DAG) logs, ``job_ids="cluster-proc"``
names each job ``<cluster>.<proc>`` instead.

Event kinds (HTCondor event -> ``EventKind``):

* SUBMIT -> SUBMITTED; EXECUTE -> STARTED with ``host`` = the ExecuteHost
  sinful string (``<ip:port?addrs=...>``, resolve it with ``hosts.HostMap``);
* FILE_TRANSFER of type IN_FINISHED -> TRANSFERRED;
* JOB_TERMINATED -> FINISHED with ``exit_code`` = the return value, or minus
  the signal number when the job was killed by a signal. A terminate event
  with no execute event before it in the same attempt (DAGMan writes NOOP
  nodes as a submit and a terminate event, cluster 0) also gives a STARTED
  at the same time: zero occupancy;
  ``peak_memory_bytes`` = the largest of the attempt's IMAGE_SIZE reports and
  the terminate event's own (ResidentSetSize KiB, else MemoryUsage MiB);
* JOB_EVICTED, SHADOW_EXCEPTION, JOB_RECONNECT_FAILED -> EVICTED (the job lost
  its slot and goes back to idle; a shadow exception is usually followed by an
  eviction or a hold, which the run state takes as a no-op);
* JOB_HELD -> HELD (``memory_exceeded`` when held for memory: ``held_for_memory``),
  JOB_RELEASED -> RELEASED, JOB_ABORTED -> ABORTED;
* IMAGE_SIZE only feeds the peak memory; every other event is ignored
  (JOB_DISCONNECTED: the job may still be running; POST_SCRIPT_TERMINATED:
  DAGMan's business, the slot was already free).

The exit code is the job's own: a Pegasus POST script (pegasus-exitcode) may
still fail a node whose job returned 0; the DAGMan retry then shows up as a
new SUBMIT of the same node.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, Literal

from wire_daemon.core.events import EventKind, TaskEvent
from wire_daemon.monitor.eventlog import EventLogCheckpoint, EventLogReader, LogEvent
from wire_daemon.monitor.problems import Problems

JobIds = Literal["dag-node", "cluster-proc"]

_SIMPLE = {
    "SUBMIT": EventKind.SUBMITTED,
    "JOB_EVICTED": EventKind.EVICTED,
    "SHADOW_EXCEPTION": EventKind.EVICTED,
    "JOB_RECONNECT_FAILED": EventKind.EVICTED,
    "JOB_HELD": EventKind.HELD,
    "JOB_RELEASED": EventKind.RELEASED,
    "JOB_ABORTED": EventKind.ABORTED,
}
_ENDS_ATTEMPT = frozenset({"JOB_EVICTED", "SHADOW_EXCEPTION", "JOB_RECONNECT_FAILED", "JOB_HELD", "JOB_ABORTED"})


@dataclass
class MapperState:
    """Cluster -> DAG node names, and the peak memory of running attempts."""

    nodes: dict[int, str] = field(default_factory=dict)
    peak: dict[str, int] = field(default_factory=dict)  # "cluster.proc" -> bytes

    def to_dict(self) -> dict[str, Any]:
        return {"nodes": {str(k): v for k, v in self.nodes.items()}, "peak": dict(self.peak)}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> MapperState:
        nodes = {int(k): str(v) for k, v in dict(data.get("nodes", {})).items()}
        peak = {str(k): int(v) for k, v in dict(data.get("peak", {})).items()}
        return cls(nodes, peak)


class TaskEventMapper:
    def __init__(
        self,
        state: MapperState | None = None,
        job_ids: JobIds = "dag-node",
        problems: Problems | None = None,
        source: str = "job event log",
    ) -> None:
        if job_ids not in ("dag-node", "cluster-proc"):
            raise ValueError(f"job_ids must be 'dag-node' or 'cluster-proc', not {job_ids!r}")
        self._state = state or MapperState()
        self._job_ids = job_ids
        self.problems = problems or Problems()
        self.source = source
        self._warned: set[int] = set()
        self.skipped = 0

    def state(self) -> MapperState:
        return MapperState(dict(self._state.nodes), dict(self._state.peak))

    def map(self, events: Iterable[LogEvent]) -> list[TaskEvent]:
        out: list[TaskEvent] = []
        for event in events:
            out.extend(self._map_one(event))
        return out

    # -- internals ------------------------------------------------------------

    def _map_one(self, ev: LogEvent) -> list[TaskEvent]:
        if ev.type == "SUBMIT" and ev.node:
            self._state.nodes[ev.cluster] = ev.node
        task = self._task_id(ev)
        if task is None:
            return []
        key = f"{ev.cluster}.{ev.proc}"
        if ev.type == "IMAGE_SIZE":
            self._raise_peak(key, ev.memory_bytes)
            return []
        if ev.type == "EXECUTE":
            self._state.peak[key] = 0
            return [TaskEvent(ev.time, EventKind.STARTED, task, host=ev.host)]
        if ev.type == "JOB_TERMINATED":
            return self._finished(ev, task, key)
        if ev.type == "FILE_TRANSFER":
            return [TaskEvent(ev.time, EventKind.TRANSFERRED, task)] if ev.transfer == "IN_FINISHED" else []
        kind = _SIMPLE.get(ev.type)
        if kind is None:
            return []
        if ev.type in _ENDS_ATTEMPT:
            self._state.peak.pop(key, None)
        return [TaskEvent(ev.time, kind, task, memory_exceeded=held_for_memory(ev))]

    def _finished(self, ev: LogEvent, task: str, key: str) -> list[TaskEvent]:
        out = []
        if key not in self._state.peak:  # no execute event in this attempt: a DAGMan NOOP node
            out.append(TaskEvent(ev.time, EventKind.STARTED, task))
        self._raise_peak(key, ev.memory_bytes)
        peak = self._state.peak.pop(key, 0) or None
        if ev.return_value is not None:
            code: int | None = ev.return_value
        elif ev.signal is not None:
            code = -abs(ev.signal)
        else:
            code = None
            self.problems.warn(self.source, f"terminate event of {task} has no return value or signal", f"~{ev.line}")
        out.append(TaskEvent(ev.time, EventKind.FINISHED, task, exit_code=code, peak_memory_bytes=peak, condor_job=key))
        return out

    def _task_id(self, ev: LogEvent) -> str | None:
        node = self._state.nodes.get(ev.cluster)
        if node is not None:
            return node
        if self._job_ids == "cluster-proc" and ev.cluster >= 0:
            return f"{ev.cluster}.{ev.proc}"
        self.skipped += 1
        if ev.cluster not in self._warned:
            self._warned.add(ev.cluster)
            why = "no DAG node name in its submit event" if ev.type == "SUBMIT" else "its submit event was not seen"
            self.problems.warn(self.source, f"events of job cluster {ev.cluster} skipped: {why}", f"~{ev.line}")
        return None

    def _raise_peak(self, key: str, value: int | None) -> None:
        if value:
            self._state.peak[key] = max(self._state.peak.get(key, 0), value)


# HTCondor's hold reason code when the starter held a job for going over its memory request.
HOLD_CODE_MEMORY = 34
_MEMORY_WORDS = ("memory", "oom")


def held_for_memory(ev: LogEvent) -> bool:
    """A hold for memory: code 34, or a policy hold (SYSTEM_PERIODIC_HOLD, code 26 / 3) whose reason says memory."""
    if ev.type != "JOB_HELD":
        return False
    if ev.hold_code == HOLD_CODE_MEMORY:
        return True
    reason = (ev.reason or "").lower()
    return ev.hold_code in (3, 26) and any(word in reason for word in _MEMORY_WORDS)


class EventLogFollower:
    """Follow one job event log: ``poll()`` gives the task events appended since the last call.

    ``checkpoint()`` is a JSON-serialisable dict (read position, year guess,
    cluster -> node map, running peaks); pass it back to resume after a restart.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        checkpoint: dict[str, Any] | None = None,
        job_ids: JobIds = "dag-node",
        problems: Problems | None = None,
        year_reference: float | None = None,
    ) -> None:
        checkpoint = checkpoint or {}
        self.problems = problems or Problems()
        self.reader = EventLogReader(
            path, EventLogCheckpoint.from_dict(checkpoint.get("reader", {})), self.problems, year_reference
        )
        self.mapper = TaskEventMapper(
            MapperState.from_dict(checkpoint.get("mapper", {})), job_ids, self.problems, self.reader.path
        )

    def poll(self) -> list[TaskEvent]:
        return self.mapper.map(self.reader.read())

    @property
    def restarts(self) -> int:
        """Times the log was read again from the start (cut, rotated, rewritten in place)."""
        return self.reader._bytes.restarts

    def checkpoint(self) -> dict[str, Any]:
        return {"reader": self.reader.checkpoint().to_dict(), "mapper": self.mapper.state().to_dict()}
