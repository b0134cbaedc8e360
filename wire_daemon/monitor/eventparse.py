"""Parse one job event of an HTCondor job event log: the grammar of the native reader, in Python.

The daemon reads the job event log with this parser alone. It follows what
HTCondor's own reader (``condor_event.cpp``/``read_user_log.cpp``, 25.x)
requires and takes from each event, line by line, for the event types whose
body the daemon uses (``NATIVE_TYPES``); what the native reader would reject
is rejected here too, with one line saying why. Why not the native reader
(``htcondor2.JobEventLog``) itself: it crashes the process on some malformed
events (a ``014`` event carrying a NUL byte, or cut after ``Node 0``,
dereferences a null pointer) and sleeps a second on every event it cannot
parse, so it could only run in a child process, behind a screen of this same
grammar; measured on the real logs and the fuzz corpus, this parser gives the
same events, in the daemon's process, without the child
(``benchmarks/eventlog_paths.py``; ``docs/monitor.md``). htcondor2 still names
the event types (``JobEventType``) and is the reference the tests compare
this parser with, event by event.

Per event (the bytes from the header line through the ``...`` line):

* **Bytes.** At most ``MAX_EVENT_BYTES``; no NUL or other control byte but tab,
  CR and LF; a header line shorter than the native reader's 1,024-byte header
  buffer. Bytes that are not UTF-8 are replaced by ``?`` (one warning: a hold
  reason in Latin-1 should not cost the event).
* **Header.** ``NNN (cluster.proc.subproc) date time text``, with a date the
  native reader reads (``MM/DD`` or ``YYYY-MM-DD``, ``T`` or a space, optional
  sub-seconds and ``Z``) and in range.
* **Body, for the event types the daemon uses** (``NATIVE_TYPES``): the lines
  each type's reader insists on (``Job terminated.``, the termination line, the
  four usage lines, ...), with the same leniency as its ``sscanf`` calls, and
  the values the daemon reads (``ParsedEvent.details``).
* **Other types** (checkpoints, node events of parallel jobs, DAGMan's
  post-script events, ...) carry nothing the daemon uses but their type, job
  and time: those come from the header alone. A malformed body of such an
  event costs nothing and is not reported.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

MAX_EVENT_BYTES = 1 << 20
MAX_HEADER_BYTES = 1000  # the native reader reads the header line into a 1,024-byte buffer
_INT_MAX = 2**31 - 1
_Check = Callable[[str, list[str]], "str | None"]

# Event types whose body the daemon reads (see eventlog._EXTRACTORS), by number.
NATIVE_TYPES = {
    0: "SUBMIT",
    1: "EXECUTE",
    4: "JOB_EVICTED",
    5: "JOB_TERMINATED",
    6: "IMAGE_SIZE",
    7: "SHADOW_EXCEPTION",
    9: "JOB_ABORTED",
    12: "JOB_HELD",
    13: "JOB_RELEASED",
    22: "JOB_DISCONNECTED",
    24: "JOB_RECONNECT_FAILED",
    40: "FILE_TRANSFER",
}

_CONTROL = re.compile(rb"[\x00-\x08\x0b\x0c\x0e-\x1f]")
# A line longer than the native reader's 512-byte synchronisation buffer that ends in "..." would be
# taken for the end of the event half-way through it.
_LONG_SYNC = re.compile(rb"(?m)^[^\n]{500,}\.\.\.\r?\n(?=.)", re.DOTALL)
_TIME = r"([0-9]{2}):([0-9]{2}):([0-9]{2})(\.[0-9]{1,6})?(Z?)"
_HEADER = re.compile(
    r"([0-9]{3}) \((-?[0-9]{1,10})\.(-?[0-9]{1,10})\.(-?[0-9]{1,10})\) "
    r"(?:([0-9]{2})/([0-9]{2}) " + _TIME + r"|([0-9]{4})-([0-9]{2})-([0-9]{2})[ T]" + _TIME + r") (.*)",
    re.ASCII | re.DOTALL,
)
_WS = " \t\n\r\f\v"  # C isspace(), which sscanf and trim() use (re.ASCII makes \s the same)
# sscanf never backtracks: a %d takes every digit it can, so the patterns are possessive (*+, ++).
_INT = r"[+-]?+[0-9]++"
_FLOAT = r"[+-]?+(?:[0-9]++\.?+[0-9]*+(?:[eE][+-]?[0-9]+)?+|\.[0-9]++(?:[eE][+-]?[0-9]+)?+|inf(?:inity)?+|nan)"
# "\t(%d) %127[a-zA-z ]" (the range A-z takes [ \ ] ^ _ ` too)
_CHECKPOINTED = re.compile(r"\s*+\(\s*+(" + _INT + r")\)\s*+([A-Za-z\[\\\]^_` ]{1,127}+)", re.ASCII)
# "\t(%d) %127[^\r\n]" (ten digits or more would not fit an int: refused)
_TERMINATION = re.compile(r"\s*+\(\s*+([+-]?+[0-9]{1,9}+)\)\s*+([^\r\n]{1,127}+)", re.ASCII)
_NORMAL = re.compile(r"Normal\s*+termination\s*+\(return\s*+value\s*+(" + _INT + ")", re.ASCII)
_ABNORMAL = re.compile(r"Abnormal\s*+termination\s*+\(signal\s*+(" + _INT + ")", re.ASCII)
# "\tUsr %d %d:%d:%d, Sys %d %d:%d:%d": eight conversions
_RUSAGE = re.compile(
    rf"\s*+Usr\s*+{_INT}\s*+{_INT}:\s*+{_INT}:\s*+{_INT},\s*+Sys\s*+{_INT}\s*+{_INT}:\s*+{_INT}:\s*+{_INT}",
    re.ASCII,
)
_NUMBER_FIRST = re.compile(r"\s*+" + _FLOAT, re.ASCII | re.IGNORECASE)  # "\t%lf  -  ...": one conversion
# "\t%f  -  %5s Bytes %8s By %21s": four conversions
_TRANSFER_LINE = re.compile(
    r"\s*+" + _FLOAT + r"\s*+-\s*+(\S{1,5}+)\s*+Bytes\s*+(\S{1,8}+)\s*+By\s*+(\S{1,21}+)",
    re.ASCII | re.IGNORECASE,
)
_IMAGE_SIZE = re.compile(r"\s*+[+-]?+[0-9]", re.ASCII)  # strtoll() that reads a digit
_QUEUE_SECONDS = re.compile(r"(?:\s*+[+-]?+[0-9]++)?", re.ASCII)  # strtol() that must use up the text
_TRANSFER_TYPES = {  # the first line of a FILE_TRANSFER event -> htcondor2.FileTransferEventType name
    "Entered queue to transfer input files": "IN_QUEUED",
    "Started transferring input files": "IN_STARTED",
    "Finished transferring input files": "IN_FINISHED",
    "Entered queue to transfer output files": "OUT_QUEUED",
    "Started transferring output files": "OUT_STARTED",
    "Finished transferring output files": "OUT_FINISHED",
}


class EventFormatError(ValueError):
    """Why an event cannot be read (one line)."""


@dataclass(frozen=True)
class ParsedEvent:
    """One event read: what its header says and, for ``NATIVE_TYPES``, the values of its body."""

    number: int  # event type number
    cluster: int
    proc: int
    event_time: str  # ISO 8601 from the header (year 2000 for MM/DD stamps)
    yearless: bool  # the header has MM/DD without a year
    native: bool  # a type whose body the daemon reads
    repaired: bool  # some bytes were not UTF-8 (read as "?")
    details: dict[str, Any] = field(default_factory=dict)  # LogEvent field -> value (see eventlog)
    out_of_range: tuple[str, ...] = ()  # details read but beyond what they can mean (left None)


def parse_event(data: bytes) -> ParsedEvent:
    """Read one event (header line through its ``...`` line); raise ``EventFormatError`` if it cannot be read."""
    if len(data) > MAX_EVENT_BYTES:
        raise EventFormatError(f"an event of {len(data):,} bytes (more than {MAX_EVENT_BYTES:,})")
    control = _CONTROL.search(data)
    if control is not None:
        raise EventFormatError(f"control byte 0x{data[control.start()]:02x} at byte {control.start()} of the event")
    header_end = data.find(b"\n")
    if header_end > MAX_HEADER_BYTES:
        raise EventFormatError(f"an event header line of {header_end:,} bytes (more than {MAX_HEADER_BYTES:,})")
    repaired = False
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        text = data.decode("utf-8", "replace").replace("\ufffd", "?")
        data = text.encode("utf-8")
        repaired = True
    lines = text.split("\n")[:-1]  # the event ends with a newline
    if "\r" in text:
        lines = [line[:-1] if line.endswith("\r") else line for line in lines]  # chomp(), as the native reader does
    header = _HEADER.fullmatch(lines[0]) if lines else None
    if header is None:
        raise EventFormatError("not a job event header (NNN (cluster.proc.sub) date time text)")
    number, cluster, proc, event_time, yearless, first = _header(header)
    native = number in NATIVE_TYPES
    if native:
        if len(data) > 500 and _LONG_SYNC.search(data):
            raise EventFormatError("a line of 500 bytes or more ends in '...' inside the event")
        body = lines[1:-1]
        why = _BODY_CHECKS[number](first, body)
        if why:
            raise EventFormatError(f"{NATIVE_TYPES[number]} event: {why}")
        details = _VALUES[number](first, body) if number in _VALUES else {}
        bad = tuple(name for name, value in details.items() if value is _OUT_OF_RANGE)
        for name in bad:
            details[name] = None
        return ParsedEvent(number, cluster, proc, event_time, yearless, True, repaired, details, bad)
    return ParsedEvent(number, cluster, proc, event_time, yearless, False, repaired)


def _header(match: re.Match[str]) -> tuple[int, int, int, str, bool, str]:
    g = match.groups()
    cluster, proc = int(g[1]), int(g[2])
    if abs(cluster) > _INT_MAX or abs(proc) > _INT_MAX or abs(int(g[3])) > _INT_MAX:
        raise EventFormatError("a job id out of range in the event header")
    cluster, proc = max(cluster, -1), max(proc, -1)  # the native reader gives no negative id: read as -1
    if g[4] is not None:  # MM/DD hh:mm:ss
        year, month, day, clock, yearless = "2000", g[4], g[5], g[6:11], True
    else:
        year, month, day, clock, yearless = g[11], g[12], g[13], g[14:19], False
    if not (
        "01" <= month <= "12" and "01" <= day <= "31" and clock[0] <= "23" and clock[1] <= "59" and clock[2] <= "60"
    ):
        raise EventFormatError("a date or time out of range in the event header")  # two digits each: compared as text
    when = _normalised(year, month, day, clock[:3]) + f"{clock[3] or ''}{clock[4]}"
    return int(g[0]), cluster, proc, when, yearless, g[19]


def _normalised(year: str, month: str, day: str, clock: tuple[str, ...]) -> str:
    """``YYYY-MM-DDThh:mm:ss``; a day past the month's end or second 60 rolls over, as the native
    reader's ``mktime`` does (11/31 is 12/01)."""
    text = f"{year}-{month}-{day}T{clock[0]}:{clock[1]}:{clock[2]}"
    try:
        datetime(int(year), int(month), int(day), int(clock[0]), int(clock[1]), int(clock[2]))
        return text
    except ValueError:
        pass
    try:
        start = datetime(int(year), int(month), 1, int(clock[0]), int(clock[1]))
        rolled = start + timedelta(days=int(day) - 1, seconds=int(clock[2]))
    except (ValueError, OverflowError):
        raise EventFormatError("a date out of range in the event header") from None
    return rolled.strftime("%Y-%m-%dT%H:%M:%S") if rolled.year == start.year else text


# -- what each reader insists on: "first" is the text after the header's time, "body" the lines
#    between the header and the "..." line; a reason string means the native reader would fail ----------


def _prefix(text: str) -> _Check:
    return lambda first, body: None if first.startswith(text) else f"does not start with {text!r}"


def _submit(first: str, body: list[str]) -> str | None:
    return _prefix("Job submitted from host: ")(first, body)


def _evicted(first: str, body: list[str]) -> str | None:
    if not first.startswith("Job was evicted."):
        return "does not start with 'Job was evicted.'"
    checkpointed = _CHECKPOINTED.match(body[0]) if body else None
    if checkpointed is None:
        return "no '(n) text' line after the first"
    if not _usage_lines(body, 1, 2):
        return "not two 'Usr ... Sys ...' usage lines"
    requeued = checkpointed.group(2).startswith("Job terminated and was requeued")
    if requeued and len(body) > 4 and _NUMBER_FIRST.match(body[3]) and _NUMBER_FIRST.match(body[4]):
        return _termination(body, 5)  # read only after both byte counts
    return None


def _terminated(first: str, body: list[str]) -> str | None:
    if not first.startswith("Job terminated."):
        return "does not start with 'Job terminated.'"
    why = _termination(body, 0)
    if why:
        return why
    at = 1 if _normal(body[0]) else 2  # an abnormal termination has a core file line
    if not _usage_lines(body, at, 4):
        return "not four 'Usr ... Sys ...' usage lines"
    # The transfer and resource lines are read until one that is neither; then the reader
    # takes one more line, and one that is empty must be the last before "...".
    if "" not in body[at + 4 :]:
        return None
    i, in_usage = at + 4, False
    while i < len(body):
        line = body[i]
        i += 1
        if in_usage:
            if ":" not in line:
                break
            continue
        if _TRANSFER_LINE.match(line):
            continue
        if line.startswith(("\tPartitionable ", "\tResources")):
            in_usage = True
            continue
        break
    else:
        return None
    if i < len(body) and body[i] == "" and i + 1 < len(body):
        return "an empty line inside the event"
    return None


def _normal(line: str) -> bool:
    match = _TERMINATION.match(line)
    return match is not None and bool(match.group(1).lstrip("+-0"))


def _termination(body: list[str], at: int) -> str | None:
    """``(1) Normal termination (return value N)`` or ``(0) Abnormal termination (signal N)`` + a core line."""
    match = _TERMINATION.match(body[at]) if at < len(body) else None
    if match is None:
        return "no '(n) Normal/Abnormal termination' line"
    if match.group(1).lstrip("+-0"):
        return None if _NORMAL.match(match.group(2)) else "a bad 'Normal termination (return value N)' line"
    if not _ABNORMAL.match(match.group(2)):
        return "a bad 'Abnormal termination (signal N)' line"
    core = body[at + 1].strip(_WS) if at + 1 < len(body) else None
    if core is None or not (core.startswith("(1) Corefile in: ") or core.startswith("(0)")):
        return "no core file line after 'Abnormal termination'"
    return None


def _usage_lines(body: list[str], at: int, count: int) -> bool:
    return len(body) >= at + count and all(_RUSAGE.match(body[i]) for i in range(at, at + count))


def _image_size(first: str, body: list[str]) -> str | None:
    prefix = "Image size of job updated: "
    if not first.startswith(prefix) or not _IMAGE_SIZE.match(first, len(prefix)):
        return f"does not start with {prefix!r} and a number"
    return None


def _aborted(first: str, body: list[str]) -> str | None:
    if not first.startswith("Job was aborted"):
        return "does not start with 'Job was aborted'"
    if len(body) == 2 and body[1] == "":
        return "an empty line inside the event"
    return None


def _disconnected(first: str, body: list[str]) -> str | None:
    return _slot_lines(body, "    Trying to reconnect to ", " ", "the slot and its address")


def _reconnect_failed(first: str, body: list[str]) -> str | None:
    return _slot_lines(body, "    Can not reconnect to ", ",", "the slot, then a comma")


def _slot_lines(body: list[str], marker: str, after_slot: str, naming: str) -> str | None:
    """An indented reason line, then ``marker`` and the slot's name followed by ``after_slot``."""
    if not body or not body[0].startswith("    "):
        return "no indented reason line"
    if len(body) < 2 or marker not in body[1] or after_slot not in body[1].replace(marker, ""):
        return f"no {marker.strip()!r} line naming {naming}"
    return None


def _file_transfer(first: str, body: list[str]) -> str | None:
    if first not in _TRANSFER_TYPES:
        return "not a known file transfer step"
    prefix = "\tSeconds spent in queue: "
    if body and body[0].startswith(prefix) and not _QUEUE_SECONDS.fullmatch(body[0], len(prefix)):
        return "a bad 'Seconds spent in queue' line"
    return None


_BODY_CHECKS: dict[int, _Check] = {
    0: _submit,
    1: _prefix("Job executing on host: "),
    4: _evicted,
    5: _terminated,
    6: _image_size,
    7: _prefix("Shadow exception!"),
    9: _aborted,
    12: _prefix("Job was held."),
    13: _prefix("Job was released."),
    22: _disconnected,
    24: _reconnect_failed,
    40: _file_transfer,
}


# -- the values the daemon reads, from events that passed their type's check: the same attributes
#    the native reader fills (names in comments), read the same way ------------------------------

_MIB = 1 << 20
_KIB = 1 << 10
_MAX_BYTES = 1 << 60  # memory sizes beyond an exbibyte are corrupt values
_OUT_OF_RANGE: Any = object()  # a value read but beyond what it can mean (reported, then None)
_DAG_NODE = re.compile(r"DAG Node:\s*(\S+)")
_DAG_NODE_PREFIX = "DAG Node: "
_STRUCTURED_NODE = re.compile(r'\[.*?\bDAGNodeName\s*=\s*"([^"\\]*)".*\]$')  # [ DAGNodeName = "x"; ... ]
_SIZE_LINE = re.compile(r"\s*+(" + _INT + r")\s++-\s*+(\S{1,255})", re.ASCII)  # "\t%lld  -  %s", a space before "-"
_LABEL = re.compile(r"\s*+\S++", re.ASCII)  # a column label of the resource table's header
_SIZE_NAMES = frozenset({"MemoryUsage", "ResidentSetSize", "ProportionalSetSize"})
_HOLD_CODES = re.compile(r"\s*+Code\s*+(" + _INT + r")\s*+Subcode\s*+(" + _INT + ")", re.ASCII)
_TRANSFER_HOST = "\tTransferring to host: "
_RECONNECT = "    Trying to reconnect to "


def _text(line: str | None) -> str | None:
    """A free-text line as the native reader keeps it (trimmed); None when empty."""
    value = line.strip(_WS) if line is not None else ""
    return value or None


def _first_body_line(body: list[str]) -> str | None:
    return body[0] if body else None


def _submit_values(first: str, body: list[str]) -> dict[str, Any]:
    # HTCondor 25 writes the node as structured notes, a ClassAd on the first line (StructuredNotes'
    # DAGNodeName), which the native reader prefers. Before it, the native reader takes the last line
    # reading "DAG Node: <name>" (DAGNodeName); without one, the notes are the first line (LogNotes),
    # where the daemon looks for the same words.
    lines = [line.strip(_WS) for line in body]
    structured = _STRUCTURED_NODE.match(lines[0]) if lines else None
    if structured:
        return {"node": structured.group(1) or None}
    dag_lines = [line for line in lines if line.startswith(_DAG_NODE_PREFIX)]
    if dag_lines:
        return {"node": dag_lines[-1][len(_DAG_NODE_PREFIX) :].strip(_WS) or None}
    match = _DAG_NODE.search(lines[0]) if lines else None
    return {"node": match.group(1) if match else None}


def _execute_values(first: str, body: list[str]) -> dict[str, Any]:
    return {"host": first[len("Job executing on host: ") :] or None}  # ExecuteHost


def _terminated_values(first: str, body: list[str]) -> dict[str, Any]:
    text = _group(_TERMINATION, body[0], 2)
    if _normal(body[0]):  # TerminatedNormally; ReturnValue
        out: dict[str, Any] = {"return_value": _status(_group(_NORMAL, text, 1))}
    else:  # TerminatedBySignal
        out = {"signal": _status(_group(_ABNORMAL, text, 1))}
    after_usage = (1 if _normal(body[0]) else 2) + 4  # the termination line(s) and four usage lines
    usage = _usage_table(body, after_usage).get("Memory")  # MemoryUsage, in MiB
    out["memory_bytes"] = _memory(None, usage)
    return out


def _group(pattern: re.Pattern[str], text: str, index: int) -> str:
    """A group of a line the type's check has matched already."""
    match = pattern.match(text)
    if match is None:  # the check and the values disagree: a bug here, said as a bad event
        raise EventFormatError(f"cannot read {text[:60]!r}")
    return match.group(index)


def _usage_table(body: list[str], at: int) -> dict[str, str]:
    """The Usage column of the "Partitionable Resources" table, by resource name (units cut off).

    As the native reader: the table follows the byte count lines (from ``at``) or nothing is read."""
    while at < len(body) and _TRANSFER_LINE.match(body[at]):
        at += 1
    if at >= len(body) or not body[at].startswith(("\tPartitionable ", "\tResources")):
        return {}
    header = body[at]
    colon = header.find(":")
    first_label = _LABEL.match(header, colon + 1) if colon >= 0 else None
    if first_label is None:
        return {}
    # The first column (Usage) ends one byte past the header's first label, counted from each line's colon.
    width = first_label.end() - colon
    usage = {}
    for line in body[at + 1 :]:
        row_colon = line.find(":")
        if row_colon < 0:
            break
        name = line[:row_colon].strip(_WS).split("(", 1)[0].strip(_WS)
        usage[name] = line[row_colon + 1 : row_colon + 1 + width].strip(_WS)
    return usage


def _image_size_values(first: str, body: list[str]) -> dict[str, Any]:
    sizes: dict[str, str] = {}
    for line in body:  # "\t181  -  MemoryUsage of job (MB)", "\t185116  -  ResidentSetSize of job (KB)"
        match = _SIZE_LINE.match(line)
        if match is None or match.group(2) not in _SIZE_NAMES:
            break  # the native reader stops at the first line that is not "<number>  -  <a size it knows>"
        sizes[match.group(2)] = match.group(1)
    return {"memory_bytes": _memory(sizes.get("ResidentSetSize"), sizes.get("MemoryUsage"))}


def _held_values(first: str, body: list[str]) -> dict[str, Any]:
    reason = _text(_first_body_line(body))  # HoldReason
    codes = _HOLD_CODES.match(body[1]) if len(body) > 1 else None  # HoldReasonCode, HoldReasonSubCode
    if reason == "Reason unspecified":
        reason = None
    code, subcode = (codes.group(1), codes.group(2)) if codes else ("0", "0")
    return {"reason": reason, "hold_code": _int32(code), "hold_subcode": _int32(subcode)}


def _reason_values(first: str, body: list[str]) -> dict[str, Any]:
    return {"reason": _text(_first_body_line(body))}  # Reason (aborted), Message (shadow exception)


def _disconnected_values(first: str, body: list[str]) -> dict[str, Any]:
    slot_and_address = body[1].replace(_RECONNECT, "")  # "<slot name> <address>" (StartdName, StartdAddr)
    return {"host": slot_and_address.split(" ", 1)[1] or None, "reason": _text(body[0])}


def _reconnect_failed_values(first: str, body: list[str]) -> dict[str, Any]:
    return {"host": None, "reason": _text(body[0])}  # Reason; no address is written


def _file_transfer_values(first: str, body: list[str]) -> dict[str, Any]:
    at = 1 if body and body[0].startswith("\tSeconds spent in queue: ") else 0  # the lines come in this order
    host = body[at][len(_TRANSFER_HOST) :] if at < len(body) and body[at].startswith(_TRANSFER_HOST) else ""
    return {"transfer": _TRANSFER_TYPES[first], "host": host or None}


_VALUES: dict[int, Callable[[str, list[str]], dict[str, Any]]] = {
    0: _submit_values,
    1: _execute_values,
    5: _terminated_values,
    6: _image_size_values,
    7: _reason_values,
    9: _reason_values,
    12: _held_values,
    22: _disconnected_values,
    24: _reconnect_failed_values,
    40: _file_transfer_values,
}


def _memory(rss_kib: str | None, usage_mib: str | None) -> Any:
    """Resident memory in bytes: ResidentSetSize (KiB) if above 0, else MemoryUsage (MiB) if above 0."""
    for text, unit in ((rss_kib, _KIB), (usage_mib, _MIB)):
        number = _number(text)
        if number is not None and number > 0:
            return number * unit if number * unit <= _MAX_BYTES else _OUT_OF_RANGE
    return None


def _number(text: str | None) -> int | None:
    try:
        return int(text) if text else None
    except ValueError:
        return None


def _status(text: str) -> Any:
    """A return value or signal number: a negative one is no value (the native reader leaves it out)."""
    number = _int32(text)
    return None if number is not _OUT_OF_RANGE and number < 0 else number


def _int32(text: str) -> Any:
    number = int(text)
    return number if abs(number) <= _INT_MAX else _OUT_OF_RANGE
