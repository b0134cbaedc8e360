"""The status snapshot: typed, written and read back the same, and an older or damaged one still renders."""

from __future__ import annotations

import json
import os
from dataclasses import replace

from wire_daemon.persist.store import StateStore
from wire_daemon.service.status import (
    STATUS_KEY,
    ControlStatus,
    Cost,
    EndedInstance,
    LastDecision,
    PoolInstance,
    SafeStateStatus,
    StageStatus,
    StatusSnapshot,
    Stopped,
    TaskCounts,
    WorkflowStatus,
    read_status,
)
from wire_daemon.service.status_text import render_status

WALL = 1_795_000_000.0


def _snapshot() -> StatusSnapshot:
    return StatusSnapshot(
        time=WALL,
        clock="wall",
        workflows=[WorkflowStatus("montage-0", "running", 103, 40, submit_dir="/srv/run1")],
        tasks=TaskCounts(103, 40, 8, 3, 0, 52),
        pool=[
            PoolInstance("i-1", "joined", "running", WALL - 600, 600.0, 4, 4, 300.0, None),
            PoolInstance("i-2", "booting", release_at=WALL + 60),
        ],
        ended_instances=[EndedInstance("i-0", "terminated")],
        ended_instances_count=1,
        stages=[StageStatus("mProject", 50, 40, 8, 2, 0, 31.5, 3)],
        last_decision=LastDecision(WALL, 2, 2, 2, [], [], "hold", "decision: pool stays at 2"),
        cost_units=3,
        cost=Cost(3, 1, 2),
        charging_unit_s=900.0,
        control=ControlStatus.from_json({"mode": "paused", "command": "pause"}),
        remaining_makespan_estimate_s=120.0,
        dry_run=True,
        safe_state=SafeStateStatus(recover_iterations=3),
    )


def _state_file(tmp_path, snapshot: object, **meta: object) -> StateStore:
    store = StateStore(tmp_path / "state.sqlite")
    store.set_meta(STATUS_KEY, snapshot if isinstance(snapshot, str) else json.dumps(snapshot))
    for key, value in meta.items():
        store.set_meta(key, value if isinstance(value, str) else json.dumps(value))
    return store


def test_a_snapshot_reads_back_as_it_was_written():
    snapshot = _snapshot()
    again = StatusSnapshot.from_json(json.loads(json.dumps(snapshot.to_json())))
    assert again == snapshot
    assert again.control.describe == "paused by the operator: the pool is kept as it is"
    stopped = StatusSnapshot.from_json(json.loads(json.dumps({**snapshot.to_json(), "stopped": {"wall": 1.0}})))
    assert stopped is not None and stopped.stopped == Stopped(1.0, False, "stopped")


def test_an_older_snapshot_with_keys_missing_renders_with_defaults(tmp_path):
    # What an early daemon wrote: no clock, no cost split, no control or safe state, instances in part.
    old = {
        "time": WALL,
        "tasks": {"total": 10, "done": 4, "running": 2},
        "pool": [{"instance_id": "i-1", "state": "running"}],
        "cost_units": 5,
        "a_key_of_a_newer_daemon": {"x": 1},
    }
    _state_file(tmp_path, old).close()
    report = read_status(tmp_path / "state.sqlite")
    assert report.snapshot is not None and not report.snapshot.virtual  # an epoch time: the wall clock
    text = render_status(report, now=WALL)
    assert "mode: automatic: the scaling policy decides" in text
    assert "tasks: 4 of 10 done, 2 running, 0 queued, 0 held, 0 not ready" in text
    assert "i-1                  ?            cloud: running" in text
    assert "cost: 5 charging unit(s)" in text and "committed" not in text
    data = report.to_json()
    assert data["cost_units"] == 5 and data["pool"][0]["busy_slots"] is None
    assert "a_key_of_a_newer_daemon" not in data


def test_values_of_the_wrong_type_read_as_their_defaults(tmp_path):
    damaged = {
        "time": WALL,
        "clock": 7,
        "tasks": "many",
        "pool": [3, {"instance_id": "i-1", "age_s": "long", "slots": True, "lifecycle": "joined"}],
        "stages": [{"stage": "s", "tasks": 2.5, "done": None}],
        "cost": {"total_units": "3"},
        "control": {"mode": "nonsense"},
        "safe_state": ["active"],
    }
    snapshot = StatusSnapshot.from_json(damaged)
    assert snapshot is not None and snapshot.tasks is None
    assert snapshot.pool == [PoolInstance("i-1", "joined")]
    assert snapshot.stages == [StageStatus("s")] and snapshot.cost == Cost()
    assert snapshot.control == ControlStatus() and snapshot.safe_state == SafeStateStatus()
    _state_file(tmp_path, damaged).close()
    assert "pool: 1 instance(s)" in render_status(read_status(tmp_path / "state.sqlite"), now=WALL)


def test_a_damaged_or_absent_snapshot_is_no_decision_yet(tmp_path):
    _state_file(tmp_path, "{not json", pid="not a pid", heartbeat="[").close()
    report = read_status(tmp_path / "state.sqlite")
    assert report.daemon == "down" and report.snapshot is None and report.pid is None
    assert render_status(report).endswith("no decision yet")
    assert read_status(tmp_path / "absent.sqlite").to_json() == {
        "daemon": "never ran",
        "state_path": str(tmp_path / "absent.sqlite"),
    }


def test_the_state_file_is_fresher_than_the_snapshot(tmp_path):
    # The daemon (this process: alive) started after its last stop; the operator paused it and a failed
    # iteration put it in the safe state since its last snapshot.
    store = _state_file(
        tmp_path,
        _snapshot().to_json() | {"stopped": {"wall": WALL - 100, "finished": False, "reason": "old"}},
        pid=str(os.getpid()),
        started={"wall": WALL},
        stopped={"wall": WALL - 100, "finished": False, "reason": "SIGTERM received"},
        heartbeat={"wall": WALL + 5},
        control={"mode": "hold", "count": 2},
        safe_state={"active": True, "reason": "3 iterations in a row failed", "recover_iterations": 3},
    )
    store.request_control("resume", by="ops", now=WALL + 1)
    store.close()
    report = read_status(tmp_path / "state.sqlite")
    assert report.daemon == "running" and report.stopped is None and report.workflow_finished is None
    assert report.control == ControlStatus.from_json({"mode": "hold", "count": 2})
    data = report.to_json()
    assert "stopped" not in data and data["control"]["describe"] == "held at 2 instance(s) by the operator"
    assert data["safe_state"]["active"] is True and data["pending_controls"][0]["command"] == "resume"
    text = render_status(report, now=WALL + 10)
    assert text.splitlines()[0].startswith("DRY-RUN: no cloud call is made")  # at the top, before all else
    assert text.splitlines()[2].startswith("SAFE STATE: 3 iterations in a row failed")
    assert "pending: resume" in text and "by ops" in text


def test_a_stopped_daemon_shows_how_its_run_ended(tmp_path):
    _state_file(
        tmp_path,
        _snapshot().to_json() | {"stopped": {"wall": WALL + 9, "finished": True, "reason": "the workflow finished"}},
        pid="999999999",
        started={"wall": WALL},
        stopped={"wall": WALL + 9, "finished": True, "reason": "the workflow finished"},
    ).close()
    report = read_status(tmp_path / "state.sqlite")
    assert report.daemon == "down" and report.workflow_finished is True
    assert report.stopped == Stopped(WALL + 9, True, "the workflow finished")
    text = render_status(report, now=WALL + 10)
    assert ": the workflow finished (the figures below are final)" in text
    assert "remaining work" not in text  # a stopped run has none to estimate


def test_the_status_gives_the_money_spent_and_committed_beside_the_units(tmp_path):
    snapshot = replace(_snapshot(), cost=Cost(3, 1, 2, spent_money=0.51, committed_money=0.34, currency="USD"))
    _state_file(tmp_path, snapshot.to_json())
    text = render_status(read_status(tmp_path / "state.sqlite"), now=WALL)
    assert "money: 0.85 USD: 0.51 spent, 0.34 committed (charged, not yet used)" in text
    assert "cost: 3 charging unit(s)" in text  # the units stay
