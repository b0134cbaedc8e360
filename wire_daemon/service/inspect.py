"""``wire-daemon inspect SUBMIT_DIR``: what the daemon would see in one submit directory.

The submit dir is read from the start with a ``SubmitDirMonitor`` (its event
log, else its jobstate.log) into a fresh ``RunState``; an ``OnlinePredictor``
then runs one update and one prediction at *now* = the last event's time (or
the wall clock, for a live directory, with ``wall_clock=True``).

Per stage: task counts (done, running, idle, held, not ready = not yet
submitted by DAGMan), the model (median execution, transfer estimate, a0/a1 of
Algorithm 1) and the prediction policy used for its unfinished tasks (the most
frequent one, and the count of each). Running tasks: host and elapsed time.
The JSON shape is documented in docs/monitor.md; NaN becomes null.
"""

from __future__ import annotations

import math
import os
import time
from collections import Counter
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

from wire_daemon.analyze.predictor import OnlinePredictor
from wire_daemon.core.config import PredictionConfig
from wire_daemon.core.run_state import RunState, TaskStatus
from wire_daemon.monitor.hosts import parse_sinful
from wire_daemon.monitor.problems import Problems
from wire_daemon.monitor.submit_dir import sub_workflow_refs
from wire_daemon.monitor.submit_monitor import SubmitDirMonitor
from wire_daemon.ports.prediction import Prediction

JSON_VERSION = 1
POLICY_NAMES = {
    0: "done",
    1: "not-started",
    2: "running-only",
    3: "stage-median",
    4: "same-input",
    5: "gradient",
    9: "oracle",
}
_MAX_POLLS = 10_000  # each poll reads up to 64 MiB of log


@dataclass
class StageReport:
    stage_id: int
    name: str
    transformation: str
    on_pool: bool  # some of its tasks occupy pool slots
    tasks: int
    done: int
    running: int
    idle: int
    held: int
    not_ready: int
    completed_in_model: int
    median_exec_s: float | None
    transfer_s: float | None
    a0: float
    a1: float
    size_groups: int
    policy: str  # the most frequent policy among unfinished tasks; "done" when none is left
    policies: dict[str, int] = field(default_factory=dict)
    predicted_occupancy_s: float | None = None  # median over the unfinished tasks


@dataclass
class RunningTask:
    task: str
    stage: str
    host: str | None
    started: float
    elapsed_s: float
    attempts: int


@dataclass
class InspectReport:
    submit_dir: str
    workflow: str
    dag: str
    source: str | None  # eventlog | jobstate | None (no event file yet)
    source_file: str | None
    events: int
    now: float | None
    now_from: str  # last-event | wall-clock | none
    dag_finished: bool
    dag_exit_code: int | None
    counts: dict[str, int]
    stages: list[StageReport]
    running: list[RunningTask]
    sub_workflows: list[dict[str, str | None]]
    warnings: list[str]


def inspect_submit_dir(path: str | os.PathLike[str], wall_clock: bool = False) -> InspectReport:
    """Read a submit dir from the start; raises ``InputError`` only when it has no usable ``.dag``."""
    problems = Problems()
    monitor = SubmitDirMonitor(path, problems=problems)
    state = RunState(monitor.workflow)
    events, last = _ingest(monitor, state)
    now, now_from = _now(last, wall_clock)
    predictor = OnlinePredictor(monitor.workflow, PredictionConfig())
    predictor.update(state, now if now is not None else 0.0)
    prediction = predictor.predict(state, now if now is not None else 0.0)
    status = monitor.dag_status()
    return InspectReport(
        submit_dir=os.fspath(path),
        workflow=monitor.workflow.name,
        dag=_relative(Path(monitor.submit_dir.dag.path), monitor.path),
        source=monitor.source,
        source_file=_relative(monitor.source_file, monitor.path) if monitor.source_file else None,
        events=events,
        now=now,
        now_from=now_from,
        dag_finished=status.finished,
        dag_exit_code=status.exit_code,
        counts=_counts(state.status),
        stages=_stages(predictor, state, prediction),
        running=_running(state, now),
        sub_workflows=[
            {
                "node": ref.node,
                "submit_dir": _relative(ref.submit_dir, monitor.path) if ref.submit_dir else None,
                "dag": ref.dag_path.name if ref.dag_path else None,
            }
            for ref in sub_workflow_refs(monitor.submit_dir)
        ],
        warnings=list(problems.messages),
    )


def _ingest(monitor: SubmitDirMonitor, state: RunState) -> tuple[int, float | None]:
    count, last = 0, None
    for _ in range(_MAX_POLLS):
        before = monitor.checkpoint()
        events = monitor.poll_events()
        for event in events:
            state.apply(event)
            last = event.time if last is None else max(last, event.time)
        count += len(events)
        if not events and monitor.checkpoint() == before:
            break
    return count, last


def _now(last: float | None, wall_clock: bool) -> tuple[float | None, str]:
    if wall_clock:
        return time.time(), "wall-clock"
    return (last, "last-event") if last is not None else (None, "none")


def _counts(status: np.ndarray) -> dict[str, int]:
    out = {"tasks": int(status.size)}
    for name, value in _STATUS_NAMES.items():
        out[name] = int(np.count_nonzero(status == value))
    return out


_STATUS_NAMES = {
    "done": TaskStatus.DONE,
    "running": TaskStatus.RUNNING,
    "idle": TaskStatus.IDLE,
    "held": TaskStatus.HELD,
    "not_ready": TaskStatus.WAITING,
}


def _stages(predictor: OnlinePredictor, state: RunState, prediction: Prediction) -> list[StageReport]:
    workflow = state.workflow
    out = []
    for model, members in zip(predictor.stage_summary(), workflow.stage_members()):
        status = state.status[members]
        unfinished = members[status != TaskStatus.DONE]
        policies = Counter(POLICY_NAMES.get(int(p), str(int(p))) for p in prediction.policy[unfinished])
        counts = {name: int(np.count_nonzero(status == value)) for name, value in _STATUS_NAMES.items()}
        out.append(
            StageReport(
                stage_id=model.stage_id,
                name=model.name,
                transformation=workflow.stages[model.stage_id].transformation,
                on_pool=bool(workflow.on_pool[members].any()),
                tasks=int(members.size),
                **counts,
                completed_in_model=model.n_completed,
                median_exec_s=_finite(model.median_exec_s),
                transfer_s=_finite(model.transfer_s),
                a0=model.a0,
                a1=model.a1,
                size_groups=model.n_groups,
                policy=policies.most_common(1)[0][0] if policies else "done",
                policies=dict(sorted(policies.items())),
                predicted_occupancy_s=_finite(float(np.median(prediction.occupancy_s[unfinished])))
                if unfinished.size
                else None,
            )
        )
    return out


def _running(state: RunState, now: float | None) -> list[RunningTask]:
    workflow = state.workflow
    out = []
    for i in state.running().tolist():
        started = float(state.start_time[i])
        out.append(
            RunningTask(
                task=workflow.task_ids[i],
                stage=workflow.stages[workflow.stage_of[i]].name,
                host=state.host.get(i),
                started=started,
                elapsed_s=max((now if now is not None else started) - started, 0.0),
                attempts=int(state.attempts[i]),
            )
        )
    return sorted(out, key=lambda r: (r.started, r.task))


def _finite(value: float) -> float | None:
    return value if math.isfinite(value) else None


def _relative(path: Path, base: Path) -> str:
    try:
        return os.path.relpath(path, base)
    except ValueError:
        return os.fspath(path)


# -- output ------------------------------------------------------------------------


def report_json(report: InspectReport) -> dict[str, Any]:
    data = asdict(report)
    data = {"version": JSON_VERSION, **data}
    return _clean(data)


def _clean(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _clean(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_clean(v) for v in value]
    return value


def render_text(report: InspectReport) -> str:
    lines = [
        f"workflow {report.workflow}: {report.counts['tasks']} tasks in {len(report.stages)} stages ({report.dag})"
    ]
    lines.append("  " + _source_line(report))
    lines.append("  " + _status_line(report))
    counts = report.counts
    lines.append(
        f"  tasks: {counts['done']} done, {counts['running']} running, {counts['idle']} idle, "
        f"{counts['held']} held, {counts['not_ready']} not ready"
    )
    lines += ["", *_stage_table(report.stages), "", *_running_lines(report.running)]
    if report.sub_workflows:
        lines += ["", "sub-workflows:"]
        lines += [
            f"  {s['node']} -> {s['submit_dir'] or '(not planned yet)'}" + (f" ({s['dag']})" if s["dag"] else "")
            for s in report.sub_workflows
        ]
    if report.warnings:
        lines += ["", f"warnings ({len(report.warnings)}):", *(f"  {w}" for w in report.warnings)]
    return "\n".join(lines)


def _source_line(report: InspectReport) -> str:
    if report.source is None:
        return "events: none (no job event log and no jobstate.log job line yet: every task shows as not ready)"
    kind = "the job event log" if report.source == "eventlog" else "no job event log, so no hosts"
    return f"events: {report.events} from {report.source_file} ({kind})"


def _status_line(report: InspectReport) -> str:
    dagman = (
        f"DAGMan finished with status {report.dag_exit_code}" if report.dag_finished else "DAGMan not seen finished"
    )
    if report.now is None:
        return f"{dagman}; now: no event yet"
    stamp = datetime.fromtimestamp(report.now, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
    return f"{dagman}; now: {stamp} ({report.now_from})"


_HEADER = (
    "stage",
    "tasks",
    "done",
    "run",
    "idle",
    "held",
    "not ready",
    "policy",
    "predicted",
    "exec",
    "transfer",
    "a0",
    "a1",
)


def _stage_table(stages: list[StageReport]) -> list[str]:
    rows = [_HEADER]
    for s in stages:
        name = s.name if s.on_pool else f"{s.name} (off-pool)"
        rows.append(
            (
                name,
                str(s.tasks),
                str(s.done),
                str(s.running),
                str(s.idle),
                str(s.held),
                str(s.not_ready),
                s.policy,
                _seconds(s.predicted_occupancy_s),
                _seconds(s.median_exec_s),
                _seconds(s.transfer_s),
                f"{s.a0:.3g}",
                f"{s.a1:.3g}",
            )
        )
    widths = [max(len(r[i]) for r in rows) for i in range(len(_HEADER))]
    return [
        "  ".join(
            cell.ljust(w) if i in (0, 7) else cell.rjust(w) for i, (cell, w) in enumerate(zip(r, widths))
        ).rstrip()
        for r in rows
    ]


def _running_lines(running: list[RunningTask]) -> list[str]:
    if not running:
        return ["running tasks: none"]
    lines = [f"running tasks ({len(running)}):"]
    for r in running:
        lines.append(
            f"  {r.task}  [{r.stage}]  on {_host(r.host)}  for {_seconds(r.elapsed_s)}"
            + (f"  (attempt {r.attempts})" if r.attempts > 1 else "")
        )
    return lines


def _host(host: str | None) -> str:
    if not host:
        return "(host unknown)"
    sinful = parse_sinful(host)
    if sinful is None:
        return host
    return sinful.alias or sinful.host


def _seconds(value: float | None) -> str:
    if value is None:
        return "-"
    if value < 100:
        return f"{value:.3g}s"
    if value < 3600:
        return f"{value / 60:.1f}m"
    return f"{value / 3600:.1f}h"
