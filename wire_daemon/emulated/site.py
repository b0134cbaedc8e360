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
* The initial pool is up at time zero (it exists when the workflow starts),
  bought on ``initial_market`` (a spot fleet started before the workflow).
* Ready tasks submitted in the same instant are shuffled with ``seed``: the
  order in which DAGMan submits siblings is not something a policy can rely on.
* Memory, only with ``instance_memory_mib`` > 0: each instance is
  one partitionable slot of ``slots`` cores and that much memory; a job needs
  a core and its ``request_memory`` (``memory_request_factor`` times its
  transformation's largest traced peak, until the rightsizer changes it). A
  negotiation takes idle jobs by priority and starts each on the oldest
  instance it fits, skipping jobs that fit nowhere. A job whose traced peak
  exceeds its request is held (like HTCondor's memory-exceeded hold, code 34)
  after ``memory_failure_fraction`` of its occupancy, and stays held until
  released; its whole allocation is wasted memory.
* Instance types, only with ``types``: a launch names one, and the
  instance has that type's cores, memory (its own, or ``instance_memory_mib``
  when the type gives none) and price per unit; the initial pool is of the
  first type. ``cost_money`` is the bill at those prices.
* Markets: a launch buys on-demand or spot capacity. Spot costs
  ``spot_price_ratio`` of on-demand, and its instances are reclaimed as
  ``emulated/market.py`` models (rate, notice, storms, capacity). Money is
  each instance's price per hour times the seconds the billing rule charges.
  A job may prefer a market (``prefer_market``, HTCondor's job Rank): while
  spot capacity is up, a negotiation starts it on the oldest free slot of
  that market, or on the oldest free slot when its market has none. A job
  may also require its market (``required``, a clause of its Requirements):
  it then waits for a free slot of that market. Memory negotiation
  (partitionable slots) does not look at markets.
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
from wire_daemon.core.config import EmulationConfig, InstanceType
from wire_daemon.core.errors import CloudCapacityError, ConfigError
from wire_daemon.core.events import EventKind, TaskEvent
from wire_daemon.core.instances import CloudState, Instance
from wire_daemon.core.pricing import DEFAULT_SPOT_PRICE_RATIO, Bill, Market, Span, bill, money, price_list
from wire_daemon.core.workflow import Workflow
from wire_daemon.emulated.market import Reclaimer, SpotMarket, storm_time
from wire_daemon.ports.prediction import DispatchEstimate

_SUBMIT, _NEGOTIATE, _FINISH, _BOOT, _HOLD, _NOTICE, _RECLAIM, _STORM = range(8)
_MIB = float(1 << 20)
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
    memory_mib: float = 0.0  # 0: memory not modelled
    used_mib: float = 0.0  # requests of the running jobs
    instance_type: str = ""  # one of the site's types; "": the one type of slots_per_instance slots
    price_per_hour: float = 0.0  # in its market
    market: Market = Market.ON_DEMAND
    noticed: bool = False  # a reclaim notice came: it ends at the notice's end

    @property
    def alive(self) -> bool:
        return self.end_time is None


def task_times(workflow: Workflow, config: EmulationConfig) -> tuple[np.ndarray, np.ndarray]:
    """Each task's slot occupancy and execution time in this world: (transfers +) runtime, x time scale."""
    transfer = (workflow.input_bytes + workflow.output_bytes) / config.bandwidth_bytes_per_s
    runtime = np.nan_to_num(workflow.runtime_s, nan=0.0)  # a trace without a runtime: the task takes no time
    return (runtime + transfer) * config.time_scale, runtime * config.time_scale


def world_dispatch(workflow: Workflow, config: EmulationConfig) -> DispatchEstimate:
    """What a job costs here beyond its occupancy, known rather than learned.

    Jobs start only at negotiation cycles: on a busy slot a job started at a
    cycle frees it mid-cycle, and the next starts at the following cycle, so
    a task of occupancy o loses ceil(o / cycle) x cycle - o (per stage, the
    mean). A job just submitted waits half a cycle on average; a node is
    submitted ``submit_delay_s`` after its last parent ended.
    """
    cycle = config.negotiation_interval_s
    occupancy, _ = task_times(workflow, config)
    lost = np.ceil(occupancy / cycle - 1e-9) * cycle - occupancy
    per_stage = np.bincount(workflow.stage_of, weights=lost, minlength=len(workflow.stages))
    count = np.bincount(workflow.stage_of, minlength=len(workflow.stages))
    gaps = np.where(count > 0, per_stage / np.maximum(count, 1), np.nan)
    # gap_observations > 0: the gaps are this world's own, not a prior to keep off the DAG.
    return DispatchEstimate(gaps, cycle / 2, config.submit_delay_s, cycle / 2, observations=1, gap_observations=1)


class EmulatedSite:
    """Implements Observations, Cloud, CondorControl and Clock over virtual time."""

    def __init__(
        self,
        workflow: Workflow,
        config: EmulationConfig,
        slots_per_instance: int,
        billing: Billing,
        types: Sequence[InstanceType] = (),
        market: SpotMarket | None = None,
        spot_price_ratio: float = DEFAULT_SPOT_PRICE_RATIO,
        initial_market: Market = Market.ON_DEMAND,
        price_per_hour: float = 1.0,  # the one type's on-demand price, without instance types
    ) -> None:
        self.wf = workflow
        self.config = config
        self.slots_per_instance = slots_per_instance
        self.types = {t.name: t for t in types}
        self._first_type = types[0].name if types else ""
        self.billing = billing
        self.offers = price_list(types, slots_per_instance, billing, spot_price_ratio, price_per_hour)
        self.market = market or SpotMarket(seed=config.seed)
        self._reclaimer = Reclaimer(self.market)
        self.interruptions = 0  # reclaim notices received
        self.interrupted_slot_s = 0.0  # slot-seconds of work lost to reclaims (rerun from zero)
        # Each notice's end, in order: (time, instance, its type, the slot-seconds its running tasks lost).
        self.reclaims: list[tuple[float, str, str, float]] = []
        self.capacity_failures = 0  # spot instances asked for that the market had no room for
        self._prefer: dict[int, Market] = {}  # task -> the market its job ranks first
        self._require: set[int] = set()  # tasks whose job runs only on its preferred market
        self.time = 0.0
        self.true_occupancy_s, self.true_exec_s = task_times(workflow, config)
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
        self._init_memory(config)
        self._submit_roots()
        booted_at = -config.boot_lag_s if config.bill_initial_boot else 0.0
        for _ in range(config.initial_instances):
            self._add_instance(0.0, launch_time=booted_at, instance_type=self._first_type, market=initial_market)
        if self.market.storm_at_s is not None:
            self._push(self.market.storm_at_s, _STORM, None)

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

    def launch(
        self,
        count: int,
        request_id: str | None = None,
        *,
        instance_type: str = "",
        market: Market = Market.ON_DEMAND,
    ) -> Sequence[Instance]:
        if instance_type and instance_type not in self.types:
            raise ConfigError(f"the emulated site has no instance type {instance_type!r}")
        kind = instance_type or self._first_type
        if not self.offers[kind].offers(market):
            raise ConfigError(f"the emulated site does not sell {kind or 'its instance type'!r} on the {market} market")
        fits = self._room(kind, market, count)
        ready = self.time + self.config.boot_lag_s
        made = [self._view(self._add_instance(ready, instance_type=kind, market=market)) for _ in range(fits)]
        if fits < count:  # as EC2 does: what fits is launched, the rest fails for capacity
            self.capacity_failures += count - fits
            name = kind or "the instance type"
            detail = f"no {market} capacity for {count - fits} of {count} {name!r}"
            raise CloudCapacityError("emulated", "launch", detail, "InsufficientInstanceCapacity", tuple(made))
        return made

    def _room(self, kind: str, market: Market, wanted: int) -> int:
        """How many of ``wanted`` instances the market has room for now."""
        capacity = self.market.capacity
        if market is not Market.SPOT or capacity is None:
            return wanted
        live = sum(1 for i in self._alive.values() if i.market is Market.SPOT and i.instance_type == kind)
        return max(0, min(wanted, capacity - live))

    def adopt(self, instance_id: str) -> Instance:
        """An instance launched elsewhere (a real cloud API) joins this world, after the boot lag.

        Rehearsals mirror a cloud endpoint's instances into the emulated pool with it.
        """
        if instance_id in self._instances:
            raise ValueError(f"instance {instance_id!r} is already in the emulated pool")
        inst = self._add_instance(self.time + self.config.boot_lag_s, instance_id, instance_type=self._first_type)
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

    def prefer_market(self, task_id: str, market: Market, required: bool = False) -> None:
        task = self.wf.index_of(task_id)
        self._prefer[task] = market
        if required:
            self._require.add(task)
        elif task in self._require:
            self._require.discard(task)
            self._request_negotiation()  # it may take any slot now

    def retire_instance(self, instance_id: str) -> None:
        inst = self._instances.get(instance_id)
        if inst is not None:
            inst.draining = True

    # -- Accounting --------------------------------------------------------

    def cost_units(self, until: float) -> int:
        return sum(self._units(inst, until) for inst in self._instances.values())

    def units_by_type(self, until: float) -> dict[str, int]:
        units: dict[str, int] = {}
        for inst in self._instances.values():
            units[inst.instance_type] = units.get(inst.instance_type, 0) + self._units(inst, until)
        return units

    def cost_money(self, until: float) -> float:
        """The bill: each instance's price per hour times the seconds billed (charging units of one
        on-demand price per unit, without instance types or markets)."""
        live = self._instances.values()
        return sum(money(self.billing, i.price_per_hour, i.launch_time, self._end(i, until)) for i in live)

    def bill(self, now: float) -> Bill:
        """Money spent and committed at ``now`` (``core.pricing.bill``)."""
        spans = [Span(i.price_per_hour, i.launch_time, i.end_time) for i in self._instances.values()]
        return bill(spans, self.billing, now)

    def paid_slot_seconds(self, until: float) -> float:
        return sum(self._units(i, until) * self.billing.charging_unit_s * i.slots for i in self._instances.values())

    def _units(self, inst: _EmuInstance, until: float) -> int:
        """Started charging units, billed from launch to termination (or ``until``)."""
        return self.billing.units(inst.launch_time, self._end(inst, until))

    @staticmethod
    def _end(inst: _EmuInstance, until: float) -> float:
        return until if inst.end_time is None else inst.end_time

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
        elif kind == _HOLD:
            task, attempt = cast(tuple[int, int], payload)
            if self._attempt[task] == attempt and task in self._host:
                self._hold(task)
        elif kind == _NOTICE:
            self._notice(cast(str, payload))
        elif kind == _RECLAIM:
            self._reclaim(cast(str, payload))
        elif kind == _STORM:
            self._storm()

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
        if self.memory_on:
            self._negotiate_shapes()
            return
        if self._require or (self._prefer and any(i.market is Market.SPOT for i in self._alive.values())):
            self._negotiate_markets()
            return
        free = self._free_slots()
        slot = next(free, None)
        while slot is not None and self._idle:
            neg_prio, seq, task = heapq.heappop(self._idle)
            stale = task in self._host or self._done[task] or -neg_prio != self._priority[task]
            if stale or seq != self._submit_seq[task]:
                continue
            self._start_task(task, slot)
            slot = next(free, None)

    def _negotiate_markets(self) -> None:
        """Idle jobs by priority, each on the oldest free slot of the market it prefers, else the oldest free slot.

        A preference is a rank (HTCondor's job Rank): a job whose market has no
        free slot takes any. A job that requires its market waits in the queue
        until a slot of that market is free.
        """
        free: dict[Market, list[tuple[int, str]]] = {m: [] for m in Market}
        for order, inst in enumerate(self._alive.values()):
            if not inst.draining and inst.ready_time <= self.time:
                free[inst.market].extend((order, inst.instance_id) for _ in range(inst.slots - len(inst.running)))
        for slots in free.values():
            slots.reverse()  # oldest last: pop() takes it
        waiting: list[tuple[int, int, int]] = []
        while self._idle and any(free.values()):
            neg_prio, seq, task = heapq.heappop(self._idle)
            stale = task in self._host or self._done[task] or -neg_prio != self._priority[task]
            if stale or seq != self._submit_seq[task]:
                continue
            wanted = self._prefer.get(task)
            if wanted is not None and not free[wanted] and task in self._require:
                waiting.append((neg_prio, seq, task))
                continue
            if wanted is None or not free[wanted]:
                wanted = min((m for m in Market if free[m]), key=lambda m: free[m][-1][0])
            self._start_task(task, free[wanted].pop()[1])
        for entry in waiting:
            heapq.heappush(self._idle, entry)

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
        if instance_id is not None and self.memory_on and self._allocate(task, instance_id):
            return  # it will be held for memory before it ends
        self._push(self._ends[task], _FINISH, (task, int(self._attempt[task])))

    def _finish(self, task: int) -> None:
        host = self._host.pop(task)
        occupancy = self.time - self._start.pop(task)
        self._ends.pop(task, None)
        if host in self._instances:
            self._instances[host].running.discard(task)
            self.busy_slot_s += occupancy
            self._free_memory(task, host, occupancy, failed=False)
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
                peak_memory_bytes=int(self.wf.peak_memory_bytes[task]) or None,
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
        host = self._host.pop(task)
        self._ends.pop(task, None)
        self._free_memory(task, host, occupancy, failed=True)
        self.busy_slot_s += occupancy
        self.wasted_slot_s += occupancy
        self.restarts += 1
        self._attempt[task] += 1  # its pending finish is now stale
        self._outbox.append(TaskEvent(self.time, EventKind.EVICTED, self.wf.task_ids[task]))
        heapq.heappush(self._idle, (-int(self._priority[task]), int(self._submit_seq[task]), task))
        self._request_negotiation()

    def _add_instance(
        self,
        ready_time: float,
        instance_id: str | None = None,
        launch_time: float | None = None,
        instance_type: str = "",
        market: Market = Market.ON_DEMAND,
    ) -> _EmuInstance:
        instance_id = instance_id or f"i-{next(self._instance_ids):05d}"
        launched = self.time if launch_time is None else launch_time
        offer = self.offers[instance_type]
        inst = _EmuInstance(
            instance_id,
            launched,
            ready_time,
            offer.cores,
            memory_mib=self.instance_memory_mib,
            instance_type=instance_type,
            price_per_hour=offer.price_per_hour(market),
            market=market,
        )
        kind = self.types.get(instance_type)
        if kind is not None and self.memory_on:
            inst.memory_mib = kind.memory_mib or self.instance_memory_mib
        self._instances[inst.instance_id] = inst
        self._alive[inst.instance_id] = inst
        if ready_time > self.time:
            self._push(ready_time, _BOOT, inst.instance_id)
        else:
            self._request_negotiation()
        if market is Market.SPOT:
            self._push(launched + self._reclaimer.time_to_reclaim(), _NOTICE, inst.instance_id)
        return inst

    # -- the spot market: notices, reclaims, storms -------------------------

    def _notice(self, instance_id: str) -> None:
        """A reclaim notice: the worker takes no new job, and ends when the notice runs out."""
        inst = self._instances[instance_id]
        if not inst.alive or inst.noticed:
            return
        inst.noticed = inst.draining = True
        self.interruptions += 1
        self._push(self.time + self.market.notice_s, _RECLAIM, instance_id)

    def _reclaim(self, instance_id: str) -> None:
        inst = self._instances[instance_id]
        if not inst.alive:
            self.reclaims.append((self.time, instance_id, inst.instance_type, 0.0))
            return  # released by its owner during the notice
        lost = sum(self.time - self._start[t] for t in inst.running if self._ends[t] > self.time + _SAME_INSTANT)
        self.interrupted_slot_s += lost
        self.reclaims.append((self.time, instance_id, inst.instance_type, lost))
        self.terminate([instance_id])

    def _storm(self) -> None:
        spot = [
            i.instance_id
            for i in self._alive.values()
            if i.market is Market.SPOT and i.instance_type == self._first_type and not i.noticed
        ]
        for instance_id in self._reclaimer.storm_victims(spot):
            self._notice(instance_id)

    # -- memory: partitionable slots, requests and holds ----------

    def _init_memory(self, config: EmulationConfig) -> None:
        self.instance_memory_mib = config.instance_memory_mib
        self.memory_on = config.instance_memory_mib > 0
        n = self.wf.n_tasks
        self.peak_mib = self.wf.peak_memory_bytes / _MIB
        self.request_mib = user_requests(self.wf, config) if self.memory_on else np.zeros(n)
        self._alloc: dict[int, float] = {}  # running task -> the request it holds on its instance
        self._held: set[int] = set()
        self.memory_failures = 0
        self.used_memory_mib_s = 0.0  # peak x occupancy of the attempts that finished
        self.wasted_memory_mib_s = 0.0  # the paper's W: over-allocation, and all of a failed attempt's

    def task_request_mib(self, tasks: np.ndarray) -> np.ndarray:
        """TaskShapes: each task's current request (NaN when memory is not modelled)."""
        return self.request_mib[tasks] if self.memory_on else np.full(len(tasks), np.nan)

    def request_memory_mib(self, task_id: str) -> float | None:
        return float(self.request_mib[self.wf.index_of(task_id)]) if self.memory_on else None

    def set_request_memory(self, task_id: str, mib: int) -> bool:
        task = self.wf.index_of(task_id)
        if not self.memory_on or task in self._host or self._done[task] or mib > self.instance_memory_mib:
            return False
        self.request_mib[task] = float(mib)
        return True

    def release_job(self, task_id: str) -> bool:
        task = self.wf.index_of(task_id)
        if task not in self._held:
            return False
        self._held.discard(task)
        self._outbox.append(TaskEvent(self.time, EventKind.RELEASED, task_id))
        heapq.heappush(self._idle, (-int(self._priority[task]), int(self._submit_seq[task]), task))
        self._request_negotiation()
        return True

    def paid_memory_mib_s(self, until: float) -> float:
        return sum(
            self._units(i, until) * self.billing.charging_unit_s * i.memory_mib for i in self._instances.values()
        )

    def _negotiate_shapes(self) -> None:
        """Idle jobs by priority, each on the oldest instance with a free core and room for its request."""
        usable = [i for i in self._alive.values() if not i.draining and i.ready_time <= self.time]
        skipped = []
        while self._idle and any(len(i.running) < i.slots for i in usable):
            entry = heapq.heappop(self._idle)
            neg_prio, seq, task = entry
            stale = task in self._host or self._done[task] or -neg_prio != self._priority[task]
            if stale or seq != self._submit_seq[task] or task in self._held:
                continue
            need = float(self.request_mib[task])
            fits = next((i for i in usable if len(i.running) < i.slots and i.memory_mib - i.used_mib >= need), None)
            if fits is None:
                skipped.append(entry)  # too big for what is free now; smaller jobs behind it may still start
                continue
            self._start_task(task, fits.instance_id)
        for entry in skipped:
            heapq.heappush(self._idle, entry)

    def _allocate(self, task: int, instance_id: str) -> bool:
        """Claim the job's request on its instance; True (and a hold scheduled) when its peak exceeds it."""
        request = float(self.request_mib[task])
        self._alloc[task] = request
        self._instances[instance_id].used_mib += request
        if self.peak_mib[task] <= request:
            return False
        fail_at = self.time + self.config.memory_failure_fraction * float(self.true_occupancy_s[task])
        self._push(fail_at, _HOLD, (task, int(self._attempt[task])))
        return True

    def _free_memory(self, task: int, host: str, occupancy: float, failed: bool) -> None:
        request = self._alloc.pop(task, None)
        if request is None:
            return
        inst = self._instances.get(host)
        if inst is not None:
            inst.used_mib -= request
        if failed:
            self.wasted_memory_mib_s += request * occupancy
        else:
            peak = float(self.peak_mib[task])
            self.used_memory_mib_s += peak * occupancy
            self.wasted_memory_mib_s += max(request - peak, 0.0) * occupancy

    def _hold(self, task: int) -> None:
        """The job went over its request: held, its slot and memory freed, the attempt's time wasted."""
        host = self._host.pop(task)
        occupancy = self.time - self._start.pop(task)
        self._ends.pop(task, None)
        self._instances[host].running.discard(task)
        self._free_memory(task, host, occupancy, failed=True)
        self.busy_slot_s += occupancy
        self.wasted_slot_s += occupancy
        self.memory_failures += 1
        self._attempt[task] += 1
        self._held.add(task)
        self._outbox.append(TaskEvent(self.time, EventKind.HELD, self.wf.task_ids[task], memory_exceeded=True))
        self._request_negotiation()

    def _view(self, inst: _EmuInstance) -> Instance:
        state = (
            CloudState.TERMINATED
            if not inst.alive
            else (CloudState.RUNNING if inst.ready_time <= self.time else CloudState.PENDING)
        )
        return Instance(
            inst.instance_id, inst.launch_time, inst.slots, state, instance_type=inst.instance_type, market=inst.market
        )


def spot_market(workflow: Workflow, config: EmulationConfig) -> SpotMarket:
    """The market an emulation config asks for; a storm lands within the run's critical path."""
    storm_at = None
    if config.storm:
        storm_at = storm_time(config.seed, config.boot_lag_s, critical_path_s(workflow, config))
    return SpotMarket(
        config.spot_interruptions_per_hour,
        config.reclaim_notice_s,
        storm_at,
        config.storm_fraction,
        config.spot_capacity,
        config.seed,
    )


def critical_path_s(workflow: Workflow, config: EmulationConfig) -> float:
    """The longest chain of slot occupancies: how long the run takes on an unbounded pool."""
    occupancy, _ = task_times(workflow, config)
    pending = workflow.n_parents().astype(np.int64)
    finish = np.zeros(workflow.n_tasks)
    ready = list(np.flatnonzero(pending == 0).tolist())
    while ready:
        task = ready.pop()
        finish[task] += occupancy[task]
        for child in workflow.children(task).tolist():
            finish[child] = max(finish[child], finish[task])
            pending[child] -= 1
            if pending[child] == 0:
                ready.append(child)
    return float(finish.max()) if finish.size else 0.0


def user_requests(workflow: Workflow, config: EmulationConfig) -> np.ndarray:
    """Each task's request_memory in MiB: the factor times its transformation's largest traced peak.

    Whole MiB, at least 1. A request no instance can hold would leave the job
    idle forever, so it is refused here rather than hanging a replay.
    """
    peaks: dict[str, float] = {}
    for name, peak in zip(workflow.transformation, workflow.peak_memory_bytes.tolist()):
        peaks[name] = max(peaks.get(name, 0.0), peak / _MIB)
    per_name = {name: max(math.ceil(peak * config.memory_request_factor), 1) for name, peak in peaks.items()}
    requests = np.array([per_name[name] for name in workflow.transformation], dtype=np.float64)
    if requests.size and requests.max() > config.instance_memory_mib:
        worst = workflow.transformation[int(np.argmax(requests))]
        raise ConfigError(
            f"emulation.instance_memory_mib {config.instance_memory_mib:g} is less than the request of "
            f"{worst} ({requests.max():g} MiB): its jobs could never start"
        )
    return requests
