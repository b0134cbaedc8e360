"""Mangled fixtures: no exception escapes a reader (the DAG reader raises only InputError, as documented)."""

from __future__ import annotations

import tempfile
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from wire_daemon.core.errors import InputError
from wire_daemon.monitor.dag import parse_dag
from wire_daemon.monitor.eventmap import EventLogFollower
from wire_daemon.monitor.kickstart import read_kickstart
from wire_daemon.monitor.problems import Problems
from wire_lab.chaos.mutations import mangled_bytes

from .conftest import EVENTLOG, KICKSTART, SUBMIT

FUZZ = settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow], derandomize=True)

JUNK = [
    b"Junk here\n",
    b"...\n",
    b"\x00\xff\xfe",
    b"000 (",
    b"005 (1.0.0) 13/45 99:99:99 Job terminated.\n...\n",
    b"\n\n",
    b"- invocation: [\n",
    b"<invocation>",
    b"PARENT x CHILD\n",
    b"JOB\n",
    b'"',
    b"\\\n",
]


def mangled(original: bytes) -> st.SearchStrategy[bytes]:
    return mangled_bytes([original], JUNK)


_SCRATCH = tempfile.TemporaryDirectory(prefix="wire-fuzz-")  # removed when the tests are done


def _write(data: bytes, name: str) -> Path:
    directory = Path(tempfile.mkdtemp(dir=_SCRATCH.name))
    path = directory / name
    path.write_bytes(data)
    return path


NODE_LOG = (EVENTLOG / "lsst_tiny_problems.nodes.log").read_bytes()
OLD_LOG = (EVENTLOG / "htcondor_test_condor.log").read_bytes()
OLD_LOG = OLD_LOG[: OLD_LOG.index(b"\n...\n", 6000) + 5]


@FUZZ
@given(st.one_of(mangled(NODE_LOG), mangled(OLD_LOG)), st.floats(0.0, 1.0))
def test_event_log_reader_survives_mangled_logs(data: bytes, split: float) -> None:
    cut = int(len(data) * split)
    path = _write(data[:cut], "nodes.log")
    problems = Problems()
    follower = EventLogFollower(path, problems=problems, job_ids="cluster-proc")
    events = follower.poll()
    with open(path, "ab") as f:
        f.write(data[cut:])
    events += follower.poll()
    assert follower.poll() == []
    assert len(events) <= 2 * data.count(b"\n...") + 2  # a NOOP-like terminate adds one STARTED
    assert all(m.startswith(str(path)) for m in problems.messages)


def test_junk_between_events_is_reported() -> None:
    first_end = NODE_LOG.index(b"\n...\n") + 5
    path = _write(NODE_LOG[:first_end] + b"Junk here\nmore junk\n...\n" + NODE_LOG[first_end:], "nodes.log")
    follower = EventLogFollower(path)
    assert len(follower.poll()) == 19
    assert follower.problems.messages == [f"{path}:4 (byte 208): not a job event (no event header); skipped"]


YAML_RECORD = (SUBMIT / "process_wf_success" / "00" / "00" / "ls_ID0000001.out.000").read_bytes()
XML_RECORD = (KICKSTART / "xml" / "success_message_zero_exit.out").read_bytes()
CLUSTER = (KICKSTART / "cluster" / "cluster_summary_failed.out").read_bytes()


@FUZZ
@given(st.one_of(mangled(YAML_RECORD), mangled(XML_RECORD), mangled(CLUSTER)))
def test_kickstart_reader_survives_mangled_records(data: bytes) -> None:
    path = _write(data, "job.out.000")
    problems = Problems()
    out = read_kickstart(path, problems)
    if out is None:
        assert problems.messages and all(m.startswith(str(path)) for m in problems.messages)
    else:
        assert out.records or out.cluster_lines


PEGASUS_DAG = (SUBMIT / "hierarchical_wf_success" / "hierarchical-workflow-0.dag").read_bytes()
SMALL_DAG = (SUBMIT / "process_wf_success" / "process-0.dag").read_bytes()


@FUZZ
@given(st.one_of(mangled(PEGASUS_DAG), mangled(SMALL_DAG)))
def test_dag_reader_raises_only_input_errors(data: bytes) -> None:
    path = _write(data, "wf.dag")
    problems = Problems()
    try:
        dag = parse_dag(path, problems)
    except InputError as err:
        assert err.source == str(path) and str(err).startswith(str(path))
        return
    assert dag.n_edges <= 17 + 4 * 4  # a duplicated PARENT line may add a few edges, never many
    assert all(m.startswith(str(path)) for m in problems.messages)
