"""Spot interruptions as the operator counts them: per instance type and zone, and the work they lost.

``InterruptionTally`` observes the journal's ``InstanceReclaimed`` events (the
guarded cloud publishes one for each spot instance that left the cloud's
listing without us terminating it; the emulated runtime for each reclaim of
its market). An instance is counted once, whoever tells of it.

The work lost is the slot-seconds the reclaimed instance's tasks had run and
must run again: measured by the emulated site, and on a real pool read from
the tasks' own events: the occupancy of the tasks evicted from that instance,
and of those still shown running on it (their eviction not read yet).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from wire_daemon.core.journal import InstanceReclaimed
from wire_daemon.core.run_state import RunState, TaskStatus


@dataclass(frozen=True)
class Reclaim:
    time: float
    instance_id: str
    instance_type: str
    zone: str
    lost_slot_s: float | None  # None: read from the tasks' events


class InterruptionTally:
    """Every spot reclaim seen since the daemon started, once each."""

    def __init__(self) -> None:
        self.reclaims: dict[str, Reclaim] = {}

    def notify(self, event: object) -> None:
        if not isinstance(event, InstanceReclaimed):
            return
        seen = self.reclaims.get(event.instance_id)
        if seen is None or (seen.lost_slot_s is None and event.lost_slot_s is not None):
            self.reclaims[event.instance_id] = Reclaim(
                event.time, event.instance_id, event.instance_type, event.zone, event.lost_slot_s
            )

    def counts(self) -> dict[tuple[str, str], int]:
        """Reclaims per (instance type, zone); "" where a cloud has no type or zone to tell."""
        out: dict[tuple[str, str], int] = {}
        for r in self.reclaims.values():
            out[(r.instance_type, r.zone)] = out.get((r.instance_type, r.zone), 0) + 1
        return out

    def lost_slot_s(self, state: RunState, now: float) -> float:
        """The slot-seconds of work the reclaims threw away (to be run again)."""
        unmeasured = {i for i, r in self.reclaims.items() if r.lost_slot_s is None}
        lost = sum(r.lost_slot_s for r in self.reclaims.values() if r.lost_slot_s is not None)
        lost += sum(state.evicted_s_by_host.get(i, 0.0) for i in unmeasured)
        for task, host in state.host.items():
            if host in unmeasured and state.status.item(task) == TaskStatus.RUNNING:
                started = state.start_time.item(task)
                lost += max(now - started, 0.0) if not math.isnan(started) else 0.0
        return lost
