"""Read pegasus-kickstart records (a job's ``*.out.NNN``): what the executable itself did.

Formats read:

* **YAML** (Pegasus 4.9+/5): a list of ``- invocation: True`` records; a file
  may hold several YAML documents separated by ``---`` lines (Pegasus adds
  ``---------------pegasus-multipart`` parts such as integrity summaries).
* **XML** (Pegasus <= 4.8): ``<invocation>`` elements, one per task of a
  clustered job, possibly several in one file with a single ``<?xml?>`` header;
  schema 1.0/2.x, with or without ``maxrss``.
* **Cluster summaries**: ``[cluster-summary ...]``, ``[seqexec-summary ...]`` and
  ``[cluster-task ...]`` lines written by pegasus-cluster / pegasus-mpi-cluster.

Per record we keep the host (``hostname``, ``hostaddr``), the invocation and
main job start and duration (the main job's duration is the executable's own
runtime, without kickstart's set-up and stat calls), the exit status, the peak
memory and the sizes of the files kickstart stat'ed.

Decisions (ours):

* Exit status: ``regular`` -> its exit code; ``signalled`` -> ``exit_code`` is
  minus the signal; ``failure`` (the executable could not be started) ->
  ``exit_code`` None and ``succeeded`` False. Without a status element the raw
  wait status is decoded.
* ``maxrss`` is the main job's ``getrusage`` value, which Linux reports in KiB
  and macOS (``uname`` system darwin) in bytes; other systems are taken as KiB.
* Files: only entries naming an ``lfn`` are task files (stdin, stdout, the
  kickstart log... are not). YAML entries with ``output: True`` are outputs and
  with ``input: True`` inputs (kickstart ``-s``/``-S``); Pegasus 4.9 YAML and XML
  records key them ``initial`` (input) and ``final`` (output) instead.
* Times are absolute (the records carry their UTC offset) but come from the
  worker's clock, which may be skewed against the submit host: use the
  durations, not the start times, against event-log times.

Values are checked where they are read: a duration or CPU time that is
negative or not finite, a start time that is not finite, a memory size or file
size that is negative or beyond an exbibyte, an exit code or signal beyond 32
bits each give one warning naming the file and the record's line, and the
record goes on without that value (``None``).

Garbage (not YAML, not XML, no record) gives one warning naming the file and
``None``; a bad part among good ones gives a warning naming the line and the
good records. Nothing raises past ``read_kickstart``.
"""

from __future__ import annotations

import math
import os
import re
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from datetime import datetime
from pathlib import Path
from typing import Any

from wire_daemon.core.errors import InputError
from wire_daemon.monitor.problems import Limited, Problems
from wire_daemon.monitor.safe_open import KICKSTART_LIMIT, read_regular
from wire_daemon.monitor.yamlio import documents, load_yaml_text

_SUMMARY = re.compile(r"^\[(cluster-summary|seqexec-summary|cluster-task)\s+(.*)\]\s*$")
_PAIR = re.compile(r'([\w-]+)=("(?:[^"\\]|\\.)*"|[^,\s\]]*)')
_XML_OPEN = re.compile(r"<invocation\b")
_XML_CLOSE = re.compile(r"</invocation\s*>")
_KIB = 1024
_MAX_BYTES = 1 << 60  # sizes beyond an exbibyte are corrupt values
_MAX_INT32 = 2**31 - 1


@dataclass(frozen=True)
class KickstartFile:
    lfn: str
    size: int | None
    input: bool = False
    output: bool = False


@dataclass(frozen=True)
class KickstartRecord:
    source: str
    format: str  # yaml | xml
    line: int = 0
    transformation: str | None = None
    derivation: str | None = None
    resource: str | None = None  # site handle
    hostname: str | None = None
    hostaddr: str | None = None
    start: float | None = None  # invocation start, seconds since the epoch (worker clock)
    duration: float | None = None  # invocation duration
    main_start: float | None = None
    main_duration: float | None = None  # the executable's own duration
    status: str = "unknown"  # regular | signalled | failure | suspended | unknown
    exit_code: int | None = None
    signal: int | None = None
    raw_status: int | None = None
    maxrss_bytes: int | None = None
    utime_s: float | None = None
    stime_s: float | None = None
    files: tuple[KickstartFile, ...] = ()
    # From ``jobids: condor: 5363338.0`` (YAML records only). The cluster alone: YAML reads "12.10" as
    # a float, 12.1, so the proc is not recoverable; Pegasus queues one proc per cluster anyway.
    condor_cluster: int | None = None

    @property
    def succeeded(self) -> bool:
        return self.status == "regular" and self.exit_code == 0

    @property
    def input_bytes(self) -> int:
        return sum(f.size or 0 for f in self.files if f.input)

    @property
    def output_bytes(self) -> int:
        return sum(f.size or 0 for f in self.files if f.output)


@dataclass(frozen=True)
class ClusterLine:
    """A ``[cluster-summary ...]`` / ``[seqexec-summary ...]`` / ``[cluster-task ...]`` line."""

    kind: str
    line: int
    values: dict[str, str | int | float] = field(default_factory=dict)

    def get(self, key: str) -> str | int | float | None:
        return self.values.get(key)


@dataclass
class KickstartOutput:
    source: str
    records: list[KickstartRecord] = field(default_factory=list)
    cluster_lines: list[ClusterLine] = field(default_factory=list)

    @property
    def summaries(self) -> list[ClusterLine]:
        return [c for c in self.cluster_lines if c.kind != "cluster-task"]

    @property
    def tasks(self) -> list[ClusterLine]:
        return [c for c in self.cluster_lines if c.kind == "cluster-task"]


def kickstart_files(output_path: str | os.PathLike[str]) -> list[Path]:
    """A job's rotated kickstart records ``<output>.000``, ``.001``..., one per attempt."""
    out = Path(output_path)
    found = [p for p in out.parent.glob(out.name + ".*") if p.suffix[1:].isdigit()]
    return sorted(found, key=lambda p: int(p.suffix[1:]))


def read_kickstart(path: str | os.PathLike[str], problems: Problems | None = None) -> KickstartOutput | None:
    problems = problems or Problems()
    source = os.fspath(path)
    try:
        data = read_regular(source, KICKSTART_LIMIT)
    except OSError as exc:
        problems.warn(source, f"cannot read the kickstart record ({exc.strerror or exc})")
        return None
    with Limited(problems) as limited:  # a record of a million bad parts: 100 warnings and a count
        try:
            return parse_kickstart(data.decode("utf-8", errors="replace"), source, limited)
        except Exception as exc:  # the promise: nothing escapes the reader
            limited.warn(source, f"kickstart record unreadable ({type(exc).__name__}: {exc})")
            return None


def parse_kickstart(text: str, source: str, problems: Problems) -> KickstartOutput | None:
    if not text.strip():
        problems.warn(source, "empty kickstart record (the job did not run or wrote nothing)")
        return None
    output = KickstartOutput(source)
    text = _take_cluster_lines(text, output)
    if "<invocation" in text:
        output.records.extend(_xml_records(text, source, problems))
    elif text.strip():
        output.records.extend(_yaml_records(text, source, problems))
    if not output.records and not output.cluster_lines:
        problems.warn(source, "no kickstart record found")
        return None
    return output


# -- cluster lines -------------------------------------------------------------------


def _take_cluster_lines(text: str, output: KickstartOutput) -> str:
    """Collect the bracketed summary lines and blank them out of the text."""
    if "[cluster-" not in text and "[seqexec-" not in text:
        return text
    lines = text.splitlines(keepends=True)
    for number, line in enumerate(lines, 1):
        match = _SUMMARY.match(line.strip())
        if match:
            values = {k: _scalar(v) for k, v in _PAIR.findall(match.group(2))}
            output.cluster_lines.append(ClusterLine(match.group(1), number, values))
            lines[number - 1] = "\n"
    return "".join(lines)


def _scalar(text: str) -> str | int | float:
    if text.startswith('"') and text.endswith('"') and len(text) >= 2:
        return text[1:-1]
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text


# -- YAML ---------------------------------------------------------------------------


def _yaml_records(text: str, source: str, problems: Problems) -> list[KickstartRecord]:
    records: list[KickstartRecord] = []
    for first_line, part in documents(text):
        try:
            data = load_yaml_text(part, source, first_line)
        except InputError as exc:
            problems.warn(source, f"part skipped: {exc.detail}", exc.where or first_line)
            continue
        items = data if isinstance(data, list) else [data]
        for item in items:
            if isinstance(item, dict) and "invocation" in item:
                records.append(_checked(_yaml_record(item, source, first_line), problems))
    return records


def _yaml_record(item: dict[str, Any], source: str, line: int) -> KickstartRecord:
    main = _dict(item.get("mainjob"))
    usage = _dict(main.get("usage"))
    status, code, signal, raw = _yaml_status(_dict(main.get("status")))
    system = _text(_dict(item.get("machine")).get("uname_system")) or "linux"
    return KickstartRecord(
        source=source,
        format="yaml",
        line=line,
        transformation=_text(item.get("transformation")),
        derivation=_text(item.get("derivation")),
        resource=_text(item.get("resource")),
        hostname=_text(item.get("hostname")),
        hostaddr=_text(item.get("hostaddr")),
        start=_time(item.get("start")),
        duration=_float(item.get("duration")),
        main_start=_time(main.get("start")),
        main_duration=_float(main.get("duration")),
        status=status,
        exit_code=code,
        signal=signal,
        raw_status=raw,
        maxrss_bytes=_maxrss(usage.get("maxrss"), system),
        utime_s=_float(usage.get("utime")),
        stime_s=_float(usage.get("stime")),
        files=_yaml_files(_dict(item.get("files"))),
        condor_cluster=_cluster(_dict(item.get("jobids")).get("condor")),
    )


def _yaml_status(status: dict[str, Any]) -> tuple[str, int | None, int | None, int | None]:
    raw = _int(status.get("raw"))
    if "regular_exitcode" in status:
        return "regular", _int(status.get("regular_exitcode")), None, raw
    if "signalled_signal" in status:
        signal = _int(status.get("signalled_signal"))
        return "signalled", -signal if signal else None, signal, raw
    if "failure_error" in status:
        return "failure", None, None, raw
    if "suspended_signal" in status:
        return "suspended", None, _int(status.get("suspended_signal")), raw
    return _decode_raw(raw)


def _yaml_files(files: dict[str, Any]) -> tuple[KickstartFile, ...]:
    """Entries with an ``lfn``: Pegasus 5 keys them by lfn with ``input``/``output`` flags,
    Pegasus 4.9 by ``initial`` (input) and ``final`` (output)."""
    out = []
    for key, entry in files.items():
        if not isinstance(entry, dict) or not _text(entry.get("lfn")):
            continue
        is_input = entry.get("input") is True or key == "initial"
        is_output = entry.get("output") is True or key == "final"
        out.append(KickstartFile(str(entry["lfn"]), _int(entry.get("size")), is_input, is_output))
    return tuple(out)


# -- XML ----------------------------------------------------------------------------


def _xml_records(text: str, source: str, problems: Problems) -> list[KickstartRecord]:
    if "<!DOCTYPE" in text or "<!ENTITY" in text:
        problems.warn(source, "XML with a DOCTYPE/ENTITY declaration refused (kickstart never writes one)")
        return []
    records = []
    line, counted = 1, 0
    for start, end in _xml_spans(text):
        line += text.count("\n", counted, start)  # counted as we go: one pass over the text
        counted = start
        try:
            element = ET.fromstring(text[start:end])
        except ET.ParseError as exc:
            problems.warn(source, f"invocation record skipped: bad XML ({exc})", line)
            continue
        records.append(_checked(_xml_record(element, source, line), problems))
    if not records and "<invocation" in text:
        problems.warn(source, "unterminated <invocation> record", text.count("\n", 0, text.find("<invocation")) + 1)
    return records


def _xml_spans(text: str) -> Iterator[tuple[int, int]]:
    """``<invocation ...> ... </invocation>`` stretches, each from an opening tag to the next closing one.

    One pass over the text (a lazy regex from every opening tag would rescan the rest of the
    text for each of them: quadratic on a file of unclosed tags)."""
    position = 0
    while True:
        opening = _XML_OPEN.search(text, position)
        if opening is None:
            return
        closing = _XML_CLOSE.search(text, opening.end())
        if closing is None:
            return
        yield opening.start(), closing.end()
        position = closing.end()


def _xml_record(root: ET.Element, source: str, line: int) -> KickstartRecord:
    main = _child(root, "mainjob")
    usage = _child(main, "usage") if main is not None else None
    status, code, signal, raw = _xml_status(_child(main, "status") if main is not None else None)
    uname = _child(root, "uname")
    if uname is None:
        machine = _child(root, "machine")
        uname = _child(machine, "uname") if machine is not None else None
    system = uname.get("system", "linux") if uname is not None else "linux"
    attrs = root.attrib
    main_attrs = main.attrib if main is not None else {}
    usage_attrs = usage.attrib if usage is not None else {}
    return KickstartRecord(
        source=source,
        format="xml",
        line=line,
        transformation=attrs.get("transformation"),
        derivation=attrs.get("derivation"),
        resource=attrs.get("resource"),
        hostname=attrs.get("hostname"),
        hostaddr=attrs.get("hostaddr"),
        start=_time(attrs.get("start")),
        duration=_float(attrs.get("duration")),
        main_start=_time(main_attrs.get("start")),
        main_duration=_float(main_attrs.get("duration")),
        status=status,
        exit_code=code,
        signal=signal,
        raw_status=raw,
        maxrss_bytes=_maxrss(usage_attrs.get("maxrss"), system),
        utime_s=_float(usage_attrs.get("utime")),
        stime_s=_float(usage_attrs.get("stime")),
        files=_xml_files(root),
    )


def _xml_status(status: ET.Element | None) -> tuple[str, int | None, int | None, int | None]:
    if status is None:
        return "unknown", None, None, None
    raw = _int(status.get("raw"))
    for child in status:
        tag = _local(child.tag)
        if tag == "regular":
            return "regular", _int(child.get("exitcode")), None, raw
        if tag == "signalled":
            signal = _int(child.get("signal"))
            return "signalled", -signal if signal else None, signal, raw
        if tag == "failure":
            return "failure", None, None, raw
        if tag == "suspended":
            return "suspended", None, _int(child.get("signal")), raw
    return _decode_raw(raw)


def _xml_files(root: ET.Element) -> tuple[KickstartFile, ...]:
    out = []
    for call in root:
        if _local(call.tag) != "statcall" or call.get("id") not in ("initial", "final"):
            continue
        lfn = call.get("lfn")
        info = _child(call, "statinfo")
        if lfn:
            size = _int(info.get("size")) if info is not None else None
            out.append(KickstartFile(lfn, size, call.get("id") == "initial", call.get("id") == "final"))
    return tuple(out)


def _child(element: ET.Element | None, name: str) -> ET.Element | None:
    if element is None:
        return None
    for child in element:
        if _local(child.tag) == name:
            return child
    return None


def _local(tag: str) -> str:
    return tag.rsplit("}", 1)[-1]


# -- values ---------------------------------------------------------------------------


def _decode_raw(raw: int | None) -> tuple[str, int | None, int | None, int | None]:
    """A POSIX wait status: exited (code in the high byte) or killed by a signal (low 7 bits)."""
    if raw is None:
        return "unknown", None, None, None
    if raw < 0:
        return "failure", None, None, raw
    signal = raw & 0x7F
    if signal == 0:
        return "regular", (raw >> 8) & 0xFF, None, raw
    return "signalled", -signal, signal, raw


def _maxrss(value: Any, system: str) -> int | None:
    number = _int(value)
    if number is None:
        return None
    return number if system.lower() == "darwin" else number * _KIB


def _time(value: Any) -> float | None:
    try:
        if isinstance(value, datetime):
            return value.timestamp()
        if isinstance(value, str):
            return datetime.fromisoformat(value).timestamp()
    except (ValueError, OverflowError, OSError):
        return None
    return None


def _float(value: Any) -> float | None:
    if isinstance(value, bool) or value is None:
        return None
    try:
        return float(value)
    except OverflowError:  # an int too large for a float: _checked reports it
        return math.inf
    except (TypeError, ValueError):
        return None


def _int(value: Any) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if not isinstance(value, (str, float)):
        return None
    try:
        return int(str(value).strip())
    except (TypeError, ValueError):  # includes an integer of more than 4,300 digits
        return None


def _text(value: Any) -> str | None:
    if value in (None, "") or isinstance(value, (dict, list)):
        return None
    return str(value)


def _cluster(value: Any) -> int | None:
    """The cluster of a Condor job id, ``5363338.0`` (read as a float or a string) or ``5363338``."""
    text = _text(value)
    if text is None:
        return None
    return _int(text.split(".", 1)[0])


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


# -- checks -----------------------------------------------------------------------------

_DURATIONS = ("duration", "main_duration", "utime_s", "stime_s")
_TIMES = ("start", "main_start")
_CODES = ("exit_code", "signal", "raw_status")


def _checked(record: KickstartRecord, problems: Problems) -> KickstartRecord:
    """The record without the values that cannot be true, each dropped with one warning."""
    bad: dict[str, Any] = {}
    for name in _DURATIONS:
        value = getattr(record, name)
        if value is not None and not (math.isfinite(value) and value >= 0):
            bad[name] = value
    for name in _TIMES:
        value = getattr(record, name)
        if value is not None and not math.isfinite(value):
            bad[name] = value
    for name in _CODES:
        value = getattr(record, name)
        if value is not None and abs(value) > _MAX_INT32:
            bad[name] = value
    if record.maxrss_bytes is not None and not 0 <= record.maxrss_bytes <= _MAX_BYTES:
        bad["maxrss_bytes"] = record.maxrss_bytes
    files = record.files
    if any(f.size is not None and not 0 <= f.size <= _MAX_BYTES for f in files):
        bad["file size"] = next(f.size for f in files if f.size is not None and not 0 <= f.size <= _MAX_BYTES)
        files = tuple(
            replace(f, size=None) if f.size is not None and not 0 <= f.size <= _MAX_BYTES else f for f in files
        )
    if not bad:
        return record
    for name, value in bad.items():
        problems.warn(record.source, f"kickstart {name} {_show(value)} cannot be; ignored", record.line)
    changes: dict[str, Any] = {name: None for name in bad if not name.startswith("size of ")}
    return replace(record, files=files, **changes)


def _show(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else f"{text[:20]}...({len(text)} characters)"
