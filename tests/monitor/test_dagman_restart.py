"""A DAGMan stopped with its schedd (a condor_restart) is not a finished workflow: the schedd starts it again."""

from __future__ import annotations

from pathlib import Path

from wire_daemon.monitor.dagman_status import dag_status

START = "11/26/26 23:05:36 ** condor_scheduniv_exec.1.0 (CONDOR_DAGMAN) STARTING UP\n"


def _exit(status: int) -> str:
    return f"11/26/26 23:06:11 **** condor_scheduniv_exec.1.0 (condor_DAGMAN) pid 207735 EXITING WITH STATUS {status}\n"


def test_dagman_stopped_with_its_schedd_is_still_running(tmp_path: Path) -> None:
    out = tmp_path / "run-0.dag.dagman.out"
    out.write_text(START + _exit(3))
    assert not dag_status(out, None).finished  # until its restart writes STARTING UP, and after
    out.write_text(START + _exit(3) + START)
    assert not dag_status(out, None).finished
    out.write_text(START + _exit(3) + START + _exit(0))
    status = dag_status(out, None)
    assert status.finished and status.exit_code == 0


def test_monitord_says_the_same(tmp_path: Path) -> None:
    jobstate = tmp_path / "jobstate.log"
    jobstate.write_text("1700000000 INTERNAL *** DAGMAN_STARTED 1 ***\n1700000035 INTERNAL *** DAGMAN_FINISHED 3 ***\n")
    assert not dag_status(None, jobstate).finished
    jobstate.write_text("1700000000 INTERNAL *** DAGMAN_STARTED 1 ***\n1700000035 INTERNAL *** DAGMAN_FINISHED 2 ***\n")
    assert dag_status(None, jobstate).exit_code == 2
