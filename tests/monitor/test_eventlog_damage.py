"""A damaged job event log: impossible event times refused, NUL gaps of any length skipped, each with a warning."""

from __future__ import annotations

import time
import tracemalloc
from datetime import datetime
from pathlib import Path

import pytest

from wire_daemon.monitor.eventlog import (
    FUTURE_SLACK_S,
    PAST_SLACK_S,
    EventLogCheckpoint,
    EventLogReader,
)
from wire_daemon.monitor.position import DEFAULT_MAX_READ
from wire_daemon.monitor.problems import Problems

from . import condor_log_text as condor

NOW = float(int(time.time()))  # event stamps are whole seconds


def _reader(log: Path, problems: Problems, **kw) -> EventLogReader:
    return EventLogReader(log, problems=problems, **kw)


def test_an_event_dated_2099_is_refused_with_a_warning_naming_file_and_offset(tmp_path: Path) -> None:
    submit = condor.submit(1, NOW - 600, "a")
    future = condor.execute(1, datetime(2099, 1, 1, 12).timestamp())
    log = tmp_path / "wf.dag.nodes.log"
    log.write_text(submit + future + condor.terminated(1, NOW - 60))
    problems = Problems()
    events = _reader(log, problems).read()
    assert [e.type for e in events] == ["SUBMIT", "JOB_TERMINATED"]
    (warning,) = problems.messages
    assert warning.startswith(f"{log}:4 (byte {len(submit)}): EXECUTE event dated 2099-01-01T")
    assert "refused: more than 24 h after the clock" in warning


def test_the_future_is_measured_from_the_clock_with_a_day_of_slack(tmp_path: Path) -> None:
    log = tmp_path / "wf.dag.nodes.log"
    log.write_text(
        condor.submit(1, NOW + FUTURE_SLACK_S - 3600, "a") + condor.submit(2, NOW + FUTURE_SLACK_S + 3600, "b")
    )
    problems = Problems()
    assert [e.cluster for e in _reader(log, problems, clock=lambda: NOW).read()] == [1]
    assert len(problems.messages) == 1


def test_an_event_long_before_the_logs_first_is_refused_and_the_first_is_kept_across_a_restart(
    tmp_path: Path,
) -> None:
    log = tmp_path / "wf.dag.nodes.log"
    first = NOW - 3 * 86400
    log.write_text(condor.submit(1, first, "a") + condor.submit(2, first - PAST_SLACK_S + 60, "b"))
    problems = Problems()
    reader = _reader(log, problems)
    assert [e.cluster for e in reader.read()] == [1, 2]  # an hour or so out of order: kept
    saved = EventLogCheckpoint.from_dict(reader.checkpoint().to_dict())
    assert saved.first_time == first
    with open(log, "a") as f:
        f.write(condor.submit(3, first - PAST_SLACK_S - 60, "c") + condor.submit(4, first + 60, "d"))
    resumed = _reader(log, problems, checkpoint=saved)
    assert [e.cluster for e in resumed.read()] == [4]
    (warning,) = problems.messages
    assert "SUBMIT event dated" in warning and "more than 24 h before the log's first event" in warning
    assert resumed.events_skipped == 1


def test_an_event_from_a_clock_reset_to_the_epoch_is_refused_even_first(tmp_path: Path) -> None:
    log = tmp_path / "wf.dag.nodes.log"
    log.write_text(condor.submit(1, 86400 * 2, "a") + condor.submit(2, NOW - 60, "b"))
    problems = Problems()
    reader = _reader(log, problems)
    assert [e.cluster for e in reader.read()] == [2]
    assert "before 2000-01-01T00:00:00Z" in problems.messages[0]
    assert reader.checkpoint().first_time == NOW - 60  # a refused event never becomes the first


def test_yearless_stamps_are_not_checked_against_the_first_event(tmp_path: Path) -> None:
    # A yearless log whose stamps go back by months: the year guess decides, as before.
    text = (
        "000 (001.000.000) 03/20 21:04:58 Job submitted from host: <1.2.3.4:5>\n...\n"
        "000 (002.000.000) 12/29 22:12:22 Job submitted from host: <1.2.3.4:5>\n...\n"
    )
    log = tmp_path / "old.log"
    log.write_text(text)
    problems = Problems()
    assert [e.cluster for e in _reader(log, problems).read()] == [1, 2]
    assert problems.messages == []


# -- NUL gaps ----------------------------------------------------------------------------------


def _sparse_log(path: Path, before: str, gap: int, after: str) -> int:
    """``before``, then a hole of ``gap`` bytes (reads as NULs, takes no disk), then ``after``."""
    with open(path, "wb") as f:
        f.write(before.encode())
        f.truncate(len(before.encode()) + gap)
        f.seek(0, 2)
        f.write(after.encode())
    return len(before.encode())


@pytest.mark.slow  # reads a 64 MiB chunk
def test_a_nul_run_longer_than_the_read_chunk_is_skipped_with_one_warning(tmp_path: Path) -> None:
    log = tmp_path / "wf.dag.nodes.log"
    before = condor.submit(1, NOW - 600, "a")
    after = condor.submit(2, NOW - 500, "b") + condor.execute(2, NOW - 400)
    gap = DEFAULT_MAX_READ + (3 << 20) + 123
    start = _sparse_log(log, before, gap, after)
    problems = Problems()
    reader = _reader(log, problems)
    tracemalloc.start()
    try:
        events = reader.read()
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert [(e.type, e.cluster) for e in events] == [("SUBMIT", 1), ("SUBMIT", 2), ("EXECUTE", 2)]
    assert problems.messages == [
        f"{log}:4 (byte {start}): bytes {start} to {start + gap} skipped: NUL bytes (a sparse or damaged log)"
    ]
    assert peak < DEFAULT_MAX_READ + (8 << 20)  # one read chunk at most: the run is measured block by block
    assert reader.read() == [] and problems.messages[1:] == []
    with open(log, "a") as f:
        f.write(condor.terminated(2, NOW - 300))
    assert [e.type for e in reader.read()] == ["JOB_TERMINATED"]


@pytest.mark.slow  # reads a 64 MiB chunk
def test_a_nul_run_at_the_start_of_the_log_hides_nothing(tmp_path: Path) -> None:
    log = tmp_path / "wf.dag.nodes.log"
    gap = DEFAULT_MAX_READ * 2 + 5
    _sparse_log(log, "", gap, condor.submit(7, NOW - 60, "x"))
    problems = Problems()
    assert [e.cluster for e in _reader(log, problems).read()] == [7]
    assert problems.messages == [f"{log}:1 (byte 0): bytes 0 to {gap} skipped: NUL bytes (a sparse or damaged log)"]


def test_a_short_nul_run_between_events_and_nuls_at_the_end_then_more_events(tmp_path: Path) -> None:
    log = tmp_path / "wf.dag.nodes.log"
    one, two = condor.submit(1, NOW - 600, "a"), condor.submit(2, NOW - 500, "b")
    log.write_bytes(one.encode() + b"\0" * 4096 + two.encode() + b"\0" * 100)
    problems = Problems()
    reader = _reader(log, problems)
    assert [e.cluster for e in reader.read()] == [1, 2]
    start, tail = len(one), len(one) + 4096 + len(two)
    assert problems.messages == [
        f"{log}:4 (byte {start}): bytes {start} to {start + 4096} skipped: NUL bytes",
        f"{log}:7 (byte {tail}): bytes {tail} to {tail + 100} skipped: NUL bytes (a sparse or damaged log)",
    ]
    with open(log, "a") as f:  # the writer goes on after the damage
        f.write(condor.execute(2, NOW - 400))
    assert [e.type for e in reader.read()] == ["EXECUTE"]


def test_a_half_written_event_after_a_nul_run_waits_for_its_end(tmp_path: Path) -> None:
    log = tmp_path / "wf.dag.nodes.log"
    event = condor.submit(3, NOW - 60, "c")
    log.write_bytes(b"\0" * 10 + event[:20].encode())
    problems = Problems()
    reader = _reader(log, problems)
    assert reader.read() == []
    assert len(problems.messages) == 1 and reader.pending_bytes == 20
    with open(log, "a") as f:
        f.write(event[20:])
    assert [e.cluster for e in reader.read()] == [3]
