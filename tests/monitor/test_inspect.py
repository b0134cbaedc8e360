"""``wire-daemon inspect`` on the fixture submit dirs: text and JSON."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from wire_daemon.cli.main import main

from .conftest import LSST, SUBMIT

INNER = "hierarchical_wf_success/00/00/blackdiamond_diamond_subworkflow.000"
TOP_KEYS = {
    "version",
    "submit_dir",
    "workflow",
    "dag",
    "source",
    "source_file",
    "events",
    "now",
    "now_from",
    "dag_finished",
    "dag_exit_code",
    "counts",
    "stages",
    "running",
    "sub_workflows",
    "warnings",
}
STAGE_KEYS = {
    "stage_id",
    "name",
    "transformation",
    "on_pool",
    "tasks",
    "done",
    "running",
    "idle",
    "held",
    "not_ready",
    "completed_in_model",
    "median_exec_s",
    "transfer_s",
    "a0",
    "a1",
    "size_groups",
    "policy",
    "policies",
    "predicted_occupancy_s",
    "aborted",
}

COUNTS = {  # dir: (tasks, done, running, idle, held, not ready), events, DAGMan exit code (None: not finished)
    "process_wf_success": ((5, 5, 0, 0, 0, 0), 15, 0),
    "process_wf_failure": ((5, 1, 0, 1, 0, 3), 9, 1),
    "sample_wf_held": ((8, 2, 0, 0, 0, 5), 11, 1),  # and one aborted
    "hierarchical_wf_success": ((13, 11, 0, 0, 0, 2), 33, None),
    "hierarchical_wf_failure": ((13, 6, 0, 0, 0, 7), 18, 1),
    INNER: ((15, 0, 0, 0, 0, 15), 0, None),
}


def _json(capsys: pytest.CaptureFixture[str], *args: str) -> dict:
    assert main(["inspect", *args, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def _stage(data: dict, name: str) -> dict:
    (stage,) = [s for s in data["stages"] if s["name"] == name]
    return stage


@pytest.mark.parametrize("name", sorted(COUNTS))
def test_json_on_every_pegasus_fixture(capsys: pytest.CaptureFixture[str], name: str) -> None:
    counts, events, exit_code = COUNTS[name]
    data = _json(capsys, str(SUBMIT / name))
    assert set(data) == TOP_KEYS and all(set(s) == STAGE_KEYS for s in data["stages"])
    c = data["counts"]
    assert (c["tasks"], c["done"], c["running"], c["idle"], c["held"], c["not_ready"]) == counts
    assert sum(s["tasks"] for s in data["stages"]) == counts[0]
    assert data["events"] == events and data["dag_exit_code"] == exit_code
    assert data["dag_finished"] is (exit_code is not None)
    assert data["source"] == ("jobstate" if events else None)


def test_failed_with_retry_stage_is_idle_and_the_done_stage_has_its_model(capsys: pytest.CaptureFixture[str]) -> None:
    data = _json(capsys, str(SUBMIT / "process_wf_failure"))
    ls = _stage(data, "ls")
    assert (ls["idle"], ls["done"], ls["on_pool"], ls["policy"], ls["policies"]) == (
        1,
        0,
        True,
        "not-started",
        {"not-started": 1},
    )
    mkdir = _stage(data, "pegasus::dirmanager")
    assert (mkdir["done"], mkdir["on_pool"], mkdir["policy"], mkdir["completed_in_model"]) == (1, False, "done", 1)
    assert mkdir["median_exec_s"] == pytest.approx(2.22) and mkdir["transfer_s"] == pytest.approx(0.78)
    assert data["now"] == 1677913875.0 and data["now_from"] == "last-event" and data["running"] == []


def test_held_and_aborted_job_is_aborted_not_not_ready(capsys: pytest.CaptureFixture[str]) -> None:
    data = _json(capsys, str(SUBMIT / "sample_wf_held"))
    chebi = _stage(data, "chebi_drug_loader")
    assert (chebi["tasks"], chebi["not_ready"], chebi["aborted"], chebi["held"]) == (1, 0, 1, 0)
    assert data["counts"]["aborted"] == 1


def test_hierarchical_lists_its_sub_workflow(capsys: pytest.CaptureFixture[str]) -> None:
    data = _json(capsys, str(SUBMIT / "hierarchical_wf_success"))
    assert data["sub_workflows"] == [
        {
            "node": "pegasus-plan_diamond_subworkflow",
            "submit_dir": "00/00/blackdiamond_diamond_subworkflow.000",
            "dag": "inner.dag",
        }
    ]
    dagman = _stage(data, "condor::dagman")
    assert (dagman["done"], dagman["on_pool"], dagman["median_exec_s"]) == (1, False, 186.0)
    failed = _json(capsys, str(SUBMIT / "hierarchical_wf_failure"))
    assert failed["sub_workflows"] == [{"node": "pegasus-plan_diamond_subworkflow", "submit_dir": None, "dag": None}]


def test_text_output(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["inspect", str(SUBMIT / "process_wf_failure")]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[:4] == [
        "workflow process-0: 5 tasks in 5 stages (process-0.dag)",
        "  events: 9 from jobstate.log (no job event log, so no hosts)",
        "  DAGMan finished with status 1; now: 2023-03-04 07:11:15 UTC (last-event)",
        "  tasks: 1 done, 0 running, 1 idle, 0 held, 3 not ready",
    ]
    header = out[5].split()
    assert header[:3] == ["stage", "tasks", "done"] and "policy" in header and "transfer" in header
    ls = next(line for line in out if line.startswith("ls "))
    assert ls.split()[:8] == ["ls", "1", "0", "0", "1", "0", "0", "not-started"]
    assert out[-1] == "running tasks: none"


def test_running_tasks_with_host_and_elapsed_time(capsys: pytest.CaptureFixture[str]) -> None:
    data = _json(capsys, str(LSST / "noop_running_1"))
    assert data["source"] == "eventlog" and data["counts"]["running"] == 10
    first = data["running"][0]
    assert first["task"] == "label2_val1a_val2b" and "alias=test02" in first["host"]
    assert first["elapsed_s"] == pytest.approx(data["now"] - first["started"]) and first["elapsed_s"] > 0
    assert main(["inspect", str(LSST / "noop_running_1")]) == 0
    text = capsys.readouterr().out
    assert "running tasks (10):" in text and "  label2_val1a_val2b  [label2_val1a_val2b]  on test02  for 9s" in text


def test_live_dir_mid_run(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    wf = tmp_path / "run0001"
    shutil.copytree(SUBMIT / "process_wf_success", wf)
    lines = (SUBMIT / "process_wf_success" / "jobstate.log").read_text().splitlines(keepends=True)
    (wf / "jobstate.log").write_text("".join(lines[:11]) + lines[11][:9])  # ls executing; a half-written line
    data = _json(capsys, str(wf))
    assert [(r["task"], r["host"], r["elapsed_s"]) for r in data["running"]] == [("ls_ID0000001", None, 0.0)]
    assert _stage(data, "ls")["policy"] == "running-only" and not data["dag_finished"]
    live = _json(capsys, str(wf), "--wall-clock")
    assert live["now_from"] == "wall-clock" and live["running"][0]["elapsed_s"] > 1e7


def test_not_a_submit_dir_is_a_one_line_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["inspect", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip()
    assert err == f"wire-daemon: error: {tmp_path}: no .dag file in the submit directory"
