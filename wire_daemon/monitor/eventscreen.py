"""Screen one job event's bytes before htcondor2's native parser may see them.

htcondor2's ``JobEventLog`` (25.x) is fast, but it crashes on some malformed
events and sleeps a second on every event it cannot parse (see
``eventparse``). This screen, pure Python and a few microseconds per event,
keeps those events away from it. It follows what the library's own reader
requires (``condor_event.cpp``/``read_user_log.cpp``, HTCondor 25.x), line by
line, so that whatever passes is parsed at the library's normal speed; what
does not is skipped with one warning, in microseconds.

Per event (the bytes from the header line through the ``...`` line):

* **Bytes.** At most ``MAX_EVENT_BYTES``; no NUL or other control byte but tab,
  CR and LF (the library reads C strings: a NUL cuts a line short, and the
  ``014`` parser then dereferences a null pointer); a header line shorter than
  the library's 1,024-byte header buffer. Bytes that are not UTF-8 are replaced
  by ``?`` (one warning; the bindings cannot hand such strings to Python, and a
  hold reason in Latin-1 should not cost the event).
* **Header.** ``NNN (cluster.proc.subproc) date time text``, with a date the
  library reads (``MM/DD`` or ``YYYY-MM-DD``, ``T`` or a space, optional
  sub-seconds and ``Z``) and in range.
* **Body, for the event types the daemon uses** (``NATIVE_TYPES``): the lines
  each type's reader insists on (``Job terminated.``, the termination line, the
  four usage lines, ...), with the same leniency as its ``sscanf`` calls. Only
  these types are handed to the library.
* **Other types** (checkpoints, node events of parallel jobs, DAGMan's
  post-script events, ...) carry nothing the daemon uses but their type, job
  and time: those come from the header alone, and the library never reads
  them. A malformed body of such an event costs nothing and is not reported.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

MAX_EVENT_BYTES = 1 << 20
MAX_HEADER_BYTES = 1000  # the library reads the header line into a 1,024-byte buffer
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
# A line longer than the library's 512-byte synchronisation buffer that ends in "..." would be
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
_NORMAL = re.compile(r"Normal\s*+termination\s*+\(return\s*+value\s*+" + _INT, re.ASCII)
_ABNORMAL = re.compile(r"Abnormal\s*+termination\s*+\(signal\s*+" + _INT, re.ASCII)
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
_FILE_TRANSFER = frozenset(
    {
        "Entered queue to transfer input files",
        "Started transferring input files",
        "Finished transferring input files",
        "Entered queue to transfer output files",
        "Started transferring output files",
        "Finished transferring output files",
    }
)


class ScreenError(ValueError):
    """Why an event is not handed to the library (one line)."""


@dataclass(frozen=True)
class Screened:
    """One event that passed: what its header says, and the bytes to give the library."""

    number: int  # event type number
    cluster: int
    proc: int
    event_time: str  # ISO 8601, as the library's EventTime would read (year 2000 for MM/DD stamps)
    yearless: bool  # the header has MM/DD without a year
    data: bytes  # the event, non-UTF-8 bytes replaced by "?"
    native: bool  # a type whose body the daemon reads: the library must parse it
    repaired: bool  # some bytes were not UTF-8


def screen(data: bytes) -> Screened:
    """Check one event (header line through its ``...`` line); raise ``ScreenError`` if it may not pass."""
    if len(data) > MAX_EVENT_BYTES:
        raise ScreenError(f"an event of {len(data):,} bytes (more than {MAX_EVENT_BYTES:,})")
    control = _CONTROL.search(data)
    if control is not None:
        raise ScreenError(f"control byte 0x{data[control.start()]:02x} at byte {control.start()} of the event")
    header_end = data.find(b"\n")
    if header_end > MAX_HEADER_BYTES:
        raise ScreenError(f"an event header line of {header_end:,} bytes (more than {MAX_HEADER_BYTES:,})")
    repaired = False
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        text = data.decode("utf-8", "replace").replace("\ufffd", "?")
        data = text.encode("utf-8")
        repaired = True
    lines = text.split("\n")[:-1]  # the event ends with a newline
    if "\r" in text:
        lines = [line[:-1] if line.endswith("\r") else line for line in lines]  # chomp(), as the library does
    header = _HEADER.fullmatch(lines[0]) if lines else None
    if header is None:
        raise ScreenError("not a job event header (NNN (cluster.proc.sub) date time text)")
    number, cluster, proc, event_time, yearless, first = _header(header)
    native = number in NATIVE_TYPES
    if native:
        if len(data) > 500 and _LONG_SYNC.search(data):
            raise ScreenError("a line of 500 bytes or more ends in '...' inside the event")
        why = _BODY_CHECKS[number](first, lines[1:-1])
        if why:
            raise ScreenError(f"{NATIVE_TYPES[number]} event: {why}")
    return Screened(number, cluster, proc, event_time, yearless, data, native, repaired)


def _header(match: re.Match[str]) -> tuple[int, int, int, str, bool, str]:
    g = match.groups()
    cluster, proc = int(g[1]), int(g[2])
    if abs(cluster) > _INT_MAX or abs(proc) > _INT_MAX or abs(int(g[3])) > _INT_MAX:
        raise ScreenError("a job id out of range in the event header")
    if g[4] is not None:  # MM/DD hh:mm:ss
        year, month, day, clock, yearless = "2000", g[4], g[5], g[6:11], True
    else:
        year, month, day, clock, yearless = g[11], g[12], g[13], g[14:19], False
    if not (
        "01" <= month <= "12" and "01" <= day <= "31" and clock[0] <= "23" and clock[1] <= "59" and clock[2] <= "60"
    ):
        raise ScreenError("a date or time out of range in the event header")  # two digits each: compared as text
    when = f"{year}-{month}-{day}T{clock[0]}:{clock[1]}:{clock[2]}{clock[3] or ''}{clock[4]}"
    return int(g[0]), cluster, proc, when, yearless, g[19]


# -- what each reader insists on: "first" is the text after the header's time, "body" the lines
#    between the header and the "..." line; a reason string means the library would fail ----------


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
    if not body or not body[0].startswith("    "):
        return "no indented reason line"
    marker = "    Trying to reconnect to "
    if len(body) < 2 or marker not in body[1] or " " not in body[1].replace(marker, ""):
        return f"no {marker.strip()!r} line naming the slot and its address"
    return None


def _reconnect_failed(first: str, body: list[str]) -> str | None:
    if not body or not body[0].startswith("    "):
        return "no indented reason line"
    marker = "    Can not reconnect to "
    if len(body) < 2 or marker not in body[1] or "," not in body[1].replace(marker, ""):
        return f"no {marker.strip()!r} line naming the slot, then a comma"
    return None


def _file_transfer(first: str, body: list[str]) -> str | None:
    if first not in _FILE_TRANSFER:
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
