"""Incremental reader of an HTCondor job event log (``<wf>-0.log``, ``*.dag.nodes.log``).

Events are parsed by ``eventparse``, the native reader's grammar in Python, in
this process (why not the ``htcondor2`` library itself: see ``eventparse`` and
``docs/monitor.md``). What the reader adds around it, and why:

* **Framing.** An event ends with a line ``...``. Each call reads the bytes
  appended since the saved position (``position.AppendedReader``) and cuts them
  after the last ``...`` line. A half-written last event stays on disk for the
  next call.
* **Bounded calls.** A call stops parsing after ``read_budget_s`` and returns
  what it has; the position is committed after the last event handled, so the
  next call goes on from there.
* **Resuming.** Our own byte offset (plus inode, size and a CRC of the bytes
  before it) is the position: a restarted reader given the saved
  ``EventLogCheckpoint`` resumes exactly after the last event it returned --
  no event is read twice.
* **Bad events.** A stretch between two ``...`` lines with no event header line
  is skipped with a warning, and so are junk lines before a header. An event
  that does not parse gives one warning (file, line, byte offset) and is
  skipped; a value out of range (a memory size beyond an exbibyte, a return
  value beyond 32 bits) gives one warning and the event goes on without it.
  One read gives at most 100 such warnings, then one line counting the rest
  (``problems.Limited``).
* **NUL gaps.** A run of NUL bytes (a sparse file, or blocks a crash left
  unwritten) is skipped whatever its length, with one warning naming the byte
  range; the events after it are read. A run longer than what one call reads
  is measured on the file itself, block by block and jumping over holes
  (``SEEK_DATA``), never held in memory.
* **Impossible times.** An event dated more than ``FUTURE_SLACK_S`` after the
  clock, more than ``PAST_SLACK_S`` before the first event of its log, or
  before ``EARLIEST_EVENT`` is refused with a warning naming its place: one
  event dated 2099 must not steer the pool (see ``TimeBounds``).
* **Times**: see ``eventtime`` (year-less stamps, UTC stamps, sub-seconds).
"""

from __future__ import annotations

import errno
import os
import re
import stat
import time
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any

import htcondor2

from wire_daemon.monitor.eventparse import EventFormatError, ParsedEvent, parse_event
from wire_daemon.monitor.eventtime import TimeFormatError, YearGuess, event_time
from wire_daemon.monitor.position import TAIL_BYTES, AppendedReader, Chunk, ReadPosition
from wire_daemon.monitor.problems import Limited, Problems

# An event ends with a line "..." (CRLF tolerated); the header starts the next one.
_END = re.compile(rb"(?:^|\n)\.\.\.\r?\n")
_HEADER = re.compile(rb"(?m)^[0-9]{3} \(")  # where an event starts (eventparse checks the rest)
_HEADER_AFTER_GAP = re.compile(rb"[\r\n]*[0-9]{3} \(")  # an event header right after a NUL run
DEFAULT_READ_BUDGET_S = 30.0
_BUDGET_EVERY = 256  # events parsed between two looks at the clock
_SCAN_BLOCK = 1 << 20  # bytes looked at per read while measuring a NUL run
_MIN_TAIL_GAP = 16  # NUL bytes that end what was read and follow other bytes: a gap from this many on
_TAIL_GAP = b"\0" * _MIN_TAIL_GAP
_MAX_GAPS_PER_READ = 4  # NUL runs skipped past the chunk end in one call (each reads on after it)

FUTURE_SLACK_S = 24 * 3600.0
PAST_SLACK_S = 24 * 3600.0
EARLIEST_EVENT = datetime(2000, 1, 1, tzinfo=UTC).timestamp()


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
    """What a reader needs to resume: read position, the year guess of yearless logs, the log's first time."""

    position: ReadPosition = field(default_factory=ReadPosition)
    years: YearGuess = field(default_factory=YearGuess)
    first_time: float = 0.0  # time of the log's first accepted event (0: none yet)

    def to_dict(self) -> dict[str, Any]:
        return {"position": self.position.to_dict(), "years": self.years.to_dict(), "first_time": self.first_time}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> EventLogCheckpoint:
        first = data.get("first_time", 0.0)
        return cls(
            ReadPosition.from_dict(data.get("position", {})),
            YearGuess.from_dict(data.get("years", {})),
            float(first) if isinstance(first, (int, float)) and not isinstance(first, bool) else 0.0,
        )


@dataclass
class TimeBounds:
    """Which event times can be true, for one log.

    Thresholds (ours): an event may not be dated more than ``FUTURE_SLACK_S``
    (a day) after the clock -- a day covers a writer in another time zone and
    clock steps, and nothing can be logged before it happens; nor more than
    ``PAST_SLACK_S`` (a day) before the first event of its log -- a log is
    written in time order, events of different jobs a few seconds apart, and
    a local clock that steps back at the end of summer time moves an hour;
    nor before ``EARLIEST_EVENT`` (2000-01-01 UTC) -- what a clock reset to
    the epoch gives, and no log the daemon reads is that old. The first event
    is checked against the clock and the floor only; a refused event never
    becomes the first. Stamps without a year (``MM/DD``) are not checked
    against the first event: their year is our guess (``eventtime.YearGuess``),
    which on purpose puts a stamp written late, across New Year, up to half a
    year before its neighbours.
    """

    clock: Callable[[], float] = time.time
    first: float = 0.0

    def why_impossible(self, when: float, yearless: bool = False) -> str | None:
        now = self.clock()
        if when > now + FUTURE_SLACK_S:
            return f"more than {FUTURE_SLACK_S / 3600:g} h after the clock ({_iso(now)})"
        if when < EARLIEST_EVENT:
            return f"before {_iso(EARLIEST_EVENT)}"
        if self.first and not yearless and when < self.first - PAST_SLACK_S:
            return f"more than {PAST_SLACK_S / 3600:g} h before the log's first event ({_iso(self.first)})"
        if not self.first:
            self.first = when
        return None


def _iso(seconds: float) -> str:
    return datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class EventLogReader:
    """``read()`` returns the events completed since the previous call."""

    def __init__(
        self,
        path: str | os.PathLike[str],
        checkpoint: EventLogCheckpoint | None = None,
        problems: Problems | None = None,
        year_reference: float | None = None,
        read_budget_s: float | None = DEFAULT_READ_BUDGET_S,
        clock: Callable[[], float] = time.time,
    ) -> None:
        checkpoint = checkpoint or EventLogCheckpoint()
        self.path = os.fspath(path)
        self.problems = problems or Problems()
        self._bytes = AppendedReader(self.path, checkpoint.position, self.problems)
        self._years = YearGuess(checkpoint.years.year, checkpoint.years.last)
        self._bounds = TimeBounds(clock, checkpoint.first_time)
        self._year_reference = year_reference
        self.read_budget_s = read_budget_s
        self.pending_bytes = 0  # bytes not consumed yet: a half-written event, or what the budget left
        self.events_read = 0
        self.events_skipped = 0  # events given up on (unparseable, or an impossible time)

    def checkpoint(self) -> EventLogCheckpoint:
        years = YearGuess(self._years.year, self._years.last)
        return EventLogCheckpoint(self._bytes.position, years, self._bounds.first)

    def read(self) -> list[LogEvent]:
        deadline = None if self.read_budget_s is None else time.monotonic() + self.read_budget_s
        events: list[LogEvent] = []
        with Limited(self.problems) as warn:  # a log of a million bad events: a hundred warnings and a count
            for _ in range(_MAX_GAPS_PER_READ):
                if not self._read_chunk(deadline, warn, events):
                    break
        self.events_read += len(events)
        return events

    def _read_chunk(self, deadline: float | None, warn: Limited, events: list[LogEvent]) -> bool:
        """Read and parse one chunk; whether a NUL run reached its end (read on after the run).

        One chunk at a time: it is released before the next is read, so a read never holds two."""
        chunk = self._bytes.read()
        if chunk is None:
            return False
        consumed, stopped = self._parse(chunk, deadline, warn, events)
        gap = None if stopped else self._nul_gap(chunk, consumed, warn)
        chunk_end = chunk.start.offset + len(chunk.data)
        if gap is not None:
            consumed = min(gap[0], chunk_end) - chunk.start.offset
        self._bytes.commit(chunk, consumed)
        self.pending_bytes = len(chunk.data) - consumed
        if gap is None or gap[0] < chunk_end:
            return False
        if gap[0] > chunk_end:  # the run went on past this chunk: resume after it
            position = self._bytes.position
            self._bytes.position = replace(position, offset=gap[0], size=max(position.size, gap[0]), tail_crc=gap[1])
        return True

    # -- internals ------------------------------------------------------------

    def _parse(self, chunk: Chunk, deadline: float | None, warn: Limited, out: list[LogEvent]) -> tuple[int, bool]:
        """Append the events of the complete segments to ``out``; how many bytes of the chunk they used
        up, and whether the budget stopped the parse."""
        reference = self._year_reference if self._year_reference is not None else chunk.mtime
        complete = 0
        for count, (line, start, end) in enumerate(_segments(chunk.data, chunk.start.line + 1)):
            if count % _BUDGET_EVERY == 0 and count and _past(deadline):
                return complete, True
            complete = end
            event = self._event(chunk, line, start, chunk.data[start:end], reference, warn)
            if event is not None:
                out.append(event)
        return complete, False

    def _event(
        self, chunk: Chunk, line: int, offset: int, data: bytes, reference: float, warn: Limited
    ) -> LogEvent | None:
        at = chunk.start.offset + offset
        cut = data.rfind(b"\0") + 1
        if cut and _HEADER_AFTER_GAP.match(data, cut):  # NUL bytes, then an event: a gap, not a bad event
            first = data.index(b"\0")
            warn.warn(self.path, f"bytes {at + first} to {at + cut} skipped: NUL bytes", _place(line, at))
            line += data.count(b"\n", 0, cut)
            at += cut
            data = data[cut:]
        header = _HEADER.search(data)
        if header is None:
            if data.strip(b"\r\n.\t "):
                self._skip(warn, "not a job event (no event header); skipped", line, at)
            return None
        if header.start() > 0:
            if data[: header.start()].strip():
                self._skip(warn, "junk before an event header skipped", line, at, count=False)
            line += data.count(b"\n", 0, header.start())
            at += header.start()
            data = data[header.start() :]
        try:
            parsed = parse_event(data)
        except EventFormatError as exc:
            self._skip(warn, f"job event skipped: {exc}", line, at)
            return None
        if parsed.repaired:
            warn.warn(self.path, "bytes that are not UTF-8 read as '?'", _place(line, at))
        return self._log_event(parsed, line, at, reference, warn)

    def _log_event(
        self, parsed: ParsedEvent, line: int, offset: int, reference: float, warn: Limited
    ) -> LogEvent | None:
        try:
            kind = _type_name(parsed.number)
            when = event_time(parsed.event_time, parsed.yearless, self._years, reference)
        except (TimeFormatError, ValueError) as exc:
            self._skip(warn, f"job event skipped: {exc}", line, offset)
            return None
        why = self._bounds.why_impossible(when, parsed.yearless)
        if why:
            self._skip(warn, f"{kind} event dated {_iso(when)} refused: {why}", line, offset)
            return None
        for name in parsed.out_of_range:
            warn.warn(self.path, f"{kind} event: {name} out of range; ignored", _place(line, offset))
        return LogEvent(kind, parsed.cluster, parsed.proc, when, line, **parsed.details)

    def _skip(self, warn: Limited, message: str, line: int, offset: int, count: bool = True) -> None:
        self.events_skipped += count
        warn.warn(self.path, message, _place(line, offset))

    def _nul_gap(self, chunk: Chunk, consumed: int, warn: Limited) -> tuple[int, int] | None:
        """Skip the unconsumed bytes through their last NUL run, if it is a gap: (end offset, tail CRC).

        A gap is a run of NUL bytes followed by an event header, or one that reaches the end of what
        was read (all of the unconsumed bytes, or at least ``_MIN_TAIL_GAP`` of them): a sparse hole or
        blocks a crash left unwritten. No event holds a NUL byte, so what precedes the run can never
        complete into one. A run that reaches the end of the chunk is followed on the file to its end
        (the CRC is of the bytes before that end, for the read position; 0 when it ends inside the
        chunk). A stray NUL in other bytes is no gap: they wait, as any unfinished event does."""
        data = chunk.data
        last = data.rfind(b"\0", consumed)  # no copy: a chunk may be the whole read size of NULs
        if last < 0:
            return None
        if last < len(data) - 1:
            if not _HEADER_AFTER_GAP.match(data, last + 1):
                return None
        elif not (data.endswith(_TAIL_GAP) or data.count(b"\0", consumed) == len(data) - consumed):
            return None
        begin = chunk.start.offset + consumed
        end, tail = chunk.start.offset + last + 1, 0
        if last == len(data) - 1:
            end, tail = _nul_run_end(self.path, end)
        line = chunk.start.line + 1 + data.count(b"\n", 0, consumed)
        what = "NUL bytes" if data[consumed] == 0 else "an unfinished event and NUL bytes"
        warn.warn(self.path, f"bytes {begin} to {end} skipped: {what} (a sparse or damaged log)", _place(line, begin))
        return end, tail


def _nul_run_end(path: str, offset: int) -> tuple[int, int]:
    """Where the NUL run that reaches ``offset`` ends on the file, and the CRC of the (up to) 64 bytes
    before that end. Reads a block at a time and jumps over holes; a file that cannot be read now
    ends the run at ``offset`` (the next read goes on from there)."""
    try:
        fd = _open_log(path)
    except OSError:
        return offset, 0
    try:
        end = offset
        while True:
            try:
                data_at = os.lseek(fd, end, os.SEEK_DATA)  # a hole reads as NULs: jump over it
            except OSError as exc:  # ENXIO: nothing but a hole after ``end``; else no SEEK_DATA here: read on
                data_at = max(end, os.fstat(fd).st_size) if exc.errno == errno.ENXIO else end
            block = os.pread(fd, _SCAN_BLOCK, data_at)
            if not block:
                end = max(end, data_at)
                break
            kept = len(block.lstrip(b"\0"))
            end = data_at + len(block) - kept
            if kept:
                break
        start = max(0, end - TAIL_BYTES)
        return end, zlib.crc32(os.pread(fd, end - start, start))
    finally:
        os.close(fd)


def _open_log(path: str) -> int:
    """A descriptor on the log, for reading; only a regular file, and the open never blocks."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise OSError(f"{path}: not a regular file")
    return fd


def _past(deadline: float | None) -> bool:
    return deadline is not None and time.monotonic() > deadline


def _place(line: int, offset: int) -> str:
    """Where an event is: its header's line and byte offset (``file:12 (byte 3456)``)."""
    return f"{line} (byte {offset})"


# The names the daemon knows the event types by are htcondor2's.
_TYPE_NAMES = {int(t.value): str(t.name) for t in htcondor2.JobEventType}


def _type_name(number: int) -> str:
    name = _TYPE_NAMES.get(number)
    if name is None:
        raise ValueError(f"unknown event type {number:03d}")
    return name


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
