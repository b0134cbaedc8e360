"""The job event parser (eventparse) against htcondor2's own reader, event by event.

htcondor2 is the reference: on every event of every real log, and on mangled
real events the parser accepts, the library (run here, in the test process)
reads the same type, job, time and values. What the parser rejects is what the
library would crash on or reject.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Any

import htcondor2
import pytest
from hypothesis import HealthCheck, given, settings

from wire_daemon.monitor.eventlog import EventLogReader, _split_events
from wire_daemon.monitor.eventparse import NATIVE_TYPES, EventFormatError, parse_event
from wire_lab.chaos.mutations import mangled_bytes

from .conftest import EVENTLOG, FIXTURES

CRASH = b"014 (12.0.0) 2024-05-22 18:28:20 Node 0 executing on\x00host: <1.2.3.4:9618>\n...\n"
UNREADABLE = b"000 (012.000.000) 2024-05-22 18:28:20 Job subm?tted from host: <1.2.3.4:9618>\n...\n"
LOGS = sorted(p for p in FIXTURES.rglob("*.log") if b"\n...\n" in p.read_bytes())
_NEVER_WAIT = -2  # the library's iterator: a deadline already past, so it never sleeps at the end of the data


def library_reads(event: bytes) -> dict[str, Any] | None:
    """The attributes htcondor2 reads from one event (None: it reads no event)."""
    fd, path = tempfile.mkstemp(suffix=".log")
    try:
        os.write(fd, event)
        os.close(fd)
        log = htcondor2.JobEventLog(path)
        try:
            raw = next(iter(log.events(stop_after=_NEVER_WAIT)), None)
        except Exception:  # an event it rejects (HTCondorException)
            return None
        finally:
            log.close()
        return None if raw is None else {key: raw.get(key) for key in raw}
    finally:
        os.unlink(path)


def library_values(number: int, ad: dict[str, Any]) -> dict[str, Any]:
    """The event's values as the daemon takes them from the library's attributes."""

    def text(key: str) -> str | None:
        value = ad.get(key)
        return value.strip() if isinstance(value, str) and value.strip() else None

    def memory() -> int | None:
        rss, usage = ad.get("ResidentSetSize"), ad.get("MemoryUsage")
        if isinstance(rss, int) and rss > 0:
            return rss * 1024
        return usage * 2**20 if isinstance(usage, int) and usage > 0 else None

    if number == 0:
        structured = ad.get("StructuredNotes")
        name = structured.get("DAGNodeName") if structured is not None else None
        notes = text("LogNotes") or ""
        if not name and "DAG Node:" in notes and notes.split("DAG Node:", 1)[1].split():
            name = notes.split("DAG Node:", 1)[1].split()[0]
        return {"node": name or None}
    if number == 1:
        return {"host": ad.get("ExecuteHost") or None}
    if number == 5:
        key = "return_value" if ad.get("TerminatedNormally") else "signal"
        value = ad.get("ReturnValue" if key == "return_value" else "TerminatedBySignal")
        return {key: value, "memory_bytes": memory()}
    if number == 6:
        return {"memory_bytes": memory()}
    if number in (7, 9):
        return {"reason": text("Message" if number == 7 else "Reason")}
    if number == 12:
        codes = {"hold_code": ad.get("HoldReasonCode"), "hold_subcode": ad.get("HoldReasonSubCode")}
        return {"reason": text("HoldReason"), **codes}
    if number == 22:
        return {"host": ad.get("StartdAddr") or None, "reason": text("DisconnectReason")}
    if number == 24:
        return {"host": None, "reason": text("Reason")}
    if number == 40:
        kind = htcondor2.FileTransferEventType(ad["Type"]).name
        return {"transfer": kind, "host": ad.get("Host") or None}
    return {}


def assert_same_as_library(event: bytes) -> None:
    ours = parse_event(event)
    ad = library_reads(event)
    assert ad is not None, f"the library reads no event from {event!r}"
    job = (ad.get("Cluster", -1), ad.get("Proc", -1))  # the library leaves a negative job id out
    assert (ad["EventTypeNumber"], *job) == (ours.number, ours.cluster, ours.proc)
    if ours.yearless:  # the library fills in the current year; the reader guesses it (eventtime)
        assert ad["EventTime"][4:] == ours.event_time[4:]
    else:
        assert ad["EventTime"] == ours.event_time
    if ours.native and not ours.out_of_range:
        assert ours.details == library_values(ours.number, ad), event


def _events(log: Path) -> list[bytes]:
    segments, _ = _split_events(log.read_bytes(), 1)
    return [data for _, _, data in segments if not data.startswith(b"...")]


@pytest.mark.parametrize("log", LOGS, ids=lambda p: p.name)
def test_every_event_of_every_real_log_reads_as_the_library_reads_it(log: Path) -> None:
    for event in _events(log):
        assert_same_as_library(event)


SEEDS = [e for log in ("icecube_held_aborted_job.log", "naudzyk_filetransfer_job.log") for e in _events(EVENTLOG / log)]
SEEDS += [e for e in _events(EVENTLOG / "htcondor_test_condor.log") if int(e[:3]) in NATIVE_TYPES][:80]


EXAMPLES = int(os.environ.get("WIRE_FUZZ_EXAMPLES", "150"))


@settings(max_examples=EXAMPLES, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(mangled_bytes(SEEDS, [b"\x00", b"\xff", b"...\n", b"\n", b" ", b"99999999999", b"-1", b"\t"]))
def test_a_mangled_event_the_parser_accepts_reads_as_the_library_reads_it(event: bytes) -> None:
    segments, _ = _split_events(event if event.endswith(b"\n...\n") else event + b"\n...\n", 1)
    if not segments or not segments[0][2][:3].isdigit():
        return
    try:
        parsed = parse_event(segments[0][2])
    except EventFormatError:
        return
    if parsed.native and not parsed.repaired:  # the library cannot hand non-UTF-8 text to Python
        assert_same_as_library(segments[0][2])


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
def test_what_the_library_cannot_read_is_rejected_with_the_reason(event: bytes, reason: str) -> None:
    with pytest.raises(EventFormatError, match=reason.replace("(", r"\(").replace(")", r"\)")):
        parse_event(event)


def test_events_of_types_the_daemon_does_not_read_are_taken_from_their_header() -> None:
    event = b"014 (12.0.0) 2024-05-22 18:28:20 Node 0\n...\n"  # cut: the library would crash on it
    parsed = parse_event(event)
    assert (parsed.native, parsed.number, parsed.cluster, parsed.event_time) == (False, 14, 12, "2024-05-22T18:28:20")


def test_a_negative_status_is_no_value_and_one_beyond_32_bits_is_out_of_range() -> None:
    usage = b"\t\tUsr 0 00:00:00, Sys 0 00:00:00  -  Run Remote Usage\n" * 4
    normal = b"005 (1.0.0) 2024-05-22 18:28:20 Job terminated.\n\t(1) Normal termination (return value %s)\n"
    negative = parse_event(normal % b"-1" + usage + b"...\n")
    assert negative.details["return_value"] is None and negative.out_of_range == ()
    huge = parse_event(normal % b"99999999999" + usage + b"...\n")
    assert huge.details["return_value"] is None and huge.out_of_range == ("return_value",)


def test_a_read_stops_at_its_budget_and_the_next_goes_on() -> None:
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


_TERMINATED = (
    "005 (1.0.0) 2025-05-03 04:12:49 Job terminated.\n\t(1) Normal termination (return value 0)\n"
    + "\t\tUsr 0 00:00:00, Sys 0 00:00:00  -  Run Remote Usage\n" * 4
)


@pytest.mark.parametrize(
    "event",
    [
        # the resource table's Usage column ends where the header's first label does, whatever it says
        _TERMINATED
        + "\tPartitionable Resoursk (KB)    :        1    10240\n\t   Memory (MB)  :        7       10\n...\n",
        _TERMINATED + "\tPartitionable Resources :    Usage  Request\n\t   Memory (MB) :      777777       10\n...\n",
        # the last "DAG Node: " line names the node; other notes do not
        "000 (1.0.0) 2025-05-03 04:12:49 Job submitted from host: <1.2.3.4:5>\nx\ny\n  DAG Node: Q\n...\n",
        # HTCondor 25 names the node in structured notes, a ClassAd on the first line
        "000 (2.0.0) 2026-11-26 23:50:55 Job submitted from host: <127.0.0.1:17275?addrs=127.0.0.1-17275>\n"
        '    [ DAGNodeName = "first_ID0000001"; JobBatchName = "weather-0" ]\n    pool:condorpool\n...\n',
        # image sizes are read up to the first line that is not a size the reader knows
        "006 (1.0.0) 2025-05-03 04:12:49 Image size of job updated: 9\n\t7  -  Foo\n\t5  -  ResidentSetSize\n...\n",
        # a day past the end of the month rolls over; a negative job id reads as -1
        "001 (-5.-7.0) 2025-11-31 04:12:49 Job executing on host: <1.2.3.4:5>\n...\n",
    ],
)
def test_edge_cases_read_as_the_library_reads_them(event: str) -> None:
    assert_same_as_library(event.encode())
