"""Incremental reader of an HTCondor job event log (``<wf>-0.log``, ``*.dag.nodes.log``).

Parsing is done by the real library, ``htcondor2.JobEventLog`` (pip package
``htcondor``), but only on events that passed a screen, and never in this
process. What we add around it, and why:

* **Framing.** An event ends with a line ``...``. Each call reads the bytes
  appended since the saved position (``position.AppendedReader``) and cuts them
  after the last ``...`` line. A half-written last event stays on disk for the
  next call. We do not point JobEventLog at the live file: with htcondor 25.14
  a half-written last event makes its iterator sleep a whole second per call,
  and an event header cut after its first bytes is consumed and the log then
  yields nothing more.
* **Screening** (``eventscreen``). Each event is checked against what the
  library's reader insists on, in microseconds, before the library sees it:
  bytes (no NUL or control byte, a header line the library can hold, bytes that
  are not UTF-8 replaced by ``?``), a well-formed header, and for the event
  types we read the body of (``eventscreen.NATIVE_TYPES``) the lines that
  type's reader requires. An event that fails gives one warning (file, line,
  byte offset) and is skipped; the library would have crashed on it, or slept
  a second before rejecting it. Events of other types are taken from their
  header alone (type, job, time): the library never reads them.
* **Isolation** (``eventparse``). The library runs in a worker process. An
  event that crashes or hangs it anyway costs one warning and that event; the
  worker is started again for the next ones. With ``parser=`` a caller may
  pass another parser (``eventparse.InProcessParser`` for measurements).
  If no worker can run, nothing is consumed and the call warns; the next call
  tries again.
* **Bounded calls.** A call stops parsing after ``read_budget_s`` and returns
  what it has; the position is committed after the last event handled, so the
  next call goes on from there.
* **Resuming.** Our own byte offset (plus inode, size and a CRC of the bytes
  before it) is the position: a restarted reader given the saved
  ``EventLogCheckpoint`` resumes exactly after the last event it returned --
  no event is read twice.
* **Bad events.** A stretch between two ``...`` lines with no event header line
  is skipped with a warning, and so are junk lines before a header. An event
  the library rejects gives one warning and is skipped; a value out of range (a
  memory size beyond an exbibyte, a return value beyond 32 bits) gives one
  warning and the event goes on without it. One read gives at most 100 such
  warnings, then one line counting the rest (``problems.Limited``).
* **Times**: see ``eventtime`` (year-less stamps, UTC stamps, sub-seconds).
"""

from __future__ import annotations

import contextlib
import os
import re
import time
from collections.abc import Generator, Iterator
from dataclasses import dataclass, field
from typing import Any, Protocol

import htcondor2

from wire_daemon.monitor.eventparse import DAG_NODE_NAME, Parsed, ParserUnavailable, shared_parser
from wire_daemon.monitor.eventscreen import Screened, ScreenError, screen
from wire_daemon.monitor.eventtime import TimeFormatError, YearGuess, event_time
from wire_daemon.monitor.position import AppendedReader, Chunk, ReadPosition
from wire_daemon.monitor.problems import Limited, Problems

# An event ends with a line "..." (CRLF tolerated); the header starts the next one.
_END = re.compile(rb"(?:^|\n)\.\.\.\r?\n")
_HEADER = re.compile(rb"(?m)^[0-9]{3} \(")  # where an event starts (eventscreen checks the rest)
_DAG_NODE = re.compile(r"DAG Node:\s*(\S+)")
_MIB = 1 << 20
_KIB = 1 << 10
_MAX_BYTES = 1 << 60  # memory sizes beyond an exbibyte are corrupt values
_MAX_INT32 = 2**31 - 1
DEFAULT_READ_BUDGET_S = 30.0


class EventParser(Protocol):
    """What parses screened events (``eventparse.IsolatedParser``, ``InProcessParser``)."""

    def parse_iter(self, events: list[bytes], deadline: float | None = None) -> Generator[Parsed, None, None]: ...


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
        parser: EventParser | None = None,
        read_budget_s: float | None = DEFAULT_READ_BUDGET_S,
    ) -> None:
        checkpoint = checkpoint or EventLogCheckpoint()
        self.path = os.fspath(path)
        self.problems = problems or Problems()
        self._bytes = AppendedReader(self.path, checkpoint.position, self.problems)
        self._years = YearGuess(checkpoint.years.year, checkpoint.years.last)
        self._year_reference = year_reference
        self._parser = parser
        self.read_budget_s = read_budget_s
        self.pending_bytes = 0  # bytes not consumed yet: a half-written event, or what the budget left
        self.events_read = 0
        self.events_skipped = 0  # events given up on (screened out, rejected or lost by the library)

    def checkpoint(self) -> EventLogCheckpoint:
        return EventLogCheckpoint(self._bytes.position, YearGuess(self._years.year, self._years.last))

    def read(self) -> list[LogEvent]:
        chunk = self._bytes.read()
        if chunk is None:
            return []
        deadline = None if self.read_budget_s is None else time.monotonic() + self.read_budget_s
        with Limited(self.problems) as warn:  # a log of a million bad events: a hundred warnings and a count
            try:
                events, consumed = self._parse(chunk, deadline, warn)
            except ParserUnavailable as exc:  # raised before any event is converted: nothing consumed
                warn.warn(self.path, f"events not read this time ({exc}); will retry", chunk.start.line + 1)
                events, consumed = [], 0
        self._bytes.commit(chunk, consumed)
        self.pending_bytes = len(chunk.data) - consumed
        self.events_read += len(events)
        return events

    # -- internals ------------------------------------------------------------

    def _parse(self, chunk: Chunk, deadline: float | None, warn: Limited) -> tuple[list[LogEvent], int]:
        """The events of the complete segments, and how many bytes of the chunk they used up."""
        items: list[tuple[int, int, Screened]] = []  # line, offset in the chunk, the screened event
        complete = 0
        for line, start, end in _segments(chunk.data, chunk.start.line + 1):  # lazily: junk costs no memory
            complete = end
            item = self._screen(chunk, line, start, chunk.data[start:end], warn)
            if item is not None:
                items.append(item)
        native = [screened.data for _, _, screened in items if screened.native]
        reference = self._year_reference if self._year_reference is not None else chunk.mtime
        events: list[LogEvent] = []
        with contextlib.closing(self._native_parser().parse_iter(native, deadline)) as answers:
            for line, offset, screened in items:
                if screened.native:
                    try:
                        answer = next(answers, None)
                    except ParserUnavailable:
                        if not events and offset == items[0][1]:
                            raise  # nothing consumed: the caller warns and reads it all again
                        answer = None
                    if answer is None:  # the budget ran out, or the parser went away: go on from here
                        return events, offset
                    event = self._from_library(answer, screened, line, chunk.start.offset + offset, reference, warn)
                else:
                    event = self._from_header(screened, line, chunk.start.offset + offset, reference, warn)
                if event is not None:
                    events.append(event)
        return events, complete

    def _screen(
        self, chunk: Chunk, line: int, offset: int, data: bytes, warn: Limited
    ) -> tuple[int, int, Screened] | None:
        at = chunk.start.offset + offset
        header = _HEADER.search(data)
        if header is None:
            if data.strip(b"\r\n.\t "):
                self._skip(warn, "not a job event (no event header); skipped", line, at)
            return None
        if header.start() > 0:
            if data[: header.start()].strip():
                self._skip(warn, "junk before an event header skipped", line, at, count=False)
            line += data.count(b"\n", 0, header.start())
            offset += header.start()
            at += header.start()
            data = data[header.start() :]
        try:
            screened = screen(data)
        except ScreenError as exc:
            self._skip(warn, f"job event skipped: {exc}", line, at)
            return None
        if screened.repaired:
            warn.warn(self.path, "bytes that are not UTF-8 read as '?'", _place(line, at))
        return line, offset, screened

    def _skip(self, warn: Limited, message: str, line: int, offset: int, count: bool = True) -> None:
        self.events_skipped += count
        warn.warn(self.path, message, _place(line, offset))

    def _native_parser(self) -> EventParser:
        if self._parser is None:
            self._parser = shared_parser()
        return self._parser

    def _from_library(
        self, answer: Parsed, screened: Screened, line: int, offset: int, reference: float, warn: Limited
    ) -> LogEvent | None:
        if not answer.events:
            self._skip(warn, f"unreadable job event skipped ({answer.error or 'no event'})", line, offset)
            return None
        raw = answer.events[0]
        try:
            kind = _type_name(raw.get("EventTypeNumber"))
            when = event_time(raw, screened.yearless, self._years, reference)
        except (TimeFormatError, ValueError, KeyError, TypeError) as exc:
            self._skip(warn, f"job event skipped: {exc}", line, offset)
            return None
        cluster, proc = _int(raw.get("Cluster")), _int(raw.get("Proc"))
        details = _details(kind, raw)
        for name in [k for k, v in details.items() if v is _OUT_OF_RANGE]:
            warn.warn(self.path, f"{kind} event: {name} out of range; ignored", _place(line, offset))
            details[name] = None
        return LogEvent(
            type=kind,
            cluster=-1 if cluster is None else cluster,
            proc=-1 if proc is None else proc,
            time=when,
            line=line,
            **details,
        )

    def _from_header(
        self, screened: Screened, line: int, offset: int, reference: float, warn: Limited
    ) -> LogEvent | None:
        try:
            kind = _type_name(screened.number)
            when = event_time({"EventTime": screened.event_time}, screened.yearless, self._years, reference)
        except (TimeFormatError, ValueError) as exc:
            self._skip(warn, f"job event skipped: {exc}", line, offset)
            return None
        return LogEvent(type=kind, cluster=screened.cluster, proc=screened.proc, time=when, line=line)


def _place(line: int, offset: int) -> str:
    """Where an event is: its header's line and byte offset (``file:12 (byte 3456)``)."""
    return f"{line} (byte {offset})"


_TYPE_NAMES = {int(t.value): str(t.name) for t in htcondor2.JobEventType}


def _type_name(number: Any) -> str:
    if isinstance(number, bool) or not isinstance(number, int):
        raise ValueError(f"no event type number ({number!r})")
    name = _TYPE_NAMES.get(number)
    if name is None:
        raise ValueError(f"unknown event type {number:03d}")
    return name


_OUT_OF_RANGE: Any = object()  # a value read but beyond what it can mean (warned about, then None)


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
        out["signal"] = _int32(raw.get("TerminatedBySignal"))
    else:
        out["return_value"] = _int32(raw.get("ReturnValue"))
    return out


def _image_size(raw: Any) -> dict[str, Any]:
    return {"memory_bytes": _memory(raw)}


def _held(raw: Any) -> dict[str, Any]:
    return {
        "reason": _str(raw.get("HoldReason")),
        "hold_code": _int32(raw.get("HoldReasonCode")),
        "hold_subcode": _int32(raw.get("HoldReasonSubCode")),
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
    name = raw.get(DAG_NODE_NAME)  # from the submit event's StructuredNotes (HTCondor 23+)
    if isinstance(name, str) and name:
        return name
    match = _DAG_NODE.search(_str(raw.get("LogNotes")) or "")
    return match.group(1) if match else None


def _memory(raw: Any) -> Any:
    """Resident memory in bytes: ResidentSetSize (KiB) if given, else MemoryUsage (MiB)."""
    rss = _int(raw.get("ResidentSetSize"))
    if rss is not None and rss > 0:
        return rss * _KIB if rss * _KIB <= _MAX_BYTES else _OUT_OF_RANGE
    usage = _int(raw.get("MemoryUsage"))
    if usage is None or usage <= 0:
        return None
    return usage * _MIB if usage * _MIB <= _MAX_BYTES else _OUT_OF_RANGE


def _int32(value: Any) -> Any:
    number = _int(value)
    if number is not None and abs(number) > _MAX_INT32:
        return _OUT_OF_RANGE
    return number


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


def _segments(data: bytes, first_line: int) -> Iterator[tuple[int, int, int]]:
    """Complete events, as they come: (first line number, start, end incl. the ``...`` line)."""
    start = 0
    line = first_line
    for match in _END.finditer(data):
        end = match.end()
        yield line, start, end
        line += data.count(b"\n", start, end)
        start = end


def _split_events(data: bytes, first_line: int) -> tuple[list[tuple[int, int, bytes]], int]:
    """Complete events (first line number, offset, bytes incl. the ``...`` line) and their total length."""
    segments = [(line, start, data[start:end]) for line, start, end in _segments(data, first_line)]
    return segments, segments[-1][1] + len(segments[-1][2]) if segments else 0
