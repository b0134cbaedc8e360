"""SubmitRootMonitor: workflows found under a root as they appear, forgotten when DAGMan has finished."""

from __future__ import annotations

import shutil
from pathlib import Path

from wire_daemon.core.run_state import RunState
from wire_daemon.monitor.problems import Problems
from wire_daemon.monitor.submit_monitor import MemoryPositionStore, SubmitDirMonitor, SubmitRootMonitor, position_prefix

from .conftest import SUBMIT

FINISHED_LINE = "1677920790 INTERNAL *** DAGMAN_FINISHED 0 ***\n"


class Clock:
    def __init__(self, now: float = 2e9) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def _place(root: Path, fixture: str, where: str, jobstate_lines: int | None = None) -> Path:
    target = root / where
    shutil.copytree(SUBMIT / fixture, target)
    if jobstate_lines is not None:
        lines = (SUBMIT / fixture / "jobstate.log").read_text().splitlines(keepends=True)
        (target / "jobstate.log").write_text("".join(lines[:jobstate_lines]))
    return target


def _by_name(updates) -> dict[str, object]:
    return {Path(u.key).name: u for u in updates}


def _stored_dirs(store: MemoryPositionStore) -> set[str]:
    return {k.split(":", 2)[2] for k in store.values if k.startswith("submit-dir:")}


def test_workflows_appear_one_after_another_and_are_forgotten_when_finished(tmp_path: Path) -> None:
    root = tmp_path / "submit"
    root.mkdir()
    store = MemoryPositionStore()
    monitor = SubmitRootMonitor(root, store, problems=Problems())
    assert monitor.poll() == []

    done = _place(root, "process_wf_success", "alice/pegasus/process/run0001")
    (update,) = monitor.poll()
    assert update.discovered and len(update.events) == 15
    assert update.finished is not None and update.finished.exit_code == 0
    assert monitor.workflows == {} and _stored_dirs(store) == set()  # forgotten with its positions
    assert monitor.poll() == []  # and not found again

    running = _place(root, "process_wf_failure", "alice/pegasus/process/run0002", jobstate_lines=12)
    (update,) = monitor.poll()
    assert update.discovered and update.finished is None and len(update.events) == 5
    assert _stored_dirs(store) == {str(running.resolve())}
    (update,) = monitor.poll()
    assert not update.discovered and update.events == []
    shutil.copyfile(SUBMIT / "process_wf_failure" / "jobstate.log", running / "jobstate.log")
    (update,) = monitor.poll()
    assert len(update.events) == 4 and update.finished.exit_code == 1
    assert monitor.workflows == {} and _stored_dirs(store) == set()
    assert set(monitor.finished) == {str(done.resolve()), str(running.resolve())}


def test_sub_workflow_is_found_through_its_parent_and_each_is_forgotten_on_its_own(tmp_path: Path) -> None:
    root = tmp_path / "submit"
    parent = _place(root, "hierarchical_wf_success", "bob/pegasus/hierarchical-workflow/run0001")
    inner = parent / "00" / "00" / "blackdiamond_diamond_subworkflow.000"
    store = MemoryPositionStore()
    monitor = SubmitRootMonitor(root, store)
    updates = _by_name(monitor.poll())
    assert set(updates) == {"run0001", "blackdiamond_diamond_subworkflow.000"}
    assert all(u.discovered and u.finished is None for u in updates.values())
    assert len(updates["run0001"].events) == 33 and updates["blackdiamond_diamond_subworkflow.000"].events == []

    with open(parent / "jobstate.log", "a") as f:
        f.write(FINISHED_LINE)
    updates = _by_name(monitor.poll())
    assert updates["run0001"].finished is not None and updates["blackdiamond_diamond_subworkflow.000"].finished is None
    assert list(monitor.workflows) == [str(inner.resolve())]

    (inner / "inner.dag.dagman.out").write_text(
        "03/04/23 01:05:00 **** condor_scheduniv_exec.46.0 (condor_DAGMAN) pid 4242 EXITING WITH STATUS 0\n"
    )
    (update,) = monitor.poll()
    assert update.finished.exit_code == 0 and update.finished.source.endswith("inner.dag.dagman.out")
    assert monitor.workflows == {} and monitor.poll() == []


def test_restarted_root_monitor_resumes_and_remembers_finished_workflows(tmp_path: Path) -> None:
    root = tmp_path / "submit"
    _place(root, "process_wf_success", "run0001")
    running = _place(root, "process_wf_failure", "run0002", jobstate_lines=12)
    store = MemoryPositionStore()
    first = _by_name(SubmitRootMonitor(root, store).poll())
    assert first["run0001"].finished and not first["run0002"].finished
    state = RunState(first["run0002"].monitor.workflow)
    for event in first["run0002"].events:
        state.apply(event)

    shutil.copyfile(SUBMIT / "process_wf_failure" / "jobstate.log", running / "jobstate.log")
    (update,) = SubmitRootMonitor(root, store).poll()  # a new daemon: run0001 stays forgotten
    assert Path(update.key).name == "run0002" and update.monitor.resumed and len(update.events) == 4
    for event in update.events:
        state.apply(event)
    one_pass = RunState(state.workflow)
    for event in SubmitDirMonitor(SUBMIT / "process_wf_failure").poll_events():
        one_pass.apply(event)
    assert state.status.tolist() == one_pass.status.tolist() and state.attempts.tolist() == one_pass.attempts.tolist()


def test_a_rescue_run_of_a_finished_workflow_is_a_new_workflow(tmp_path: Path) -> None:
    root = tmp_path / "submit"
    wf = _place(root, "process_wf_failure", "run0001")
    monitor = SubmitRootMonitor(root)
    (update,) = monitor.poll()
    assert update.finished.exit_code == 1
    assert monitor.poll() == []
    with open(wf / "jobstate.log", "a") as f:
        f.write("1677914000 INTERNAL *** DAGMAN_STARTED 11.0 ***\n")
    (update,) = monitor.poll()
    assert update.discovered and update.finished is None and len(update.events) == 9  # read again from the start


def test_a_dir_is_taken_only_once_its_dag_is_complete(tmp_path: Path) -> None:
    root = tmp_path / "submit"
    wf = root / "run0001"
    shutil.copytree(SUBMIT / "process_wf_success", wf)
    (wf / "jobstate.log").unlink()
    dag = wf / "process-0.dag"
    clock = Clock(dag.stat().st_mtime + 1)  # the planner wrote the .dag a second ago
    monitor = SubmitRootMonitor(root, clock=clock, settle_s=5.0)
    assert monitor.poll() == []
    clock.now += 10
    (update,) = monitor.poll()
    assert update.discovered and update.events == []


def test_bad_submit_dir_warns_once_and_never_stops_the_others(tmp_path: Path) -> None:
    root = tmp_path / "submit"
    bad = _place(root, "process_wf_success", "run0001")
    (bad / "braindump.yml").write_text("wf_uuid: x\n")  # no dag key: the dir must hold a single .dag
    shutil.copyfile(bad / "process-0.dag", bad / "other.dag")
    _place(root, "sample_wf_held", "run0002")
    problems = Problems()
    monitor = SubmitRootMonitor(root, problems=problems)
    (update,) = monitor.poll()
    assert Path(update.key).name == "run0002"
    monitor.poll()
    warnings = [m for m in problems.messages if "workflow not monitored" in m]
    assert len(warnings) == 1 and warnings[0].startswith(str(bad)) and "several .dag files" in warnings[0]


def test_position_prefix_does_not_reach_into_nested_dirs(tmp_path: Path) -> None:
    outer, inner = tmp_path / "run1", tmp_path / "run1" / "00" / "00" / "sub.000"
    inner.mkdir(parents=True)
    store = MemoryPositionStore()
    store.save_position(position_prefix(outer) + str(outer), {"a": 1})
    store.save_position(position_prefix(inner) + str(inner), {"b": 2})
    store.forget_positions(position_prefix(outer))
    assert list(store.values) == [position_prefix(inner) + str(inner)]
