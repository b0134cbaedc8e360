"""Incremental reader of Pegasus ``jobstate.log`` (written by pegasus-monitord).

Each line is ``<epoch seconds> <job> <state> <condor id or code> <site> <remote id> <submit seq>``,
e.g. ``1677913809 ls_ID0000001 SUBMIT 9.0 condorpool - 2``. For ``*_SUCCESS`` and
``*_FAILURE`` states the fourth column is the exit code instead of the Condor
job id. Workflow-level lines have the job ``INTERNAL`` and the state between
``***`` markers (``1677913788 INTERNAL *** DAGMAN_STARTED 7.0 ***``).

The reader follows the file like the event-log reader (``position.py``): only
complete lines are read, a half-written last line waits for the next call, a
replaced or truncated file is read again from the start with a warning, and a
line that cannot be read gives one warning naming file:line. So does a line
whose time is not a finite number of seconds between the epoch and the year
9999 (NaN, inf, negative), or whose exit code does not fit in 32 bits: it is
skipped, since a time that cannot be would corrupt every duration built on it.

``JobstateMapper`` turns lines into ``TaskEvent``s, for submit dirs that have
no job event log (the fixtures): SUBMIT -> SUBMITTED, EXECUTE -> STARTED (no
host: jobstate.log has none), JOB_SUCCESS / JOB_FAILURE -> FINISHED at the time
of the preceding JOB_TERMINATED (occupancy ends when the job does, not when
monitord noticed) with the exit code, JOB_HELD -> HELD, JOB_RELEASED ->
RELEASED, JOB_EVICTED / SHADOW_EXCEPTION / JOB_RECONNECT_FAILED -> EVICTED,
JOB_ABORTED -> ABORTED; other states (scripts, hold reasons...) are ignored.
Times have one-second resolution.
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from wire_daemon.core.events import EventKind, TaskEvent
from wire_daemon.monitor.position import AppendedReader, ReadPosition
from wire_daemon.monitor.problems import Limited, Problems

INTERNAL = "INTERNAL"
MAX_TIME = 253402300799.0  # 9999-12-31 23:59:59 UTC
_MAX_INT32 = 2**31 - 1
_SIMPLE = {
    "SUBMIT": EventKind.SUBMITTED,
    "EXECUTE": EventKind.STARTED,
    "JOB_HELD": EventKind.HELD,
    "JOB_RELEASED": EventKind.RELEASED,
    "JOB_EVICTED": EventKind.EVICTED,
    "SHADOW_EXCEPTION": EventKind.EVICTED,
    "JOB_RECONNECT_FAILED": EventKind.EVICTED,
    "JOB_ABORTED": EventKind.ABORTED,
}


@dataclass(frozen=True)
class JobstateLine:
    time: float
    job: str
    state: str
    condor_id: str | None = None  # "9.0"; None on INTERNAL lines
    exit_code: int | None = None  # *_SUCCESS / *_FAILURE lines
    site: str | None = None
    remote_id: str | None = None
    submit_seq: int | None = None
    line: int = 0

    @property
    def internal(self) -> bool:
        return self.job == INTERNAL


class JobstateLineError(ValueError):
    """A jobstate line with a value that cannot be (a time that is not finite, an exit code beyond 32 bits)."""


def parse_jobstate_line(text: str, line: int = 0) -> JobstateLine | None:
    """One line, or None when it is not a jobstate line; ``JobstateLineError`` when it is one that cannot be."""
    words = text.split()
    if len(words) < 3:
        return None
    try:
        when = float(words[0])
    except ValueError:
        return None
    if not (math.isfinite(when) and 0 <= when <= MAX_TIME):
        raise JobstateLineError(f"time {words[0][:40]!r} is not a time between the epoch and the year 9999")
    if words[1] == INTERNAL:
        inner = [w for w in words[2:] if w != "***"]
        return JobstateLine(when, INTERNAL, inner[0], line=line) if inner else None
    state = words[2]
    fourth = words[3] if len(words) > 3 else None
    code = _int(fourth) if state.endswith(("_SUCCESS", "_FAILURE")) else None
    if code is not None and abs(code) > _MAX_INT32:
        raise JobstateLineError(f"exit code {str(fourth)[:40]!r} does not fit in 32 bits")
    return JobstateLine(
        time=when,
        job=words[1],
        state=state,
        condor_id=None if code is not None else fourth,
        exit_code=code,
        site=_dash(words, 4),
        remote_id=_dash(words, 5),
        submit_seq=_seq(_dash(words, 6)),
        line=line,
    )


class JobstateReader:
    """``read()`` returns the lines completed since the previous call."""

    def __init__(
        self, path: str | os.PathLike[str], position: ReadPosition | None = None, problems: Problems | None = None
    ) -> None:
        self.path = os.fspath(path)
        self.problems = problems or Problems()
        self._bytes = AppendedReader(self.path, position, self.problems)

    @property
    def position(self) -> ReadPosition:
        return self._bytes.position

    @property
    def restarts(self) -> int:
        """Times the file was read again from the start (cut, rotated, rewritten in place)."""
        return self._bytes.restarts

    def read(self) -> list[JobstateLine]:
        chunk = self._bytes.read()
        if chunk is None:
            return []
        complete = chunk.data.rfind(b"\n") + 1
        if complete == 0:
            return []
        out: list[JobstateLine] = []
        first = chunk.start.line + 1
        text = chunk.data[:complete].decode("utf-8", errors="replace")
        with Limited(self.problems) as warn:  # a million bad lines: a hundred warnings and a count
            for number, raw in enumerate(text.splitlines(), first):
                if not raw.strip():
                    continue
                try:
                    parsed = parse_jobstate_line(raw, number)
                except JobstateLineError as exc:
                    warn.warn(self.path, f"jobstate line skipped: {exc}", number)
                    continue
                if parsed is None:
                    warn.warn(self.path, f"not a jobstate line: {raw[:60]!r}; skipped", number)
                else:
                    out.append(parsed)
        self._bytes.commit(chunk, complete)
        return out


@dataclass
class JobstateMapper:
    """jobstate lines -> task events (see the module docstring); ``terminated`` is its state."""

    terminated: dict[str, float] = field(default_factory=dict)  # job -> time of JOB_TERMINATED
    condor_ids: dict[str, str] = field(default_factory=dict)  # job -> Condor id of its latest submit

    def map(self, lines: Iterable[JobstateLine]) -> list[TaskEvent]:
        out: list[TaskEvent] = []
        for line in lines:
            event = self._map_one(line)
            if event is not None:
                out.append(event)
        return out

    def to_dict(self) -> dict[str, Any]:
        return {"terminated": dict(self.terminated), "condor_ids": dict(self.condor_ids)}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> JobstateMapper:
        return cls(
            {str(k): float(v) for k, v in dict(data.get("terminated", {})).items()},
            {str(k): str(v) for k, v in dict(data.get("condor_ids", {})).items()},
        )

    def _map_one(self, line: JobstateLine) -> TaskEvent | None:
        if line.internal:
            return None
        if line.condor_id is not None:
            self.condor_ids[line.job] = line.condor_id
        if line.state == "JOB_TERMINATED":
            self.terminated[line.job] = line.time
            return None
        if line.state in ("JOB_SUCCESS", "JOB_FAILURE"):
            when = self.terminated.pop(line.job, line.time)
            code = line.exit_code if line.exit_code is not None else (0 if line.state == "JOB_SUCCESS" else 1)
            condor_job = self.condor_ids.get(line.job)
            return TaskEvent(when, EventKind.FINISHED, line.job, exit_code=code, condor_job=condor_job)
        kind = _SIMPLE.get(line.state)
        return TaskEvent(line.time, kind, line.job) if kind is not None else None


def _seq(text: str | None) -> int | None:
    number = _int(text)
    return number if number is not None and abs(number) <= _MAX_INT32 else None


def _dash(words: list[str], i: int) -> str | None:
    if i >= len(words) or words[i] == "-":
        return None
    return words[i]


def _int(text: str | None) -> int | None:
    if text is None:
        return None
    try:
        return int(text)
    except ValueError:  # includes an integer of more than 4,300 digits
        return None
