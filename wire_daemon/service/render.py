"""Plain-text rendering of decisions and replay summaries for the terminal."""

from __future__ import annotations

import math
from typing import Any

from wire_daemon.runtime.replay import ReplayResult
from wire_daemon.service.wording import ends_in_s

_POLICY_LABELS = {1: "p1", 2: "p2", 3: "p3", 4: "p4", 5: "p5", 6: "prior-xform", 7: "prior-wf", 9: "oracle"}


def format_decision(r: dict[str, Any]) -> str:
    """One decision-log record on one line (a replay's records or the daemon's log)."""
    change = ""
    if r.get("launched"):
        change = f" launch {','.join(r['launched'])}"
    if r.get("released"):
        change += f" drain {','.join(r['released'])}"
    if r.get("terminated"):
        change += f" terminated {','.join(r['terminated'])}"
    counts = sorted((int(k), v) for k, v in (r.get("prediction_policies") or {}).items())
    preds = " ".join(f"{_POLICY_LABELS.get(k, k)}={v}" for k, v in counts)
    parts = [
        f"t={r.get('time', 0):8.0f}s done={r.get('done', 0):5d} "
        f"run={r.get('running', 0):4d} idle={r.get('idle', 0):5d} "
        f"pool={r.get('pool', 0):3d} -> {r.get('target', 0):3d} (p={r.get('planned', '?')}){change or ' -'}",
        f"load {r.get('upcoming_tasks', 0)} tasks/{r.get('upcoming_load_s', 0):.0f}s",
    ]
    if "cost_units" in r:
        parts.append(f"cost {r['cost_units']}")
    parts.append(r.get("rule", ""))
    if r.get("estimates"):
        parts.append(format_estimates(r))
    if preds:
        parts.append(f"predictions {preds}")
    parts.extend(r.get("notes") or [])
    return "; ".join(parts)


def format_estimates(r: dict[str, Any]) -> str:
    """The estimates of a policy that sees the whole run: time to the end and units still to pay, per pool size.

    The chosen size is in brackets; one instance either side shows what a
    different choice would have meant.
    """
    chosen = r.get("planned")
    cells = []
    for e in r.get("estimates") or []:
        cell = f"{e['size']}: ends in {ends_in_s(r, e['makespan_s']):.0f} s, +{e['cost_units']} units"
        cells.append(f"[{cell}]" if e["size"] == chosen else cell)
    text = "estimates " + " | ".join(cells)
    if r.get("full_pool_makespan_s") is not None:
        left = ends_in_s(r, r["full_pool_makespan_s"])
        text += f" (full pool: ends in {left:.0f} s)" if left >= 0 else f" (full pool: ended {-left:.0f} s ago)"
    return text


def format_table(results: dict[str, ReplayResult]) -> str:
    header = (
        f"{'policy':<20} {'cost(units)':>11} {'money':>9} {'makespan(s)':>12} {'rel.time':>8} {'util':>6} {'peak':>5} "
        f"{'restarts':>8} {'decision ms mean/max':>21}"
    )
    lines = [header, "-" * len(header)]
    for name, r in results.items():
        lines.append(
            f"{name:<20} {r.cost_units:>11d} {r.cost_money:>9.2f} {r.makespan_s:>12.1f} {r.relative_time:>8.3f} "
            f"{r.utilization:>6.3f} {r.peak_instances:>5d} {r.restarts:>8d} "
            f"{r.decision_mean_s * 1e3:>10.2f}/{r.decision_max_s * 1e3:<10.2f}"
        )
    lost = [(name, r) for name, r in results.items() if r.interruptions]
    if lost:
        lines.append("")
        lines.append("spot reclaims (work lost: slot-seconds rerun from zero):")
        lines.extend(f"  {name:<20} {r.interruptions} reclaims, {r.interrupted_slot_s:.0f} s lost" for name, r in lost)
    errors = [(name, r) for name, r in results.items() if any(e.tasks for e in r.errors)]
    if errors:
        lines.append("")
        lines.append("prediction error (policies 3-5, last prediction before each task started):")
        for name, r in errors:
            parts = []
            for e in r.errors:
                if e.tasks == 0:
                    parts.append(f"{e.stage_class}: -")
                elif e.unit == "s":
                    parts.append(f"{e.stage_class}: {e.tasks} tasks, mean |err| {e.mean_abs:.2f} s")
                else:
                    parts.append(f"{e.stage_class}: {e.tasks} tasks, mean |rel err| {_pct(e.mean_abs)}")
            lines.append(f"  {name:<12} " + "; ".join(parts))
    return "\n".join(lines)


def _pct(x: float) -> str:
    return "-" if math.isnan(x) else f"{100 * x:.1f}%"
