"""The state file lost mid-run: ``wire-daemon run`` on moto, its state file truncated or deleted, restarted.

The cycled workload runs the pool up; once the endpoint lists enough live
instances the daemon dies (kill -9: a host crash or re-provisioning) and its
state file is lost, truncated to 0 bytes or deleted with SQLite's side files,
alternately; the daemon restarts at once on the same config. Measured against
the endpoint:

* orphaned: an instance live when the file was lost that the restarted
  daemon's state file does not hold once it has decided (the kill harness's
  ``unknown_after_restart`` check);
* peak: the most live instances the endpoint listed at once, sampled every
  poll through the whole run, against ``max_instances``;
* adoption lines: the restarted daemon's one line per start saying what it
  adopted (``reconcile: adopted N instance(s) ...``), with the ids it names.

The run then drains as the other chaos runs do, and gets the same final audit
(nothing leaked, nothing launched twice).
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass, field
from pathlib import Path

from wire_lab.chaos.daemon import count_lines
from wire_lab.chaos.faultproxy import FaultPlan
from wire_lab.chaos.harness import Moto, PendingCheck, PoolRun, Rig, RunShape, _fill, _tick, check_after_restart
from wire_lab.chaos.world import LIVE, describe_pool

# The guard's own line (the decision line after it repeats it among its notes).
ADOPTED = re.compile(r"guarded_cloud: reconcile: adopted (\d+) instance\(s\) [^:]*: (.*)$")


@dataclass(frozen=True)
class StateLossPlan:
    losses: int = 2
    live_at_least: int = 2  # lose the file once the endpoint lists this many live instances
    wait_s: float = 40.0  # for that many, then lose it anyway
    decide_wait_s: float = 30.0  # for the restarted daemon's first decision
    seed: int = 14


@dataclass
class Adoption:
    """One restart after a loss: what was live at the loss, and what the daemon's line said it adopted."""

    how: str
    live_at_loss: list[str]
    lines: list[str] = field(default_factory=list)
    named: list[str] = field(default_factory=list)  # the ids those lines name


@dataclass
class StateLossResult(PoolRun):
    losses: int = 0
    adoptions: list[Adoption] = field(default_factory=list)

    @property
    def orphaned(self) -> list[str]:
        return list(self.audit.unknown_after_restart)

    @property
    def ok(self) -> bool:
        one_line = all(len(a.lines) == 1 and set(a.live_at_loss) <= set(a.named) for a in self.adoptions)
        return self._clean() and not self.orphaned and one_line and self.tracebacks == 0


def lose_state(path: Path, how: str) -> None:
    """The state file gone, as a re-provisioned host or an ``rm`` leaves it: its SQLite side files too."""
    for side in (path.with_name(path.name + "-wal"), path.with_name(path.name + "-shm")):
        side.unlink(missing_ok=True)
    if how == "truncate":
        path.write_bytes(b"")
    else:
        path.unlink(missing_ok=True)


def run_state_loss(work: Path, moto: Moto, shape: RunShape, plan: StateLossPlan) -> StateLossResult:
    rig = Rig.build(work, moto, shape, FaultPlan(seed=plan.seed))
    result = StateLossResult(max_instances=shape.max_instances)
    pending: list[PendingCheck] = []
    rig.start()
    try:
        for n in range(plan.losses):
            how = ("truncate", "delete")[n % 2]
            _wait_for_pool(rig, plan)
            rig.daemon.kill9()
            live = sorted(
                i["InstanceId"] for _, i in describe_pool(rig.ec2, rig.settings.pool) if i["State"]["Name"] in LIVE
            )
            lose_state(rig.settings.state_path, how)
            result.losses += 1
            logged = len(_stderr_lines(rig))
            decided = count_lines(rig.settings.decisions_path)
            rig.daemon.start()
            pending.append(PendingCheck(n + 1, set(live), decided))
            _wait_for_decision(rig, decided, plan.decide_wait_s)
            pending = check_after_restart(rig, pending, result.audit)
            result.adoptions.append(_adoption(how, live, _stderr_lines(rig)[logged:]))
        rig.finish()
        check_after_restart(rig, pending, result.audit)
    finally:
        rig.close()
    _fill(result, rig)
    return result


def _wait_for_pool(rig: Rig, plan: StateLossPlan) -> None:
    deadline = time.time() + plan.wait_s
    while time.time() < deadline and rig.world.cloud.live_count < plan.live_at_least:
        _tick(rig)


def _wait_for_decision(rig: Rig, decided: int, wait_s: float) -> None:
    deadline = time.time() + wait_s
    while time.time() < deadline and count_lines(rig.settings.decisions_path) <= decided:
        _tick(rig)


def _stderr_lines(rig: Rig) -> list[str]:
    path = rig.daemon.stderr_path
    return path.read_text(errors="replace").splitlines() if path.exists() else []


def _adoption(how: str, live: list[str], lines: list[str]) -> Adoption:
    adoption = Adoption(how, live)
    for line in lines:
        found = ADOPTED.search(line)
        if found:
            adoption.lines.append(line)
            adoption.named += [i.strip() for i in found.group(2).split(",")]
    return adoption
