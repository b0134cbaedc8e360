"""Incremental reader of an HTCondor job event log (``<wf>-0.log``, ``*.dag.nodes.log``).

Parsing is done by the real library, ``htcondor2.JobEventLog`` (pip package
``htcondor``). What we add around it, and why:

* **Framing.** An event ends with a line ``...``. Each call reads the bytes
  appended since the saved position (``position.AppendedReader``), cuts them
  after the last ``...`` line, and hands only those complete events to
  JobEventLog through a private temporary file. We do not point JobEventLog at
  the live file, because with htcondor 25.14 a half-written last event makes
  its iterator sleep a whole second per call, and an event header cut after its
  first bytes (e.g. ``00``) is consumed and the log then yields nothing more.
  Framing ourselves keeps a half-written event on disk for the next call.
* **Resuming.** JobEventLog keeps its own file offset; it can only be carried
  over through pickling, which needs an identical file. Our own byte offset
  (plus inode, size and a CRC of the bytes before it) is enough instead: the
  events of one call are parsed from a fresh JobEventLog over just the new
  bytes, so a restarted reader given the saved ``EventLogCheckpoint`` resumes
  exactly after the last event it returned -- no event is read twice.
* **Bad events.** A stretch between two ``...`` lines with no event header line
  (``NNN (cluster.proc.sub) date time``) is skipped with a warning before
  JobEventLog sees it, and so are junk lines before a header. JobEventLog raises on an event it cannot parse
  (after retrying it for about a second: HTCondor's reader assumes a writer
  may still be busy) and goes on with the next one; we turn that into one
  warning (file and line) and skip it.
* **Never waiting.** We ask JobEventLog for events with a deadline already
  past: with ``stop_after=0`` the bindings still sleep a second at the end of
  the data whenever the clock turns a second meanwhile.
* **Times**: see ``eventtime`` (year-less stamps, UTC stamps, sub-seconds).
"""

from __future__ import annotations

import contextlib
import os
import re
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import htcondor2

from wire_daemon.monitor.eventtime import TimeFormatError, YearGuess, event_time, is_yearless
from wire_daemon.monitor.position import AppendedReader, Chunk, ReadPosition
from wire_daemon.monitor.problems import Problems

# An event ends with a line "..." (CRLF tolerated); the header starts the next one.
_END = re.compile(rb"(?:^|\n)\.\.\.\r?\n")
_HEADER = re.compile(rb"(?m)^\d{3} \([^)\n]*\) (?:\d{1,2}/\d{1,2}|\d{4}-\d{2}-\d{2})[ T]\d{1,2}:\d{2}:\d{2}")
_DAG_NODE = re.compile(r"DAG Node:\s*(\S+)")
# ``events(stop_after=0)`` sets a deadline of "now" in whole seconds, and the bindings
# sleep a second at the end of the data when the clock turns a second meanwhile;
# a deadline already past never waits.
_NEVER_WAIT = -2
_MIB = 1 << 20
_KIB = 1 << 10


@dataclass(frozen=True)
class LogEvent:
    """One job event as read from the log, before it is mapped to a task."""

    type: str  # htcondor2.JobEventType name: SUBMIT, EXECUTE, JOB_TERMINATED, ...
    cluster: int
    proc: int
    time: float  # seconds since the epoch (see eventtime)
    line: int = 0  # 1-based line of the event's header (approximate after a bad event)
    node: str | None = None  # DAG node name, from the submit event's notes
    host: str | None = None  # EXECUTE: ExecuteHost; disconnect events: StartdAddr
    return_value: int | None = None  # JOB_TERMINATED, normal termination
    signal: int | None = None  # JOB_TERMINATED, killed by a signal
    memory_bytes: int | None = None  # IMAGE_SIZE / JOB_TERMINATED memory use
    transfer: str | None = None  # FILE_TRANSFER: IN_QUEUED ... OUT_FINISHED
    reason: str | None = None  # hold / abort / shadow exception / reconnect failure text
    hold_code: int | None = None
    hold_subcode: int | None = None


@dataclass
class EventLogCheckpoint:
    """What a reader needs to resume: read position and the year guess of yearless logs."""

    position: ReadPosition = field(default_factory=ReadPosition)
    years: YearGuess = field(default_factory=YearGuess)

    def to_dict(self) -> dict[str, Any]:
        return {"position": self.position.to_dict(), "years": self.years.to_dict()}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> EventLogCheckpoint:
        return cls(ReadPosition.from_dict(data.get("position", {})), YearGuess.from_dict(data.get("years", {})))


class EventLogReader:
    """``read()`` returns the events completed since the previous call."""

    def __init__(
        self,
        path: str | os.PathLike[str],
        checkpoint: EventLogCheckpoint | None = None,
        problems: Problems | None = None,
        year_reference: float | None = None,
    ) -> None:
        checkpoint = checkpoint or EventLogCheckpoint()
        self.path = os.fspath(path)
        self.problems = problems or Problems()
        self._bytes = AppendedReader(self.path, checkpoint.position, self.problems)
        self._years = YearGuess(checkpoint.years.year, checkpoint.years.last)
        self._year_reference = year_reference
        self.pending_bytes = 0  # bytes of a half-written event waiting for the next call
        self.events_read = 0

    def checkpoint(self) -> EventLogCheckpoint:
        return EventLogCheckpoint(self._bytes.position, YearGuess(self._years.year, self._years.last))

    def read(self) -> list[LogEvent]:
        chunk = self._bytes.read()
        if chunk is None:
            return []
        segments, complete = _split_events(chunk.data, chunk.start.line + 1)
        self.pending_bytes = len(chunk.data) - complete
        if complete == 0:
            return []
        try:
            events = list(self._parse(chunk, segments))
        except Exception as exc:  # the temporary copy or the library failed as a whole: nothing consumed
            self.problems.warn(
                self.path, f"events not read this time ({type(exc).__name__}: {exc}); will retry", chunk.start.line + 1
            )
            return []
        self._bytes.commit(chunk, complete)
        self.events_read += len(events)
        return events

    # -- internals ------------------------------------------------------------

    def _parse(self, chunk: Chunk, segments: list[tuple[int, bytes]]) -> Iterator[LogEvent]:
        good = [event for event in map(self._trim, segments) if event is not None]
        if not good:
            return
        lines = [line for line, _ in good]
        data = b"".join(data for _, data in good)
        reference = self._year_reference if self._year_reference is not None else chunk.mtime
        clock = (is_yearless(data), reference)
        with _staged(data) as staged:
            log = htcondor2.JobEventLog(staged)
            try:
                yield from self._iterate(log, lines, clock)
            finally:
                log.close()

    def _trim(self, segment: tuple[int, bytes]) -> tuple[int, bytes] | None:
        """The event of one stretch ending in ``...``, from its header line on (None if it has none)."""
        line, data = segment
        header = _HEADER.search(data)
        if header is None:
            if data.strip(b"\r\n.\t "):
                self.problems.warn(self.path, "not a job event (no event header); skipped", line)
            return None
        if header.start() > 0:
            if data[: header.start()].strip():
                self.problems.warn(self.path, "junk before an event header skipped", line)
            line += data.count(b"\n", 0, header.start())
        return line, data[header.start() :]

    def _iterate(self, log: Any, lines: list[int], clock: tuple[bool, float]) -> Iterator[LogEvent]:
        done = 0  # events consumed, good or bad (indexes ``lines``; approximate after a bad one)
        errors = 0
        iterator = log.events(stop_after=_NEVER_WAIT)
        while errors <= len(lines):  # bounded even if the library kept failing
            line = lines[min(done, len(lines) - 1)]
            done += 1
            try:
                raw = next(iterator)
            except StopIteration:
                return
            except Exception as exc:  # htcondor2 raises HTCondorException (ULOG_RD_ERROR) and friends
                errors += 1
                self.problems.warn(self.path, f"unreadable job event skipped ({exc})", f"~{line}")
                continue
            event = self._convert(raw, line, clock)
            if event is not None:
                yield event

    def _convert(self, raw: Any, line: int, clock: tuple[bool, float]) -> LogEvent | None:
        try:
            kind = raw.type.name
            when = event_time(raw, clock[0], self._years, clock[1])
        except (TimeFormatError, ValueError, KeyError, TypeError) as exc:
            self.problems.warn(self.path, f"job event skipped: {exc}", f"~{line}")
            return None
        cluster, proc = _int(raw.get("Cluster")), _int(raw.get("Proc"))
        return LogEvent(
            type=kind,
            cluster=-1 if cluster is None else cluster,
            proc=-1 if proc is None else proc,
            time=when,
            line=line,
            **_details(kind, raw),
        )


def _details(kind: str, raw: Any) -> dict[str, Any]:
    extract = _EXTRACTORS.get(kind)
    return extract(raw) if extract else {}


def _submit(raw: Any) -> dict[str, Any]:
    return {"node": _dag_node(raw)}


def _execute(raw: Any) -> dict[str, Any]:
    return {"host": _str(raw.get("ExecuteHost"))}


def _terminated(raw: Any) -> dict[str, Any]:
    normal = raw.get("TerminatedNormally")
    out: dict[str, Any] = {"memory_bytes": _memory(raw)}
    if normal is False:
        out["signal"] = _int(raw.get("TerminatedBySignal"))
    else:
        out["return_value"] = _int(raw.get("ReturnValue"))
    return out


def _image_size(raw: Any) -> dict[str, Any]:
    return {"memory_bytes": _memory(raw)}


def _held(raw: Any) -> dict[str, Any]:
    return {
        "reason": _str(raw.get("HoldReason")),
        "hold_code": _int(raw.get("HoldReasonCode")),
        "hold_subcode": _int(raw.get("HoldReasonSubCode")),
    }


def _reason(key: str) -> Any:
    return lambda raw: {"reason": _str(raw.get(key))}


def _disconnect(raw: Any) -> dict[str, Any]:
    return {"host": _str(raw.get("StartdAddr")), "reason": _str(raw.get("Reason") or raw.get("DisconnectReason"))}


def _file_transfer(raw: Any) -> dict[str, Any]:
    code = _int(raw.get("Type"))
    try:
        name = htcondor2.FileTransferEventType(code).name if code is not None else None
    except ValueError:
        name = None
    return {"transfer": name, "host": _str(raw.get("Host"))}


_EXTRACTORS = {
    "SUBMIT": _submit,
    "EXECUTE": _execute,
    "JOB_TERMINATED": _terminated,
    "IMAGE_SIZE": _image_size,
    "JOB_HELD": _held,
    "JOB_ABORTED": _reason("Reason"),
    "SHADOW_EXCEPTION": _reason("Message"),
    "JOB_RECONNECT_FAILED": _disconnect,
    "JOB_DISCONNECTED": _disconnect,
    "FILE_TRANSFER": _file_transfer,
}


def _dag_node(raw: Any) -> str | None:
    notes = raw.get("StructuredNotes")
    if notes is not None:
        try:
            name = notes.get("DAGNodeName")
        except AttributeError:
            name = None
        if isinstance(name, str) and name:
            return name
    match = _DAG_NODE.search(_str(raw.get("LogNotes")) or "")
    return match.group(1) if match else None


def _memory(raw: Any) -> int | None:
    """Resident memory in bytes: ResidentSetSize (KiB) if given, else MemoryUsage (MiB)."""
    rss = _int(raw.get("ResidentSetSize"))
    if rss is not None and rss > 0:
        return rss * _KIB
    usage = _int(raw.get("MemoryUsage"))
    return usage * _MIB if usage is not None and usage > 0 else None


def _int(value: Any) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return None


def _str(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None


def _split_events(data: bytes, first_line: int) -> tuple[list[tuple[int, bytes]], int]:
    """Complete events (first line number, bytes incl. the ``...`` line) and their total length."""
    segments: list[tuple[int, bytes]] = []
    start = 0
    line = first_line
    for match in _END.finditer(data):
        end = match.end()
        segments.append((line, data[start:end]))
        line += data.count(b"\n", start, end)
        start = end
    return segments, start


class _staged:
    """A private temporary file holding complete events for JobEventLog."""

    def __init__(self, data: bytes) -> None:
        self._data = data
        self._path = ""

    def __enter__(self) -> str:
        fd, self._path = tempfile.mkstemp(prefix="wire-eventlog-", suffix=".log")
        with os.fdopen(fd, "wb") as f:
            f.write(self._data)
        return self._path

    def __exit__(self, *exc: Any) -> None:
        with contextlib.suppress(OSError):
            os.unlink(self._path)
