"""Event times from HTCondor job event logs, as seconds since the epoch.

What an event header's stamp means (and where the ``htcondor2`` bindings, 25.x,
read it otherwise, which is why the daemon reads it itself):

* **No year.** Logs written before HTCondor 9 (and any log written with
  ``ISO_DATE`` off) stamp events as ``MM/DD hh:mm:ss``. The bindings fill in
  the *current* year, so a 2019 log would read as this year, and a log that
  runs over New Year would jump back by eleven months. We infer the year
  instead (see ``YearGuess``).
* **UTC stamps.** A stamp ending in ``Z`` was written in UTC (the bindings'
  ``timestamp`` reads it as local time).
* **Sub-second stamps** are kept (the bindings truncate them).

Without a zone a stamp is local time, the submit host's: that is where the
schedd and shadows write the log and where the daemon runs, so no clock skew
enters between events of one log.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

_ISO = re.compile(r"(\d{4})-(\d{2})-(\d{2})[T ](\d{2}):(\d{2}):(\d{2})(\.\d+)?(Z|[+-]\d{2}:?\d{2})?$")
_ROLLOVER = timedelta(days=183)
_SLACK = timedelta(days=1)


class TimeFormatError(ValueError):
    """An event time that cannot be read."""


@dataclass
class YearGuess:
    """The year of ``MM/DD hh:mm:ss`` stamps, guessed once per log and carried forward.

    Rule (ours): the first yearless stamp gets the year that puts it at or
    before the log file's modification time (plus a day of slack for clock
    changes): events cannot be newer than the file that records them. From
    then on stamps are nearly in order, so a stamp more than half a year
    *before* the previous one means the log crossed New Year (the year moves
    on), and a stamp more than half a year *after* the previous one is a
    late-written event from the old year (the year stays). The state is part
    of the reader's checkpoint so a restarted reader keeps the same years.
    """

    year: int = 0  # 0: no yearless stamp seen yet
    last: float = 0.0  # naive local time of the previous stamp, as a POSIX-like number

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> YearGuess:
        return cls(int(data.get("year", 0)), float(data.get("last", 0.0)))

    def resolve(self, month: int, day: int, clock: tuple[int, int, int], reference: float) -> datetime:
        if not self.year:
            self.year = _first_year(month, day, clock, reference)
            stamp = _naive(self.year, month, day, clock)
            self.last = _naive_seconds(stamp)
            return stamp
        stamp = _naive(self.year, month, day, clock)
        previous = _from_naive_seconds(self.last)
        if stamp < previous - _ROLLOVER:
            self.year += 1
            stamp = _naive(self.year, month, day, clock)
        elif stamp > previous + _ROLLOVER:
            return _naive(self.year - 1, month, day, clock)
        self.last = _naive_seconds(stamp)
        return stamp


def event_time(stamp: str, yearless: bool, guess: YearGuess, reference: float) -> float:
    """Seconds since the epoch of one event (``stamp``: its header's time as ISO 8601).

    ``yearless``: the log's headers are ``MM/DD hh:mm:ss`` (the stamp then has a
    placeholder year): we keep its month, day and clock and guess the year.
    """
    if not yearless:
        return iso_seconds(stamp)
    match = _ISO.match(stamp)
    if not match:
        raise TimeFormatError(f"bad event time {stamp!r}")
    month, day, hour, minute, second = (int(g) for g in match.groups()[1:6])
    try:
        when = guess.resolve(month, day, (hour, minute, second), reference)
    except ValueError as exc:
        raise TimeFormatError(f"bad date {month:02d}/{day:02d}: {exc}") from None
    return when.timestamp() + float(match.group(7) or 0.0)


def iso_seconds(value: Any) -> float:
    """``YYYY-MM-DDThh:mm:ss[.fff][Z|+hh:mm]`` -> seconds; local time when no zone is given."""
    match = _ISO.match(value) if isinstance(value, str) else None
    if not match:
        raise TimeFormatError(f"bad event time {value!r}")
    year, month, day, hour, minute, second = (int(g) for g in match.groups()[:6])
    try:
        stamp = datetime(year, month, day, hour, minute, second)
    except ValueError as exc:
        raise TimeFormatError(f"bad event time {value!r}: {exc}") from None
    zone = match.group(8)
    if zone:
        stamp = stamp.replace(tzinfo=_zone(zone))
    return stamp.timestamp() + float(match.group(7) or 0.0)


def _zone(text: str) -> timezone:
    if text == "Z":
        return UTC
    sign = -1 if text[0] == "-" else 1
    digits = text[1:].replace(":", "")
    return timezone(sign * timedelta(hours=int(digits[:2]), minutes=int(digits[2:])))


def _first_year(month: int, day: int, clock: tuple[int, int, int], reference: float) -> int:
    anchor = datetime.fromtimestamp(reference)
    year = anchor.year
    try:
        if _naive(year, month, day, clock) > anchor + _SLACK:
            year -= 1
    except ValueError:  # 02/29 in a common year: take the latest leap year not after the anchor
        while not _is_leap(year):
            year -= 1
    return year


def _naive(year: int, month: int, day: int, clock: tuple[int, int, int]) -> datetime:
    return datetime(year, month, day, *clock)


def _naive_seconds(stamp: datetime) -> float:
    return (stamp - datetime(1970, 1, 1)).total_seconds()


def _from_naive_seconds(seconds: float) -> datetime:
    return datetime(1970, 1, 1) + timedelta(seconds=seconds)


def _is_leap(year: int) -> bool:
    return year % 4 == 0 and (year % 100 != 0 or year % 400 == 0)
