"""The event screen (eventscreen) and the library in a worker process (eventparse), as the reader uses them."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Generator
from pathlib import Path

import pytest

from wire_daemon.monitor.eventlog import EventLogReader, _split_events
from wire_daemon.monitor.eventparse import InProcessParser, IsolatedParser, Parsed, ParserUnavailable
from wire_daemon.monitor.eventscreen import ScreenError, screen
from wire_daemon.monitor.problems import Problems

from . import condor_log_text as condor
from .conftest import EVENTLOG, FIXTURES

GOOD = condor.submit(1, 1716400000, "a").encode()
CRASH = b"014 (12.0.0) 2024-05-22 18:28:20 Node 0 executing on\x00host: <1.2.3.4:9618>\n...\n"
UNREADABLE = b"000 (012.000.000) 2024-05-22 18:28:20 Job subm?tted from host: <1.2.3.4:9618>\n...\n"
LOGS = sorted(p for p in FIXTURES.rglob("*.log") if b"\n...\n" in p.read_bytes())


def test_a_crash_in_the_library_costs_that_event_only() -> None:
    parser = IsolatedParser()
    try:
        good, crash, after = parser.parse([GOOD, CRASH, GOOD])  # CRASH unscreened: straight to the library
    finally:
        parser.close()
    assert good.events and after.events and not crash.events
    assert crash.lost and crash.error == "the event parser crashed (SIGSEGV) on this event"
    assert (parser.starts, parser.lost) == (2, 1)


def test_an_event_that_stalls_the_library_is_cut_at_the_budget() -> None:
    parser = IsolatedParser(event_budget_s=0.3)
    start = time.monotonic()
    try:
        results = parser.parse([GOOD, UNREADABLE, GOOD])  # the library would sleep a second on it
    finally:
        parser.close()
    assert time.monotonic() - start < 1.0
    assert [bool(r.events) for r in results] == [True, False, True]
    assert results[1].lost and "made no progress for 0.3 s" in (results[1].error or "")


def test_a_worker_stopped_from_outside_is_not_blamed_on_an_event() -> None:
    parser = IsolatedParser()
    try:
        parser.parse([GOOD])
        assert parser._proc is not None
        os.kill(parser._proc.pid, signal.SIGTERM)  # a service stop, say: between two calls
        parser._proc.wait()
        assert parser.parse([GOOD])[0].events  # a new worker, nothing lost
        got = []
        answers = parser.parse_iter([GOOD] * 5000)
        got.append(next(answers))
        os.kill(parser._proc.pid, signal.SIGKILL)  # and in the middle of a call
        try:
            got += list(answers)  # completes only if the worker had answered all it was sent
        except ParserUnavailable as exc:
            assert "stopped from outside (SIGKILL)" in str(exc) or "went away" in str(exc)
        assert got and not any(r.lost for r in got)
    finally:
        parser.close()
    assert parser.lost == 0


def test_the_worker_and_the_library_in_process_agree() -> None:
    events = [data for _, _, data in _split_events((EVENTLOG / "icecube_held_aborted_job.log").read_bytes(), 1)[0]]
    isolated = IsolatedParser()
    try:
        assert [p.events for p in isolated.parse(events)] == [p.events for p in InProcessParser().parse(events)]
    finally:
        isolated.close()


@pytest.mark.parametrize("log", LOGS, ids=lambda p: p.name)
def test_every_fixture_event_passes_the_screen_and_its_header_time_is_the_librarys(log: Path) -> None:
    segments, _ = _split_events(log.read_bytes(), 1)
    screened = [screen(data) for _, _, data in segments if not data.startswith(b"...")]
    native = [s for s in screened if s.native]
    for item, parsed in zip(native, InProcessParser().parse([s.data for s in native])):
        (attributes,) = parsed.events
        library_time = attributes["EventTime"]
        if item.yearless:  # the library fills in the current year; we only give month and day
            assert library_time[4:] == item.event_time[4:]
        else:
            assert library_time == item.event_time


@pytest.mark.parametrize(
    "event, reason",
    [
        (CRASH, "control byte 0x00"),
        (b"000 (1.0.0) 2024-05-22 18:28:20 Job submitted from host: <" + b"x" * 2000 + b">\n...\n", "header line"),
        (b"000 (1.0.0) 5/22 18:28:20 Job submitted from host: <1.2.3.4:5>\n...\n", "not a job event header"),
        (b"000 (1.0.0) 2024-13-22 18:28:20 Job submitted from host: <1.2.3.4:5>\n...\n", "out of range"),
        (b"000 (1.0.0) 2024-05-22 18:28:20\n...\n", "not a job event header"),
        (UNREADABLE, "does not start with 'Job submitted from host: '"),
        (b"005 (1.0.0) 2024-05-22 18:28:20 Job terminated.\n\t(1) Normal termination (return value 0)\n...\n", "usage"),
        (
            b"005 (1.0.0) 2024-05-22 18:28:20 Job terminated.\n\t(1) Normal termination (return value 0)\n"
            + b"\t\tUsr 0 00:00:00, Sys 00:00:00  -  Run Remote Usage\n" * 4
            + b"...\n",
            "usage",  # "Sys 00:00:00" is one number short: sscanf would not read it
        ),
        (b"040 (1.0.0) 2024-05-22 18:28:20 Started transfering input files\n...\n", "file transfer step"),
        (
            b"024 (1.0.0) 2024-05-22 18:28:20 Job reconnection failed\n    too long\n    Can not reconnect to s\n...\n",
            "comma",
        ),
        (b"009 (1.0.0) 2024-05-22 18:28:20 Job was aborted.\n\tvia condor_rm\n\n...\n", "empty line"),
    ],
)
def test_the_screen_stops_what_the_library_cannot_read(event: bytes, reason: str) -> None:
    with pytest.raises(ScreenError, match=reason.replace("(", r"\(").replace(")", r"\)")):
        screen(event)


def test_events_of_types_the_daemon_does_not_read_are_taken_from_their_header() -> None:
    event = b"014 (12.0.0) 2024-05-22 18:28:20 Node 0\n...\n"  # cut: the library would crash on it
    passed = screen(event)
    assert (passed.native, passed.number, passed.cluster, passed.event_time) == (False, 14, 12, "2024-05-22T18:28:20")


@pytest.mark.slow
def test_a_read_stops_at_its_budget_and_the_next_goes_on(tmp_path: Path) -> None:
    whole = EventLogReader(EVENTLOG / "icecube_large_job.log").read()
    reader = EventLogReader(EVENTLOG / "icecube_large_job.log", read_budget_s=0.0)
    first = reader.read()
    assert 0 < len(first) < len(whole) and reader.pending_bytes > 0
    got = list(first)
    while reader.pending_bytes or not got:
        more = reader.read()
        if not more:
            break
        got += more
    assert got == whole


def test_a_parser_that_goes_away_mid_read_keeps_what_was_read(tmp_path: Path) -> None:
    log = tmp_path / "nodes.log"
    log.write_bytes((EVENTLOG / "lsst_tiny_problems.nodes.log").read_bytes())
    whole = EventLogReader(log).read()

    class GoesAway:
        def parse_iter(self, events: list[bytes], deadline: float | None = None) -> Generator[Parsed, None, None]:
            yield from InProcessParser().parse(events[:5])
            raise ParserUnavailable("the event parser was stopped from outside (SIGKILL)")

    problems = Problems()
    reader = EventLogReader(log, problems=problems, parser=GoesAway())
    first = reader.read()
    assert 5 <= len(first) < len(whole) and problems.messages == []
    reader._parser = InProcessParser()
    assert first + reader.read() == whole


def test_without_memfd_the_events_are_staged_in_a_private_directory_and_removed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delattr(os, "memfd_create")  # as on a system without it
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", None)  # so that it reads TMPDIR again
    results = InProcessParser().parse([GOOD, UNREADABLE.replace(b"?", b"i"), GOOD])
    assert all(r.events for r in results)
    assert list(tmp_path.iterdir()) == []
