"""Hypothesis fuzzing of every reader: any input gives the project's own error type or a result.

Property, for each reader (``READERS``): whatever the bytes, the reader returns a
result, possibly with warnings that each name the file, or raises the project's
own error (``InputError``, ``WorkflowError``) naming the file; never another
exception, never a crash of the process, never a hang; and the values it returns
are ones that can be true (finite times and durations, sizes within an exbibyte).

**Where the examples run.** A native crash must fail an example, not kill pytest.
Readers whose parsing is native code in this process (libyaml, expat, the JSON
scanner) and the pure-Python ones alike run each example in a forked child
(``run_isolated``): a signal there is a "process death", a child still busy
after ``HANG_S`` a hang, and Hypothesis shrinks the input like any failure.
How the event log's parser agrees with htcondor2's own reader, event by
event, is in ``tests/monitor/test_eventparse.py``.

Inputs are real files from ``tests/data`` mangled at the byte level (flips,
deletions, duplications, truncations, insertions of hostile bits: NUL, Latin-1,
NaN, huge and over-long numbers, deep nesting, YAML aliases, long lines) and,
for the JSON and YAML files, parsed and written back with one to three values
replaced by hostile ones (NaN, inf, negative numbers, 10**400, long strings,
deep lists, wrong types), so that the checks past the parser are reached too;
plus the native-crash and numeric cases of issue 14 as explicit examples.

Short form here (``WIRE_FUZZ_EXAMPLES``, default 40 per reader; the module runs
in well under a minute). The full form is ``benchmarks/fuzz_readers.py
--examples N``: the same readers and strategies, with counts instead of asserts.
"""

from __future__ import annotations

import copy
import faulthandler
import json
import math
import os
import signal
import tempfile
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from wire_daemon.core.errors import WireError
from wire_daemon.emulated.traces import load_trace
from wire_daemon.monitor.abstract_wf import read_abstract_workflow
from wire_daemon.monitor.braindump import read_braindump
from wire_daemon.monitor.dag import parse_dag
from wire_daemon.monitor.eventmap import EventLogFollower
from wire_daemon.monitor.jobstate import MAX_TIME, JobstateMapper, JobstateReader
from wire_daemon.monitor.kickstart import read_kickstart
from wire_daemon.monitor.problems import Problems
from wire_daemon.monitor.submit_file import parse_submit_file
from wire_lab.chaos.mutations import mangled_bytes, value_slots

# The slow tier (-m slow): forks a child per example and runs every reader's full example count.
pytestmark = pytest.mark.slow

DATA = Path(__file__).resolve().parents[1] / "data"
FIXTURES = DATA / "fixtures"
SUBMIT = FIXTURES / "pegasus-submit"
EXAMPLES = int(os.environ.get("WIRE_FUZZ_EXAMPLES", "40"))
HANG_S = 30.0
MAX_BYTES = 1 << 60

# -- outcomes ----------------------------------------------------------------------------


@dataclass
class Outcome:
    """What one input did: ``ok`` (a result, maybe warnings), ``error`` (the project's error type),
    or a failure: ``foreign`` (another exception, or a value that cannot be), ``death``, ``hang``."""

    status: str
    detail: str = ""
    seconds: float = 0.0  # wall time of the read
    warnings: int = 0
    cpu: float = 0.0  # CPU time of the read, in the process that read (a loaded machine does not inflate it)

    @property
    def failed(self) -> bool:
        return self.status not in ("ok", "error")


def run_reader(reader: Reader, data: bytes, directory: Path | None = None) -> Outcome:
    """Run one reader on ``data`` in this process and classify what happened."""
    directory = directory or Path(tempfile.mkdtemp(prefix="wire-fuzz-"))
    path = directory / reader.filename
    path.write_bytes(data)
    start, cpu = time.perf_counter(), time.process_time()
    try:
        warnings = reader.read(path)
    except WireError as exc:
        seconds, cpu = time.perf_counter() - start, time.process_time() - cpu
        if not str(exc).startswith(str(path)):
            return Outcome("foreign", f"error does not name the file: {exc}", seconds, 0, cpu)
        return Outcome("error", str(exc)[:200], seconds, 0, cpu)
    except BaseException as exc:  # noqa: BLE001 -- anything else is what we are looking for
        seconds, cpu = time.perf_counter() - start, time.process_time() - cpu
        return Outcome("foreign", "".join(traceback.format_exception_only(exc)).strip()[:400], seconds, 0, cpu)
    finally:
        _remove(directory)
    seconds, cpu = time.perf_counter() - start, time.process_time() - cpu
    unnamed = [w for w in warnings if not w.startswith(str(path))]
    if unnamed:
        return Outcome("foreign", f"warning does not name the file: {unnamed[0][:200]}", seconds, len(warnings), cpu)
    return Outcome("ok", "", seconds, len(warnings), cpu)


def run_isolated(reader: Reader, data: bytes) -> Outcome:
    """``run_reader`` in a forked child: a crash or a hang there is an outcome, not our death."""
    directory = Path(tempfile.mkdtemp(prefix="wire-fuzz-"))  # ours: removed even if the child dies
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child
        os.close(read_fd)
        faulthandler.disable()  # a crash is reported by the parent, without pytest's traceback dump
        try:
            outcome = run_reader(reader, data, directory)
            os.write(write_fd, json.dumps(outcome.__dict__).encode())
        finally:
            os._exit(0)
    os.close(write_fd)
    try:
        return _wait(pid, read_fd)
    finally:
        if directory.exists():
            _remove(directory)


def _wait(pid: int, read_fd: int) -> Outcome:
    start = time.perf_counter()
    payload = _read_all(read_fd, HANG_S)
    if payload is None:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        return Outcome("hang", f"still reading after {HANG_S:g} s", time.perf_counter() - start)
    _, status = os.waitpid(pid, 0)
    if os.WIFSIGNALED(status):
        name = signal.Signals(os.WTERMSIG(status)).name
        return Outcome("death", f"the reader's process died ({name})", time.perf_counter() - start)
    if not payload:
        return Outcome("death", f"the reader's process exited with status {os.WEXITSTATUS(status)}")
    return Outcome(**json.loads(payload))


def _read_all(fd: int, timeout: float) -> bytes | None:
    import select

    chunks = []
    limit = time.monotonic() + timeout
    try:
        while True:
            left = limit - time.monotonic()
            if left <= 0 or not select.select([fd], [], [], left)[0]:
                return None
            chunk = os.read(fd, 1 << 16)
            if not chunk:
                return b"".join(chunks)
            chunks.append(chunk)
    finally:
        os.close(fd)


def _remove(directory: Path) -> None:
    for child in directory.iterdir():
        child.unlink()
    directory.rmdir()


class ImpossibleValue(AssertionError):
    """A reader returned a value that cannot be true (a NaN time, a negative duration...)."""


def _require(ok: bool, what: str) -> None:
    if not ok:
        raise ImpossibleValue(what)


def _finite_nonnegative(value: float | None) -> bool:
    return value is None or (math.isfinite(value) and value >= 0)


# -- the readers -------------------------------------------------------------------------


def _read_eventlog(path: Path) -> list[str]:
    """Half the file, a poll, the rest, two polls (a live log growing under the reader)."""
    data = path.read_bytes()
    cut = len(data) // 2
    path.write_bytes(data[:cut])
    follower = EventLogFollower(path, job_ids="cluster-proc")
    events = follower.poll()
    with open(path, "ab") as f:
        f.write(data[cut:])
    events += follower.poll()
    _require(follower.poll() == [], "a third poll read more")
    for event in events:
        _require(math.isfinite(event.time), f"event time {event.time}")
        _require(event.peak_memory_bytes is None or 0 <= event.peak_memory_bytes <= MAX_BYTES, "memory")
    _require(len(events) <= 2 * data.count(b"\n...") + 2, "more events than the log holds")
    return follower.problems.messages


def _read_kickstart(path: Path) -> list[str]:
    problems = Problems()
    out = read_kickstart(path, problems)
    if out is None:
        _require(bool(problems.messages), "no record and no warning")
        return problems.messages
    for record in out.records:
        for value in (record.duration, record.main_duration, record.utime_s, record.stime_s):
            _require(_finite_nonnegative(value), f"a duration of {value}")
        _require(record.maxrss_bytes is None or 0 <= record.maxrss_bytes <= MAX_BYTES, "maxrss")
        _require(all(f.size is None or 0 <= f.size <= MAX_BYTES for f in record.files), "a file size")
    return problems.messages


def _read_dag(path: Path) -> list[str]:
    problems = Problems()
    dag = parse_dag(path, problems)
    _require(dag.n_nodes == len(dag.names), "node count")
    return problems.messages


def _read_submit_file(path: Path) -> list[str]:
    problems = Problems()
    sub = parse_submit_file(path, problems)
    if sub is not None:
        _ = (sub.universe, sub.xformation, sub.job_class, sub.site, sub.priority, sub.arguments, sub.log)
        _require(_finite_nonnegative(sub.request_memory_mib), "request_memory")
    return problems.messages


def _read_jobstate(path: Path) -> list[str]:
    problems = Problems()
    lines = JobstateReader(path, problems=problems).read()
    events = JobstateMapper().map(lines)
    for item in (*lines, *events):
        _require(math.isfinite(item.time) and 0 <= item.time <= MAX_TIME, f"a time of {item.time}")
    return problems.messages


def _read_braindump(path: Path) -> list[str]:
    braindump = read_braindump(path)
    for name in ("wf_uuid", "root_wf_uuid", "dax_label", "wf_name", "dag", "submit_dir", "condor_log", "dax"):
        value = getattr(braindump, name)
        _require(value is None or isinstance(value, str), name)
    return []


def _read_workflow_yml(path: Path) -> list[str]:
    problems = Problems()
    workflow = read_abstract_workflow(path, problems=problems)
    _require(all(0 <= s <= MAX_BYTES for s in workflow.file_sizes.values()), "a file size")
    for job in workflow.jobs:
        workflow.input_bytes(job)
    return problems.messages


def _read_trace(path: Path) -> list[str]:
    workflow = load_trace(path)
    runtimes = [float(r) for r in workflow.runtime_s]
    _require(all(math.isfinite(r) and r >= 0 for r in runtimes), "a runtime")
    return []


@dataclass
class Reader:
    name: str
    filename: str
    read: Callable[[Path], list[str]]
    seeds: list[bytes]
    isolate: bool = True  # each example in a forked child
    regressions: list[bytes] = field(default_factory=list)  # explicit examples (issue 14)
    hostile: list[bytes] = field(default_factory=list)  # reader-specific bits to insert
    structure: str = ""  # "json" / "yaml": also mutate the parsed seeds' values

    @property
    def docs(self) -> list[Any]:
        """The seeds that parse as one document (a multipart kickstart record does not)."""
        out = []
        for data in self.seeds:
            try:
                out.append(json.loads(data) if self.structure == "json" else yaml.safe_load(data))
            except (ValueError, yaml.YAMLError):
                continue
        return out

    def encode(self, doc: Any) -> bytes:
        if self.structure == "json":
            return json.dumps(doc).encode()
        return yaml.safe_dump(doc, allow_unicode=True, width=10_000).encode()


def _head(path: Path, events: int) -> bytes:
    data = path.read_bytes()
    end = 0
    for _ in range(events):
        end = data.index(b"\n...\n", end) + 5
    return data[:end]


_T = "2024-05-22 18:28:"
_SUBMIT = b"000 (012.000.000) " + _T.encode() + b"20 Job submitted from host: <1.2.3.4:9618>\n    DAG Node: a\n...\n"
_TERMINATED = (
    b"005 (012.000.000) "
    + _T.encode()
    + b"30 Job terminated.\n\t(1) Normal termination (return value 0)\n"
    + b"\t\tUsr 0 00:00:00, Sys 0 00:00:00  -  Run Remote Usage\n" * 4
    + b"...\n"
)
NODE_EXECUTE_CRASHES = [
    b"014 (12.0.0) 2024-05-22 18:28:20 Node 0 executing on\x00host: <1.2.3.4:9618>\n...\n",
    b"014 (12.0.0) 2024-05-22 18:28:20 Node 0\n...\n",
    b"014 (12.0.0) 2024-05-22 18:28:20 Node 0 executing on\n...\n",
]
DEEP_FLOW = b"[" * 50_000 + b"]" * 50_000


def _kickstart_yaml_seeds() -> list[bytes]:
    inner = SUBMIT / "hierarchical_wf_success" / "00" / "00" / "blackdiamond_diamond_subworkflow.000" / "00" / "00"
    return [
        (SUBMIT / "process_wf_success" / "00" / "00" / "ls_ID0000001.out.000").read_bytes(),
        (inner / "preprocess_ID0000001.out.000").read_bytes(),
        (FIXTURES / "kickstart" / "yaml" / "yaml-ok.out").read_bytes(),
    ]


def _submit_seeds() -> list[bytes]:
    subs = sorted((SUBMIT / "hierarchical_wf_success").rglob("*.sub"))
    return [p.read_bytes() for p in subs[:6]]


READERS: dict[str, Reader] = {
    "eventlog": Reader(
        "eventlog",
        "wf.dag.nodes.log",
        _read_eventlog,
        [
            (FIXTURES / "eventlog" / "lsst_tiny_problems.nodes.log").read_bytes(),
            _head(FIXTURES / "eventlog" / "htcondor_test_condor.log", 40),
            _head(FIXTURES / "eventlog" / "icecube_held_aborted_job.log", 30),
            (FIXTURES / "eventlog" / "naudzyk_filetransfer_job.log").read_bytes(),
        ],
        regressions=[_SUBMIT + crash + _TERMINATED for crash in NODE_EXECUTE_CRASHES]
        + [(_SUBMIT.replace(b"Job submitted", b"Job subm\xe9tted") + _TERMINATED) * 23],
        hostile=[b"014 (", b"\n...\n", b"\tUsr 0 00:00:00, Sys 0 00:00:00", b"\tPartitionable Resources :", b"Node 0"],
    ),
    "kickstart-yaml": Reader(
        "kickstart-yaml",
        "job.out.000",
        _read_kickstart,
        _kickstart_yaml_seeds(),
        structure="yaml",
        regressions=[b"- invocation: " + DEEP_FLOW, b"- invocation: True\n  mainjob: {duration: -5.0}\n"],
        hostile=[b"duration: -5.0", b"duration: .nan", b"maxrss: " + b"9" * 30, b"&a [*a, *a, *a]"],
    ),
    "kickstart-xml": Reader(
        "kickstart-xml",
        "job.out.000",
        _read_kickstart,
        [
            (FIXTURES / "kickstart" / "xml" / name).read_bytes()
            for name in ("success_message_zero_exit.out", "signalled.out", "cluster_summary_missing.out")
        ]
        + [(FIXTURES / "kickstart" / "cluster" / "cluster_summary_failed.out").read_bytes()],
        regressions=[b"<invocation " * 100_000, b"<a>" * 100_000 + b"<invocation duration='-1'></invocation>"],
        hostile=[b'duration="-1.5"', b'duration="nan"', b"<invocation>", b"</invocation>", b"<!ENTITY"],
    ),
    "dag": Reader(
        "dag",
        "wf.dag",
        _read_dag,
        [
            (SUBMIT / "hierarchical_wf_success" / "hierarchical-workflow-0.dag").read_bytes(),
            (SUBMIT / "process_wf_success" / "process-0.dag").read_bytes(),
        ],
        hostile=[b"PARENT x CHILD\n", b"JOB\n", b"RETRY a " + b"9" * 5000 + b"\n", b"PRIORITY a 99999999999\n"],
    ),
    "submit-file": Reader(
        "submit-file",
        "job.sub",
        _read_submit_file,
        _submit_seeds(),
        hostile=[b"request_memory = 1" + b"0" * 400 + b"\n", b"+pegasus_job_class = 1e999\n", b"priority = nan\n"],
    ),
    "jobstate": Reader(
        "jobstate",
        "jobstate.log",
        _read_jobstate,
        [(SUBMIT / name / "jobstate.log").read_bytes() for name in ("process_wf_failure", "sample_wf_held")],
        regressions=[b"nan a EXECUTE 9.0 pool - 1\n-5 a SUBMIT 9.0 pool - 1\ninf a JOB_TERMINATED 9.0 pool - 1\n"],
        hostile=[b"nan ", b"inf ", b"-1 ", b"1e400 ", b" JOB_SUCCESS " + b"9" * 30 + b" "],
    ),
    "braindump": Reader(
        "braindump",
        "braindump.yml",
        _read_braindump,
        [(SUBMIT / name / "braindump.yml").read_bytes() for name in ("process_wf_success", "sample_wf_held")],
        structure="yaml",
        regressions=[b"dag: " + DEEP_FLOW, b"dag: " + b"[" * 3000 + b"]" * 3000],
        hostile=[b"dag: [[[[[", b"&a [*a, *a, *a, *a]", b"*a", b"9" * 5000],
    ),
    "workflow-yml": Reader(
        "workflow-yml",
        "workflow.yml",
        _read_workflow_yml,
        [(SUBMIT / name / "workflow.yml").read_bytes() for name in ("hierarchical_wf_success", "sample_wf_held")],
        structure="yaml",
        regressions=[DEEP_FLOW, b"jobs:\n- id: " + b"[" * 3000 + b"]" * 3000 + b"\n"],
        hostile=[b"size: " + b"9" * 30, b"size: -1", b"&a [*a, *a, *a]", b"uses: 5", b"jobs: 7"],
    ),
    "wfformat": Reader(
        "wfformat",
        "trace.json",
        _read_trace,
        [(DATA / name).read_bytes() for name in ("wfformat-1.4-mini.json", "wfformat-1.3-mini.json")],
        structure="json",
        regressions=[b'{"workflow": {"tasks": [{"name": "a", "runtime": ' + b"1" * 5000 + b"}]}}", b"[" * 100_000],
        hostile=[b"NaN", b"-1", b"1" + b"0" * 400, b"1e999", b'"runtimeInSeconds": [[[[', b"[" * 5000],
    ),
}

_DOCS = {name: reader.docs for name, reader in READERS.items() if reader.structure}

JUNK = [
    b"\x00",
    b"\xe9",
    b"\xff\xfe",
    b"\n",
    b"\n\n",
    b"...\n",
    b'"',
    b"\\\n",
    b"nan",
    b"inf",
    b"-1",
    b"9" * 25,
    b"9" * 5000,
    b"[" * 400,
    b"{a: " * 300,
    b"x" * 2000,
]


def mangled(reader: Reader) -> st.SearchStrategy[bytes]:
    """A seed with one to three byte-level mutations, hostile insertions included."""
    return mangled_bytes(reader.seeds, JUNK + reader.hostile)


def _nested(depth: int) -> list[Any]:
    value: list[Any] = []
    for _ in range(depth):
        value = [value]
    return value


HOSTILE_VALUES: list[Any] = [
    float("nan"),
    float("inf"),
    float("-inf"),
    -1,
    -1.5,
    0,
    10**30,
    10**400,
    -(10**30),
    "",
    "x" * 5000,
    "9" * 5000,
    None,
    True,
    [],
    {},
    _nested(300),
    {"a": _nested(50)},
]


@st.composite
def restructured(draw: st.DrawFn, reader: Reader) -> bytes:
    """A parsed seed with one to three values replaced by hostile ones, written back."""
    doc = copy.deepcopy(draw(st.sampled_from(_DOCS[reader.name])))
    slots = value_slots(doc)
    for _ in range(draw(st.integers(1, 3))):
        if slots:
            container, key = draw(st.sampled_from(slots))
            container[key] = copy.deepcopy(draw(st.sampled_from(HOSTILE_VALUES)))
    return reader.encode(doc)


def inputs(reader: Reader) -> st.SearchStrategy[bytes]:
    if not reader.structure:
        return mangled(reader)
    return st.one_of(mangled(reader), restructured(reader))


def check(reader: Reader, data: bytes) -> Outcome:
    """One input through one reader, where a crash cannot take this process down."""
    return run_isolated(reader, data) if reader.isolate else run_reader(reader, data)


def _describe(outcome: Outcome, data: bytes) -> str:
    shown = data if len(data) <= 300 else data[:300] + b"..."
    return f"{outcome.status}: {outcome.detail} (after {outcome.seconds:.3f} s) on input {shown!r}"


# -- the tests -----------------------------------------------------------------------------


def _fuzz_settings(examples: int) -> settings:
    return settings(
        max_examples=examples,
        deadline=None,
        derandomize=True,
        database=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.large_base_example],
    )


@pytest.mark.parametrize("name", sorted(READERS))
def test_reader_gives_a_result_or_its_own_error(name: str) -> None:
    reader = READERS[name]

    def prop(data: bytes) -> None:
        outcome = check(reader, data)
        assert not outcome.failed, _describe(outcome, data)

    test = given(inputs(reader))(prop)
    for case in reader.regressions:
        test = example(case)(test)
    _fuzz_settings(EXAMPLES)(test)()


@pytest.mark.parametrize("name", sorted(n for n, r in READERS.items() if r.regressions))
def test_issue_14_inputs_are_survived_in_a_child(name: str) -> None:
    """The native-crash and numeric cases, each in a forked child: survived, with a result or an error."""
    reader = READERS[name]
    for case in reader.regressions:
        outcome = run_isolated(reader, case)
        assert not outcome.failed, _describe(outcome, case)
        assert outcome.seconds < 5.0, _describe(outcome, case)


def test_run_isolated_reports_a_death_and_a_hang() -> None:
    """The harness itself: a segfault and a hang in the child are outcomes, not our death."""

    def segfault(path: Path) -> list[str]:
        import ctypes

        ctypes.string_at(0)
        return []

    def hang(path: Path) -> list[str]:
        time.sleep(60)
        return []

    global HANG_S
    died = run_isolated(Reader("crash", "x", segfault, [b""]), b"x")
    assert died.status == "death" and "SIGSEGV" in died.detail
    saved, HANG_S = HANG_S, 0.5
    try:
        hung = run_isolated(Reader("hang", "x", hang, [b""]), b"x")
    finally:
        HANG_S = saved
    assert hung.status == "hang"
