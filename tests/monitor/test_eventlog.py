"""The job event log reader (eventparse underneath) and its mapping to task events."""

from __future__ import annotations

import os
import shutil
from collections import Counter, defaultdict
from datetime import datetime
from pathlib import Path

import pytest

from wire_daemon.core.events import EventKind
from wire_daemon.core.instances import Instance
from wire_daemon.core.run_state import RunState, TaskStatus
from wire_daemon.monitor.eventlog import EventLogReader
from wire_daemon.monitor.eventmap import EventLogFollower
from wire_daemon.monitor.eventtime import YearGuess, iso_seconds
from wire_daemon.monitor.hosts import HostMap
from wire_daemon.monitor.problems import Problems
from wire_daemon.monitor.submit_dir import workflow_from_submit_dir

from .conftest import EVENTLOG, LSST

EVENT_COUNTS = {
    "eventlog/icecube_held_aborted_job.log": {
        "SUBMIT": 60,
        "EXECUTE": 40,
        "IMAGE_SIZE": 67,
        "SHADOW_EXCEPTION": 10,
        "JOB_HELD": 10,
        "JOB_EVICTED": 10,
        "JOB_ABORTED": 30,
        "JOB_TERMINATED": 20,
    },
    "eventlog/icecube_large_job.log": {
        "SUBMIT": 491,
        "EXECUTE": 469,
        "IMAGE_SIZE": 4480,
        "JOB_TERMINATED": 378,
        "SHADOW_EXCEPTION": 43,
        "JOB_HELD": 43,
        "JOB_ABORTED": 111,
        "JOB_EVICTED": 45,
        "JOB_DISCONNECTED": 1,
        "JOB_RECONNECT_FAILED": 1,
    },
    "eventlog/naudzyk_filetransfer_job.log": {
        "SUBMIT": 8,
        "EXECUTE": 8,
        "IMAGE_SIZE": 14,
        "JOB_TERMINATED": 8,
        "FILE_TRANSFER": 8,
    },
    "eventlog/lsst_tiny_problems.nodes.log": {
        "SUBMIT": 6,
        "EXECUTE": 6,
        "JOB_TERMINATED": 5,
        "JOB_EVICTED": 1,
        "JOB_ABORTED": 1,
        "POST_SCRIPT_TERMINATED": 1,
    },
    "eventlog/lsst_noop_failed_1.nodes.log": {
        "SUBMIT": 29,
        "EXECUTE": 28,
        "JOB_TERMINATED": 29,
        "POST_SCRIPT_TERMINATED": 1,
    },
    "eventlog/lsst_test_pipelines_check.nodes.log": {
        "SUBMIT": 5,
        "EXECUTE": 5,
        "JOB_TERMINATED": 5,
        "POST_SCRIPT_TERMINATED": 1,
    },
    "eventlog/htcondor_test_condor.log": {
        "SUBMIT": 42,
        "EXECUTE": 35,
        "EXECUTABLE_ERROR": 48,
        "CHECKPOINTED": 53,
        "JOB_EVICTED": 35,
        "JOB_TERMINATED": 43,
        "IMAGE_SIZE": 32,
        "SHADOW_EXCEPTION": 28,
        "GENERIC": 35,
        "JOB_ABORTED": 40,
        "JOB_SUSPENDED": 31,
        "JOB_UNSUSPENDED": 49,
        "JOB_HELD": 48,
        "JOB_RELEASED": 43,
        "NODE_EXECUTE": 42,
        "NODE_TERMINATED": 40,
        "POST_SCRIPT_TERMINATED": 41,
        "GLOBUS_SUBMIT": 46,
        "GLOBUS_SUBMIT_FAILED": 41,
        "GLOBUS_RESOURCE_UP": 38,
        "GLOBUS_RESOURCE_DOWN": 35,
        "JOB_DISCONNECTED": 3,
        "JOB_RECONNECTED": 1,
        "JOB_RECONNECT_FAILED": 2,
    },
    "dagman/ctrl_bps_htcondor/tiny_running/tiny_running.dag.nodes.log": {
        "SUBMIT": 3,
        "EXECUTE": 3,
        "JOB_TERMINATED": 1,
    },
    "dagman/ctrl_bps_htcondor/noop_running_1/noop_running_1.dag.nodes.log": {
        "SUBMIT": 20,
        "EXECUTE": 19,
        "JOB_TERMINATED": 9,
    },
}
TOTALS = {
    "eventlog/icecube_held_aborted_job.log": 247,
    "eventlog/icecube_large_job.log": 6062,
    "eventlog/naudzyk_filetransfer_job.log": 46,
    "eventlog/lsst_tiny_problems.nodes.log": 20,
    "eventlog/lsst_noop_failed_1.nodes.log": 87,
    "eventlog/lsst_test_pipelines_check.nodes.log": 16,
    "eventlog/htcondor_test_condor.log": 851,
}


@pytest.mark.parametrize("relative", sorted(EVENT_COUNTS))
def test_events_per_type(relative: str) -> None:
    problems = Problems()
    reader = EventLogReader(EVENTLOG.parent / relative, problems=problems)
    events = reader.read()
    assert dict(Counter(e.type for e in events)) == EVENT_COUNTS[relative]
    assert len(events) == TOTALS.get(relative, len(events))
    assert reader.read() == [] and reader.pending_bytes == 0
    assert problems.messages == []


def test_event_details() -> None:
    events = EventLogReader(EVENTLOG / "lsst_tiny_problems.nodes.log").read()
    submit, execute = events[1], events[3]
    assert (submit.type, submit.cluster, submit.proc, submit.node) == ("SUBMIT", 9230, 0, "pipetaskInit")
    assert execute.type == "EXECUTE" and execute.host.startswith("<10.0.0.33:9618?addrs=10.0.0.33-9618+")
    assert submit.time == datetime(2025, 2, 13, 11, 59, 47).timestamp()  # local time of the submit host
    assert (events[0].line, events[1].line) == (1, 4)
    terminated = [e for e in events if e.type == "JOB_TERMINATED"]
    assert [e.return_value for e in terminated] == [0, 1, 0, 0, 0]
    held = [e for e in EventLogReader(EVENTLOG / "icecube_held_aborted_job.log").read() if e.type == "JOB_HELD"]
    assert {(e.hold_code, e.hold_subcode) for e in held} == {(21, 1001)}
    assert "Memory limit exceeded" in held[0].reason


def test_yearless_dates_take_the_year_of_the_file(tmp_path: Path) -> None:
    log = tmp_path / "job.log"
    shutil.copyfile(EVENTLOG / "icecube_held_aborted_job.log", log)
    upstream_commit = datetime(2019, 11, 1, 12, 0).timestamp()
    os.utime(log, (upstream_commit, upstream_commit))
    events = EventLogReader(log).read()
    assert events[0].time == datetime(2019, 10, 30, 17, 31, 2).timestamp()
    assert all(datetime.fromtimestamp(e.time).year == 2019 for e in events)
    assert all(b.time >= a.time - 3600 for a, b in zip(events, events[1:]))


def test_year_guess_rolls_over_new_year() -> None:
    guess = YearGuess()
    reference = datetime(2021, 1, 2, 12, 0).timestamp()
    first = guess.resolve(12, 31, (23, 59, 0), reference)
    second = guess.resolve(1, 1, (0, 1, 0), reference)
    late = guess.resolve(12, 31, (23, 59, 30), reference)  # a late-written event from the old year
    assert (first.year, second.year, late.year) == (2020, 2021, 2020)
    assert guess.year == 2021
    assert YearGuess.from_dict(guess.to_dict()) == guess


def test_iso_times_honour_utc_and_fractions() -> None:
    assert iso_seconds("2025-02-13T11:59:47Z") == 1739447987.0
    assert iso_seconds("2025-02-13T11:59:47.250+01:00") == 1739444387.25
    assert iso_seconds("2025-02-13T11:59:47") == datetime(2025, 2, 13, 11, 59, 47).timestamp()


def test_dag_node_log_to_task_outcomes() -> None:
    workflow = workflow_from_submit_dir(LSST / "tiny_problems")
    follower = EventLogFollower(LSST / "tiny_problems" / "tiny_problems.dag.nodes.log")
    events = follower.poll()
    assert Counter(e.kind for e in events) == {
        EventKind.SUBMITTED: 6,
        EventKind.STARTED: 6,
        EventKind.FINISHED: 5,
        EventKind.EVICTED: 1,
        EventKind.ABORTED: 1,
    }
    state = RunState(workflow)
    for event in events:
        state.apply(event)
    status = {workflow.task_ids[i]: TaskStatus(s) for i, s in enumerate(state.status)}
    assert status["057c8caf-66f6-4612-abf7-cdea5b666b1b_label1_val1a_val2b"] == TaskStatus.IDLE  # exit 1, no retry left
    assert status["40040b97-606d-4997-98d3-e0493055fe7e_label2_val1a_val2b"] == TaskStatus.WAITING  # its parent failed
    assert sum(s == TaskStatus.DONE for s in status.values()) == 4
    # The SERVICE node (provisioningJob) is not a task: its 4 events are ignored by the run state.
    assert state.warnings == 4


def test_still_running_dag_logs_have_running_tasks() -> None:
    for name, log, running, done in [
        ("tiny_running", "tiny_running.dag.nodes.log", 1, 1),
        ("noop_running_1", "noop_running_1.dag.nodes.log", 10, 9),
    ]:
        workflow = workflow_from_submit_dir(LSST / name)
        events = EventLogFollower(LSST / name / log).poll()
        assert not any(e.kind in (EventKind.ABORTED, EventKind.EVICTED, EventKind.HELD) for e in events)
        assert "finalJob" not in {e.task_id for e in events}  # the DAG has not ended
        state = RunState(workflow)
        for event in events:
            state.apply(event)
        assert (len(state.running()), state.n_done()) == (running, done)
        assert not state.is_finished()
        assert all(host.startswith("<10.0.0.33:") for host in state.host.values())


def test_noop_nodes_finish_with_zero_occupancy() -> None:
    workflow = workflow_from_submit_dir(LSST / "noop_failed_1")
    events = EventLogFollower(LSST / "noop_failed_1" / "noop_failed_1.dag.nodes.log").poll()
    noop = [e for e in events if e.task_id == "wms_noop_order1_val1a"]
    assert [e.kind for e in noop] == [EventKind.SUBMITTED, EventKind.STARTED, EventKind.FINISHED]
    state = RunState(workflow)
    for event in events:
        state.apply(event)
    i = workflow.index_of("wms_noop_order1_val1a")
    assert state.status[i] == TaskStatus.DONE and state.occupancy_s[i] == 0.0
    assert state.warnings == 0


def test_plain_log_held_then_aborted_outcomes() -> None:
    events = EventLogFollower(EVENTLOG / "icecube_held_aborted_job.log", job_ids="cluster-proc").poll()
    history: dict[str, list[str]] = defaultdict(list)
    for event in events:
        history[event.task_id].append(event.kind.value)
    assert Counter(tuple(h) for h in history.values()) == {
        ("submitted", "started", "evicted", "held", "aborted"): 10,  # memory limit: shadow exception, hold, condor_rm
        ("submitted", "started", "finished"): 20,
        ("submitted", "started", "evicted", "aborted"): 10,
        ("submitted", "aborted"): 10,
        ("submitted",): 10,
    }
    assert {e.exit_code for e in events if e.kind == EventKind.FINISHED} == {1}


def test_memory_and_transfer_events() -> None:
    events = EventLogFollower(EVENTLOG / "naudzyk_filetransfer_job.log", job_ids="cluster-proc").poll()
    finished = [e for e in events if e.kind == EventKind.FINISHED]
    assert len(finished) == 8 and {e.exit_code for e in finished} == {0}
    assert {e.peak_memory_bytes for e in finished} == {1 << 20}  # MemoryUsage 1 MB beats RSS 260 KiB
    assert [e.task_id for e in events if e.kind == EventKind.TRANSFERRED] == ["3.0", "4.0"]


def test_events_of_an_unknown_cluster_are_skipped_with_one_warning(tmp_path: Path) -> None:
    text = (EVENTLOG / "lsst_tiny_problems.nodes.log").read_text()
    first_end = text.index("\n...\n") + 5
    log = tmp_path / "nodes.log"
    log.write_text(text[first_end:])  # lose the submit event of provisioningJob (cluster 9229)
    follower = EventLogFollower(log)
    events = follower.poll()
    assert "provisioningJob" not in {e.task_id for e in events} and len(events) == 15
    assert follower.mapper.skipped == 3
    assert follower.problems.messages == [
        f"{log}:~4: events of job cluster 9229 skipped: its submit event was not seen"
    ]


def test_execute_hosts_resolve_to_instances() -> None:
    events = EventLogFollower(LSST / "tiny_running" / "tiny_running.dag.nodes.log").poll()
    hosts = HostMap([Instance("i-0abc", 0.0, 4, address="10.0.0.33")])
    started = [hosts.resolve_event(e) for e in events if e.kind == EventKind.STARTED]
    assert {e.host for e in started} == {"i-0abc"}
