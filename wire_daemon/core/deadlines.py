"""An operator's deadline: a wall-clock time (ISO 8601, with its time zone) or a duration from the workflow's start.

``steering.deadline`` and the ``deadline`` control command take the same
text: ``2026-11-27T08:00:00Z`` (a moment; a zone is required, a time without
one means a different moment on every host), or a duration such as ``8h``,
``90m``, ``1h30m``, ``45s`` or ``2d`` (from the workflow's first event, so a
restarted daemon keeps the same deadline). ``parse_deadline`` refuses
anything else with one line that says what it takes.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime

_UNIT_S = {"d": 86400.0, "h": 3600.0, "m": 60.0, "min": 60.0, "s": 1.0}
_PART = re.compile(r"(\d+(?:\.\d+)?)(d|h|min|m|s)")
FORMS = "a time with its zone (2026-11-27T08:00:00Z) or a duration from the workflow's start (8h, 90m, 1h30m)"


@dataclass(frozen=True)
class Deadline:
    """A deadline as given: a moment (``at``, epoch seconds) or a duration after the workflow's start."""

    text: str
    at: float | None = None
    after_s: float | None = None

    def resolve(self, start: float) -> float:
        """The moment it falls at, for a workflow that started at ``start`` (epoch seconds, or the replay's clock)."""
        return self.at if self.at is not None else start + (self.after_s or 0.0)

    def passed_s(self, now: float) -> float:
        """How long ago a moment deadline passed at ``now`` (0: not yet, or a duration, which counts from a
        workflow's start)."""
        return max(now - self.at, 0.0) if self.at is not None else 0.0

    def shown(self) -> str:
        """Short, for a decision line: 08:00Z (a moment: its UTC time of day) or 8h after start."""
        if self.at is not None:
            return datetime.fromtimestamp(self.at, UTC).strftime("%H:%MZ")
        return f"{self.text} after start"


def parse_deadline(text: str) -> Deadline:
    """``text`` as a deadline; ValueError with one line saying what is taken."""
    given = text.strip()
    compact = given.replace(" ", "").lower()
    if compact and _PART.sub("", compact) == "":
        seconds = sum(float(n) * _UNIT_S[unit] for n, unit in _PART.findall(compact))
        if seconds <= 0:
            raise ValueError(f"must be a duration above 0 (got {given!r})")
        return Deadline(given, after_s=seconds)
    try:
        moment = datetime.fromisoformat(given)
    except ValueError:
        raise ValueError(f"must be {FORMS} (got {given!r})") from None
    if moment.tzinfo is None:
        raise ValueError(f"needs its time zone, e.g. {given}Z for UTC (got {given!r})")
    return Deadline(given, at=moment.timestamp())
