"""jobstate.log lines and the task outcomes they give for the Pegasus submit dirs (which have no event log)."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from wire_daemon.core.events import EventKind
from wire_daemon.core.run_state import RunState, TaskStatus
from wire_daemon.monitor.jobstate import JobstateMapper, JobstateReader, parse_jobstate_line
from wire_daemon.monitor.problems import Problems
from wire_daemon.monitor.submit_dir import workflow_from_submit_dir

from .conftest import SUBMIT


def test_line_formats() -> None:
    line = parse_jobstate_line("1677913809 ls_ID0000001 SUBMIT 9.0 condorpool - 2", 12)
    assert line is not None
    assert (line.time, line.job, line.state, line.condor_id, line.site, line.remote_id, line.submit_seq, line.line) == (
        1677913809.0,
        "ls_ID0000001",
        "SUBMIT",
        "9.0",
        "condorpool",
        None,
        2,
        12,
    )
    failure = parse_jobstate_line("1677913864 ls_ID0000001 JOB_FAILURE 2 condorpool - 2")
    assert failure is not None and (failure.exit_code, failure.condor_id) == (2, None)
    internal = parse_jobstate_line("1677913788 INTERNAL *** DAGMAN_STARTED 7.0 ***")
    assert internal is not None and internal.internal and internal.state == "DAGMAN_STARTED"
    assert parse_jobstate_line("garbage line here") is None and parse_jobstate_line("") is None


def _outcomes(name: str) -> tuple[RunState, list]:
    workflow = workflow_from_submit_dir(SUBMIT / name)
    events = JobstateMapper().map(JobstateReader(SUBMIT / name / "jobstate.log").read())
    state = RunState(workflow)
    for event in events:
        state.apply(event)
    assert state.warnings == 0
    return state, events


def test_failed_with_retry() -> None:
    state, events = _outcomes("process_wf_failure")
    ls = [e for e in events if e.task_id == "ls_ID0000001"]
    assert [(e.kind, e.exit_code) for e in ls] == [
        (EventKind.SUBMITTED, None),
        (EventKind.STARTED, None),
        (EventKind.FINISHED, 2),
        (EventKind.SUBMITTED, None),
        (EventKind.STARTED, None),
        (EventKind.FINISHED, 2),
    ]
    assert ls[2].time == 1677913860  # the JOB_TERMINATED time, not when monitord saw the failure
    i = state.workflow.index_of("ls_ID0000001")
    assert (TaskStatus(state.status[i]), state.attempts[i]) == (TaskStatus.IDLE, 2)
    assert state.n_done() == 1


def test_held_then_aborted() -> None:
    state, events = _outcomes("sample_wf_held")
    held = [e.kind for e in events if e.task_id == "chebi_drug_loader_ID0000001"]
    assert held == [EventKind.SUBMITTED, EventKind.STARTED, EventKind.EVICTED, EventKind.HELD, EventKind.ABORTED]
    assert state.n_done() == 2 and len(state.running()) == 0


@pytest.mark.parametrize("name, lines, done", [("process_wf_success", 39, 5), ("hierarchical_wf_success", 77, 11)])
def test_successful_runs(name: str, lines: int, done: int) -> None:
    assert len(JobstateReader(SUBMIT / name / "jobstate.log").read()) == lines
    state, events = _outcomes(name)
    assert state.n_done() == done
    assert Counter(e.kind for e in events)[EventKind.FINISHED] == done


def test_bad_lines_warn_and_a_half_line_waits(tmp_path: Path) -> None:
    log = tmp_path / "jobstate.log"
    log.write_text("1677913809 a SUBMIT 9.0 condorpool - 2\nnonsense\n1677913810 a EXEC")
    problems = Problems()
    reader = JobstateReader(log, problems=problems)
    assert [entry.state for entry in reader.read()] == ["SUBMIT"]
    assert problems.messages == [f"{log}:2: not a jobstate line: 'nonsense'; skipped"]
    with open(log, "a") as f:
        f.write("UTE 9.0 condorpool - 2\n")
    assert [(entry.state, entry.line) for entry in reader.read()] == [("EXECUTE", 3)]


def test_mapper_state_round_trip() -> None:
    mapper = JobstateMapper()
    mapper.map([parse_jobstate_line("5 a JOB_TERMINATED 1.0 pool - 1")])  # type: ignore[list-item]
    resumed = JobstateMapper.from_dict(mapper.to_dict())
    (event,) = resumed.map([parse_jobstate_line("9 a JOB_SUCCESS 0 pool - 1")])  # type: ignore[list-item]
    assert (event.kind, event.time, event.exit_code) == (EventKind.FINISHED, 5.0, 0)
