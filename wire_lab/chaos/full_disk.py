"""The state file's disk filled up mid-run: ``wire-daemon run`` on moto, its state on a small tmpfs (root only).

The state file lives on a tmpfs of ``FullDiskPlan.size_kib`` (256 KiB: the
daemon's state, its write-ahead log checkpointed small, takes about 210 KiB
of it, so that only the filler fills it); the decisions log and the submit
root do not. Once the endpoint lists a live
instance, a filler file takes every byte left; the workload goes on (the
daemon launches and releases with its writes kept in memory) for
``full_s``; the filler is then removed. Measured:

* the daemon's deaths (restarts the harness had to do) and tracebacks;
* its "no room" lines (one per time the disk filled) and "room again" lines;
* peak: the most live instances the endpoint listed at once, against
  ``max_instances``;
* launched while full: the instances the decisions log says were launched
  while the disk had no room;
* unknown: the instances the endpoint lists live that the state file on
  disk does not hold, right after the daemon says it has room again (waited
  for up to ``settle_s``), and how long after the filler's removal it said so;

then the usual drain and final audit (nothing leaked, nothing launched twice).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path

from wire_lab.chaos.daemon import count_lines, read_decisions, read_store
from wire_lab.chaos.faultproxy import FaultPlan
from wire_lab.chaos.harness import Moto, PoolRun, Rig, RunShape, _fill, _tick
from wire_lab.chaos.small_disk import SmallDisk
from wire_lab.chaos.world import LIVE, describe_pool

NO_ROOM = "no room on its disk ("
ROOM_AGAIN = "room on its disk again"


@dataclass(frozen=True)
class FullDiskPlan:
    size_kib: int = 256
    live_at_least: int = 1  # fill the disk once the endpoint lists this many live instances
    wait_s: float = 40.0  # for that many, then fill it anyway
    full_s: float = 12.0  # how long the disk stays full at least
    full_max_s: float = 60.0  # and longer, up to this, until the daemon has met it (said "no room")
    settle_s: float = 30.0  # after the filler is gone: for the state file to know every live instance
    seed: int = 14


@dataclass
class FullDiskResult(PoolRun):
    filled_bytes: int = 0
    no_room_lines: int = 0
    room_again_lines: int = 0
    decisions_while_full: int = 0
    launched_while_full: list[str] = field(default_factory=list)
    live_at_room: list[str] = field(default_factory=list)  # live on the endpoint when the daemon had room again
    unknown: list[str] = field(default_factory=list)  # of those, not in the state file on disk
    room_after_s: float = -1.0  # from the filler's removal to the daemon's "room again" line (-1: never)

    @property
    def ok(self) -> bool:
        quiet = self.no_room_lines >= 1 and not self.unexpected_exits and self.tracebacks == 0
        return self._clean() and quiet and self.room_after_s >= 0 and not self.unknown


def run_full_disk(work: Path, moto: Moto, shape: RunShape, plan: FullDiskPlan) -> FullDiskResult:
    rig = Rig.build(work, moto, shape, FaultPlan(seed=plan.seed))
    disk = SmallDisk(work / "state-disk", plan.size_kib).mount()
    result = FullDiskResult(max_instances=shape.max_instances)
    try:
        rig.settings = replace(rig.settings, state_path=disk.path / "state.sqlite")
        rig.daemon.config.write_text(rig.settings.yaml())
        rig.start()
        _until(rig, plan.wait_s, lambda: rig.world.cloud.live_count >= plan.live_at_least)
        result.filled_bytes = disk.fill()
        decided = _decisions(rig)
        _until(rig, plan.full_s, lambda: False)
        # A quiet spell writes nothing (no launch, no release): the disk stays full until a write meets it.
        _until(rig, plan.full_max_s - plan.full_s, lambda: _lines(rig, NO_ROOM) > 0)
        result.decisions_while_full = _decisions(rig) - decided
        result.launched_while_full = [
            i for r in read_decisions(rig.settings.decisions_path)[decided:] for i in r.get("launched", [])
        ]
        disk.free()
        freed = time.time()
        _until(rig, plan.settle_s, lambda: _lines(rig, ROOM_AGAIN) > 0)
        if _lines(rig, ROOM_AGAIN):
            result.room_after_s = time.time() - freed
            result.live_at_room, result.unknown = _unknown(rig)
        rig.finish()
    finally:
        rig.close()
        disk.unmount()
    _fill(result, rig)
    result.no_room_lines = _lines(rig, NO_ROOM)
    result.room_again_lines = _lines(rig, ROOM_AGAIN)
    return result


def _lines(rig: Rig, text: str) -> int:
    path = rig.daemon.stderr_path
    return sum(text in line for line in path.read_text(errors="replace").splitlines()) if path.exists() else 0


def _until(rig: Rig, seconds: float, done: Callable[[], bool]) -> None:
    deadline = time.time() + seconds
    while time.time() < deadline and not done():
        _tick(rig)


def _decisions(rig: Rig) -> int:
    return count_lines(rig.settings.decisions_path)


def _unknown(rig: Rig) -> tuple[list[str], list[str]]:
    """Live on the endpoint, and of those the ones not in the state file on disk."""
    live = {i["InstanceId"] for _, i in describe_pool(rig.ec2, rig.settings.pool) if i["State"]["Name"] in LIVE}
    unknown = live - read_store(rig.settings.state_path).live()
    for _ in range(3):  # one launched this very moment is recorded right after its launch call returns
        if not unknown:
            break
        time.sleep(1.0)
        unknown -= read_store(rig.settings.state_path).live()
    return sorted(live), sorted(unknown)
