"""The resource-steering policy: WIRE Algorithms 2 and 3.

Algorithm 3 (``resize_pool``) turns the upcoming load into a pool size: it
packs the predicted remaining occupancies onto instances of ``l`` slots and
counts an instance only once its slots are busy for a whole charging unit.
Algorithm 2 (``steer``) compares that size with the pool and grows it, or
releases instances whose paid unit is about to end and whose tasks would cost
little to restart.

Decisions where the paper is silent:

* Poll order (Algorithm 3, line 8): tasks are polled in the order the upcoming
  load lists them, which is the projected schedule: tasks running at the start
  of the next interval first (in slot order), then the queue in Condor's order.
  That is how the slots will actually be filled.
* Line 11 of Algorithm 3 only fires on a full set of ``l`` tasks, so with l = 1
  a leftover below one unit is never counted; line 28 alone adds the last
  instance. We keep that as written.
* The pool size is clamped to [min_instances, max_instances]; Algorithm 3
  stops packing once it reaches the maximum (more load cannot change p).
* Release order (Algorithm 2, line 10): candidates are visited by increasing
  restart cost, then by increasing time to next charge, so that the instances
  released are the cheapest to restart (the paper asks to minimise it).
* ``m`` counts every live instance, including those still booting: they are
  paid for and will serve the next interval.
* When a release takes effect. The paper times every change for the start of
  the next interval, yet only releases instances whose unit ends *before*
  it: on a real cloud, terminating at the interval start would already have
  paid the next unit. So a released instance is drained at once (Condor
  starts nothing new on it) and terminated ``release_guard_s`` before its
  unit ends (``release_time``); its restart cost c_j is the occupancy its
  tasks have sunk at that moment. Running tasks that end before then are
  not lost.
* No release of an instance younger than ``min_instance_age_intervals``
  intervals (2 by default: its boot plus one interval of work). The plan that
  launched it was made an interval ago; releasing it as soon as it boots
  because the load moved pays its boot for nothing. With u shorter than the
  interval this flapping made WIRE dearer than the full site
  (docs/decisions.md). Cluster autoscalers have the same guard.
* Launches pay their boot (the launch lag, one interval) before they work.
  With ``boot_aware_launch`` (on by default) a launch must be justified by
  Algorithm 3 over the unit *plus* that lag; with u = 1 min and a 3-minute
  lag, the paper's rule launched instances that cost 3 idle units each.
"""

from __future__ import annotations

from bisect import insort
from collections.abc import Sequence
from dataclasses import dataclass

from wire_daemon.core.config import SteeringConfig
from wire_daemon.ports.policy import SteeringDecision


@dataclass(frozen=True)
class InstanceView:
    """An instance as the steering policy sees it at the start of the next interval."""

    instance_id: str
    time_to_next_charge_s: float  # r_j, measured from now
    restart_cost_s: float  # c_j, max sunk occupancy of its tasks when the release takes effect
    release_at: float = 0.0  # when a release would take effect (see ``release_time``)
    age_s: float = float("inf")  # since launch
    dearness: float = 0.0  # price per task that fits (several instance types): the dearest go first


def release_time(now: float, time_to_next_charge_s: float, guard_s: float) -> float:
    """When to terminate an instance released now: just before its paid unit ends."""
    return now + max(time_to_next_charge_s - guard_s, 0.0)


def resize_pool(
    upcoming_s: Sequence[float],
    charging_unit_s: float,
    slots_per_instance: int,
    leftover_fraction: float = 0.2,
    max_instances: int | None = None,
    carry_overshoot: bool = False,
) -> int:
    """Algorithm 3: the number of instances the upcoming load keeps busy for a unit.

    ``carry_overshoot`` is the fluid variant: when an instance's unit fills, the
    busy time beyond ``u`` and the tasks still in its slots count toward the
    next instance instead of being dropped (line 16). It is not the paper's
    algorithm, but the packing its §III-E arithmetic assumes (p = load / u).

    The slot loads are kept sorted, so the shortest is the first and a new task
    goes in by bisection: the same multiset of slot values as the paper's
    loop, step for step (the loads are finite), at about two thirds of the
    cost; this loop runs once per upcoming task, and the upcoming load can
    hold a whole wide stage.
    """
    u, slots = charging_unit_s, slots_per_instance
    values = [float(v) for v in upcoming_s]
    n = len(values)
    p = 0
    used = 0.0
    loads: list[float] = []
    i = 0
    while i < n:
        room = slots - len(loads)
        if room == 1:
            insort(loads, values[i])
            i += 1
        elif room:
            loads.extend(values[i : i + room])
            loads.sort()
            i = min(i + room, n)
            if len(loads) < slots:
                break
        shortest = loads[0]
        used += shortest
        if used >= u:
            p += 1
            if max_instances is not None and p >= max_instances:
                return p
            if not carry_overshoot:
                used, loads = 0.0, []
                continue
            used -= u
        loads = [t - shortest for t in loads if t != shortest]
    if p == 0 or max(loads, default=0.0) > leftover_fraction * u:
        p += 1
    return p


def choose_releases(
    instances: Sequence[InstanceView],
    target: int,
    interval_s: float,
    charging_unit_s: float,
    restart_cost_fraction: float = 0.2,
    min_age_s: float = 0.0,
) -> list[str]:
    """Algorithm 2, lines 10-18: which instances to release to approach ``target``."""
    excess = len(instances) - target
    if excess <= 0:
        return []
    limit = restart_cost_fraction * charging_unit_s
    candidates = sorted(
        (
            i
            for i in instances
            if i.time_to_next_charge_s <= interval_s and i.restart_cost_s <= limit and i.age_s >= min_age_s
        ),
        key=lambda i: (-i.dearness, i.restart_cost_s, i.time_to_next_charge_s, i.instance_id),
    )
    return [i.instance_id for i in candidates[:excess]]


def _worth_booting(upcoming_s: Sequence[float], config: SteeringConfig) -> int:
    """Instances the load keeps busy for a unit *after* the launch lag, which is paid too."""
    horizon = config.planning_unit_s + config.interval_s
    return resize_pool(
        upcoming_s,
        horizon,
        config.slots_per_instance,
        config.leftover_fraction,
        config.max_instances,
        config.packing == "fluid",
    )


def steer(
    upcoming_s: Sequence[float], instances: Sequence[InstanceView], config: SteeringConfig, work_left: bool = True
) -> SteeringDecision:
    """Algorithm 2: grow to Algorithm 3's size, or release what is cheap to release.

    ``work_left`` False (every task done, or no workflow at all on a submit
    host): Algorithm 3's line 28 keeps one instance for the work still to
    come, and none is coming, so the size is 0 (then ``min_instances``).
    """
    planned = (
        resize_pool(
            upcoming_s,
            config.planning_unit_s,
            config.slots_per_instance,
            config.leftover_fraction,
            config.max_instances,
            config.packing == "fluid",
        )
        if work_left
        else 0
    )
    target = min(max(planned, config.min_instances), config.max_instances)
    m = len(instances)
    if target > m and config.boot_aware_launch:
        worth = max(_worth_booting(upcoming_s, config), config.min_instances)
        target = max(m, min(target, worth))
        if target == m:
            return SteeringDecision(m, planned, rule="hold: new instances would not earn back their boot")
    if target > m:
        return SteeringDecision(target, planned, launch=target - m, rule="grow: load fills instances for a unit")
    if target == m:
        return SteeringDecision(target, planned, rule="hold")
    release = choose_releases(
        instances,
        target,
        config.interval_s,
        config.planning_unit_s,
        config.release_restart_cost_fraction,
        config.min_instance_age_intervals * config.interval_s,
    )
    rule = (
        "shrink: unit ends before next interval, restart cost low"
        if release
        else "hold: no instance cheap to release now"
    )
    when = {i.instance_id: i.release_at for i in instances if i.instance_id in release}
    return SteeringDecision(m - len(release), planned, release=release, release_at=when, rule=rule)
