"""The emulated site: DAGMan + HTCondor + an IaaS cloud in virtual time.

One discrete-event world implements all four ports (observations, cloud,
condor control, clock), so the MAPE loop runs against it exactly as it would
against a real submit host.

The model, and the choices made where reality offers several:

* DAGMan submits a node ``submit_delay_s`` after its last parent finished.
* Condor matches idle jobs to free slots once per negotiation cycle (at
  multiples of ``negotiation_interval_s``), by JobPrio
  (higher first) then submit order; a job keeps its place when it is evicted.
* A task occupies its slot for input transfer + runtime + output transfer, the
  transfers being its file bytes over ``bandwidth_bytes_per_s``; the whole
  occupancy is multiplied by ``time_scale``.
* An instance is billed per started charging unit from its launch; it runs
  tasks from ``launch + boot_lag_s``. A retired (draining) instance takes no
  new job. Terminating it ends its billing at once and evicts its running
  jobs, which restart from zero when matched again.
* The initial pool is up at time zero (it exists when the workflow starts).
* Ready tasks submitted in the same instant are shuffled with ``seed``: the
  order in which DAGMan submits siblings is not something a policy can rely on.
"""

from __future__ import annotations

import heapq
import itertools
import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import cast

import numpy as np

from wire_daemon.core.billing import Billing
from wire_daemon.core.config import EmulationConfig
from wire_daemon.core.events import EventKind, TaskEvent
from wire_daemon.core.instances import PENDING, RUNNING, TERMINATED, Instance
from wire_daemon.core.workflow import Workflow

_SUBMIT, _NEGOTIATE, _FINISH, _BOOT = range(4)
_SAME_INSTANT = 1e-6  # seconds: events closer than this happen together (float noise)


@dataclass
class _EmuInstance:
    instance_id: str
    launch_time: float
    ready_time: float
    slots: int
    end_time: float | None = None
    draining: bool = False
    running: set[int] = field(default_factory=set)

    @property
    def alive(self) -> bool:
        return self.end_time is None


class EmulatedSite:
    """Implements Observations, Cloud, CondorControl and Clock over virtual time."""

    def __init__(self, workflow: Workflow, config: EmulationConfig, slots_per_instance: int, billing: Billing) -> None:
        self.wf = workflow
        self.config = config
        self.slots_per_instance = slots_per_instance
        self.billing = billing
        self.time = 0.0
        bw = config.bandwidth_bytes_per_s
        transfer = (workflow.input_bytes + workflow.output_bytes) / bw
        runtime = np.nan_to_num(workflow.runtime_s, nan=0.0)
        self.true_exec_s = runtime * config.time_scale
        self.true_occupancy_s = (runtime + transfer) * config.time_scale
        self._rng = np.random.default_rng(config.seed)
        self._events: list[tuple[float, int, int, object]] = []
        self._seq = itertools.count()
        self._pending_parents = workflow.n_parents().astype(np.int64)
        self._done = np.zeros(workflow.n_tasks, dtype=bool)
        self._attempt = np.zeros(workflow.n_tasks, dtype=np.int64)
        self._host: dict[int, str] = {}
        self._start: dict[int, float] = {}
        self._ends: dict[int, float] = {}  # running task -> when its occupancy ends
        self._priority = np.zeros(workflow.n_tasks, dtype=np.int64)
        self._submit_seq = np.full(workflow.n_tasks, -1, dtype=np.int64)
        self._idle: list[tuple[int, int, int]] = []  # (-priority, submit seq, task)
        self._instances: dict[str, _EmuInstance] = {}  # every instance ever launched (billing)
        self._alive: dict[str, _EmuInstance] = {}  # the live ones, in launch order
        self._instance_ids = itertools.count(1)
        self._negotiation_at: float | None = None
        self._outbox: list[TaskEvent] = []
        self.n_done = 0
        self.last_finish = 0.0
        self.busy_slot_s = 0.0
        self.restarts = 0
        self.wasted_slot_s = 0.0
        self.first_completion: dict[int, float] = {}  # stage -> time of its first finished task
        self._submit_roots()
        booted_at = -config.boot_lag_s if config.bill_initial_boot else 0.0
        for _ in range(config.initial_instances):
            self._add_instance(ready_time=0.0, launch_time=booted_at)

    # -- Clock -------------------------------------------------------------

    def now(self) -> float:
        return self.time

    def sleep_until(self, when: float) -> None:
        self.advance_to(when)

    def advance_to(self, when: float) -> None:
        while self._events and self._events[0][0] <= when:
            t, _, kind, payload = heapq.heappop(self._events)
            self.time = t
            self._dispatch(kind, payload)
        self.time = max(self.time, when)

    @property
    def finished(self) -> bool:
        return self.n_done == self.wf.n_tasks

    # -- Observations ------------------------------------------------------

    def poll_events(self) -> Sequence[TaskEvent]:
        out, self._outbox = self._outbox, []
        return out

    # -- Cloud -------------------------------------------------------------

    def list_instances(self, include_unusable: bool = False) -> Sequence[Instance]:
        return [self._view(i) for i in self._alive.values()]  # an emulated instance is never unusable

    def find_request(self, request_id: str) -> Sequence[Instance]:
        return []  # launches here never fail half-way: there is no request to settle

    def all_instances(self) -> Sequence[Instance]:
        return [self._view(i) for i in self._instances.values()]

    def launch(self, count: int, request_id: str | None = None) -> Sequence[Instance]:
        ready = self.time + self.config.boot_lag_s
        return [self._view(self._add_instance(ready)) for _ in range(count)]

    def adopt(self, instance_id: str) -> Instance:
        """An instance launched elsewhere (a real cloud API) joins this world, after the boot lag.

        Rehearsals mirror a cloud endpoint's instances into the emulated pool with it.
        """
        if instance_id in self._instances:
            raise ValueError(f"instance {instance_id!r} is already in the emulated pool")
        inst = self._add_instance(self.time + self.config.boot_lag_s, instance_id)
        return self._view(inst)

    def terminate(self, instance_ids: Sequence[str]) -> Sequence[str]:
        ended = []
        for instance_id in instance_ids:
            inst = self._instances.get(instance_id)
            if inst is None or not inst.alive:
                continue
            ended.append(instance_id)
            for task in sorted(inst.running):
                if self._ends[task] <= self.time + _SAME_INSTANT:
                    self._finish(task)  # ends at the very moment of the termination: it made it
                else:
                    self._evict(task)
            inst.end_time = self.time
            inst.running.clear()
            del self._alive[instance_id]
        return ended

    # -- Condor control ----------------------------------------------------

    def set_job_priority(self, task_id: str, priority: int) -> None:
        task = self.wf.index_of(task_id)
        if self._priority[task] == priority:
            return
        self._priority[task] = priority
        if task not in self._host and self._submit_seq[task] >= 0 and not self._done[task]:
            heapq.heappush(self._idle, (-priority, int(self._submit_seq[task]), task))
            self._request_negotiation()

    def retire_instance(self, instance_id: str) -> None:
        inst = self._instances.get(instance_id)
        if inst is not None:
            inst.draining = True

    # -- Accounting --------------------------------------------------------

    def cost_units(self, until: float) -> int:
        return sum(self._units(inst, until) for inst in self._instances.values())

    def paid_slot_seconds(self, until: float) -> float:
        return sum(self._units(i, until) * self.billing.charging_unit_s * i.slots for i in self._instances.values())

    def _units(self, inst: _EmuInstance, until: float) -> int:
        """Started charging units, billed from launch to termination (or ``until``)."""
        end = until if inst.end_time is None else inst.end_time
        return self.billing.units(inst.launch_time, end)

    # -- the world ---------------------------------------------------------

    def _push(self, t: float, kind: int, payload: object) -> None:
        # Never schedule into the past: a rounding error there would move the clock back.
        heapq.heappush(self._events, (max(t, self.time), next(self._seq), kind, payload))

    def _dispatch(self, kind: int, payload: object) -> None:
        if kind == _SUBMIT:
            self._submit(cast(list[int], payload))
        elif kind == _NEGOTIATE:
            self._negotiate()
        elif kind == _FINISH:
            task, attempt = cast(tuple[int, int], payload)
            if self._attempt[task] == attempt and task in self._host:
                self._finish(task)
        elif kind == _BOOT:
            self._request_negotiation()

    def _submit_roots(self) -> None:
        roots = np.flatnonzero(self._pending_parents == 0)
        self._push(0.0, _SUBMIT, self._rng.permutation(roots).tolist())

    def _submit(self, tasks: list[int]) -> None:
        for task in tasks:
            self._submit_seq[task] = next(self._seq)
            self._outbox.append(TaskEvent(self.time, EventKind.SUBMITTED, self.wf.task_ids[task]))
            if self.wf.on_pool[task]:
                heapq.heappush(self._idle, (-int(self._priority[task]), int(self._submit_seq[task]), task))
            else:
                self._start_task(task, None)  # local universe: runs on the submit host
        self._request_negotiation()

    def _request_negotiation(self) -> None:
        if self._negotiation_at is not None and self._negotiation_at >= self.time:
            return
        cycle = self.config.negotiation_interval_s
        # The next cycle, or this one; max() because ceil() of a time a rounding
        # error past a boundary lands just before it.
        self._negotiation_at = max(math.ceil(self.time / cycle - 1e-9) * cycle, self.time)
        self._push(self._negotiation_at, _NEGOTIATE, None)

    def _negotiate(self) -> None:
        self._negotiation_at = None
        free = self._free_slots()
        slot = next(free, None)
        while slot is not None and self._idle:
            neg_prio, seq, task = heapq.heappop(self._idle)
            stale = task in self._host or self._done[task] or -neg_prio != self._priority[task]
            if stale or seq != self._submit_seq[task]:
                continue
            self._start_task(task, slot)
            slot = next(free, None)

    def _free_slots(self) -> Iterator[str]:
        """Free slots, oldest instance first, one instance id per slot.

        A generator, so a negotiation with few idle jobs does not list every
        slot of a large pool. An instance's free count is read when the
        generator reaches it, before any job is started on it.
        """
        for inst in self._alive.values():
            if not inst.draining and inst.ready_time <= self.time:
                for _ in range(inst.slots - len(inst.running)):
                    yield inst.instance_id

    def _start_task(self, task: int, instance_id: str | None) -> None:
        self._attempt[task] += 1
        self._start[task] = self.time
        self._host[task] = instance_id or "submit-host"
        if instance_id is not None:
            self._instances[instance_id].running.add(task)
        self._outbox.append(TaskEvent(self.time, EventKind.STARTED, self.wf.task_ids[task], host=self._host[task]))
        self._ends[task] = self.time + float(self.true_occupancy_s[task])
        self._push(self._ends[task], _FINISH, (task, int(self._attempt[task])))

    def _finish(self, task: int) -> None:
        host = self._host.pop(task)
        occupancy = self.time - self._start.pop(task)
        self._ends.pop(task, None)
        if host in self._instances:
            self._instances[host].running.discard(task)
            self.busy_slot_s += occupancy
            self._request_negotiation()
        self._done[task] = True
        self.n_done += 1
        self.last_finish = self.time
        self.first_completion.setdefault(int(self.wf.stage_of[task]), self.time)
        self._outbox.append(
            TaskEvent(
                self.time,
                EventKind.FINISHED,
                self.wf.task_ids[task],
                host=host,
                exec_runtime_s=float(self.true_exec_s[task]),
                exit_code=0,
                input_bytes=int(self.wf.input_bytes[task]),
            )
        )
        self._release_children(task)

    def _release_children(self, task: int) -> None:
        ready = []
        for child in self.wf.children(task):
            self._pending_parents[child] -= 1
            if self._pending_parents[child] == 0:
                ready.append(int(child))
        if ready:
            self._push(self.time + self.config.submit_delay_s, _SUBMIT, self._rng.permutation(ready).tolist())

    def _evict(self, task: int) -> None:
        occupancy = self.time - self._start.pop(task)
        self._host.pop(task)
        self._ends.pop(task, None)
        self.busy_slot_s += occupancy
        self.wasted_slot_s += occupancy
        self.restarts += 1
        self._attempt[task] += 1  # its pending finish is now stale
        self._outbox.append(TaskEvent(self.time, EventKind.EVICTED, self.wf.task_ids[task]))
        heapq.heappush(self._idle, (-int(self._priority[task]), int(self._submit_seq[task]), task))
        self._request_negotiation()

    def _add_instance(
        self, ready_time: float, instance_id: str | None = None, launch_time: float | None = None
    ) -> _EmuInstance:
        instance_id = instance_id or f"i-{next(self._instance_ids):05d}"
        launched = self.time if launch_time is None else launch_time
        inst = _EmuInstance(instance_id, launched, ready_time, self.slots_per_instance)
        self._instances[inst.instance_id] = inst
        self._alive[inst.instance_id] = inst
        if ready_time > self.time:
            self._push(ready_time, _BOOT, inst.instance_id)
        else:
            self._request_negotiation()
        return inst

    def _view(self, inst: _EmuInstance) -> Instance:
        state = TERMINATED if not inst.alive else (RUNNING if inst.ready_time <= self.time else PENDING)
        return Instance(inst.instance_id, inst.launch_time, inst.slots, state)
