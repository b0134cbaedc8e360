"""What an operator reads: times on the wall clock, and each decision in plain words.

Times. On a real submit host the loop's clock is the wall clock (Unix
seconds): every time an operator reads is shown in UTC,
``2025-11-05 12:03:00Z``. On the emulated site the loop's clock is virtual
(seconds since the replay started, sped up): those times are shown as
offsets, ``+0:06:00 (virtual)``, and say so. A decisions-log record says
which clock it used (``"clock": "virtual"``); an older record without the
key is read as virtual when its time is before 2001 (no real site ran then).

``--since`` takes an ISO time (``2025-11-05T12:00``, UTC unless it names a
zone), a duration back from now (``10m``, ``10m ago``, ``2h``, ``1d``,
``90s``), or a bare number: seconds on the loop's clock, as the log's
``time`` field holds them (virtual seconds on the emulated site).
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from wire_daemon.core.errors import ConfigError

_EPOCH_MIN_S = 1e9  # a loop time before 2001 is not a wall-clock time
_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(s|sec|secs|m|min|mins|h|hr|hrs|d|day|days)?\s*(ago)?\s*$", re.I)
_UNIT_S = {"s": 1, "sec": 1, "secs": 1, "m": 60, "min": 60, "mins": 60, "h": 3600, "hr": 3600, "hrs": 3600}
_UNIT_S |= {"d": 86400, "day": 86400, "days": 86400}


# -- times -------------------------------------------------------------------------


def is_virtual(record: dict[str, Any]) -> bool:
    """Was this record's ``time`` on the emulated site's virtual clock?"""
    clock = record.get("clock")
    if clock in ("virtual", "wall"):
        return clock == "virtual"
    t = record.get("time")
    return not (isinstance(t, (int, float)) and t >= _EPOCH_MIN_S)


def wall(t: float) -> str:
    """A Unix time in UTC: ``2025-11-05 12:03:00Z``."""
    return datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%d %H:%M:%SZ")


def offset(t: float) -> str:
    """Virtual seconds since the replay started: ``+1:02:03 (virtual)``."""
    sign = "-" if t < 0 else "+"
    seconds = int(round(abs(t)))
    return f"{sign}{seconds // 3600}:{seconds // 60 % 60:02d}:{seconds % 60:02d} (virtual)"


def when(t: float, virtual: bool) -> str:
    return offset(t) if virtual else wall(t)


def ago(seconds: float) -> str:
    """``42 s ago``, ``3 min ago``, ``2.5 h ago``."""
    seconds = max(seconds, 0.0)
    if seconds < 120:
        return f"{seconds:.0f} s ago"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min ago"
    return f"{seconds / 3600:.1f} h ago"


def duration(seconds: float) -> str:
    """``45 s``, ``7.5 min``, ``2.1 h``."""
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.1f} min"
    return f"{seconds / 3600:.1f} h"


# -- --since ------------------------------------------------------------------------


@dataclass(frozen=True)
class Since:
    """A lower bound on a record's time: on the wall clock, or on the loop's clock."""

    wall_s: float | None = None  # Unix seconds
    loop_s: float | None = None  # the log's own ``time`` field

    def admits(self, record: dict[str, Any]) -> bool:
        t = record.get("time")
        if not isinstance(t, (int, float)):
            return True
        if self.loop_s is not None:
            return t >= self.loop_s
        if self.wall_s is None:
            return True
        if not is_virtual(record):
            return t >= self.wall_s
        written = record.get("wall")  # a virtual record: when it was written
        return not isinstance(written, (int, float)) or written >= self.wall_s


def parse_since(text: str | None, now: Callable[[], float] = time.time) -> Since:
    """``--since``: an ISO time, a duration back from now, or loop-clock seconds; one clear error otherwise."""
    if text is None or text == "":
        return Since()
    stripped = text.strip()
    if re.fullmatch(r"-?\d+(\.\d+)?", stripped):
        return Since(loop_s=float(stripped))
    match = _DURATION.match(stripped)
    if match and (match.group(2) or match.group(3)):
        unit = (match.group(2) or "s").lower()
        return Since(wall_s=now() - float(match.group(1)) * _UNIT_S[unit])
    try:
        moment = datetime.fromisoformat(stripped.replace("Z", "+00:00").replace("z", "+00:00"))
    except ValueError:
        raise ConfigError(
            f"--since {text!r}: give an ISO time (2025-11-05T12:00, UTC unless a zone is named), "
            "a duration back from now (10m, 10m ago, 2h, 1d), or seconds on the loop's clock (360)"
        ) from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return Since(wall_s=moment.timestamp())


# -- decisions in words --------------------------------------------------------------


def _ids(ids: list[str], limit: int = 4) -> str:
    shown = ", ".join(ids[:limit])
    return shown + (f" and {len(ids) - limit} more" if len(ids) > limit else "")


def ends_in_s(r: dict[str, Any], makespan_s: float) -> float:
    """Seconds from a decision to an estimated end (``estimates[].makespan_s``, ``full_pool_makespan_s``;
    the full pool's is negative when the full pool, from the workflow's start, would have ended already).

    A record holds that duration. Logs written before it did hold the end
    itself, on the loop's clock: on the wall clock an epoch time (no estimate
    is 30 years long), read here as the end it is.
    """
    now = r.get("time")
    if makespan_s >= _EPOCH_MIN_S and isinstance(now, (int, float)) and not is_virtual(r):
        return makespan_s - now
    return makespan_s


def estimate_words(r: dict[str, Any]) -> str:
    """When the workflow would end and what it would still cost, at the chosen pool size and one either side."""

    def ends(makespan_s: float) -> str:
        return f"ends in {duration(max(ends_in_s(r, makespan_s), 0.0))}"

    cells = []
    for e in r.get("estimates") or []:
        chosen = " (chosen)" if e.get("size") == r.get("planned") else ""
        cells.append(f"{e['size']} instance(s){chosen}: {ends(e['makespan_s'])}, {e['cost_units']} more unit(s)")
    text = "estimates: " + "; ".join(cells)
    full = r.get("full_pool_makespan_s")
    if isinstance(full, (int, float)):  # from the workflow's start: that end may be past already
        left = ends_in_s(r, full)
        text += f"; the full pool would {f'end in {duration(left)}' if left >= 0 else f'have ended {ago(-left)}'}"
    return text


def decision_words(r: dict[str, Any]) -> str:
    """One decisions-log record in plain words, without its time."""
    event = r.get("event")
    if event == "control":
        return str(r.get("rule") or f"operator: {r.get('command')}")
    if event == "shutdown":
        parts = [f"daemon stopped: {r.get('reason') or 'shutdown'}"]
        if r.get("terminated"):
            parts.append(f"terminated {_ids(r['terminated'])}")
        if "cost_units" in r:
            parts.append(f"cost {r['cost_units']} unit(s) in all")
        parts.extend(r.get("notes") or [])
        return "; ".join(parts)
    pool, target = r.get("pool", 0), r.get("target", 0)
    change = f"pool {pool} -> {target}" if pool != target else f"pool stays at {pool}"
    actions = []
    if r.get("launched"):
        actions.append(f"launching {len(r['launched'])} ({_ids(r['launched'])})")
    if r.get("released"):
        actions.append(f"releasing {_ids(r['released'])} (drained now, terminated when the paid unit ends)")
    if r.get("terminated"):
        actions.append(f"terminated {_ids(r['terminated'])}")
    head = f"decision ({r['policy']}): " if r.get("policy") else "decision: "
    parts = [head + change + (", " + ", ".join(actions) if actions else "")]
    parts.append(f"tasks {r.get('done', 0)} done, {r.get('running', 0)} running, {r.get('idle', 0)} queued")
    load_s = float(r.get("upcoming_load_s") or 0.0)
    parts.append(f"predicted load {r.get('upcoming_tasks', 0)} task(s), {duration(load_s)} of slot time")
    if "cost_units" in r:
        money = f", money {r['cost_money']:.2f}" if isinstance(r.get("cost_money"), (int, float)) else ""
        parts.append(f"cost so far {r['cost_units']} unit(s){money}")
    if r.get("rule"):
        parts.append(f"why: {r['rule']}")
    if r.get("estimates"):  # a policy that estimates the whole run (target-slowdown)
        parts.append(estimate_words(r))
    notes = r.get("notes") or []
    if notes:
        parts.append("notes: " + " | ".join(notes))
    return "; ".join(parts)


def decision_line(r: dict[str, Any]) -> str:
    """A record with its time: on the wall clock (UTC), or as a virtual offset on the emulated site."""
    t = r.get("time")
    stamp = when(float(t), is_virtual(r)) if isinstance(t, (int, float)) else "(no time)"
    return f"{stamp}  {decision_words(r)}"
