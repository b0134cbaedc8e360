"""Incremental reading: growing files, half-written records, truncation, rotation, resume."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from wire_daemon.monitor.eventlog import EventLogCheckpoint, EventLogReader
from wire_daemon.monitor.eventmap import EventLogFollower
from wire_daemon.monitor.jobstate import JobstateReader
from wire_daemon.monitor.position import ReadPosition
from wire_daemon.monitor.problems import Problems

from .conftest import EVENTLOG, SUBMIT

LOGS = [
    "lsst_tiny_problems.nodes.log",
    "icecube_held_aborted_job.log",
    "naudzyk_filetransfer_job.log",
    "htcondor_test_condor.log",
]


def _key(event):  # everything but the (approximate) line number
    return (event.type, event.cluster, event.proc, event.time, event.node, event.host, event.return_value)


def _append(path: Path, data: bytes) -> None:
    with open(path, "ab") as f:
        f.write(data)


def _reference_events(name: str, reference: float):
    return [_key(e) for e in EventLogReader(EVENTLOG / name, year_reference=reference).read()]


@pytest.mark.parametrize("name", LOGS)
def test_log_written_in_chunks_reads_like_one_read(tmp_path: Path, name: str) -> None:
    data = (EVENTLOG / name).read_bytes()
    reference = (EVENTLOG / name).stat().st_mtime
    expected = _reference_events(name, reference)
    log = tmp_path / name
    log.write_bytes(b"")
    reader = EventLogReader(log, year_reference=reference)
    half = len(data) // 2
    second_event_end = data.index(b"\n...\n", data.index(b"\n...\n", half) + 1) + 5
    cuts = [half, second_event_end - 7, len(data)]  # the 2nd read ends inside an event
    got, start, started = [], 0, time.monotonic()
    for cut in cuts:
        _append(log, data[start:cut])
        start = cut
        got += [_key(e) for e in reader.read()]
    assert time.monotonic() - started < 5  # a half-written event never stalls the reader
    assert got == expected
    assert reader.pending_bytes == 0 and reader.read() == []


@pytest.mark.slow
def test_every_cut_position_gives_the_same_events(tmp_path: Path) -> None:
    name = "lsst_tiny_problems.nodes.log"
    data = (EVENTLOG / name).read_bytes()
    expected = _reference_events(name, 0.0)
    log = tmp_path / name
    for cut in range(0, len(data), 11):
        log.write_bytes(data[:cut])
        reader = EventLogReader(log, year_reference=0.0)
        first = [_key(e) for e in reader.read()]
        _append(log, data[cut:])
        assert first + [_key(e) for e in reader.read()] == expected, f"cut at byte {cut}"


def test_persisted_checkpoint_resumes_without_double_counting(tmp_path: Path) -> None:
    name = "icecube_held_aborted_job.log"
    data = (EVENTLOG / name).read_bytes()
    log = tmp_path / name
    log.write_bytes(data[: len(data) // 3])
    os.utime(log, (1572609600, 1572609600))  # 2019-11-01: the year of the yearless stamps
    first = EventLogFollower(log, job_ids="cluster-proc")
    before = first.poll()
    saved = json.dumps(first.checkpoint())  # what the daemon would store
    _append(log, data[len(data) // 3 :])
    resumed = EventLogFollower(log, checkpoint=json.loads(saved), job_ids="cluster-proc")
    after = resumed.poll()
    whole = EventLogFollower(EVENTLOG / name, job_ids="cluster-proc", year_reference=1572609600).poll()
    assert before + after == whole
    assert resumed.poll() == []
    assert resumed.problems.messages == []


def test_truncated_log_is_read_again_with_a_warning(tmp_path: Path) -> None:
    log = tmp_path / "nodes.log"
    data = (EVENTLOG / "lsst_tiny_problems.nodes.log").read_bytes()
    log.write_bytes(data)
    problems = Problems()
    reader = EventLogReader(log, problems=problems)
    assert len(reader.read()) == 20
    with open(log, "r+b") as f:  # same inode, shorter file
        f.truncate(0)
        f.write(data[: data.index(b"\n...\n") + 5])
    assert [e.type for e in reader.read()] == ["SUBMIT"]
    (message,) = problems.messages
    assert message.startswith(f"{log}:") and "was truncated" in message and "from the start" in message


def test_rotated_log_is_detected_by_its_inode(tmp_path: Path) -> None:
    log = tmp_path / "nodes.log"
    data = (EVENTLOG / "lsst_tiny_problems.nodes.log").read_bytes()
    log.write_bytes(data)
    problems = Problems()
    reader = EventLogReader(log, problems=problems)
    reader.read()
    os.rename(log, tmp_path / "nodes.log.old")
    log.write_bytes(data + data[:50])  # a new, longer file at the same path
    assert len(reader.read()) == 20
    assert "inode changed" in problems.messages[0]


def test_rewritten_log_is_detected_by_the_bytes_before_the_offset(tmp_path: Path) -> None:
    log = tmp_path / "nodes.log"
    data = (EVENTLOG / "lsst_tiny_problems.nodes.log").read_bytes()
    log.write_bytes(data)
    problems = Problems()
    reader = EventLogReader(log, problems=problems)
    reader.read()
    node = data.rindex(b"finalJob")
    with open(log, "r+b") as f:  # same inode and size, different bytes just before the offset
        f.seek(node)
        f.write(b"finalJoe")
    assert len(reader.read()) == 20
    assert "rewritten before the read position" in problems.messages[0]


def test_missing_log_waits_with_one_warning(tmp_path: Path) -> None:
    log = tmp_path / "later.log"
    problems = Problems()
    reader = EventLogReader(log, problems=problems)
    assert reader.read() == [] and reader.read() == []
    assert problems.messages == [f"{log}: not found (yet); waiting for it"]
    log.write_bytes((EVENTLOG / "lsst_tiny_problems.nodes.log").read_bytes())
    assert len(reader.read()) == 20


def test_checkpoint_round_trip_and_validation() -> None:
    checkpoint = EventLogCheckpoint(ReadPosition(offset=10, line=2, inode=5, size=10, tail_crc=7))
    assert EventLogCheckpoint.from_dict(json.loads(json.dumps(checkpoint.to_dict()))) == checkpoint
    with pytest.raises(ValueError, match="offset"):
        ReadPosition.from_dict({"offset": -1})


def test_jobstate_log_read_in_pieces(tmp_path: Path) -> None:
    source = (SUBMIT / "process_wf_failure" / "jobstate.log").read_bytes()
    whole = JobstateReader(SUBMIT / "process_wf_failure" / "jobstate.log").read()
    assert len(whole) == 25
    log = tmp_path / "jobstate.log"
    log.write_bytes(source[:100])
    reader = JobstateReader(log)
    got = reader.read()
    _append(log, source[100:1000])
    got += reader.read()
    resumed = JobstateReader(log, ReadPosition.from_dict(reader.position.to_dict()))
    _append(log, source[1000:])
    got += resumed.read()
    assert got == whole
