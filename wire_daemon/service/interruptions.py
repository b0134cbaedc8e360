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

import json
import math
from dataclasses import asdict, dataclass

from wire_daemon.core.journal import InstanceReclaimed
from wire_daemon.core.run_state import RunState, TaskStatus

INTERRUPTIONS_KEY = "interruptions"  # the state file's meta key of the tally


@dataclass(frozen=True)
class Reclaim:
    time: float
    instance_id: str
    instance_type: str
    zone: str
    lost_slot_s: float | None  # None: read from the tasks' events


class InterruptionTally:
    """Every spot reclaim seen, once each; kept across restarts through ``to_json`` / ``from_json``."""

    def __init__(self) -> None:
        self.reclaims: dict[str, Reclaim] = {}
        self.changed = False  # since the last to_json

    def notify(self, event: object) -> None:
        if not isinstance(event, InstanceReclaimed):
            return
        seen = self.reclaims.get(event.instance_id)
        if seen is None or (seen.lost_slot_s is None and event.lost_slot_s is not None):
            self.reclaims[event.instance_id] = Reclaim(
                event.time, event.instance_id, event.instance_type, event.zone, event.lost_slot_s
            )
            self.changed = True

    def to_json(self) -> str:
        self.changed = False
        return json.dumps([asdict(r) for r in self.reclaims.values()])

    @classmethod
    def from_json(cls, text: str | None) -> InterruptionTally:
        """The tally a state file kept; what it cannot read (absent, damaged, another version's) is left out."""
        tally = cls()
        try:
            items = json.loads(text) if text else []
        except ValueError:
            items = []
        for item in items if isinstance(items, list) else []:
            reclaim = _reclaim(item)
            if reclaim is not None:
                tally.reclaims[reclaim.instance_id] = reclaim
        return tally

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


def _reclaim(item: object) -> Reclaim | None:
    """One kept reclaim, or None when it is not one this version can trust."""
    if not isinstance(item, dict):
        return None
    number = (int, float)
    lost = item.get("lost_slot_s")
    fits = (
        isinstance(item.get("time"), number)
        and all(isinstance(item.get(k), str) for k in ("instance_id", "instance_type", "zone"))
        and (lost is None or (isinstance(lost, number) and not isinstance(lost, bool)))
    )
    if not fits:
        return None
    return Reclaim(float(item["time"]), item["instance_id"], item["instance_type"], item["zone"], lost)
