"""A submit host whose workload cycles the pool, mirrored on a cloud endpoint (moto's server).

Workflows run one after another under one submit root, each written live in
real Pegasus format (``wire_lab.live_writer``): a wide stage (more tasks than
the pool has slots), then one join task. Each makes the daemon grow the pool;
once it is done and the pool has shrunk back (or ``next_after_s`` has
passed), the next one is planned. So the pool grows and shrinks once per
workflow.

The emulated pool follows the endpoint: an instance the daemon launches joins
the pool after the boot lag, one it terminates leaves it (its jobs are
evicted). The mirror samples the endpoint's live count at every poll (every
``poll_s``): its peak, and how many times the pool went from ``low`` or fewer
to ``high`` or more and back (a cycle).
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from wire_daemon.core.config import EmulationConfig
from wire_daemon.core.workflow import TaskSpec, Workflow, build_workflow
from wire_daemon.execute.providers.base import TAG_POOL, TAG_REQUEST
from wire_lab.live_writer import LiveEmulation, WriterOptions, build_live

LIVE = ("pending", "running")
ENDED = ("shutting-down", "terminated")


@dataclass(frozen=True)
class Workload:
    """The shape of each workflow, and the pace of the world."""

    wide: int = 16  # tasks in the wide stage
    runtime_s: float = 5.0  # each wide task
    join_s: float = 1.0
    slots: int = 2
    charging_unit_s: float = 6.0
    boot_lag_s: float = 0.5
    next_after_s: float = 40.0  # start the next workflow by then even if the pool has not shrunk
    high: int = 2  # a cycle: the live count reaches high...
    low: int = 0  # ...then falls back to low
    poll_s: float = 0.1

    def emulation(self) -> EmulationConfig:
        return EmulationConfig(
            boot_lag_s=self.boot_lag_s, negotiation_interval_s=0.5, submit_delay_s=0.1, initial_instances=0
        )


def cycled_workflow(index: int, workload: Workload) -> Workflow:
    """One wide stage and a join: the pool must grow for the first and may shrink after."""
    wide = [TaskSpec(f"wide_ID{k:07d}", "wide", runtime_s=workload.runtime_s) for k in range(workload.wide)]
    join = TaskSpec("join_ID9999999", "join", tuple(t.task_id for t in wide), runtime_s=workload.join_s)
    return build_workflow(f"cycle{index:03d}", f"<chaos workflow {index}>", [*wide, join])


@dataclass
class CloudView:
    """Everything the endpoint has shown of the pool: states, requests, reservations, and the live peak."""

    states: dict[str, str] = field(default_factory=dict)  # instance -> last state
    request_of: dict[str, str] = field(default_factory=dict)  # instance -> wire:request-id tag
    reservation_of: dict[str, str] = field(default_factory=dict)
    live_count: int = 0
    peak: int = 0
    samples: int = 0
    cycles: int = 0
    cycle_peaks: list[int] = field(default_factory=list)  # the most live instances in each cycle
    _high_seen: bool = False
    _cycle_peak: int = 0

    def update(self, raw: list[tuple[str, dict[str, Any]]], workload: Workload) -> None:
        for reservation_id, instance in raw:
            instance_id = instance["InstanceId"]
            self.states[instance_id] = instance["State"]["Name"]
            tags = {t["Key"]: t["Value"] for t in instance.get("Tags", [])}
            self.request_of[instance_id] = tags.get(TAG_REQUEST, "")
            self.reservation_of[instance_id] = reservation_id
        self.live_count = sum(s in LIVE for s in self.states.values())
        self.peak = max(self.peak, self.live_count)
        self.samples += 1
        self._cycle_peak = max(self._cycle_peak, self.live_count)
        if self.live_count >= workload.high:
            self._high_seen = True
        elif self.live_count <= workload.low and self._high_seen:
            self._high_seen = False
            self.cycles += 1
            self.cycle_peaks.append(self._cycle_peak)
            self._cycle_peak = 0

    def live(self) -> set[str]:
        return {i for i, s in self.states.items() if s in LIVE}


def describe_pool(ec2: Any, pool: str) -> list[tuple[str, dict[str, Any]]]:
    """(reservation id, instance) for every instance tagged with the pool, any state."""
    out = []
    paginator_args: dict[str, Any] = {"Filters": [{"Name": f"tag:{TAG_POOL}", "Values": [pool]}]}
    while True:
        reply = ec2.describe_instances(**paginator_args)
        for reservation in reply["Reservations"]:
            out += [(reservation["ReservationId"], i) for i in reservation["Instances"]]
        if not reply.get("NextToken"):
            return out
        paginator_args["NextToken"] = reply["NextToken"]


class CycledSubmitHost:
    """Runs workflows in sequence under ``root`` and mirrors the pool from ``ec2`` (a client to the endpoint)."""

    def __init__(self, root: Path, ec2: Any, pool: str, workload: Workload) -> None:
        self.root = root
        self.ec2 = ec2
        self.pool = pool
        self.workload = workload
        self.cloud = CloudView()
        self.workflows_started = 0
        self.workflows_done = 0
        self.tasks_done = 0
        self.error: BaseException | None = None
        self.stop = threading.Event()
        self.more = threading.Event()  # cleared: finish the current workflow, start no other
        self.more.set()
        self._live: LiveEmulation | None = None
        self._addresses: dict[str, str] = {}  # instance -> private address, as the endpoint gives it
        self._epoch = 0.0
        self._closed_at = 0.0
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> CycledSubmitHost:
        self.root.mkdir(parents=True, exist_ok=True)
        self._thread.start()
        return self

    def close(self) -> None:
        self.stop.set()
        self._thread.join(timeout=30)

    @property
    def idle(self) -> bool:
        """No workflow running (the last one finished) and no other to start."""
        return self._live is None and not self.more.is_set()

    def snapshot(self) -> CloudView:
        with self._lock:
            return CloudView(dict(self.cloud.states), dict(self.cloud.request_of), dict(self.cloud.reservation_of))

    # -- the thread ------------------------------------------------------------------

    def _run(self) -> None:
        try:
            while not self.stop.is_set():
                self._mirror()
                self._step()
                time.sleep(self.workload.poll_s)
        except BaseException as exc:  # surfaced by the harness
            self.error = exc

    def _step(self) -> None:
        live = self._live
        if live is None:
            if self.more.is_set() and self._may_start_next():
                self._start_next()
            return
        live.advance_to(time.time() - self._epoch)
        if live.finished:
            live.writer.close(live.site.last_finish)  # DAGMan finished
            self.workflows_done += 1
            self.tasks_done += live.site.wf.n_tasks
            self._live = None
            self._closed_at = time.time()

    def _may_start_next(self) -> bool:
        shrunk = self.cloud.live_count <= self.workload.low
        return shrunk or time.time() - self._closed_at > self.workload.next_after_s

    def _start_next(self) -> None:
        index = self.workflows_started
        self._epoch = time.time()
        live = build_live(
            cycled_workflow(index, self.workload),
            self.root / f"cycle{index:03d}-run0001",
            self.workload.emulation(),
            self.workload.slots,
            self.workload.charging_unit_s,
            WriterOptions(epoch=self._epoch, subsecond_times=True, label=f"cycle{index:03d}"),
        )
        self._live = live
        self.workflows_started += 1
        for instance_id in sorted(self.cloud.live()):  # the pool that is up joins this workflow's world
            self._join(live, instance_id)

    def _join(self, live: LiveEmulation, instance_id: str) -> None:
        address = self._addresses.get(instance_id, "")
        if address:
            live.writer.hosts.pin(instance_id, address)
        live.site.adopt(instance_id)

    def _mirror(self) -> None:
        raw = describe_pool(self.ec2, self.pool)
        with self._lock:
            self.cloud.update(raw, self.workload)
        for _, instance in raw:
            self._addresses[instance["InstanceId"]] = instance.get("PrivateIpAddress", "")
        live = self._live
        if live is None:
            return
        alive = {i.instance_id for i in live.site.list_instances()}
        known = {i.instance_id for i in live.site.all_instances()}
        for instance_id, state in self.cloud.states.items():
            if state in LIVE and instance_id not in known:
                live.advance_to(time.time() - self._epoch)  # the change happens now
                self._join(live, instance_id)
            elif state in ENDED and instance_id in alive:
                live.advance_to(time.time() - self._epoch)
                live.site.terminate([instance_id])
