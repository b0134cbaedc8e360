"""``wire-daemon status`` in words: a ``StatusReport`` (``service/status.py``) as the lines an operator reads."""

from __future__ import annotations

import time

from wire_daemon.ports.prediction import POLICY_RUNNING_ONLY
from wire_daemon.service.status import PoolInstance, StatusReport, StatusSnapshot
from wire_daemon.service.wording import ago, duration
from wire_daemon.service.wording import wall as wall_time
from wire_daemon.service.wording import when as time_of


def render_status(report: StatusReport, now: float | None = None) -> str:
    now = time.time() if now is None else now
    snapshot = report.snapshot
    lines = _dry_run_lines(snapshot) + [_daemon_line(report, now)] + _condor_away_lines(report)
    lines += _safe_state_lines(report)
    if report.daemon == "never ran" or snapshot is None:
        return "\n".join(lines + _pending_lines(report) + ["no decision yet"])
    virtual = snapshot.virtual
    control = report.control or snapshot.control
    lines.append(f"mode: {control.describe}")
    lines += _pending_lines(report)
    if virtual:
        lines.append(f"loop clock {time_of(snapshot.time, True)}: the emulated site's virtual time")
    else:
        lines.append(f"loop clock {wall_time(snapshot.time)}")
    lines += _workflow_lines(snapshot, virtual)
    tasks = snapshot.tasks
    if tasks is not None:
        lines.append(
            f"tasks: {tasks.done} of {tasks.total} done, {tasks.running} running, {tasks.idle} queued, "
            f"{tasks.held} held, {tasks.not_ready} not ready"
        )
    last = snapshot.last_decision
    if last is not None:
        stamp = time_of(last.time, virtual) if last.time is not None else "?"
        lines.append(f"last decision ({stamp}): {last.words or last.rule}")
        if last.details:
            lines.append(f"  details: {last.details}")
    lines += _pool_lines(snapshot, virtual)
    lines.append(_cost_line(snapshot))
    lines += _interruption_lines(snapshot)
    remaining = snapshot.remaining_makespan_estimate_s
    if remaining and report.stopped is None:
        lines.append(f"remaining work over the pool's slots: about {duration(remaining)} (a lower bound)")
    return "\n".join(lines + _stage_lines(snapshot))


def _pending_lines(report: StatusReport) -> list[str]:
    lines = []
    for c in report.pending_controls:
        what = c.command + (f" {c.count}" if c.count is not None else "") + (f" {c.argument}" if c.argument else "")
        by = f" by {c.requested_by}" if c.requested_by else ""
        lines.append(f"  pending: {what} (asked {wall_time(c.requested_at)}{by}; not applied yet)")
    return lines


def _daemon_line(report: StatusReport, now: float) -> str:
    line = f"daemon: {report.daemon}" + (f" (pid {report.pid})" if report.pid else "")
    beat = report.last_heartbeat_wall
    if beat is not None:
        line += f"; last heartbeat {wall_time(beat)} ({ago(now - beat)})"
    stopped = report.stopped
    if report.daemon == "down" and stopped is not None:
        line += f"\nstopped {wall_time(stopped.wall) if stopped.wall else ''}: {stopped.reason}"
        if stopped.finished:
            line += " (the figures below are final)"
    return line


def _dry_run_lines(snapshot: StatusSnapshot | None) -> list[str]:
    """At the top, before anything else: a dry run changes nothing, whatever the lines below say."""
    if snapshot is None or not snapshot.dry_run:
        return []
    return ["DRY-RUN: no cloud call is made; the launches and terminations below are what it would have done"]


def _condor_away_lines(report: StatusReport) -> list[str]:
    away = report.condor_away
    if away is None:
        return []
    since = f" since {wall_time(away.since)}" if away.since is not None else ""
    return [f"HTCONDOR UNREACHABLE{since}: {away.reason}; the pool is held as it is until it answers"]


def _safe_state_lines(report: StatusReport) -> list[str]:
    safe = report.safe_state
    if safe is None or not safe.active:
        return []
    since = f" since {wall_time(safe.since)}" if safe.since is not None else ""
    was = "" if report.daemon == "running" else " (when it stopped)"
    recover = "?" if safe.recover_iterations is None else safe.recover_iterations
    return [
        f"SAFE STATE{since}{was}: {safe.reason}; no launch, no termination until "
        f"{recover} iteration(s) in a row succeed ({safe.succeeded_in_a_row} so far)"
    ]


def _workflow_lines(snapshot: StatusSnapshot, virtual: bool) -> list[str]:
    workflows = snapshot.workflows
    if workflows is None:
        return []
    if not workflows:
        return ["workflows: none followed (no workflow under the submit root yet)"]
    lines = [f"workflows ({len(workflows)}):"]
    for w in workflows:
        progress = f"{w.done}/{w.tasks} tasks done"
        state = w.state
        if w.exit_code not in (None, 0):
            state += f" (DAGMan exit {w.exit_code})"
        if w.finished_at is not None:
            state += f" at {time_of(w.finished_at, virtual)}"
        where = w.submit_dir or w.trace or ""
        lines.append(f"  {w.name:<28} {state:<24} {progress:<20} {where}")
    return lines


def _pool_lines(snapshot: StatusSnapshot, virtual: bool) -> list[str]:
    pool = snapshot.pool
    lines = [f"pool: {len(pool)} instance(s)" + ("" if pool else ": none")]
    lines += [_instance_line(i, virtual) for i in pool]
    ended = snapshot.ended_instances
    count = max(snapshot.ended_instances_count, len(ended))
    if count:
        shown = ", ".join(f"{e.instance_id} ({e.lifecycle})" for e in ended)
        more = f" (latest: {shown})" if count > len(ended) else f": {shown}"
        lines.append(f"  ended since the daemon started: {count}{more}")
    return lines


def _instance_line(i: PoolInstance, virtual: bool) -> str:
    parts = [f"  {i.instance_id:<20} {i.lifecycle or '?':<11}"]
    if i.state:
        parts.append(f"cloud: {i.state:<8}")
    if i.age_s is not None:
        parts.append(f"up {duration(i.age_s):>8}")
    if i.slots:
        parts.append(f"busy {i.busy_slots or 0}/{i.slots}")
    if i.release_at is not None:
        parts.append(f"terminated at {time_of(i.release_at, virtual)}")
    elif i.next_charge_in_s is not None:
        parts.append(f"next unit in {duration(i.next_charge_in_s)}")
    return "  ".join(parts)


def _cost_line(snapshot: StatusSnapshot) -> str:
    unit = snapshot.charging_unit_s
    per = f" of {duration(unit)}" if unit is not None else ""
    cost = snapshot.cost
    if cost is None:  # an older snapshot: the total only
        return f"cost: {snapshot.cost_units} charging unit(s){per}"
    units = (
        f"cost: {cost.total_units} charging unit(s){per}: {cost.spent_units} spent (ended), "
        f"{cost.committed_units} committed (started, not yet ended)"
    )
    if cost.spent_money is None or cost.committed_money is None:  # an older snapshot: units only
        return units
    spent, committed = cost.spent_money, cost.committed_money
    return (
        f"{units}\nmoney: {spent + committed:.2f} {cost.currency}: {spent:.2f} spent, "
        f"{committed:.2f} committed (charged, not yet used)"
    )


def _interruption_lines(snapshot: StatusSnapshot) -> list[str]:
    """Spot reclaims per type and zone and the work they lost, then the back-offs in force; nothing while
    there was none."""
    seen = snapshot.interruptions
    lines = []
    if seen.total:
        where = ", ".join(
            f"{c.instance_type or 'default type'} in {c.zone or 'no zone'}: {c.count}" for c in seen.by_type_zone
        )
        lines.append(
            f"spot interruptions: {seen.total} reclaimed by the cloud ({where}); "
            f"work lost: {seen.lost_slot_s:.0f} slot-s ({duration(seen.lost_slot_s)} of one slot), to run again"
        )
    for b in seen.back_offs:
        left = max(b.until - snapshot.time, 0.0)
        lines.append(f"spot back-off: {b.instance_type or 'default type'} launches on-demand for {duration(left)} more")
    return lines


def _stage_lines(snapshot: StatusSnapshot) -> list[str]:
    if not snapshot.stages:
        return []
    lines = ["stages:"]
    for s in snapshot.stages:
        if s.predicted_occupancy_s is not None and s.prediction_policy == POLICY_RUNNING_ONLY:
            # Nothing of the stage finished: its tasks take at least as long as the longest has run so far.
            predicted = f"  at least {s.predicted_occupancy_s:>6.1f} s (running, none finished yet)"
        elif s.predicted_occupancy_s is not None:
            predicted = f"  predicted {s.predicted_occupancy_s:>7.1f} s (policy {s.prediction_policy})"
        else:
            predicted = "  not started: no prediction yet" if s.prediction_policy == 1 else ""
        lines.append(
            f"  {s.stage:<24} done {s.done:>5}/{s.tasks:<5} running {s.running:>4} "
            f"idle {s.idle:>5} not ready {s.not_ready:>5}{predicted}"
        )
    return lines
