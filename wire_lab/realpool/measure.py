"""What a real run cost and how long it took, measured from what HTCondor and moto recorded.

The same measures as a replay (``wire_daemon.runtime.replay``): makespan from
the first submit to the last task end, cost as charging units started by
every instance, the peak pool, and restarts (executions beyond the first of a
job: attempts that a lost worker threw away).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from wire_daemon.core.billing import Billing
from wire_lab.realpool.session import CloudHistory


@dataclass(frozen=True)
class JobTimes:
    submitted: dict[str, float]  # cluster.proc -> epoch s
    started: dict[str, list[float]]  # every execute event of the job
    ended: dict[str, float]
    node_of: dict[str, str]  # cluster.proc -> DAG node name (from the submit event's LogNotes)

    @property
    def makespan_s(self) -> float:
        if not self.submitted or not self.ended:
            return 0.0
        return max(self.ended.values()) - min(self.submitted.values())

    @property
    def restarts(self) -> int:
        return sum(max(0, len(starts) - 1) for starts in self.started.values())


def job_times(event_log: Path) -> JobTimes:
    """Per job: submit, every execute, and the terminate or abort time, from a job event log."""
    import htcondor2

    submitted: dict[str, float] = {}
    started: dict[str, list[float]] = {}
    ended: dict[str, float] = {}
    node_of: dict[str, str] = {}
    for event in htcondor2.JobEventLog(str(event_log)).events(stop_after=0):
        job = f"{event.cluster}.{event.proc}"
        kind = event.type
        if kind == htcondor2.JobEventType.SUBMIT:
            submitted[job] = event.timestamp
            notes = str(event.get("LogNotes", ""))
            if notes.startswith("DAG Node: "):
                node_of[job] = notes.removeprefix("DAG Node: ").strip()
        elif kind == htcondor2.JobEventType.EXECUTE:
            started.setdefault(job, []).append(event.timestamp)
        elif kind in (htcondor2.JobEventType.JOB_TERMINATED, htcondor2.JobEventType.JOB_ABORTED):
            ended[job] = event.timestamp
    return JobTimes(submitted, started, ended, node_of)


@dataclass(frozen=True)
class RunMeasures:
    makespan_s: float
    cost_units: int
    peak_instances: int
    restarts: int
    instances: int

    def as_dict(self) -> dict[str, float | int]:
        return {
            "makespan_s": round(self.makespan_s, 1),
            "cost_units": self.cost_units,
            "peak_instances": self.peak_instances,
            "restarts": self.restarts,
            "instances": self.instances,
        }


def measure(times: JobTimes, cloud: CloudHistory, billing: Billing, until: float) -> RunMeasures:
    """Cost bills every instance from launch to its end (or ``until`` if it is still up)."""
    units = sum(billing.units(start, cloud.ended.get(i, until)) for i, start in cloud.launched.items())
    return RunMeasures(times.makespan_s, units, cloud.peak, times.restarts, len(cloud.launched))


def starts_per_node(times: JobTimes) -> Counter[str]:
    return Counter({times.node_of.get(job, job): len(starts) for job, starts in times.started.items()})
