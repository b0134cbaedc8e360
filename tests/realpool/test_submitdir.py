"""Trace -> Pegasus-layout submit dir (wire_lab/realpool/submitdir.py), checked without HTCondor.

The daemon's own readers must see in the written directory exactly what the
trace loader sees in the trace: tasks, stages (transformation and predecessor
stages), edges, input sizes, which tasks occupy the pool. The DAG must pass
DAGMan's syntax rules (our strict check, the project's parser, and HTCondor's
own DAG command check through htcondor2), each .sub must parse as an HTCondor
submit description, and the job executable (a /bin/sh kickstart stand-in) and
POST script are run here for real and read back by the kickstart reader and
the submit-dir monitor. The real pool runs the same directory later.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from wire_lab.realpool import submitdir
from wire_lab.realpool.daemon_api import (  # every wire_daemon name these tests use comes through here
    MemoryPositionStore,
    Problems,
    SubmitDirMonitor,
    Workflow,
    load_trace,
    parse_dag,
    read_kickstart,
    read_submit_dir,
)
from wire_lab.realpool.submitdir import SubmitDirOptions, WrittenSubmitDir, write_submit_dir
from wire_lab.realpool.task_emulator import EXITCODE_NAME, EmulatedTask, install

REPO = Path(__file__).resolve().parents[2]
MONTAGE = REPO / "wire_daemon" / "data" / "montage-chameleon-2mass-01d-001.json"
SRASEARCH = REPO / "tests" / "data" / "srasearch-chameleon-30a-001.json"
MINI = REPO / "tests" / "data" / "wfformat-1.4-mini.json"  # Pegasus auxiliary jobs, local and on the pool
LEGACY = REPO / "tests" / "data" / "montage-4.0-osg-dataset02-run001-head.json"  # 6-digit ids, aux jobs
TRACES = [MONTAGE, SRASEARCH, MINI, LEGACY]
NO_EVENT_LOG = "no job event log"  # the one warning of a DAG that has not started


def _write(tmp_path: Path, trace: Path | Workflow, scale: float = 2.0, **options: object) -> WrittenSubmitDir:
    return write_submit_dir(trace, tmp_path / "submit", scale, SubmitDirOptions(**options))  # type: ignore[arg-type]


def _stage_view(wf: Workflow, task_of: dict[str, str] | None = None) -> dict[str, tuple[str, str, tuple[str, ...]]]:
    """Per trace task id: (stage name, transformation, sorted predecessor stage names)."""
    names = {s.stage_id: s.name for s in wf.stages}
    view = {}
    for i, task in enumerate(wf.task_ids):
        stage = wf.stages[int(wf.stage_of[i])]
        preds = tuple(sorted(names[p] for p in stage.predecessor_stages))
        view[task_of[task] if task_of else task] = (stage.name, stage.transformation, preds)
    return view


def _edges(wf: Workflow, task_of: dict[str, str] | None = None) -> set[tuple[str, str]]:
    rename = task_of or {t: t for t in wf.task_ids}
    return {(rename[wf.task_ids[p]], rename[wf.task_ids[c]]) for c in range(wf.n_tasks) for p in wf.parents(c).tolist()}


def _task_of(written: WrittenSubmitDir) -> dict[str, str]:
    return {job.node: job.task_id for job in written.jobs}


# -- what the readers see ------------------------------------------------------------------


@pytest.mark.parametrize("trace", TRACES, ids=lambda p: p.stem)
def test_readers_see_the_trace(tmp_path: Path, trace: Path) -> None:
    expected = load_trace(trace)
    written = _write(tmp_path, trace)
    problems = Problems()
    seen = read_submit_dir(written.path, problems).workflow
    task_of = _task_of(written)
    assert seen.n_tasks == expected.n_tasks == len(written.jobs)
    assert sorted(task_of[t] for t in seen.task_ids) == sorted(expected.task_ids)
    assert [s.name for s in seen.stages] == [s.name for s in expected.stages]
    assert _stage_view(seen, task_of) == _stage_view(expected)
    assert _edges(seen, task_of) == _edges(expected) and seen.n_edges == expected.n_edges == written.n_edges
    for i, node in enumerate(seen.task_ids):  # abstract workflow sizes and pool placement, task by task
        j = expected.index_of(task_of[node])
        assert seen.input_bytes[i] == expected.input_bytes[j], node
        assert seen.output_bytes[i] == expected.output_bytes[j], node
        assert bool(seen.on_pool[i]) == bool(expected.on_pool[j]), node
    assert problems.messages == []  # not one line of the directory is skipped or guessed


@pytest.mark.parametrize("trace", [MONTAGE, SRASEARCH], ids=lambda p: p.stem)
def test_inspect_command_sees_the_trace(tmp_path: Path, trace: Path) -> None:
    expected = load_trace(trace)
    written = _write(tmp_path, trace)
    report = json.loads(_wire_daemon("inspect", str(written.path), "--json"))
    assert report["workflow"] == f"{written.label}-0" and report["dag"] == written.dag.name
    assert report["counts"]["tasks"] == report["counts"]["not_ready"] == expected.n_tasks
    stages = [(s["name"], s["transformation"], s["tasks"], s["on_pool"]) for s in report["stages"]]
    members = expected.stage_members()
    assert stages == [(s.name, s.transformation, len(members[s.stage_id]), True) for s in expected.stages]
    assert len(report["warnings"]) == 1 and NO_EVENT_LOG in report["warnings"][0]  # DAGMan has not run yet


def _wire_daemon(*args: str) -> str:
    """The installed console script (stable across module moves), beside this interpreter."""
    script = Path(sys.executable).with_name("wire-daemon")
    command = [str(script)] if script.exists() else [shutil.which("wire-daemon") or pytest.skip("no wire-daemon")]
    done = subprocess.run([*command, *args], capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_braindump_and_submit_files_identify_the_workflow(tmp_path: Path) -> None:
    written = _write(tmp_path, MONTAGE, wf_uuid="5f0c6c52-8d53-4f4b-9a3c-0c7cf2a1f001")
    found = read_submit_dir(written.path)
    braindump = found.braindump
    assert braindump is not None and braindump.wf_uuid == braindump.root_wf_uuid == written.wf_uuid
    assert braindump.dag == written.dag.name and braindump.submit_dir == str(written.path.resolve())
    assert braindump.condor_log == f"{written.label}-0.log" and braindump.dax.endswith("/workflow.yml")
    for job in written.jobs:
        sub = found.submit_files[job.node]
        assert sub.xformation == job.transformation and sub.dag_job_id == job.node and sub.dax_job_id == job.dax_id
        assert sub.attributes["pegasus_wf_uuid"] == written.wf_uuid and sub.site == "condorpool"
        assert sub.universe == "vanilla" and sub.get("request_cpus") == "1"
        assert sub.get("requirements") == 'TARGET.WirePool =?= "wire-pool"'
        assert sub.get("should_transfer_files") == "YES" and sub.get("when_to_transfer_output") == "ON_EXIT"
        assert sub.log == f"{written.path.resolve()}/{written.label}-0.log"
        assert sub.output == f"{written.path.resolve()}/{job.subdir}/{job.node}.out"
        text = (written.path / job.submit_path).read_text(encoding="utf-8")
        assert f'+pegasus_wf_xformation = "{job.transformation}"' in text.splitlines()  # literal, no VARS macro


def test_node_names_follow_pegasus(tmp_path: Path) -> None:
    written = _write(tmp_path, MONTAGE)
    for job in written.jobs:
        assert job.node == job.task_id  # the trace's ids are already <transformation>_ID<n>
        assert re.fullmatch(rf"{re.escape(job.transformation)}_ID\d{{7}}", job.node)
        assert job.node.endswith("_" + job.dax_id)
    # Pegasus' Hashed submit mapper: 45 jobs in 00/00, then 51 a directory
    assert [j.subdir for j in written.jobs[:46]] == ["00/00"] * 45 + ["00/01"]
    assert written.jobs[-1].subdir == "00/02"


def test_odd_task_ids_are_renamed(tmp_path: Path) -> None:
    trace = _trace_file(
        tmp_path,
        {
            "a b": ("prog one", []),
            "PARENT": ("prog one", ["a b"]),
            "x+y": ("mAdd", ["a b"]),
            "mAdd_ID0000004": ("mAdd", ["PARENT", "x+y"]),
            "other_ID0000002": ("mViewer", ["mAdd_ID0000004"]),
        },
    )
    written = _write(tmp_path, trace)
    names = written.node_of
    assert names["mAdd_ID0000004"] == "mAdd_ID0000004"  # already right: kept
    assert names["a b"] == "prog_one_ID0000001" and names["PARENT"] == "prog_one_ID0000002"
    assert names["x+y"] == "mAdd_ID0000003" and names["other_ID0000002"] == "mViewer_ID0000005"
    seen = read_submit_dir(written.path).workflow
    task_of = _task_of(written)
    expected = load_trace(trace)
    assert _stage_view(seen, task_of) == _stage_view(expected) and _edges(seen, task_of) == _edges(expected)
    assert {j.transformation for j in written.jobs} == {"prog one", "mAdd", "mViewer"}  # literal in .sub


def _trace_file(tmp_path: Path, tasks: dict[str, tuple[str, list[str]]]) -> Path:
    """A WfFormat 1.5 trace: task id -> (program, parents); 1.5 s each, one 1000-byte input."""
    spec = [
        {"id": t, "name": t, "parents": parents, "children": [], "inputFiles": [f"in-{k}"], "outputFiles": []}
        for k, (t, (_, parents)) in enumerate(tasks.items())
    ]
    files = [{"id": f"in-{k}", "sizeInBytes": 1000} for k in range(len(tasks))]
    execution = [
        {"id": t, "runtimeInSeconds": 1.5, "command": {"program": program}} for t, (program, _) in tasks.items()
    ]
    doc = {
        "schemaVersion": "1.5",
        "name": "odd",
        "workflow": {"specification": {"tasks": spec, "files": files}, "execution": {"tasks": execution}},
    }
    path = tmp_path / "odd-ids.json"
    path.write_text(json.dumps(doc), encoding="utf-8")
    return path


def test_off_pool_tasks_run_in_the_local_universe(tmp_path: Path) -> None:
    written = _write(tmp_path, MINI)
    found = read_submit_dir(written.path)
    for job in written.jobs:
        sub = found.submit_files[job.node]
        assert sub.universe == ("vanilla" if job.on_pool else "local"), job.node
        assert ("requirements" in sub.commands) == job.on_pool
        assert (sub.site == "local") == (not job.on_pool)
    assert {j.node for j in written.jobs if not j.on_pool} >= {"create_dir_mini_0_local", "register_condorpool_1_0"}


def test_pool_dir_is_where_the_pool_sees_the_files(tmp_path: Path) -> None:
    written = _write(tmp_path, MONTAGE, pool_dir="/srv/wire/run0001", pool=None)
    found = read_submit_dir(written.path)
    sub = found.submit_files[written.jobs[0].node]
    assert sub.executable == "/srv/wire/run0001/bin/wire-task-emulator.sh"
    assert sub.log == "/srv/wire/run0001/montage-chameleon-2mass-01d-001-0.log" and "requirements" not in sub.commands
    monitor = SubmitDirMonitor(written.path, MemoryPositionStore())
    assert monitor.event_logs[1] == written.path / "montage-chameleon-2mass-01d-001-0.log"  # mapped back


# -- the DAG against DAGMan's rules ----------------------------------------------------------

_NAME = r"[A-Za-z0-9_.\-]+"
_DAG_LINE = {
    "JOB": re.compile(rf"JOB ({_NAME}) (\S+\.sub)"),
    "SCRIPT": re.compile(rf"SCRIPT POST ({_NAME}) (/\S+) -r \$RETURN (\S+\.out)"),
    "PRIORITY": re.compile(rf"PRIORITY ({_NAME}) (-?\d+)"),
    "RETRY": re.compile(rf"RETRY ({_NAME}) (\d+)"),
    "CATEGORY": re.compile(rf"CATEGORY ({_NAME}) ({_NAME})"),
    "VARS": re.compile(rf'VARS ({_NAME})((?: \+?[A-Za-z_][A-Za-z0-9_]*="(?:[^"\\]|\\.)*")+)'),
    "PARENT": re.compile(rf"PARENT +((?:{_NAME} )+)CHILD((?: {_NAME})+)"),
    "MAXJOBS": re.compile(rf"MAXJOBS ({_NAME}) (\d+)"),
}


def _dag_problems(text: str, base: Path) -> list[str]:
    """Our strict reading of DAGMan's rules for the commands we write (one message per violation)."""
    problems, nodes, used = [], set(), set()
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip() or line.startswith("#"):
            continue
        keyword = line.split()[0]
        match = _DAG_LINE.get(keyword, re.compile("(?!)")).fullmatch(line)
        if not match:
            problems.append(f"{number}: not a valid {keyword} line: {line}")
        elif keyword == "JOB":
            name = match.group(1)
            if name in nodes or name.upper() in ("PARENT", "CHILD", "ALL_NODES"):
                problems.append(f"{number}: node {name} defined twice or reserved")
            if not (base / match.group(2)).is_file():
                problems.append(f"{number}: submit file {match.group(2)} missing")
            nodes.add(name)
        elif keyword == "PARENT":
            used.update(match.group(1).split() + match.group(2).split())
        elif keyword in ("SCRIPT", "PRIORITY", "RETRY", "CATEGORY", "VARS"):
            used.add(match.group(1))
    problems += [f"node {n} used before or without a JOB line" for n in sorted(used - nodes)]
    return problems


@pytest.mark.parametrize("trace", TRACES, ids=lambda p: p.stem)
def test_dag_follows_dagman_syntax(tmp_path: Path, trace: Path) -> None:
    written = _write(tmp_path, trace, retry=3)
    text = written.dag.read_text(encoding="utf-8")
    assert _dag_problems(text, written.path) == []
    dag = parse_dag(written.dag)  # the project's parser: raises on unknown nodes, cycles, duplicates
    assert dag.n_nodes == len(written.jobs) and {n.retry for n in dag.nodes} == {3}
    for node in dag.nodes:
        (post,) = [s for s in node.scripts if s.kind == "POST"]
        assert post.executable.endswith("/bin/" + EXITCODE_NAME)
        assert ("+DAGNodeRetry", "$(RETRY)") in node.vars
    exitcode = written.path / "bin" / EXITCODE_NAME
    assert os.access(exitcode, os.X_OK) and os.access(written.path / "bin" / "wire-task-emulator.sh", os.X_OK)


def test_htcondor_accepts_the_dag_and_submit_files(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    htcondor2 = pytest.importorskip("htcondor2")
    written = _write(tmp_path, MINI)
    for job in written.jobs:  # HTCondor's own submit-language parser
        parsed = htcondor2.Submit((written.path / job.submit_path).read_text(encoding="utf-8"))
        assert parsed["MY.pegasus_wf_xformation"] == f'"{job.transformation}"' and parsed["universe"]
    # condor_submit_dag's DAG check (every command keyword) needs a condor_dagman on PATH; a dummy does.
    fake = tmp_path / "fakebin"
    fake.mkdir()
    (fake / "condor_dagman").write_text("#!/bin/sh\nexit 0\n")
    (fake / "condor_dagman").chmod(0o755)
    monkeypatch.setenv("PATH", f"{fake}{os.pathsep}{os.environ.get('PATH', '')}")
    monkeypatch.chdir(written.path)
    dagman_job = htcondor2.Submit.from_dag(written.dag.name, {})
    assert written.dag.name in str(dagman_job)
    broken = written.path / "broken.dag"  # the check does bite: an unknown command is refused
    broken.write_text(written.dag.read_text(encoding="utf-8") + "NOT_A_COMMAND x\n", encoding="utf-8")
    with pytest.raises(Exception, match="NOT_A_COMMAND"):
        htcondor2.Submit.from_dag(broken.name, {})


def _parse_v2_arguments(value: str) -> list[str]:
    """HTCondor's new argument syntax: blanks separate, '' groups, '' / "" inside are literal quotes."""
    assert value[0] == value[-1] == '"', value
    text, args, current, quoted, started, i = value[1:-1], [], [], False, False, 0
    while i < len(text):
        c, following = text[i], text[i + 1 : i + 2]
        if c == '"':
            assert following == '"', f"lone double quote in {value}"
            current.append('"')
            started, i = True, i + 2
        elif c == "'" and quoted and following == "'":
            current.append("'")
            i += 2
        elif c == "'":
            quoted, started, i = not quoted, True, i + 1
        elif c.isspace() and not quoted:
            if started:
                args.append("".join(current))
            current, started, i = [], False, i + 1
        else:
            current.append(c)
            started, i = True, i + 1
    assert not quoted, f"unterminated quote in {value}"
    return args + (["".join(current)] if started else [])


def test_arguments_round_trip(tmp_path: Path) -> None:
    written = _write(tmp_path, _trace_file(tmp_path, {"it's": ("two words", []), 'q"x': ("mAdd", ["it's"])}))
    assert submitdir.condor_arguments(["a b", "it's", 'say "hi"', ""]) == '''"'a b' 'it''s' 'say ""hi""' ''"'''
    found = read_submit_dir(written.path)
    for job in written.jobs:
        assert _parse_v2_arguments(found.submit_files[job.node].get("arguments") or "") == job.emulated.argv()


# -- running the job executable and the POST script ------------------------------------------


def _run_job(written: WrittenSubmitDir, node: str, attempt: int | None = None, condor_job: str = "7.0") -> int:
    """Run a job's executable with its .sub arguments, stdout to its .out: as the starter would."""
    job = next(j for j in written.jobs if j.node == node)
    sub = read_submit_dir(written.path).submit_files[node]
    local = str(written.path.resolve())
    executable = (sub.executable or "").replace(written.pool_dir, local, 1)
    env = _job_environment(sub.get("environment") or "", condor_job)  # only what the .sub gives: no PATH
    if attempt is not None:
        ad = written.path / f".{node}.job.ad"
        ad.write_text(f'DAGNodeName = "{node}"\nDAGNodeRetry = {attempt}\n')
        env["_CONDOR_JOB_AD"] = str(ad)
    with open(written.path / job.subdir / f"{node}.out", "w") as out:
        done = subprocess.run(
            [executable, *_parse_v2_arguments(sub.get("arguments") or "")],
            stdout=out,
            stderr=subprocess.PIPE,
            env=env,
            cwd=written.path,
            timeout=60,
            check=False,
        )
    assert done.stderr == b"", done.stderr
    return done.returncode


def _job_environment(value: str, condor_job: str) -> dict[str, str]:
    assert value[0] == value[-1] == '"', value  # new syntax; our values hold no blank or quote
    pairs = dict(item.split("=", 1) for item in value[1:-1].split())
    return {k: v.replace("$(cluster).$(process)", condor_job) for k, v in pairs.items()}


def _post(written: WrittenSubmitDir, node: str, returned: int) -> int:
    job = next(j for j in written.jobs if j.node == node)
    command = [str(written.path / "bin" / EXITCODE_NAME), "-r", str(returned), f".//{job.subdir}/{node}.out"]
    return subprocess.run(command, cwd=written.path, capture_output=True, timeout=30, check=False).returncode


def test_emulator_writes_a_kickstart_record(tmp_path: Path) -> None:
    written = _write(tmp_path, MONTAGE, scale=0.01)
    job = written.jobs[0]  # mProject_ID0000001: 15.712 s in the trace -> 0.157 s
    assert _run_job(written, job.node) == 0
    output = read_kickstart(written.path / job.subdir / f"{job.node}.out")
    assert output is not None
    (record,) = output.records
    expected = load_trace(MONTAGE)
    i = expected.index_of(job.task_id)
    assert record.transformation == "mProject" and record.derivation == job.dax_id and record.resource == "condorpool"
    assert record.succeeded and record.exit_code == 0 and record.status == "regular"
    assert expected.runtime_s[i] * 0.01 <= record.main_duration < expected.runtime_s[i] * 0.01 + 0.5
    assert record.duration >= record.main_duration and record.hostname
    assert record.input_bytes == expected.input_bytes[i] and record.output_bytes == expected.output_bytes[i]
    assert record.maxrss_bytes == -(-int(expected.peak_memory_bytes[i]) // 1024) * 1024


def test_memory_options_reach_the_submit_files(tmp_path: Path) -> None:
    """request_memory per transformation on its pool jobs, the held-job removal delay, and -M with the peak."""
    written = _write(tmp_path, MINI, request_memory_mib={"mProject": 400}, hold_memory=True, held_remove_s=1800)
    wf = load_trace(MINI)
    for job in written.jobs:
        sub = (written.path / job.submit_path).read_text()
        wants = job.on_pool and job.transformation == "mProject"
        assert ("request_memory = 400" in sub) == wants, job.node
        if job.on_pool:
            assert "((CurrentTime - EnteredCurrentStatus) > 1800)" in sub
        peak = int(wf.peak_memory_bytes[job.task])
        assert job.emulated.hold_mib == (-(-peak // (1 << 20)) if job.on_pool and peak > 0 else None), job.node
        assert ("-M" in job.emulated.argv()) == bool(job.emulated.hold_mib)
    assert any(job.emulated.hold_mib for job in written.jobs)
    plain = _write(tmp_path / "plain", MINI)  # the defaults: nothing of the above
    assert not any(job.emulated.hold_mib for job in plain.jobs)
    assert all("request_memory" not in (plain.path / job.submit_path).read_text() for job in plain.jobs)


def test_emulator_really_holds_the_memory_it_is_told_to(tmp_path: Path) -> None:
    task = EmulatedTask("fat", "ID0000001", "condorpool", seconds=3.0, maxrss_kib=64 * 1024, hold_mib=64)
    scripts = install(tmp_path / "bin")
    with open(tmp_path / "fat.out", "w") as out:
        job = subprocess.Popen([str(scripts.emulator), *task.argv()], stdout=out, cwd=tmp_path)
        peak_kib = 0
        while job.poll() is None:
            peak_kib = max(peak_kib, _tree_rss_kib(job.pid))
            time.sleep(0.1)
    assert job.returncode == 0
    assert 64 * 1024 <= peak_kib < 80 * 1024, f"{peak_kib} KiB"  # what HTCondor sums over the job's processes
    output = read_kickstart(tmp_path / "fat.out")
    assert output is not None and output.records[0].maxrss_bytes == 64 * 1024 * 1024
    assert output.records[0].main_duration >= 3.0


def _tree_rss_kib(root: int) -> int:
    """Resident KiB of ``root`` and its descendants, from /proc."""
    parent: dict[int, int] = {}
    rss: dict[int, int] = {}
    for stat in Path("/proc").glob("[0-9]*/status"):
        try:
            fields = dict(line.split(":", 1) for line in stat.read_text().splitlines() if ":" in line)
        except OSError:
            continue  # ended meanwhile
        pid = int(stat.parent.name)
        parent[pid] = int(fields["PPid"])
        rss[pid] = int(fields.get("VmRSS", "0 kB").split()[0])
    tree, grew = {root}, True
    while grew:
        more = {pid for pid, ppid in parent.items() if ppid in tree} - tree
        tree |= more
        grew = bool(more)
    return sum(rss.get(pid, 0) for pid in tree)


def test_injected_failure_then_retry(tmp_path: Path) -> None:
    """A node whose first attempt fails: records kept per attempt, as pegasus-exitcode keeps them."""
    written = _write(tmp_path, MONTAGE, scale=0.001, failures={"mProject_ID0000001": 1})
    node, sub_dir = "mProject_ID0000001", written.path / "00" / "00"
    assert _run_job(written, node, attempt=0) == 1
    assert _post(written, node, 1) == 1  # the node fails: DAGMan retries it
    assert _run_job(written, node, attempt=1) == 0
    assert _post(written, node, 0) == 0
    first, second = (read_kickstart(sub_dir / f"{node}.out.{k:03d}") for k in (0, 1))
    assert first is not None and second is not None and not (sub_dir / f"{node}.out").exists()
    assert first.records[0].exit_code == 1 and first.records[0].output_bytes == 0  # no outputs on failure
    assert second.records[0].succeeded and second.records[0].output_bytes > 0
    assert _post(written, node, 0) == 1  # no .out left: fails, as pegasus-exitcode does


def test_post_script_fails_a_job_without_a_good_record(tmp_path: Path) -> None:
    written = _write(tmp_path, MONTAGE, scale=0.001)
    job = written.jobs[1]
    (written.path / job.subdir / f"{job.node}.out").write_text("")
    (written.path / job.subdir / f"{job.node}.err").write_text("oops\n")
    assert _post(written, job.node, 0) == 1  # returned 0, but no raw: 0 record
    assert (written.path / job.subdir / f"{job.node}.err.000").read_text() == "oops\n"


def test_monitor_reads_each_attempts_record(tmp_path: Path) -> None:
    """jobstate.log lines + the emulator's records: the monitor's FINISHED events carry the records' facts."""
    written = _write(tmp_path, MONTAGE, scale=0.002, failures={"mProject_ID0000002": 1})
    expected = load_trace(MONTAGE)
    lines = ["1700000000 INTERNAL *** DAGMAN_STARTED 1.0 ***"]
    for cluster, (node, attempt, code) in enumerate(
        [("mProject_ID0000001", 0, 0), ("mProject_ID0000002", 0, 1), ("mProject_ID0000002", 1, 0)], 2
    ):
        assert _run_job(written, node, attempt, condor_job=f"{cluster}.0") == code  # the id jobstate.log gives it
        assert _post(written, node, code) == (1 if code else 0)
        state = "JOB_SUCCESS 0" if code == 0 else f"JOB_FAILURE {code}"
        t = 1700000000 + 10 * cluster
        lines += [
            f"{t} {node} SUBMIT {cluster}.0 condorpool - {cluster}",
            f"{t + 1} {node} EXECUTE {cluster}.0 condorpool - {cluster}",
            f"{t + 2} {node} JOB_TERMINATED {cluster}.0 condorpool - {cluster}",
            f"{t + 3} {node} {state} condorpool - {cluster}",
        ]
    (written.path / "jobstate.log").write_text("\n".join(lines) + "\n")
    monitor = SubmitDirMonitor(written.path, MemoryPositionStore())
    finished = [e for e in monitor.poll_events() if e.kind.name == "FINISHED"]
    assert monitor.source == "jobstate" and monitor.kickstart_found == 3 and monitor.kickstart_missing == 0
    assert [(e.task_id, e.exit_code) for e in finished] == [
        ("mProject_ID0000001", 0),
        ("mProject_ID0000002", 1),
        ("mProject_ID0000002", 0),
    ]
    for event in finished:
        i = expected.index_of(event.task_id)
        assert expected.runtime_s[i] * 0.002 <= event.exec_runtime_s < expected.runtime_s[i] * 0.002 + 0.5
        assert event.input_bytes == expected.input_bytes[i]
        assert event.peak_memory_bytes == -(-int(expected.peak_memory_bytes[i]) // 1024) * 1024


# -- command line ----------------------------------------------------------------------------


def test_cli_prints_one_summary_line(tmp_path: Path) -> None:
    out = tmp_path / "run"
    command = [
        sys.executable,
        "-m",
        "wire_lab.realpool.submitdir",
        str(SRASEARCH),
        str(out),
        "--time-scale",
        "3",
        "--retry",
        "2",
        "--fail",
        "bowtie2-build_ID0000001:2",
    ]
    done = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    (line,) = done.stdout.splitlines()
    assert (
        line.startswith("srasearch-chameleon-30a-001: 64 jobs (64 on the pool), 5 stages, ") and "time scale 3" in line
    )
    assert "RETRY bowtie2-build_ID0000001 2" in (out / "srasearch-chameleon-30a-001-0.dag").read_text()
    again = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=120, check=False)
    assert again.returncode == 2 and again.stdout == "" and len(again.stderr.splitlines()) == 1


@pytest.mark.parametrize(
    "options, message",
    [
        ({"failures": {"nope": 1}}, "unknown task"),
        ({"pool": 'a"b'}, "pool name"),
        ({"pool_dir": "rel/dir"}, "absolute"),
        ({"held_remove_s": -1}, "held_remove_s"),
        ({"request_memory_mib": {"mProject": 0}}, "request_memory"),
    ],
)
def test_bad_options_are_refused(tmp_path: Path, options: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        _write(tmp_path, MONTAGE, **options)
