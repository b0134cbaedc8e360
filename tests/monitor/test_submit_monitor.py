"""SubmitDirMonitor over the real submit dirs: task states, kickstart, hosts, restarts, bad input."""

from __future__ import annotations

import shutil
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from wire_daemon.core.events import EventKind, TaskEvent
from wire_daemon.core.run_state import RunState, TaskStatus
from wire_daemon.monitor.hosts import HostMap
from wire_daemon.monitor.kickstart import read_kickstart
from wire_daemon.monitor.problems import Problems
from wire_daemon.monitor.submit_monitor import MemoryPositionStore, SubmitDirMonitor, time_ordered

from . import condor_log_text as text
from .conftest import LSST, SUBMIT

WAITING, IDLE, DONE = TaskStatus.WAITING, TaskStatus.IDLE, TaskStatus.DONE
INNER = "hierarchical_wf_success/00/00/blackdiamond_diamond_subworkflow.000"


def _state(monitor: SubmitDirMonitor, state: RunState | None = None) -> RunState:
    state = state or RunState(monitor.workflow)
    for event in monitor.poll_events():
        state.apply(event)
    return state


def _statuses(state: RunState) -> dict[str, TaskStatus]:
    return {t: TaskStatus(int(s)) for t, s in zip(state.workflow.task_ids, state.status)}


def _snapshot(state: RunState) -> tuple:
    arrays = (
        state.status,
        state.start_time,
        state.finish_time,
        state.occupancy_s,
        state.exec_s,
        state.transfer_s,
        state.attempts,
        state.submit_seq,
    )
    return tuple(np.nan_to_num(a, nan=-1.0).tolist() for a in arrays) + (state.completion_order, dict(state.host))


def _copy(tmp_path: Path, source: Path) -> Path:
    target = tmp_path / source.name
    shutil.copytree(source, target)
    return target


# -- the fixture submit dirs (no event log in them: jobstate.log) ---------------------------------

EXPECTED = {
    # dir: (events per kind, statuses of the tasks named, counts of all statuses)
    "process_wf_success": ({"submitted": 5, "started": 5, "finished": 5}, {"ls_ID0000001": DONE}, {DONE: 5}),
    "process_wf_failure": (
        {"submitted": 3, "started": 3, "finished": 3},
        {"create_dir_process_0_local": DONE, "ls_ID0000001": IDLE, "stage_out_local_local_0_0": WAITING},
        {DONE: 1, IDLE: 1, WAITING: 3},
    ),
    "sample_wf_held": (
        {"submitted": 3, "started": 3, "finished": 2, "evicted": 1, "held": 1, "aborted": 1},
        {"chebi_drug_loader_ID0000001": WAITING, "stage_in_local_local_0_0": DONE},
        {DONE: 2, WAITING: 6},
    ),
    "hierarchical_wf_success": (
        {"submitted": 11, "started": 11, "finished": 11},
        {"pegasus-plan_diamond_subworkflow": DONE, "cleanup_hierarchical-workflow_0_local": WAITING},
        {DONE: 11, WAITING: 2},
    ),
    "hierarchical_wf_failure": (
        {"submitted": 6, "started": 6, "finished": 6},
        {"pegasus-plan_diamond_subworkflow": WAITING, "curl_ID0000001": DONE},
        {DONE: 6, WAITING: 7},
    ),
}


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_fixture_dirs_reconstruct_task_states(name: str) -> None:
    kinds, named, counts = EXPECTED[name]
    monitor = SubmitDirMonitor(SUBMIT / name, problems=Problems())
    events = monitor.poll_events()
    state = RunState(monitor.workflow)
    for event in events:
        state.apply(event)
    assert monitor.source == "jobstate" and monitor.source_file == SUBMIT / name / "jobstate.log"
    assert dict(Counter(e.kind.value for e in events)) == kinds
    statuses = _statuses(state)
    assert {t: statuses[t] for t in named} == named
    assert dict(Counter(statuses.values())) == counts
    assert monitor.poll_events() == []  # nothing counted twice


def test_failed_job_with_retry_gets_each_attempts_kickstart_record() -> None:
    monitor = SubmitDirMonitor(SUBMIT / "process_wf_failure")
    finished = [e for e in monitor.poll_events() if e.kind == EventKind.FINISHED and e.task_id == "ls_ID0000001"]
    records = [
        read_kickstart(SUBMIT / "process_wf_failure" / "00" / "00" / f"ls_ID0000001.out.00{i}").records[0]
        for i in (0, 1)
    ]
    assert [e.exit_code for e in finished] == [2, 2]
    assert [e.exec_runtime_s for e in finished] == [r.main_duration for r in records]
    assert [e.peak_memory_bytes for e in finished] == [r.maxrss_bytes for r in records] != [None, None]
    state = RunState(monitor.workflow)
    for event in SubmitDirMonitor(SUBMIT / "process_wf_failure").poll_events():
        state.apply(event)
    assert state.attempts[state.workflow.index_of("ls_ID0000001")] == 2  # failed twice, back in the queue
    assert monitor.dag_status().finished and monitor.dag_status().exit_code == 1


def _attempt_records(wf: Path) -> list[tuple[float | None, int | None]]:
    """(exec time, peak memory) of each FINISHED event of ls_ID0000001."""
    finished = [e for e in SubmitDirMonitor(wf).poll_events() if e.kind == EventKind.FINISHED]
    return [(e.exec_runtime_s, e.peak_memory_bytes) for e in finished if e.task_id == "ls_ID0000001"]


@pytest.mark.parametrize(
    "moves",
    [
        # One rotation too many before these attempts (a job removed while held, rotated with no record):
        # counting attempts would look for .000 and find the first attempt's record one file later.
        [("out.001", "out.002"), ("out.000", "out.001")],
        # Rotations out of order: the count names the other attempt's file.
        [("out.000", "tmp"), ("out.001", "out.000"), ("tmp", "out.001")],
    ],
)
def test_kickstart_record_is_matched_by_condor_job_not_by_counting(
    tmp_path: Path, moves: list[tuple[str, str]]
) -> None:
    expected = _attempt_records(SUBMIT / "process_wf_failure")  # records 9.0 and 10.0, in order
    assert len(expected) == 2 and expected[0] != expected[1]
    wf = _copy(tmp_path, SUBMIT / "process_wf_failure")
    jobs = wf / "00" / "00"
    for old, new in moves:
        (jobs / f"ls_ID0000001.{old}").rename(jobs / f"ls_ID0000001.{new}")
    assert _attempt_records(wf) == expected


def test_kickstart_records_naming_no_job_fall_back_to_the_count(tmp_path: Path) -> None:
    wf = _copy(tmp_path, SUBMIT / "process_wf_failure")
    jobs = wf / "00" / "00"
    for i in (0, 1):
        path = jobs / f"ls_ID0000001.out.00{i}"
        path.write_text(path.read_text().replace("jobids:", "no_jobids:"))
    assert _attempt_records(wf) == _attempt_records(SUBMIT / "process_wf_failure")


def test_held_then_aborted_job() -> None:
    monitor = SubmitDirMonitor(SUBMIT / "sample_wf_held")
    events = [e for e in monitor.poll_events() if e.task_id == "chebi_drug_loader_ID0000001"]
    assert [e.kind for e in events] == [
        EventKind.SUBMITTED,
        EventKind.STARTED,
        EventKind.EVICTED,
        EventKind.HELD,
        EventKind.ABORTED,
    ]
    assert [e.time for e in events] == [1678036247, 1678036280, 1678036282, 1678036282, 1678036326]


def test_kickstart_durations_are_the_executables_own() -> None:
    monitor = SubmitDirMonitor(SUBMIT / "process_wf_success")
    state = _state(monitor)
    i = state.workflow.index_of("ls_ID0000001")
    assert state.exec_s[i] == pytest.approx(0.005)  # mainjob duration of ls_ID0000001.out.000
    assert state.occupancy_s[i] == 1.0 and state.transfer_s[i] == pytest.approx(0.995)
    assert (monitor.kickstart_found, monitor.kickstart_missing) == (5, 0)


def test_hierarchical_parent_and_its_sub_workflow() -> None:
    parent = SubmitDirMonitor(SUBMIT / "hierarchical_wf_success")
    (ref,) = parent.submit_dir.sub_workflows
    assert (ref.node, ref.submit_dir, ref.dag_path.name) == (
        "pegasus-plan_diamond_subworkflow",
        SUBMIT / INNER,
        "inner.dag",
    )
    assert not parent.dag_status().finished  # its jobstate.log stops before DAGMAN_FINISHED


def test_dir_without_event_log_or_jobstate_says_so_once() -> None:
    problems = Problems()
    monitor = SubmitDirMonitor(SUBMIT / INNER, problems=problems)
    assert monitor.poll_events() == [] and monitor.poll_events() == []
    assert monitor.source is None and monitor.workflow.n_tasks == 15
    assert len(problems.messages) == 1 and "no job event log (inner.dag.nodes.log, inner.log)" in problems.messages[0]


# -- an event log beside the Pegasus files ---------------------------------------------------------


def _write_process_failure_log(path: Path, t: float = 1677913789.0) -> None:
    path.write_text(
        text.submit(8, t, "create_dir_process_0_local")
        + text.execute(8, t + 4, "10.0.0.9", "submit")
        + text.terminated(8, t + 7)
        + text.submit(9, t + 20, "ls_ID0000001")
        + text.execute(9, t + 70)
        + text.terminated(9, t + 71, 2)
        + text.submit(10, t + 85, "ls_ID0000001")
        + text.execute(10, t + 85, "10.0.0.6", "worker2")
        + text.terminated(10, t + 86, 2)
    )


def test_event_log_is_preferred_and_hosts_become_instance_ids(tmp_path: Path) -> None:
    wf = _copy(tmp_path, SUBMIT / "process_wf_failure")
    _write_process_failure_log(wf / "process-0.log")  # the braindump's condor_log
    hosts = HostMap()
    hosts.add("i-0001", "10.0.0.5")
    monitor = SubmitDirMonitor(wf, hosts=hosts, problems=Problems())
    events = monitor.poll_events()
    assert monitor.source == "eventlog" and monitor.source_file == wf / "process-0.log"
    started = [e.host for e in events if e.kind == EventKind.STARTED]
    assert started == [
        "<10.0.0.9:9618?addrs=10.0.0.9-9618&alias=submit>",
        "i-0001",
        "<10.0.0.6:9618?addrs=10.0.0.6-9618&alias=worker2>",
    ]  # unknown hosts kept as written
    finished = [e for e in events if e.kind == EventKind.FINISHED]
    assert [e.exec_runtime_s for e in finished] == [pytest.approx(2.22), 0.003, 0.003]
    assert len(monitor.hosts.problems.messages) == 2  # one warning per unknown address


def test_kickstart_not_rotated_yet_or_missing(tmp_path: Path) -> None:
    wf = _copy(tmp_path, SUBMIT / "process_wf_failure")
    jobs = wf / "00" / "00"
    (jobs / "ls_ID0000001.out.001").rename(jobs / "ls_ID0000001.out")  # POST script not run yet
    (jobs / "create_dir_process_0_local.out.000").unlink()  # record not there (yet)
    monitor = SubmitDirMonitor(wf)
    finished = {
        (e.task_id, e.exit_code, e.exec_runtime_s) for e in monitor.poll_events() if e.kind == EventKind.FINISHED
    }
    assert finished == {("create_dir_process_0_local", 0, None), ("ls_ID0000001", 2, 0.003)}
    assert (monitor.kickstart_found, monitor.kickstart_missing) == (2, 1)


def test_garbage_kickstart_record_warns_and_finishes_without_it(tmp_path: Path) -> None:
    wf = _copy(tmp_path, SUBMIT / "process_wf_success")
    record = wf / "00" / "00" / "ls_ID0000001.out.000"
    record.write_text("- invocation: True\n  mainjob: [unclosed\n")
    problems = Problems()
    state = _state(SubmitDirMonitor(wf, problems=problems))
    i = state.workflow.index_of("ls_ID0000001")
    assert state.status[i] == DONE and state.exec_s[i] == state.occupancy_s[i] == 1.0
    assert any(m.startswith(str(record)) for m in problems.messages)


# -- restarts: never re-read, never count twice --------------------------------------------------


def _one_pass(wf: Path) -> RunState:
    return _state(SubmitDirMonitor(wf))


def _in_pieces(wf: Path, source: Path, cuts: list[int]) -> tuple[RunState, MemoryPositionStore]:
    """Write ``source``'s bytes up to each cut, with a brand-new monitor (same store) each time."""
    data = source.read_bytes()
    target = wf / source.name
    target.write_bytes(b"")
    store = MemoryPositionStore()
    state: RunState | None = None
    for cut in [*cuts, len(data)]:
        with open(target, "ab") as f:
            f.write(data[target.stat().st_size : cut])
        monitor = SubmitDirMonitor(wf, store=store)
        state = _state(monitor, state)
        assert monitor.poll_events() == []
    assert state is not None
    return state, store


@pytest.mark.parametrize("name", ["process_wf_failure", "sample_wf_held", "hierarchical_wf_success"])
def test_restart_at_every_line_of_jobstate_gives_one_pass_state(tmp_path: Path, name: str) -> None:
    wf = _copy(tmp_path, SUBMIT / name)
    source = SUBMIT / name / "jobstate.log"
    data = source.read_bytes()
    ends = [i + 1 for i, b in enumerate(data) if b == ord("\n")]
    cuts = ends + [ends[len(ends) // 2] - 5]  # every line end, and inside a line
    state, _ = _in_pieces(wf, source, sorted(cuts))
    assert _snapshot(state) == _snapshot(_one_pass(SUBMIT / name))


def test_restart_between_retries_keeps_the_attempt_count(tmp_path: Path) -> None:
    wf = _copy(tmp_path, SUBMIT / "process_wf_failure")
    source = SUBMIT / "process_wf_failure" / "jobstate.log"
    cut = source.read_bytes().index(b"1677913874 ls_ID0000001 SUBMIT")
    data = source.read_bytes()
    (wf / "jobstate.log").write_bytes(data[:cut])
    store = MemoryPositionStore()
    first = SubmitDirMonitor(wf, store=store).poll_events()
    (wf / "jobstate.log").write_bytes(data)
    second = SubmitDirMonitor(wf, store=store)
    assert second.resumed
    memory = [
        e.peak_memory_bytes
        for e in first + second.poll_events()
        if e.task_id == "ls_ID0000001" and e.kind == EventKind.FINISHED
    ]
    assert memory == [2696 * 1024, 2532 * 1024]  # maxrss of .out.000, then of .out.001


@pytest.mark.parametrize("name", ["tiny_problems", "noop_running_1", "group_failed_1"])
def test_restart_inside_event_log_gives_one_pass_state(tmp_path: Path, name: str) -> None:
    wf = _copy(tmp_path, LSST / name)
    source = LSST / name / f"{name}.dag.nodes.log"
    size = source.stat().st_size
    state, store = _in_pieces(wf, source, [size // 4, size // 2 + 3, 3 * size // 4 - 11])
    expected = _one_pass(LSST / name)
    assert _snapshot(state) == _snapshot(expected) and expected.n_done() > 0
    assert len(store.values) == 1  # one key per submit dir


def test_rewind_reads_everything_again(tmp_path: Path) -> None:
    wf = _copy(tmp_path, SUBMIT / "process_wf_success")
    store = MemoryPositionStore()
    assert len(SubmitDirMonitor(wf, store=store).poll_events()) == 15
    again = SubmitDirMonitor(wf, store=store)
    assert again.resumed and again.poll_events() == []
    again.rewind()
    assert not again.resumed and len(again.poll_events()) == 15


def test_unusable_saved_position_warns_and_reads_from_the_start(tmp_path: Path) -> None:
    wf = _copy(tmp_path, SUBMIT / "process_wf_success")
    store = MemoryPositionStore()
    monitor = SubmitDirMonitor(wf, store=store)
    store.save_position(
        monitor.key,
        {"version": 1, "source": "jobstate", "file": "jobstate.log", "reader": {"position": {"offset": -4}}},
    )
    problems = Problems()
    assert len(SubmitDirMonitor(wf, store=store, problems=problems).poll_events()) == 15
    assert problems.messages[0].startswith(monitor.key + ": saved read position unusable")


def test_failure_inside_a_poll_rolls_back_without_loss_or_double_count(tmp_path: Path) -> None:
    wf = _copy(tmp_path, SUBMIT / "process_wf_failure")
    problems = Problems()
    monitor = SubmitDirMonitor(wf, problems=problems)
    calls = {"n": 0}
    original = monitor._with_kickstart

    def flaky(event: TaskEvent, attempt: int) -> TaskEvent:
        calls["n"] += 1
        if calls["n"] == 2:
            raise OSError("disk hiccup")
        return original(event, attempt)

    monitor._with_kickstart = flaky  # type: ignore[method-assign]
    assert monitor.poll_events() == []
    assert "events not read this time (OSError: disk hiccup); will retry" in problems.messages[-1]
    state = _state(monitor)
    assert _snapshot(state) == _snapshot(_one_pass(SUBMIT / "process_wf_failure"))
    assert monitor.poll_events() == []


def test_junk_lines_and_a_vanished_file_never_stop_the_monitor(tmp_path: Path) -> None:
    wf = _copy(tmp_path, SUBMIT / "process_wf_success")
    jobstate = wf / "jobstate.log"
    lines = jobstate.read_text().splitlines(keepends=True)
    jobstate.write_text("".join(lines[:10]) + "garbage here\n" + "".join(lines[10:]))
    problems = Problems()
    monitor = SubmitDirMonitor(wf, problems=problems)
    assert len(monitor.poll_events()) == 15
    assert f"{jobstate}:11: not a jobstate line: 'garbage here'; skipped" in problems.messages
    jobstate.unlink()
    assert monitor.poll_events() == [] and monitor.poll_events() == []
    assert sum("not found (yet)" in m for m in problems.messages) == 1


def test_events_come_in_time_order_but_a_task_keeps_its_own_order() -> None:
    def ev(t: float, kind: EventKind, task: str) -> TaskEvent:
        return TaskEvent(t, kind, task)

    events = [
        ev(5, EventKind.SUBMITTED, "a"),
        ev(4, EventKind.STARTED, "a"),
        ev(3, EventKind.SUBMITTED, "b"),
        ev(6, EventKind.FINISHED, "a"),
    ]
    assert [(e.task_id, e.kind) for e in time_ordered(events)] == [
        ("b", EventKind.SUBMITTED),
        ("a", EventKind.SUBMITTED),
        ("a", EventKind.STARTED),
        ("a", EventKind.FINISHED),
    ]


def test_a_store_that_fails_to_save_loses_nothing(tmp_path: Path) -> None:
    wf = _copy(tmp_path, SUBMIT / "process_wf_success")

    class Flaky(MemoryPositionStore):
        fail = True

        def save_position(self, key: str, value: dict) -> None:
            if self.fail:
                raise OSError("database is locked")
            super().save_position(key, value)

    store, problems = Flaky(), Problems()
    monitor = SubmitDirMonitor(wf, store=store, problems=problems)
    assert monitor.poll_events() == [] and "database is locked" in problems.messages[-1]
    store.fail = False
    assert len(monitor.poll_events()) == 15 and SubmitDirMonitor(wf, store=store).poll_events() == []


def test_positions_in_the_daemons_sqlite_state(tmp_path: Path) -> None:
    from wire_daemon.persist.store import StateStore

    wf = _copy(tmp_path, SUBMIT / "process_wf_failure")
    data = (SUBMIT / "process_wf_failure" / "jobstate.log").read_bytes()
    (wf / "jobstate.log").write_bytes(data[: len(data) // 2])
    store = StateStore(tmp_path / "state.sqlite")
    state = _state(SubmitDirMonitor(wf, store=store))
    store.close()
    (wf / "jobstate.log").write_bytes(data)
    store = StateStore(tmp_path / "state.sqlite")
    monitor = SubmitDirMonitor(wf, store=store)
    assert monitor.resumed
    assert _snapshot(_state(monitor, state)) == _snapshot(_one_pass(SUBMIT / "process_wf_failure"))
    store.forget_positions(monitor.prefix)
    assert store.load_position(monitor.key) is None
    store.close()
