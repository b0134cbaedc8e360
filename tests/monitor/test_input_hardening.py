"""Issue 14, the input side: every reader survives what a hostile or broken submit host writes.

One regression test per finding (each failed on the code before the fix):

* 1 -- a malformed ``014`` event segfaulted htcondor2's JobEventLog, and libyaml's
  C loader segfaulted on flow nesting 50,000 deep (kickstart, braindump, workflow.yml).
  These run the reader in a child process, so that a crash fails the test instead of
  killing pytest;
* 4 -- an event the library cannot read cost a second (and one non-UTF-8 byte in a
  node name stalled the whole log);
* 6 -- NaN / inf / negative times and durations, ``RecursionError`` on deep nesting,
  over-long integers and integers too large for a float, temporary files left behind.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from wire_daemon.core.errors import InputError, WorkflowError
from wire_daemon.emulated.traces import load_trace
from wire_daemon.monitor.abstract_wf import read_abstract_workflow
from wire_daemon.monitor.braindump import read_braindump
from wire_daemon.monitor.eventlog import EventLogReader
from wire_daemon.monitor.jobstate import JobstateReader
from wire_daemon.monitor.kickstart import read_kickstart
from wire_daemon.monitor.problems import Problems
from wire_daemon.monitor.submit_dir import read_submit_dir

from . import condor_log_text as condor
from .conftest import SUBMIT

ROOT = Path(__file__).resolve().parents[2]
T0 = 1716400000.0
DEEP_FLOW = "[" * 50_000 + "]" * 50_000


def _child(code: str, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    """Run ``code`` in a fresh interpreter (temporary files go to tmp_path/tmp)."""
    scratch = tmp_path / "tmp"
    scratch.mkdir(exist_ok=True)
    env = dict(os.environ, PYTHONPATH=str(ROOT), TMPDIR=str(scratch))
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def _died(result: subprocess.CompletedProcess[str]) -> str:
    return f"the reader died with status {result.returncode}: {result.stderr[-400:]}"


# -- finding 1: native crashes ---------------------------------------------------------

NODE_EXECUTE = {
    "nul-byte": b"014 (12.0.0) 2024-05-22 18:28:20 Node 0 executing on\x00host: <1.2.3.4:9618>\n...\n",
    "cut-after-node-0": b"014 (12.0.0) 2024-05-22 18:28:20 Node 0\n...\n",
    "cut-after-executing-on": b"014 (12.0.0) 2024-05-22 18:28:20 Node 0 executing on\n...\n",
}


@pytest.mark.slow
@pytest.mark.parametrize("case", sorted(NODE_EXECUTE))
def test_a_malformed_node_execute_event_does_not_kill_the_reader(tmp_path: Path, case: str) -> None:
    log = tmp_path / "wf.dag.nodes.log"
    before = condor.submit(12, T0, "a").encode()
    log.write_bytes(before + NODE_EXECUTE[case] + condor.terminated(12, T0 + 5).encode())
    result = _child(
        f"""
        import json
        from wire_daemon.monitor.eventmap import EventLogFollower
        follower = EventLogFollower({str(log)!r})
        events = follower.poll()
        print(json.dumps({{"kinds": [e.kind.name for e in events], "warnings": follower.problems.messages}}))
        """,
        tmp_path,
    )
    assert result.returncode == 0, _died(result)
    out = json.loads(result.stdout)
    assert out["kinds"] == ["SUBMITTED", "STARTED", "FINISHED"]  # the events around it are all read
    if case == "nul-byte":  # one warning, naming the file, the line and the byte offset
        assert out["warnings"] == [
            f"{log}:4 (byte {len(before)}): job event skipped: control byte 0x00 at byte 52 of the event"
        ]
    else:  # node events of parallel jobs are taken from their header: their body is never parsed
        assert out["warnings"] == []


@pytest.mark.slow
def test_a_crash_leaves_no_temporary_file_behind(tmp_path: Path) -> None:
    log = tmp_path / "wf.dag.nodes.log"
    log.write_bytes(condor.submit(12, T0, "a").encode() + NODE_EXECUTE["nul-byte"])
    result = _child(
        f"""
        from wire_daemon.monitor.eventlog import EventLogReader
        EventLogReader({str(log)!r}).read()
        """,
        tmp_path,
    )
    assert result.returncode == 0, _died(result)
    assert list((tmp_path / "tmp").iterdir()) == []  # no wire-eventlog-*.log, and no other file


@pytest.mark.slow
@pytest.mark.parametrize("reader", ["kickstart", "braindump", "workflow.yml"])
def test_yaml_nested_50000_deep_is_refused_not_a_crash(tmp_path: Path, reader: str) -> None:
    path = tmp_path / {"kickstart": "job.out.000", "braindump": "braindump.yml", "workflow.yml": "workflow.yml"}[reader]
    path.write_text(
        {"kickstart": "- invocation: " + DEEP_FLOW, "braindump": "dag: " + DEEP_FLOW}.get(reader, DEEP_FLOW)
    )
    call = {
        "kickstart": "from wire_daemon.monitor.kickstart import read_kickstart as read",
        "braindump": "from wire_daemon.monitor.braindump import read_braindump as read",
        "workflow.yml": "from wire_daemon.monitor.abstract_wf import read_abstract_workflow as read",
    }[reader]
    result = _child(
        f"""
        from wire_daemon.core.errors import InputError
        from wire_daemon.monitor.problems import Problems
        {call}
        problems = Problems()
        try:
            out = read({str(path)!r}, problems=problems) if {reader == "kickstart"} else read({str(path)!r})
            print(out is None, problems.messages)
        except InputError as exc:
            print("InputError", exc)
        """,
        tmp_path,
    )
    assert result.returncode == 0, _died(result)
    assert f"{path}:1: " in result.stdout and "nested more than 200 levels deep" in result.stdout


# -- finding 4: an unreadable event costs milliseconds, and only itself ------------------------------


def test_46_events_with_a_latin1_byte_each_cost_milliseconds(tmp_path: Path) -> None:
    """Half have the byte in text the library must match (skipped), half in free text (kept)."""
    log = tmp_path / "wf.dag.nodes.log"
    events = []
    for i in range(23):
        events.append(condor.submit(100 + i, T0 + i, f"node{i}").encode().replace(b"node", b"n\xe9ud"))
        events.append(condor.submit(200 + i, T0 + i, f"node{i}").encode().replace(b"submitted", b"subm\xe9tted"))
    log.write_bytes(b"".join(events))
    problems = Problems()
    reader = EventLogReader(log, problems=problems)
    start = time.monotonic()
    got = reader.read()
    took = time.monotonic() - start
    assert took < 3.0, f"{took:.1f} s for 46 events (the library sleeps a second on each one it cannot read)"
    assert sorted(e.cluster for e in got) == list(range(100, 123))
    assert {e.node for e in got} == {f"n?ud{i}" for i in range(23)}
    skipped = [m for m in problems.messages if "skipped" in m]
    assert len(skipped) == 23 and all(m.startswith(f"{log}:") and "(byte " in m for m in skipped)
    assert reader.read() == [] and reader.pending_bytes == 0


# -- finding 6: values that cannot be, deep nesting, numbers ------------------------------------


def test_jobstate_times_that_cannot_be_are_skipped_with_a_warning(tmp_path: Path) -> None:
    log = tmp_path / "jobstate.log"
    log.write_text(
        "1677913809 a SUBMIT 9.0 pool - 1\n"
        "nan a EXECUTE 9.0 pool - 1\n"
        "inf a EXECUTE 9.0 pool - 1\n"
        "-5 a EXECUTE 9.0 pool - 1\n"
        "1e400 a EXECUTE 9.0 pool - 1\n"
        "1677913810 a JOB_TERMINATED 9.0 pool - 1\n"
        "1677913811 a JOB_SUCCESS 99999999999999999999 pool - 1\n"
        "1677913812 a JOB_SUCCESS 0 pool - 1\n"
    )
    problems = Problems()
    lines = JobstateReader(log, problems=problems).read()
    assert [line.line for line in lines] == [1, 6, 8]
    assert all(math.isfinite(line.time) and line.time >= 0 for line in lines)
    assert [m.split(": ", 1)[0] for m in problems.messages] == [f"{log}:{n}" for n in (2, 3, 4, 5, 7)]


KICKSTART_RECORD = """\
- invocation: True
  transformation: "ls"
  start: 2023-03-04T01:03:01.880-08:00
  duration: {duration}
  mainjob:
    start: 2023-03-04T01:03:01.880-08:00
    duration: {main}
    status: {{raw: 0, regular_exitcode: 0}}
    usage: {{utime: 0.1, stime: 0.1, maxrss: {maxrss}}}
  files:
    f.a: {{lfn: "f.a", size: 10, input: True}}
"""


@pytest.mark.parametrize(
    "duration, main, maxrss, bad",
    [
        ("1.5", "-5.0", "100", ["main_duration"]),  # a negative duration
        (".nan", "1.0", "100", ["duration"]),
        ("1.0e+999", "1.0", "100", ["duration"]),  # inf
        ("1.0", "1.0", "9" * 30, ["maxrss_bytes"]),  # beyond an exbibyte
        ("1.0", "1" + "0" * 400, "100", ["main_duration"]),  # an int too large for a float
    ],
)
def test_kickstart_values_that_cannot_be_are_dropped_with_a_warning(
    tmp_path: Path, duration: str, main: str, maxrss: str, bad: list[str]
) -> None:
    path = tmp_path / "ls.out.000"
    path.write_text(KICKSTART_RECORD.format(duration=duration, main=main, maxrss=maxrss))
    problems = Problems()
    out = read_kickstart(path, problems)
    assert out is not None
    (record,) = out.records
    for name in bad:
        assert getattr(record, name) is None
    assert record.main_duration is None or record.main_duration >= 0
    assert len(problems.messages) == len(bad)
    assert all(m.startswith(f"{path}:1: kickstart ") for m in problems.messages)


def test_deep_nesting_in_a_braindump_is_an_input_error_not_a_recursion_error(tmp_path: Path) -> None:
    path = tmp_path / "braindump.yml"
    path.write_text("dag: " + "[" * 3000 + "]" * 3000 + "\n")
    with pytest.raises(InputError, match="nested more than 200 levels deep"):
        read_braindump(path).dag  # noqa: B018


def test_deep_nesting_in_workflow_yml_is_an_input_error_not_a_recursion_error(tmp_path: Path) -> None:
    path = tmp_path / "workflow.yml"
    path.write_text("jobs:\n- id: " + "[" * 3000 + "]" * 3000 + "\n")
    with pytest.raises(InputError, match="nested more than 200 levels deep"):
        read_abstract_workflow(path)


def test_the_yaml_librarys_own_depth_refusal_reads_as_ours(monkeypatch: pytest.MonkeyPatch) -> None:
    """libyaml 0.2.6 refuses flow nesting past 1,000 while scanning ahead; older ones do not, so a stand-in."""
    import yaml

    from wire_daemon.monitor import yamlio

    def refusing(text: str, Loader: object) -> Iterator[object]:
        yield yaml.StreamStartEvent()
        mark = yaml.Mark("<unicode string>", 0, 2, 7, None, None)
        raise yaml.scanner.ScannerError("while increasing flow level", mark, "exceeded maximum nesting depth", mark)

    monkeypatch.setattr(yamlio.yaml, "parse", refusing)
    with pytest.raises(InputError, match=r"nested more than 200 levels deep") as caught:
        yamlio.load_yaml_text("a: " + "[" * 60 + "]" * 60, "deep.yml", first_line=10)
    assert str(caught.value).startswith("deep.yml:12: ")


def test_a_file_size_too_large_for_the_workflow_arrays_is_a_warning(tmp_path: Path) -> None:
    wf = tmp_path / "wf"
    shutil.copytree(SUBMIT / "process_wf_success", wf)
    huge = "9" * 30  # an int: YAML reads it, numpy's int64 cannot hold it
    text = (wf / "workflow.yml").read_text().replace("type: output,", f"type: input, size: {huge},")
    (wf / "workflow.yml").write_text(text)
    problems = Problems()
    submit_dir = read_submit_dir(wf, problems)  # was: OverflowError building the workflow's int64 arrays
    assert int(submit_dir.workflow.input_bytes.max()) == 0
    assert [m for m in problems.messages if "not a file size" in m] == [
        f"{wf / 'workflow.yml'}:jobs[0]: size of 'listing.txt' is not a file size (999999999999999999999999999999); "
        "taken as unknown"
    ]


def _trace(tmp_path: Path, runtime: str) -> Path:
    path = tmp_path / "trace.json"
    path.write_text(
        '{"schemaVersion": "1.5", "workflow": {"specification": {"tasks": [{"id": "a", "parents": [], '
        '"children": [], "inputFiles": [], "outputFiles": []}], "files": []}, '
        '"execution": {"tasks": [{"id": "a", "runtimeInSeconds": ' + runtime + "}]}}}"
    )
    return path


@pytest.mark.parametrize(
    "runtime, message",
    [
        ("1" * 5000, "an integer of more than 4,300 digits"),  # was: ValueError
        ("1" + "0" * 400, "negative, not finite or absurdly long"),  # was: OverflowError (too large for a float)
        ("[" * 100_000 + "]" * 100_000, "nested too deeply"),  # was: RecursionError
    ],
)
def test_trace_numbers_and_nesting_are_workflow_errors(tmp_path: Path, runtime: str, message: str) -> None:
    path = _trace(tmp_path, runtime)
    with pytest.raises(WorkflowError, match=message) as caught:
        load_trace(path)
    assert str(caught.value).startswith(str(path)) and len(str(caught.value)) < 300


def test_an_image_size_beyond_an_exbibyte_is_dropped_with_a_warning(tmp_path: Path) -> None:
    log = tmp_path / "job.log"
    first = condor.submit(7, T0, "a")
    log.write_text(
        first + f"006 (007.000.000) {condor.stamp(T0 + 1)} Image size of job updated: 9223372036854775807\n"
        "\t9223372036854775807  -  ResidentSetSize of job (KB)\n...\n"
    )
    problems = Problems()
    events = EventLogReader(log, problems=problems).read()
    assert [e.type for e in events] == ["SUBMIT", "IMAGE_SIZE"] and events[1].memory_bytes is None
    assert problems.messages == [f"{log}:4 (byte {len(first)}): IMAGE_SIZE event: memory_bytes out of range; ignored"]


# -- a flood of bad records: a hundred warnings and a count, not a million log lines ------------


def test_a_log_of_junk_events_gives_a_hundred_warnings_and_a_count(tmp_path: Path) -> None:
    log = tmp_path / "wf.dag.nodes.log"
    log.write_bytes(b"junk\n...\n" * 1000 + b"...\n" * 250_000 + condor.submit(7, T0, "a").encode())
    problems = Problems()
    events = EventLogReader(log, problems=problems).read()
    assert [e.cluster for e in events] == [7]
    assert len(problems.messages) == 101
    assert problems.messages[-1] == f"{log}:201 (byte 900): 900 more warnings like these not shown"


def test_a_jobstate_log_of_bad_lines_gives_a_hundred_warnings_and_a_count(tmp_path: Path) -> None:
    log = tmp_path / "jobstate.log"
    log.write_text("nan a SUBMIT 9.0 pool - 1\n" * 300 + "1677913809 a SUBMIT 9.0 pool - 1\n")
    problems = Problems()
    assert len(JobstateReader(log, problems=problems).read()) == 1
    assert (
        len(problems.messages) == 101 and problems.messages[-1] == f"{log}:101: 200 more warnings like these not shown"
    )
