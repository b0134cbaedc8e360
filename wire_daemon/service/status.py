"""What ``wire-daemon status`` shows, as one typed snapshot.

The daemon builds a ``StatusSnapshot`` after every decision and at its stop
(``Daemon.status_snapshot``) and keeps it in the state file as JSON (meta key
``status``). ``read_status`` loads it back from the state file, whether the
daemon is up or down, and adds what the snapshot cannot know: whether the
daemon is alive, its last heartbeat, the operator's mode and the safe state
when they changed after the snapshot, and the commands not applied yet. The
result, a ``StatusReport``, is what ``status --json`` prints
(``StatusReport.to_json``) and ``status`` renders (``service/status_text.py``).

Every field has a default, and a value of the wrong type is read as its
default: a snapshot written by an older or newer daemon (keys missing or
added) or a damaged entry still renders, never a traceback.
"""

from __future__ import annotations

import json
import os
import sqlite3
import types
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar, Union, get_args, get_origin, get_type_hints

import numpy as np

from wire_daemon.core.errors import InputError
from wire_daemon.core.run_state import RunState, TaskStatus
from wire_daemon.persist.store import StateStore
from wire_daemon.runtime.control import PoolControl
from wire_daemon.service.wording import is_virtual

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

STATUS_KEY = "status"  # meta: the last snapshot
_T = TypeVar("_T", bound="DataclassInstance")


# -- the snapshot ----------------------------------------------------------------------------


@dataclass(frozen=True)
class WorkflowStatus:
    """One workflow followed now or lately: where it is and how far it got."""

    name: str = "?"
    state: str = "?"  # waiting | running | finished | failed
    tasks: int = 0
    done: int = 0
    submit_dir: str | None = None  # a submit host's workflow
    trace: str | None = None  # the emulated site's trace
    exit_code: int | None = None  # DAGMan's, once finished
    finished_at: float | None = None  # loop clock


@dataclass(frozen=True)
class TaskCounts:
    total: int = 0
    done: int = 0
    running: int = 0
    idle: int = 0
    held: int = 0
    not_ready: int = 0


@dataclass(frozen=True)
class PoolInstance:
    """One live instance of ours. Only ``instance_id``, ``lifecycle`` and ``release_at`` are known for one
    the cloud does not list (a launch not answered yet, a termination under way): the rest is None."""

    instance_id: str = "?"
    lifecycle: str | None = None  # a LifecycleState value
    state: str | None = None  # the cloud's word
    launched_at: float | None = None
    age_s: float | None = None
    busy_slots: int | None = None
    slots: int | None = None
    next_charge_in_s: float | None = None
    release_at: float | None = None  # loop clock: when a timed release terminates it


@dataclass(frozen=True)
class EndedInstance:
    instance_id: str = "?"
    lifecycle: str = "?"


@dataclass(frozen=True)
class StageStatus:
    """Task counts of one stage and the prediction for its unfinished tasks (None: no prediction)."""

    stage: str = "?"
    tasks: int = 0
    done: int = 0
    running: int = 0
    idle: int = 0
    not_ready: int = 0
    predicted_occupancy_s: float | None = None
    prediction_policy: int | None = None


@dataclass(frozen=True)
class Cost:
    """Charging units: those of ended units (spent) and of started, unfinished ones (committed)."""

    total_units: int = 0
    spent_units: int = 0
    committed_units: int = 0
    # Money at the configured prices (steering.price_per_hour, instance types, markets): spent on time
    # that passed or on instances that ended, committed to time charged and not yet used.
    spent_money: float | None = None
    committed_money: float | None = None
    currency: str = ""


@dataclass(frozen=True)
class InterruptionCount:
    """Spot reclaims of one instance type in one zone ("" where the cloud tells none)."""

    instance_type: str = ""
    zone: str = ""
    count: int = 0


@dataclass(frozen=True)
class Interruptions:
    """Spot instances the cloud took back (on a submit host since the state file's first run; on the emulated
    site in this run): interruptions, not failures.

    ``lost_slot_s`` is the work they threw away: slot-seconds their tasks had run, to be run again.
    """

    total: int = 0
    by_type_zone: list[InterruptionCount] = field(default_factory=list)
    lost_slot_s: float = 0.0
    back_offs: list[SpotBackOffStatus] = field(default_factory=list)  # types launched on-demand for now


@dataclass(frozen=True)
class SpotBackOffStatus:
    """A type whose spot launches go on-demand until ``until`` (a capacity error, or reclaims in a row)."""

    instance_type: str = ""
    until: float = 0.0


@dataclass(frozen=True)
class LastDecision:
    time: float | None = None
    target: int | None = None
    planned: int | None = None
    pool: int | None = None
    launched: list[str] = field(default_factory=list)
    released: list[str] = field(default_factory=list)
    rule: str = ""
    words: str = ""  # the decision in one line of plain words (service/wording.py)
    details: str = ""  # what that line leaves out: tasks, predicted load, the policy's rule, its estimates


@dataclass(frozen=True)
class ControlStatus:
    """The operator's mode (``runtime.control.PoolControl``) and its words."""

    mode: str = "auto"
    count: int = 0
    action: str = ""
    command: str = ""
    since: float | None = None
    describe: str = "automatic: the scaling policy decides"

    @classmethod
    def of(cls, control: PoolControl) -> ControlStatus:
        mode = {k: v for k, v in control.to_json().items() if k != "steering"}  # the deadline, budget: in describe
        return cls(**mode, describe=control.describe())

    @classmethod
    def from_json(cls, data: object) -> ControlStatus:
        """Read through ``PoolControl``, which knows the valid modes; the words follow from the mode."""
        return cls.of(PoolControl.from_json(data if isinstance(data, dict) else None))


@dataclass(frozen=True)
class SafeStateStatus:
    """The safe state as ``service.safe_state.CrashWatch`` keeps it in the state file."""

    active: bool = False
    reason: str = ""
    since: float | None = None  # wall clock
    failed_in_a_row: int = 0
    succeeded_in_a_row: int = 0
    recover_iterations: int | None = None

    @classmethod
    def from_json(cls, data: object) -> SafeStateStatus:
        return _load(cls, data)


@dataclass(frozen=True)
class CondorAwayStatus:
    """HTCondor does not answer the daemon: since when (wall clock) and why; the pool is held meanwhile."""

    since: float | None = None
    reason: str = ""

    @classmethod
    def from_json(cls, data: object) -> CondorAwayStatus | None:
        return _load(cls, data) if isinstance(data, dict) else None


@dataclass(frozen=True)
class Stopped:
    """How the daemon's last run ended."""

    wall: float | None = None
    finished: bool = False  # the (emulated) workflow is done: the figures are final
    reason: str = "stopped"


@dataclass(frozen=True)
class StatusSnapshot:
    """What the daemon saw at one moment of its loop's clock (``time``); written after each decision."""

    time: float
    clock: str | None = None  # wall | virtual; None: an older snapshot, told by its time
    workflows: list[WorkflowStatus] | None = None
    tasks: TaskCounts | None = None
    pool: list[PoolInstance] = field(default_factory=list)
    ended_instances: list[EndedInstance] = field(default_factory=list)  # the latest few
    ended_instances_count: int = 0
    stages: list[StageStatus] = field(default_factory=list)
    last_decision: LastDecision | None = None
    cost_units: int = 0
    cost: Cost | None = None
    charging_unit_s: float | None = None
    control: ControlStatus = field(default_factory=ControlStatus)
    remaining_makespan_estimate_s: float = 0.0  # a lower bound: the work left over the pool's slots
    dry_run: bool | None = None  # None: a snapshot written before every site said
    safe_state: SafeStateStatus = field(default_factory=SafeStateStatus)
    stopped: Stopped | None = None
    interruptions: Interruptions = field(default_factory=Interruptions)

    @property
    def virtual(self) -> bool:
        """Are its times on the emulated site's virtual clock?"""
        return is_virtual({"clock": self.clock, "time": self.time})

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        if self.stopped is None:
            del data["stopped"]
        return data

    @classmethod
    def from_json(cls, data: object) -> StatusSnapshot | None:
        """None if ``data`` holds no snapshot (the daemon decided nothing yet, or the entry is damaged)."""
        if not isinstance(data, dict) or not _fits(data.get("time"), float):
            return None
        workflows = data.get("workflows")
        return _load(
            cls,
            data,
            workflows=None if not isinstance(workflows, list) else _load_all(WorkflowStatus, workflows),
            tasks=_load(TaskCounts, data["tasks"]) if isinstance(data.get("tasks"), dict) else None,
            pool=_load_all(PoolInstance, data.get("pool")),
            ended_instances=_load_all(EndedInstance, data.get("ended_instances")),
            stages=_load_all(StageStatus, data.get("stages")),
            last_decision=_load(LastDecision, data["last_decision"])
            if isinstance(data.get("last_decision"), dict)
            else None,
            cost=_load(Cost, data["cost"]) if isinstance(data.get("cost"), dict) else None,
            control=ControlStatus.from_json(data.get("control")),
            safe_state=SafeStateStatus.from_json(data.get("safe_state")),
            stopped=_load(Stopped, data["stopped"]) if isinstance(data.get("stopped"), dict) else None,
            interruptions=_interruptions(data.get("interruptions")),
        )


def _interruptions(data: object) -> Interruptions:
    given = _dict(data)
    return _load(
        Interruptions,
        data,
        by_type_zone=_load_all(InterruptionCount, given.get("by_type_zone")),
        back_offs=_load_all(SpotBackOffStatus, given.get("back_offs")),
    )


def interruption_status(
    counts: dict[tuple[str, str], int], lost_slot_s: float, back_offs: dict[str, float] | None = None
) -> Interruptions:
    """The tally's counts, the most reclaimed first (then by type and zone), and the back-offs in force, as
    status shows them."""
    ordered = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))
    return Interruptions(
        total=sum(counts.values()),
        by_type_zone=[InterruptionCount(kind, zone, n) for (kind, zone), n in ordered],
        lost_slot_s=round(lost_slot_s, 1),
        back_offs=[SpotBackOffStatus(kind, until) for kind, until in (back_offs or {}).items()],
    )


def workflow_statuses(workflows: list[dict[str, Any]]) -> list[WorkflowStatus]:
    """The runtime's workflow lines, typed."""
    return _load_all(WorkflowStatus, workflows)


# -- the report --------------------------------------------------------------------------------


@dataclass(frozen=True)
class PendingControl:
    """An operator's command written to the state file and not applied yet."""

    command: str
    count: int | None
    requested_at: float
    requested_by: str
    argument: str | None = None  # deadline WHEN, budget AMOUNT


@dataclass(frozen=True)
class StatusReport:
    """The last snapshot and what only the state file knows now; see the module docstring.

    ``control``, ``safe_state`` and ``stopped`` are the freshest known and take
    the place of the snapshot's.
    """

    daemon: str  # running | down | never ran
    state_path: str
    pid: int | None = None
    last_heartbeat_wall: float | None = None
    started_wall: float | None = None
    workflow_finished: bool | None = None  # known once the daemon is down
    snapshot: StatusSnapshot | None = None  # None: no decision yet
    control: ControlStatus | None = None
    safe_state: SafeStateStatus | None = None
    stopped: Stopped | None = None  # only while the daemon is down
    pending_controls: list[PendingControl] = field(default_factory=list)
    condor_away: CondorAwayStatus | None = None  # only while the running daemon finds HTCondor unreachable

    def to_json(self) -> dict[str, Any]:
        """The snapshot's keys and the report's, in one flat object (``status --json``)."""
        if self.daemon == "never ran":
            return {"daemon": self.daemon, "state_path": self.state_path}
        data: dict[str, Any] = {
            "daemon": self.daemon,
            "pid": self.pid,
            "state_path": self.state_path,
            "last_heartbeat_wall": self.last_heartbeat_wall,
            "started_wall": self.started_wall,
            "workflow_finished": self.workflow_finished,
        }
        if self.snapshot is not None:
            data |= self.snapshot.to_json()
        data.pop("stopped", None)
        for key in ("control", "safe_state", "stopped", "condor_away"):
            value = getattr(self, key)
            if value is not None:
                data[key] = asdict(value)
        data["pending_controls"] = [asdict(c) for c in self.pending_controls]
        return data


CONDOR_AWAY_KEY = "condor_away"  # meta: {since, reason} while HTCondor does not answer, null once it does


def read_status(state_path: str | Path) -> StatusReport:
    """The report from the state file alone, so it works with the daemon down; no file: it never ran."""
    path = Path(state_path)
    if not path.exists():
        return StatusReport("never ran", str(path))
    store = open_state_file(path)
    try:
        meta = {key: _meta_json(store, key) for key in (STATUS_KEY, "heartbeat", "stopped", "started", "control")}
        safe_state = _meta_json(store, "safe_state")
        condor_away = _meta_json(store, CONDOR_AWAY_KEY)
        pid = _meta_int(store, "pid")
        pending = store.pending_controls()
        # Written by a run, damaged or not; a file only the operator's commands made before the first start has none.
        ran = any(store.get_meta(key) is not None for key in (STATUS_KEY, "heartbeat", "started", "stopped", "pid"))
    finally:
        store.close()
    heartbeat, stopped, started = (_dict(meta[k]) for k in ("heartbeat", "stopped", "started"))
    # A stop written after the latest start: the run that wrote it is over, whatever process has its pid now.
    started_at = _time_or_none(started.get("wall", heartbeat.get("wall"))) or 0.0
    alive = _alive(pid) and (not stopped or started_at > (_time_or_none(stopped.get("wall")) or 0.0))
    snapshot = StatusSnapshot.from_json(meta[STATUS_KEY])
    # Fresher than the snapshot: a pause applies between iterations; the safe state is entered on a failed
    # iteration, which writes no snapshot.
    control = ControlStatus.from_json(meta["control"]) if meta["control"] is not None else _of(snapshot, "control")
    safe = SafeStateStatus.from_json(safe_state) if isinstance(safe_state, dict) else _of(snapshot, "safe_state")
    return StatusReport(
        daemon="running" if alive else "down" if ran else "never ran",
        state_path=str(path),
        pid=pid or None,
        last_heartbeat_wall=_time_or_none(heartbeat.get("wall")),
        started_wall=_time_or_none(started.get("wall")),
        workflow_finished=None if alive else _bool_or_none(stopped.get("finished")),
        snapshot=snapshot,
        control=control,
        safe_state=safe,
        stopped=None if alive else _ended(snapshot, stopped),
        pending_controls=[
            PendingControl(c.command, c.count, c.requested_at, c.requested_by, c.argument) for c in pending
        ],
        condor_away=CondorAwayStatus.from_json(condor_away) if alive else None,
    )


def _ended(snapshot: StatusSnapshot | None, stopped: dict[str, Any]) -> Stopped | None:
    """The last run's end: the one its final snapshot holds, else the state file's own record of it."""
    own = snapshot.stopped if snapshot is not None else None
    return (own or _load(Stopped, stopped)) if stopped else own


def _of(snapshot: StatusSnapshot | None, key: str) -> Any:
    return getattr(snapshot, key) if snapshot is not None else None


def open_state_file(path: Path) -> StateStore:
    """The state file for a command: a file it may not open is one line naming it, never a traceback."""
    try:
        return StateStore(path)
    except sqlite3.OperationalError as exc:
        raise InputError(str(path), f"cannot open the state file ({exc}): run as the daemon's user") from None


def _meta_json(store: StateStore, key: str) -> Any:
    """A meta entry's JSON value; a damaged one reads as absent."""
    text = store.get_meta(key)
    if text is None:
        return None
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return None


def _meta_int(store: StateStore, key: str) -> int:
    text = store.get_meta(key) or ""
    return int(text) if text.strip().isdigit() else 0


def _alive(pid: int) -> bool:
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # alive, as another user
        return True
    return True


# -- what the daemon computes for the snapshot -------------------------------------------------


def task_counts(state: RunState) -> TaskCounts:
    return TaskCounts(
        total=state.workflow.n_tasks,
        done=state.n_done(),
        running=state.count(TaskStatus.RUNNING),
        idle=state.count(TaskStatus.IDLE),
        held=state.count(TaskStatus.HELD),
        not_ready=state.count(TaskStatus.WAITING),
    )


def stage_statuses(state: RunState, prediction: Any) -> list[StageStatus]:
    """Per stage: task counts by state, and the prediction for its unfinished tasks.

    Counted with bincounts over the task arrays: one pass, whatever the number of stages.
    """
    wf, status = state.workflow, state.status.astype(np.int64)
    n_stages = len(wf.stages)
    stage_of = wf.stage_of.astype(np.int64)
    counts = np.bincount(stage_of * 8 + status, minlength=n_stages * 8).reshape(n_stages, 8)
    mean_s, policy = _stage_predictions(prediction, stage_of, n_stages, status)
    return [
        StageStatus(
            stage=stage.name,
            tasks=int(counts[k].sum()),
            done=int(counts[k, TaskStatus.DONE]),
            running=int(counts[k, TaskStatus.RUNNING]),
            idle=int(counts[k, TaskStatus.IDLE]),
            not_ready=int(counts[k, TaskStatus.WAITING]),
            predicted_occupancy_s=mean_s[k],
            prediction_policy=policy[k],
        )
        for k, stage in enumerate(wf.stages)
    ]


def _stage_predictions(
    prediction: Any, stage_of: np.ndarray, n_stages: int, status: np.ndarray
) -> tuple[list[float | None], list[int | None]]:
    """Mean predicted occupancy of each stage's unfinished tasks, and the policy most of them use."""
    if prediction is None or n_stages == 0:
        return [None] * n_stages, [None] * n_stages
    open_ = (prediction.policy > 0) & (status != TaskStatus.DONE)
    stages = stage_of[open_]
    n = np.bincount(stages, minlength=n_stages)
    total = np.bincount(stages, weights=np.nan_to_num(prediction.occupancy_s[open_]), minlength=n_stages)
    by_policy = np.bincount(stages * 10 + prediction.policy[open_].astype(np.int64), minlength=n_stages * 10)
    dominant = by_policy.reshape(n_stages, 10).argmax(axis=1)
    policy = [int(p) if c else None for p, c in zip(dominant, n)]
    # Policy 1 (no task of the stage seen started) predicts nothing: no number, rather than 0 s.
    mean_s = [round(float(t / c), 1) if c and p != 1 else None for t, c, p in zip(total, n, policy)]
    return mean_s, policy


def remaining_estimate(state: RunState, prediction: Any, pool: int, slots_per_instance: int) -> float:
    """Predicted remaining work over the pool's slots: a rough lower bound for operators."""
    if prediction is None or state.n_done() == state.workflow.n_tasks:
        return 0.0
    remaining = np.nansum(prediction.remaining_s[state.status != TaskStatus.DONE])
    return round(float(remaining) / max(1, pool * slots_per_instance), 1)


# -- reading JSON into the records, with defaults ----------------------------------------------


def _load(cls: type[_T], data: object, **given: Any) -> _T:
    """``cls`` from a JSON object: each field the object holds with a fitting type, the default for the rest
    (keys it does not know are left out). Nested records come loaded in ``given``."""
    source = data if isinstance(data, dict) else {}
    hints = get_type_hints(cls)
    kept = {
        f.name: source[f.name]
        for f in fields(cls)
        if f.name not in given and f.name in source and _fits(source[f.name], hints[f.name])
    }
    return cls(**kept, **given)


def _load_all(cls: type[_T], items: object) -> list[_T]:
    """Each JSON object of a list, as ``cls``; anything else in it is skipped."""
    return [_load(cls, item) for item in items if isinstance(item, dict)] if isinstance(items, list) else []


def _fits(value: object, hint: Any) -> bool:
    """Does a JSON value fit a field's type (str, int, float, bool, None, their unions and lists)?"""
    origin = get_origin(hint)
    if origin in (Union, types.UnionType):
        return any(_fits(value, h) for h in get_args(hint))
    if origin is list:
        return isinstance(value, list) and all(_fits(v, get_args(hint)[0]) for v in value)
    if hint is type(None):
        return value is None
    if hint is float:  # JSON writes 3.0 as 3
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if hint is int:
        return isinstance(value, int) and not isinstance(value, bool)
    return isinstance(hint, type) and isinstance(value, hint)


def _dict(value: object) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _time_or_none(value: object) -> float | None:
    """A JSON number as a time; anything else (a bool included) as None."""
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _bool_or_none(value: object) -> bool | None:
    return value if isinstance(value, bool) else None
