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


def duration(seconds: float, minute_digits: int = 1) -> str:
    """``45 s``, ``7.5 min`` (``8 min`` with no minute digits), ``2.1 h``."""
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.{minute_digits}f} min"
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
    """When the workflow would end and what it would still cost, at the policy's size and one either side.

    Where the operator (or the safe state) overrides the policy, the size the
    policy chose is named as the policy's, not as the pool's: the pool follows
    the operator. Once the run has a bill, each choice's units are also given in
    money, at what a unit has cost so far (``~``): the policy prices its choices
    in units, and which market and type each future launch buys is not decided
    until it launches.
    """

    def ends(makespan_s: float) -> str:
        return f"ends in {duration(max(ends_in_s(r, makespan_s), 0.0))}"

    label = " (the policy's choice)" if overridden(r) else " (chosen)"
    per_unit = _money_per_unit(r)
    currency = f" {r['currency']}" if r.get("currency") else ""
    cells = []
    for e in r.get("estimates") or []:
        chosen = label if e.get("size") == r.get("planned") else ""
        money = f" (~{e['cost_units'] * per_unit:.2f}{currency})" if per_unit is not None else ""
        cells.append(f"{e['size']} instance(s){chosen}: {ends(e['makespan_s'])}, {e['cost_units']} more unit(s){money}")
    text = "estimates: " + "; ".join(cells)
    full = r.get("full_pool_makespan_s")
    if isinstance(full, (int, float)):  # from the workflow's start: that end may be past already
        left = ends_in_s(r, full)
        text += f"; the full pool would {f'end in {duration(left)}' if left >= 0 else f'have ended {ago(-left)}'}"
    return text


# What the operator's control and the safe state write at the head of a rule they override
# (runtime/control.py), with the policy's own decision after "(the policy wanted N".
_OVERRIDES = ("held at ", "paused by the operator", "drain-all by the operator", "terminate-all by", "safe state")
_POLICY_WANTED = re.compile(r"\s*\(the policy wanted (\d+)")
REASON_MIN = 48  # a reason is cut to no fewer characters than this while something else can give way
DECISION_WORDS_MAX = 138  # one decision in at most this many characters; with its time, at most 160


def overridden(r: dict[str, Any]) -> bool:
    """Did the operator (or the safe state) decide this pool, not the policy?"""
    return str(r.get("rule") or "").startswith(_OVERRIDES)


def main_reason(rule: str) -> str:
    """The reason of a rule in a few words: its first clause; for an override, what the operator asked
    and what the policy would have done (never the policy's figures as if they were the pool's)."""
    wanted = _POLICY_WANTED.search(rule)
    if wanted and rule.startswith(_OVERRIDES):
        head = rule[: wanted.start()].removesuffix(": no change")
        return f"{head}; the policy would have {wanted.group(1)}"
    head = rule.split("; ")[0].strip()
    if head.startswith("drain-all by the operator"):
        return "drain-all by the operator: each instance ends with its paid unit"
    if head.startswith("terminate-all by the operator"):
        return "terminate-all by the operator"
    if head == "hold":
        return "no change needed"
    return head or "no rule given"


def _short_ids(ids: list[str]) -> str:
    return ids[0] if len(ids) == 1 else f"{ids[0]}, {ids[1]}" if len(ids) == 2 else f"{ids[0]}\u2026"


def _actions(r: dict[str, Any], ids: bool = True) -> list[str]:
    """What the decision did to the pool; in a dry run, what it would have done."""
    would = bool(r.get("dry_run"))
    verbs = (
        ("launched", "would launch" if would else "launching"),
        ("released", "would release" if would else "releasing"),
        ("terminated", "would terminate" if would else "terminated"),
        ("postponed", "would keep draining" if would else "kept draining"),  # a task on it is running late
    )
    shown = {key: list(r.get(key) or []) for key, _ in verbs}
    if shown["terminated"] and set(shown["released"]) <= set(shown["terminated"]):
        shown["released"] = []  # released and terminated at once (terminate-all): said once
    return [
        f"{verb} {len(shown[key])}" + (f" ({_short_ids(shown[key])})" if ids else "")
        for key, verb in verbs
        if shown[key]
    ]


def _change(r: dict[str, Any], acted: bool) -> str:
    pool, target = r.get("pool", 0), r.get("target", 0)
    if pool == target:
        return f"pool stays at {pool}"
    if acted:
        return f"pool {pool} -> {target}"
    return f"pool {pool}, aiming at {target}"  # earlier releases under way, or launches held back by a limit


def _money_per_unit(r: dict[str, Any]) -> float | None:
    """What a unit has cost this run so far, on average (its markets and types as they were bought): the
    price the estimates' units are given in money at. None before any money is known."""
    units, money = r.get("cost_units"), r.get("cost_money")
    if isinstance(units, int) and units > 0 and isinstance(money, (int, float)):
        return float(money) / units
    return None


def _money(r: dict[str, Any]) -> str:
    if "cost_units" not in r:
        return ""
    money = ""
    if isinstance(r.get("cost_money"), (int, float)):
        currency = f" {r['currency']}" if r.get("currency") else ""
        committed = r.get("money_committed")
        charged = isinstance(committed, (int, float)) and round(committed, 2) > 0
        of_it = f" ({committed:.2f} committed)" if charged else ""
        money = f", {r['cost_money']:.2f}{currency}{of_it}"
    return f"; cost {r['cost_units']} unit(s){money}"


def _cut(text: str, room: int) -> str:
    """``text`` in at most ``room`` characters, an ellipsis where it was cut."""
    if len(text) <= room:
        return text
    return text[: max(room - 1, 0)].rstrip(" ;:,") + "\u2026"


def one_line(r: dict[str, Any], limit: int = DECISION_WORDS_MAX) -> str:
    """A decision in one short line: what changed and the main reason, a large move of the prediction
    and why, the money so far. To stay within ``limit`` the instance ids give way first (``--verbose``
    lists them), then the prediction's note, then the reason, each cut with an ellipsis."""
    moved = f"; {r['load_change']}" if r.get("load_change") else ""
    money = _money(r)
    reason = main_reason(str(r.get("rule") or ""))
    wanted = min(len(reason), REASON_MIN)
    change = _change_words(r, ids=True)
    if limit - len(change) - len(moved) - len(money) - 2 < wanted:
        change = _change_words(r, ids=False)
    room = limit - len(change) - len(moved) - len(money) - 2
    if moved and room < wanted:
        moved = _cut(moved, len(moved) - (wanted - room))
        room = limit - len(change) - len(moved) - len(money) - 2
    return f"{change}: {_cut(reason, room)}{moved}{money}"


def _change_words(r: dict[str, Any], ids: bool) -> str:
    actions = _actions(r, ids)
    return _change(r, bool(actions)) + (", " + ", ".join(actions) if actions else "")


def decision_words(r: dict[str, Any], verbose: bool = False) -> str:
    """One decisions-log record in plain words, without its time: one short line, or with ``verbose``
    every figure (tasks, predicted load, the policy's full rule, its estimates, the notes)."""
    event = r.get("event")
    if event == "run":
        return run_words(r)
    if event == "control":
        return str(r.get("rule") or f"operator: {r.get('command')}")
    if event == "shutdown":
        parts = [f"daemon stopped: {r.get('reason') or 'shutdown'}"]
        if r.get("terminated"):
            verb = "would have terminated" if r.get("dry_run") else "terminated"
            parts.append(f"{verb} {_ids(r['terminated'])}")
        if "cost_units" in r:
            parts.append(f"cost {r['cost_units']} unit(s) in all")
        parts.extend(r.get("notes") or [])
        return "; ".join(parts)
    if not verbose:
        return one_line(r)
    return one_line(r, limit=10**6) + "; " + decision_details(r)


def decision_details(r: dict[str, Any]) -> str:
    """What the one line leaves out: the task counts, the predicted load, the full rule, the estimates, notes."""
    parts = [f"policy {r.get('policy') or '?'}"]
    parts.append(f"tasks {r.get('done', 0)} done, {r.get('running', 0)} running, {r.get('idle', 0)} queued")
    load_s = float(r.get("upcoming_load_s") or 0.0)
    parts.append(f"predicted load {r.get('upcoming_tasks', 0)} task(s), {duration(load_s)} of slot time")
    if r.get("rule"):
        parts.append(f"why: {r['rule']}")
    if r.get("estimates"):  # a policy that estimates the whole run (target-slowdown)
        parts.append(estimate_words(r))
    if r.get("launched") or r.get("released"):
        ids = [f"{key} {', '.join(r[key])}" for key in ("launched", "released") if r.get(key)]
        parts.append("; ".join(ids) + (" (drained now, terminated when the paid unit ends)" * bool(r.get("released"))))
    notes = r.get("notes") or []
    if notes:
        parts.append("notes: " + " | ".join(notes))
    return "; ".join(parts)


def run_words(r: dict[str, Any]) -> str:
    """A run's header record: which run, on which site, with which policy and config."""
    dry = ", DRY-RUN" if r.get("dry_run") else ""
    config = f", config {r['config']}" if r.get("config") else ""
    return f"run {r.get('run', '?')} started: {r.get('site', '?')}, policy {r.get('policy', '?')}{dry}{config}"


def decision_line(r: dict[str, Any], verbose: bool = False) -> str:
    """A record with its time: on the wall clock (UTC), or as a virtual offset on the emulated site."""
    t = r.get("time")
    stamp = when(float(t), is_virtual(r)) if isinstance(t, (int, float)) else "(no time)"
    return f"{stamp}  {decision_words(r, verbose)}"
