"""``wire-daemon inspect SUBMIT_DIR``: what the daemon would see in one submit directory.

The submit dir is read from the start with a ``SubmitDirMonitor`` (its event
log, else its jobstate.log) into a fresh ``RunState``; an ``OnlinePredictor``
then runs one update and one prediction at *now* = the last event's time (or
the wall clock, for a live directory, with ``wall_clock=True``).

Per stage: task counts (done, running, idle, held, aborted = removed from the
queue by condor_rm or a hold that ended in an abort, not ready = not yet
submitted by DAGMan), the model (median execution, transfer estimate, a0/a1 of
Algorithm 1) and the prediction policy used for its unfinished tasks (the most
frequent one, and the count of each). Running tasks: host and elapsed time.
The JSON shape is documented in docs/monitor.md; NaN becomes null.

Nothing read is dropped without a word. A warning says so when events name
nodes the ``.dag`` does not have (a ``.dag`` cut short), when a Pegasus
``.dag`` lacks its closing line, when part of the event file could not be
read as events (a torn last event, or a file that is not an event log), and
when DAGMan says it finished while the events read leave tasks running or
queued. A stage with no task seen started has no prediction (``-``), not 0 s;
a0/a1 are Algorithm 1's line after as many steps as the daemon would have
taken by *now* (one per 180 s interval since the first event), and ``-``
where no line is fitted (no task of the stage completed, or all did: the
daemon freezes a finished stage's model).
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
from wire_daemon.core.config import PredictionConfig, SteeringConfig
from wire_daemon.core.events import EventKind
from wire_daemon.core.run_state import RunState, TaskStatus
from wire_daemon.monitor.hosts import parse_sinful
from wire_daemon.monitor.problems import Problems, shown
from wire_daemon.monitor.safe_open import open_regular
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
_MAX_GRADIENT_STEPS = 5_000  # a month of 3-minute intervals is more than any run needs
_NOT_STARTED = 1  # prediction policy 1: no task of the stage has started


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
    a0: float | None  # None: no line fitted (see the module docstring)
    a1: float | None
    size_groups: int
    policy: str  # the most frequent policy among unfinished tasks; "done" when none is left
    policies: dict[str, int] = field(default_factory=dict)
    predicted_occupancy_s: float | None = None  # median over the unfinished tasks; None: nothing seen to predict from
    aborted: int = 0


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
    ingest = read_events(monitor, state)
    events, last = ingest.count, ingest.last
    now, now_from = _now(last, wall_clock)
    predictor = OnlinePredictor(monitor.workflow, PredictionConfig())
    at = now if now is not None else 0.0
    for _ in range(_gradient_steps(state, now)):  # the steps the daemon would have taken by now
        predictor.update(state, at)
    prediction = predictor.predict(state, at)
    status = monitor.dag_status()
    aborted = _aborted(state, ingest.last_kind)
    counts = _counts(state.status, aborted)
    warnings = list(problems.messages)
    warnings += _unknown_nodes(ingest.unknown, monitor)
    warnings += _dag_unfinished(Path(monitor.submit_dir.dag.path))
    warnings += _unread_bytes(monitor)
    if _contradiction(status.finished, status.exit_code, counts):
        warnings.append(
            f"DAGMan says the workflow finished (status {status.exit_code}), but the events read leave "
            f"{counts['running']} task(s) running, {counts['idle']} queued and {counts['held']} held: "
            "the event log is cut short, or its last events are not written yet"
        )
    return InspectReport(
        submit_dir=shown(os.fspath(path)),
        workflow=monitor.workflow.name,
        dag=_relative(Path(monitor.submit_dir.dag.path), monitor.path),
        source=monitor.source,
        source_file=_relative(monitor.source_file, monitor.path) if monitor.source_file else None,
        events=events,
        now=now,
        now_from=now_from,
        dag_finished=status.finished,
        dag_exit_code=status.exit_code,
        counts=counts,
        stages=_stages(predictor, state, prediction, aborted),
        running=_running(state, now),
        sub_workflows=[
            {
                "node": ref.node,
                "submit_dir": _relative(ref.submit_dir, monitor.path) if ref.submit_dir else None,
                "dag": ref.dag_path.name if ref.dag_path else None,
            }
            for ref in sub_workflow_refs(monitor.submit_dir)
        ],
        warnings=warnings,
    )


def _contradiction(finished: bool, exit_code: int | None, counts: dict[str, int]) -> bool:
    """DAGMan finished, but the events leave tasks running (or, after a success, queued or held)."""
    if not finished:
        return False
    if exit_code == 0:
        return counts["running"] + counts["idle"] + counts["held"] > 0
    return counts["running"] > 0  # a failed DAG leaves its failed nodes queued; none runs after DAGMan


@dataclass
class _Ingest:
    count: int = 0
    last: float | None = None
    unknown: Counter[str] = field(default_factory=Counter)  # node -> events that name it, not in the .dag
    last_kind: dict[int, EventKind] = field(default_factory=dict)  # task -> its latest event's kind


def read_events(monitor: SubmitDirMonitor, state: RunState) -> _Ingest:
    """Every event the submit dir holds now, applied to ``state`` (``plan`` reads a submit dir this way too)."""
    out = _Ingest()
    for _ in range(_MAX_POLLS):
        before = monitor.checkpoint()
        events = monitor.poll_events()
        numbers = state.workflow.indices_of([e.task_id for e in events]) if events else []
        for event, i in zip(events, numbers):
            out.last = event.time if out.last is None else max(out.last, event.time)
            if i < 0:
                out.unknown[event.task_id] += 1
                continue
            state.apply(event)
            out.last_kind[i] = event.kind
        out.count += len(events)
        if not events and monitor.checkpoint() == before:
            break
    return out


def _gradient_steps(state: RunState, now: float | None) -> int:
    """One per daemon interval from the first event to now (at least one: the first update)."""
    first = state.first_event_time
    if now is None or first is None:
        return 1
    intervals = math.ceil(max(now - first, 0.0) / SteeringConfig().interval_s)
    return int(min(max(intervals, 1), _MAX_GRADIENT_STEPS))


def _aborted(state: RunState, last_kind: dict[int, EventKind]) -> np.ndarray:
    """Tasks whose last event is an abort and that nothing resubmitted since (RunState shows them not ready)."""
    aborted = np.zeros(state.workflow.n_tasks, dtype=bool)
    for i, kind in last_kind.items():
        if kind is EventKind.ABORTED and state.status[i] == TaskStatus.WAITING:
            aborted[i] = True
    return aborted


def _unknown_nodes(unknown: Counter[str], monitor: SubmitDirMonitor) -> list[str]:
    if not unknown:
        return []
    dag = Path(monitor.submit_dir.dag.path).name
    names = ", ".join(sorted(unknown)[:5]) + (", ..." if len(unknown) > 5 else "")
    return [
        f"{sum(unknown.values())} event(s) name {len(unknown)} node(s) that are not in {dag} ({names}): "
        "the .dag may be cut short, or not the one DAGMan ran; those events are not counted"
    ]


def _dag_unfinished(dag: Path) -> list[str]:
    """A Pegasus .dag ends with its '# End of DAG' banner; one without it was cut short."""
    try:
        with open_regular(dag) as handle:
            head = handle.read(512)
            handle.seek(max(os.fstat(handle.fileno()).st_size - 512, 0))
            tail = handle.read(512)
    except OSError:
        return []
    if b"PEGASUS WMS GENERATED DAG FILE" in head and b"End of DAG" not in tail:
        return [f"{dag.name} has no '# End of DAG' line, which Pegasus writes last: the .dag may be cut short"]
    return []


def _unread_bytes(monitor: SubmitDirMonitor) -> list[str]:
    """Bytes of the event file the reader could not turn into events (a torn last event, or not an event log)."""
    source = monitor.source_file
    if source is None:
        return []
    reader = monitor.checkpoint().get("reader") or {}
    position = (reader.get("reader") or {}).get("position") or reader.get("position") or {}
    consumed = position.get("offset")
    try:
        size = source.stat().st_size
    except OSError:
        return []
    if not isinstance(consumed, int) or consumed >= size:
        return []
    name = _relative(source, monitor.path)
    if consumed == 0:
        return [
            f"{name}: none of its {size} bytes could be read as "
            + ("job events (is it an HTCondor job event log?)" if monitor.source == "eventlog" else "jobstate lines")
        ]
    return [
        f"{name}: its last {size - consumed} bytes are not a complete "
        + ("event" if monitor.source == "eventlog" else "line")
        + " (cut short, or still being written): not counted"
    ]


def _now(last: float | None, wall_clock: bool) -> tuple[float | None, str]:
    if wall_clock:
        return time.time(), "wall-clock"
    return (last, "last-event") if last is not None else (None, "none")


def _counts(status: np.ndarray, aborted: np.ndarray) -> dict[str, int]:
    out = {"tasks": int(status.size)}
    for name, value in _STATUS_NAMES.items():
        out[name] = int(np.count_nonzero(status == value))
    out["aborted"] = int(aborted.sum())
    out["not_ready"] -= out["aborted"]
    return out


_STATUS_NAMES = {
    "done": TaskStatus.DONE,
    "running": TaskStatus.RUNNING,
    "idle": TaskStatus.IDLE,
    "held": TaskStatus.HELD,
    "not_ready": TaskStatus.WAITING,
}


def _stages(
    predictor: OnlinePredictor, state: RunState, prediction: Prediction, aborted: np.ndarray
) -> list[StageReport]:
    workflow = state.workflow
    out = []
    for model, members in zip(predictor.stage_summary(), workflow.stage_members()):
        status = state.status[members]
        unfinished = members[status != TaskStatus.DONE]
        policies = Counter(POLICY_NAMES.get(int(p), str(int(p))) for p in prediction.policy[unfinished])
        counts = {name: int(np.count_nonzero(status == value)) for name, value in _STATUS_NAMES.items()}
        n_aborted = int(aborted[members].sum())
        counts["not_ready"] -= n_aborted
        seen = unfinished[prediction.policy[unfinished] != _NOT_STARTED]
        fitted = 0 < model.n_completed < model.n_tasks
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
                a0=model.a0 if fitted else None,
                a1=model.a1 if fitted else None,
                size_groups=model.n_groups,
                policy=policies.most_common(1)[0][0] if policies else "done",
                policies=dict(sorted(policies.items())),
                predicted_occupancy_s=_finite(float(np.median(prediction.occupancy_s[seen]))) if seen.size else None,
                aborted=n_aborted,
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
    """For showing: a name that is not UTF-8 comes out escaped."""
    try:
        return shown(os.path.relpath(path, base))
    except ValueError:
        return shown(os.fspath(path))


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
    n, k = report.counts["tasks"], len(report.stages)
    lines = [f"workflow {report.workflow}: {n} task{'s' * (n != 1)} in {k} stage{'s' * (k != 1)} ({report.dag})"]
    lines.append("  " + _source_line(report))
    lines.append("  " + _status_line(report))
    counts = report.counts
    aborted = f", {counts['aborted']} aborted" if counts.get("aborted") else ""
    lines.append(
        f"  tasks: {counts['done']} done, {counts['running']} running, {counts['idle']} idle, "
        f"{counts['held']} held{aborted}, {counts['not_ready']} not ready"
    )
    lines += ["", *_stage_table(report.stages), "", *_running_lines(report.running)]
    with_aborted = [stage for stage in report.stages if stage.aborted]
    if with_aborted:
        lines += [
            "",
            "aborted (removed from the queue: DAGMan retries the node if it has retries left, else it fails):",
        ]
        lines += [f"  {stage.name}: {stage.aborted} task(s)" for stage in with_aborted]
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
    if _contradiction(report.dag_finished, report.dag_exit_code, report.counts):
        left = report.counts["running"] + report.counts["idle"] + report.counts["held"]
        dagman += f" (yet {left} task(s) still show running, queued or held: see the warnings)"
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
                "-" if s.a0 is None else f"{s.a0:.3g}",
                "-" if s.a1 is None else f"{s.a1:.3g}",
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
