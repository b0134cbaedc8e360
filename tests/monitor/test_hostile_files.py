"""A hostile submit root: FIFOs and devices under the names the monitor reads, undecodable names,
oversized files. Nothing blocks, nothing grows without bound, each costs one warning naming the file."""

from __future__ import annotations

import os
import shutil
import signal
import stat
from pathlib import Path

import pytest

from wire_daemon.core.errors import InputError
from wire_daemon.monitor import dag as dag_module
from wire_daemon.monitor.dag import parse_dag
from wire_daemon.monitor.kickstart import read_kickstart
from wire_daemon.monitor.observations import FinishedMarkersOnly
from wire_daemon.monitor.problems import Problems, shown
from wire_daemon.monitor.safe_open import KICKSTART_LIMIT, NotRegularFile, TooLarge, open_regular, read_regular
from wire_daemon.monitor.submit_monitor import MemoryPositionStore, SubmitDirMonitor, SubmitRootMonitor
from wire_daemon.service.inspect import inspect_submit_dir

from .conftest import SUBMIT

FINISHED_LINE = "1677920790 INTERNAL *** DAGMAN_FINISHED 0 ***\n"


@pytest.fixture
def never_blocks():
    """Fail (instead of hanging the run) if the test blocks for 10 s: SIGALRM breaks a blocking open()."""

    def _expired(signum, frame):
        raise AssertionError("blocked for 10 s")

    before = signal.signal(signal.SIGALRM, _expired)
    signal.setitimer(signal.ITIMER_REAL, 10.0)
    yield
    signal.setitimer(signal.ITIMER_REAL, 0)
    signal.signal(signal.SIGALRM, before)


def _running_copy(root: Path, name: str = "run0001") -> Path:
    """process_wf_failure cut after 12 jobstate lines: DAGMan still running."""
    target = root / name
    shutil.copytree(SUBMIT / "process_wf_failure", target)
    lines = (target / "jobstate.log").read_text().splitlines(keepends=True)
    (target / "jobstate.log").write_text("".join(lines[:12]))
    return target


def _replace_with_fifo(path: Path) -> None:
    if path.exists():
        path.unlink()
    os.mkfifo(path)


def _char_device(path: Path) -> None:
    """A real character device node (root only); the symlink cases below run for anyone."""
    if os.geteuid() != 0:
        if os.environ.get("CI") == "true":
            pytest.fail("CI runs as root: the device case must run there")
        pytest.skip("mknod needs root")
    if path.exists():
        path.unlink()
    os.mknod(path, stat.S_IFCHR | 0o644, os.makedev(1, 5))  # the same device as /dev/zero


def _warnings_about(problems: Problems, path: Path) -> list[str]:
    return [m for m in problems.messages if m.startswith(os.fspath(path))]


# -- the helper -------------------------------------------------------------------------


def test_the_helper_refuses_a_fifo_and_a_device_without_blocking(tmp_path, never_blocks):
    fifo = tmp_path / "jobstate.log"
    os.mkfifo(fifo)
    zero = tmp_path / "zero.out"
    zero.symlink_to("/dev/zero")
    for path, words in ((fifo, "FIFO"), (zero, "character device"), (tmp_path, "directory")):
        with pytest.raises(NotRegularFile, match=words):
            read_regular(path, 1 << 20)
    with pytest.raises(NotRegularFile), open_regular(fifo):
        pass


def test_the_helper_bounds_the_size(tmp_path):
    big = tmp_path / "big"
    big.write_bytes(b"x" * 1001)
    assert read_regular(big, 1001) == b"x" * 1001
    with pytest.raises(TooLarge, match="1,001 bytes, over the 1,000-byte bound"):
        read_regular(big, 1000)


# -- the monitor --------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["process-0.dag.dagman.out", "jobstate.log", "process-0.dag.nodes.log"])
def test_a_fifo_under_a_status_or_event_file_name_costs_one_warning(tmp_path, never_blocks, name):
    root = tmp_path / "submit"
    _running_copy(root, "good")
    hostile = _running_copy(root, "hostile")
    _replace_with_fifo(hostile / name)
    problems = Problems()
    monitor = SubmitRootMonitor(root, MemoryPositionStore(), problems=problems, settle_s=0.0)
    first = {Path(u.key).name: u for u in monitor.poll()}
    for _ in range(2):
        monitor.poll()
    assert len(first["good"].events) == 5  # the other workflow is read as before
    assert len(_warnings_about(problems, hostile / name)) == 1, problems.messages
    assert "FIFO" in _warnings_about(problems, hostile / name)[0]
    assert all(u.finished is None for u in first.values())


def test_a_device_as_the_event_log_or_a_kickstart_record_costs_one_warning(tmp_path, never_blocks):
    root = tmp_path / "submit"
    hostile = _running_copy(root)
    (hostile / "process-0.dag.nodes.log").symlink_to("/dev/zero")
    record = hostile / "00" / "00" / "ls_ID0000001.out.000"
    record.unlink()
    record.symlink_to("/dev/zero")
    problems = Problems()
    monitor = SubmitDirMonitor(hostile, problems=problems)
    for _ in range(3):
        monitor.poll_events()
    assert len(_warnings_about(problems, hostile / "process-0.dag.nodes.log")) == 1, problems.messages
    assert monitor.source == "jobstate"  # the device is not an event log: jobstate.log is read instead


def test_a_real_character_device_node_costs_one_warning(tmp_path, never_blocks):
    root = tmp_path / "submit"
    hostile = _running_copy(root)
    _char_device(hostile / "jobstate.log")
    problems = Problems()
    monitor = SubmitRootMonitor(root, problems=problems, settle_s=0.0)
    for _ in range(3):
        monitor.poll()
    (line,) = _warnings_about(problems, hostile / "jobstate.log")
    assert "character device" in line


def test_fifos_as_the_dag_the_braindump_and_a_submit_file_never_block(tmp_path, never_blocks):
    root = tmp_path / "submit"
    sub = _running_copy(root, "sub")
    _replace_with_fifo(sub / "00" / "00" / "ls_ID0000001.sub")
    dag = _running_copy(root, "dag")
    _replace_with_fifo(dag / "process-0.dag")
    braindump = _running_copy(root, "braindump")
    _replace_with_fifo(braindump / "braindump.yml")
    problems = Problems()
    monitor = SubmitRootMonitor(root, problems=problems, settle_s=0.0)
    for _ in range(3):
        monitor.poll()
    assert any(k.endswith("sub") for k in monitor.workflows)  # the FIFO submit file is one node's, not the run's
    for path in (sub / "00" / "00" / "ls_ID0000001.sub", dag / "process-0.dag", braindump / "braindump.yml"):
        assert len(_warnings_about(problems, path)) == 1, (path, problems.messages)


def test_inspect_with_a_fifo_jobstate_returns_with_a_warning(tmp_path, never_blocks):
    hostile = _running_copy(tmp_path)
    _replace_with_fifo(hostile / "jobstate.log")
    report = inspect_submit_dir(hostile)
    assert report.source is None
    assert any("jobstate.log" in w and "FIFO" in w for w in report.warnings), report.warnings


# -- names that are not UTF-8 ----------------------------------------------------------------


def test_a_directory_named_with_undecodable_bytes_is_read_like_any_other(tmp_path):
    root = tmp_path / "submit"
    _running_copy(root, "good")
    bad = Path(os.fsdecode(os.path.join(os.fsencode(root), b"wf-\xff")))
    shutil.copytree(root / "good", bad)
    problems = Problems()
    from wire_daemon.persist.store import StateStore

    store = StateStore(tmp_path / "state.sqlite")  # SQLite refuses str with lone surrogates: keys must be escaped
    monitor = SubmitRootMonitor(root, FinishedMarkersOnly(store), problems=problems, settle_s=0.0)
    updates = monitor.poll()
    assert len(updates) == 2 and all(len(u.events) == 5 for u in updates)
    with open(bad / "jobstate.log", "a") as f:
        f.write(FINISHED_LINE)
    monitor.poll()
    assert os.fspath(bad.resolve()) in monitor.finished  # kept as the file system's name: it round-trips
    again = SubmitRootMonitor(root, FinishedMarkersOnly(store), problems=problems, settle_s=0.0)
    assert os.fspath(bad.resolve()) in again.finished
    store.close()
    assert shown(os.fspath(bad)).endswith("wf-\\xff")


def test_a_warning_about_an_undecodable_name_is_shown_escaped(tmp_path):
    problems = Problems()
    problems.warn(os.fsdecode(b"/x/wf-\xff/jobstate.log"), "something")
    assert problems.messages == ["/x/wf-\\xff/jobstate.log: something"]
    problems.messages[0].encode("utf-8")  # any writer takes it


# -- sizes ----------------------------------------------------------------------------------


def test_an_oversized_kickstart_record_is_skipped_with_a_warning(tmp_path):
    record = tmp_path / "job.out.000"
    with open(record, "wb") as f:
        f.truncate(KICKSTART_LIMIT + 1)  # sparse: costs no disk
    problems = Problems()
    assert read_kickstart(record, problems) is None
    (line,) = problems.messages
    assert line.startswith(os.fspath(record)) and "over the 16,777,216-byte bound" in line


def _cycle_dag(path: Path, n: int) -> None:
    lines = [f"JOB n{i} n.sub\n" for i in range(n)]
    lines += [f"PARENT n{i} CHILD n{i + 1}\n" for i in range(n - 1)]
    lines.append(f"PARENT n{n - 1} CHILD n0\n")
    path.write_text("".join(lines))


def test_a_long_cycle_is_named_in_one_short_line(tmp_path):
    dag = tmp_path / "w.dag"
    _cycle_dag(dag, 5000)
    with pytest.raises(InputError) as err:
        parse_dag(dag)
    assert "(5,000 nodes)" in err.value.detail and len(str(err.value)) < 300


def test_a_refused_dag_is_parsed_again_only_when_it_changes(tmp_path, monkeypatch):
    root = tmp_path / "submit"
    run = _running_copy(root)
    _cycle_dag(run / "process-0.dag", 50)
    parses = []
    real = dag_module._Parser.parse
    monkeypatch.setattr(dag_module._Parser, "parse", lambda self: parses.append(1) or real(self))
    problems = Problems()
    monitor = SubmitRootMonitor(root, problems=problems, settle_s=0.0)
    for _ in range(4):
        monitor.poll()
    assert len(parses) == 1 and sum("cycle" in m for m in problems.messages) == 1
    shutil.copyfile(SUBMIT / "process_wf_failure" / "process-0.dag", run / "process-0.dag")  # fixed
    monitor.poll()
    assert len(monitor.workflows) == 1


# -- finished workflows --------------------------------------------------------------------


def test_a_workflow_finished_before_it_was_seen_is_marked_unread_and_markers_are_written_once(tmp_path):
    root = tmp_path / "submit"
    for i in range(3):
        shutil.copytree(SUBMIT / "process_wf_success", root / f"run{i}")
    _running_copy(root, "live")
    writes = []

    class Counting(MemoryPositionStore):
        def save_position(self, key, value):
            writes.append(key)
            super().save_position(key, value)

    store = Counting()
    monitor = SubmitRootMonitor(root, store, settle_s=0.0, read_finished=False)
    (update,) = monitor.poll()
    assert Path(update.key).name == "live" and len(monitor.finished) == 3
    root_writes = [k for k in writes if k.startswith("submit-root:")]
    writes.clear()
    for _ in range(3):
        monitor.poll()
    assert len(root_writes) == 1 and not [k for k in writes if k.startswith("submit-root:")]


# -- a log cut mid-run -----------------------------------------------------------------------


def _job_successes(jobstate: Path) -> int:
    return len({line.split()[1] for line in jobstate.read_text().splitlines() if " JOB_SUCCESS " in line})


def test_an_event_log_cut_mid_run_is_reconciled_with_jobstate_not_double_counted(tmp_path):
    from wire_daemon.core.run_state import RunState
    from wire_lab.chaos.hostile import live_workflow

    live = live_workflow(tmp_path / "wf", "cut")
    monitor, state, at = None, None, 0.0

    def feed() -> None:
        for event in monitor.poll_events():
            state.apply(event)

    while state is None or state.n_done() < 12:
        at += 60.0
        live.advance_to(at)
        if monitor is None and (tmp_path / "wf" / "cut-0.dag.nodes.log").exists():
            monitor = SubmitDirMonitor(tmp_path / "wf")
            state = RunState(monitor.workflow)
        if monitor is not None:
            feed()
    log = monitor.source_file
    assert log is not None and log.name.endswith(".nodes.log")
    os.truncate(log, log.stat().st_size // 2)
    while not live.finished:
        at += 60.0
        live.advance_to(at)
        feed()
        feed()  # the poll after the re-read caught up reconciles
        assert state.n_done() == _job_successes(tmp_path / "wf" / "jobstate.log")
    assert state.n_done() == state.workflow.n_tasks
    assert sum("reading it again from the start" in m for m in monitor.problems.messages) == 1
