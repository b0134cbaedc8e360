"""What ``wire-daemon run`` runs against: the emulated site or a real submit host.

Both give the service the same things: the MAPE loop to run (built over the
loop's ports), a clock, the live pool and the cost so far; both publish on
the service's journal. The service (``service.daemon``) does not know which
one it has.

* ``EmulatedRuntime``: a trace replayed on the emulated site, in accelerated
  virtual time. It is finished when the workflow is.
* ``SubmitHostRuntime``: every Pegasus workflow under a submit root, a cloud
  driver behind ``GuardedCloud``, and HTCondor control (or its logged
  stand-in). It runs until stopped; with no workflow it is an empty DAG, and
  the steering policy lets the pool go as its charging units end. HTCondor
  is asked nothing at start: a schedd or collector that is not up (yet)
  makes ``refresh`` raise ``CondorUnreachable``, and the service waits.

Both build their loop with ``runtime.assembly``, which wraps the scaling
policy in ``ControlledPolicy`` (``runtime.control``), so the operator's
pause / hold / drain-all / terminate-all apply to either, and both tell the
service which workflows they follow (``workflows``).
"""

from __future__ import annotations

import json
import logging
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any, Protocol

import numpy as np
from pydantic import ValidationError

from wire_daemon.analyze.memory import MemoryRightsizer
from wire_daemon.core.errors import CloudError
from wire_daemon.core.events import EventKind
from wire_daemon.core.instances import Instance, Lifecycle, LifecycleState
from wire_daemon.core.journal import InstanceReclaimed, Journal, Notice, TasksBoosted, cloud_error
from wire_daemon.core.pricing import Bill, Offer, SpotPriceBook
from wire_daemon.core.run_state import RunState, TaskStatus
from wire_daemon.core.sections import config_error
from wire_daemon.emulated.traces import bundled_trace_path, load_trace
from wire_daemon.execute.condor_control import LoggedCondorControl
from wire_daemon.execute.dry_run import DryRunCloud, dry_run_guard, unwrap
from wire_daemon.execute.guarded_cloud import GuardedCloud
from wire_daemon.loop.mape import MapeLoop
from wire_daemon.monitor.combine import split_task_id
from wire_daemon.monitor.hosts import HostMap
from wire_daemon.monitor.observations import FinishedMarkersOnly, SubmitHostObservations, TrackedWorkflow
from wire_daemon.monitor.problems import shown
from wire_daemon.monitor.submit_monitor import SubmitRootMonitor
from wire_daemon.persist.recorder import StoreRecorder
from wire_daemon.persist.store import StateStore
from wire_daemon.ports import Cloud
from wire_daemon.ports.condor import SubmitHostCondor
from wire_daemon.ports.memory import MemoryControl
from wire_daemon.runtime.assembly import LoopOptions, MarketMemory, World, assemble_loop, emulated_site
from wire_daemon.runtime.builders import build_condor_control, build_driver
from wire_daemon.runtime.control import PoolControl
from wire_daemon.runtime.policies import PolicyInputs, market_at_submit, policy_entry
from wire_daemon.runtime.settings import Settings

log = logging.getLogger(__name__)

# Sleeps up to the seconds given; a sleep that can be cut short (by a signal or an operator's command)
# returns True when it was, so that a virtual clock moves only as far as the wall clock did.
Sleep = Callable[[float], bool | None]
FINISHED_KEPT = 20  # finished workflows that status still lists
MARKET_KEY = "market"  # the state file's copy of what the loops learned of the spot market (MarketMemory)
# Seconds between two glances, while asleep, at whether DAGMan finished a followed workflow: billed per second,
# its pool idle until the next decision would cost up to an interval of every instance.
END_GLANCE_S = 10.0


class Runtime(Protocol):
    loop: MapeLoop
    speedup: float  # virtual seconds per wall second (1 on a real site)
    control: PoolControl  # the operator's mode, applied by the ControlledPolicy around the scaling policy
    virtual_clock: bool  # the loop's clock is virtual time (the emulated site), not the wall clock

    def now(self) -> float: ...

    def sleep_until(self, when: float) -> bool:
        """Sleep until ``when``; True when woken early because a workflow ended: a decision is due now."""

    @property
    def finished(self) -> bool: ...

    def refresh(self) -> None:
        """Read the world before an iteration; may replace ``loop`` (a workflow came or went)."""

    def instances(self) -> Sequence[Instance]: ...

    def excuse_vanished(self, why: str) -> None:
        """The pool goes unwatched (``why``): spot workers found gone at the next listing are no reclaims."""

    def cost_units(self, now: float) -> int: ...

    def bill(self, now: float) -> Bill:
        """Money spent and committed so far, at the configured prices."""

    def flush_notes(self) -> None:
        """Publish what the site has to say since the last call (input problems, dry-run condor calls), and
        keep in the state file what the iteration learned that a restart needs (the spot market)."""

    def reconfigure(self, settings: Settings) -> None:
        """Apply reloaded settings (steering; safety on a real cloud) to the running loop."""

    def workflows(self) -> list[dict[str, Any]]:
        """The workflows followed now and lately: name, submit dir, state, tasks done of all."""


def _apply_steering(loop: MapeLoop, settings: Settings) -> None:
    loop.steering = settings.steering
    loop.policy.reconfigure(settings.steering)


class EmulatedRuntime:
    """A trace on the emulated site: each virtual second lasts 1/speedup wall seconds.

    Virtual time moves only when the loop sleeps, so a slow iteration delays
    the world instead of letting it run ahead unobserved.
    """

    virtual_clock = True

    def __init__(self, settings: Settings, journal: Journal, sleep: Sleep = time.sleep) -> None:
        s = settings
        self.trace = Path(s.site.trace) if s.site.trace else bundled_trace_path()
        workflow = load_trace(self.trace)
        self.site = emulated_site(
            workflow, s.steering, s.emulation, market_at_submit(policy_entry(s.policy), s.steering)
        )
        self.speedup = s.site.speedup
        self.sleep = sleep
        self.journal = journal
        self._reclaims_told = 0
        self.control = PoolControl()
        state = RunState(workflow)
        site = self.site
        truth = lambda: (site.true_occupancy_s, site.true_exec_s)  # noqa: E731
        memory_mib = s.steering.instance_memory_mib or s.emulation.instance_memory_mib
        sizer = None
        if site.memory_on:  # a trace site with memory: the cap is the instance's
            cap = min(s.memory.max_request_mib or s.emulation.instance_memory_mib, s.emulation.instance_memory_mib)
            sizer = memory_sizer(s, state, site, cap)
        # A dry run launches and terminates nothing on the emulated cloud either: phantoms stand in for
        # what it would have launched, and the workflow runs on the pool the site started with.
        cloud: Cloud = DryRunCloud(site, site.now, journal) if s.safety.dry_run else site
        self.loop = assemble_loop(
            s.policy,
            PolicyInputs(state, s.steering, s.prediction, s.policy_options, truth),
            World(site, cloud, site, clock=site.now),
            memory_mib,
            site,
            LoopOptions(self.control, journal=journal, memory=sizer),
        )

    def now(self) -> float:
        return self.site.now()

    def sleep_until(self, when: float) -> bool:
        """Sleep the wall time ``when`` is away, then run the world to it; a sleep cut short (an operator's
        command, a signal) runs the world only as far as the wall clock went: a command moves no virtual time.

        Never woken by the workflow's end: the run stops there, and the site bills the pool to that end.
        """
        start = self.site.now()
        delay = (when - start) / self.speedup
        if delay > 0:
            began = time.monotonic()
            if self.sleep(delay):
                when = min(when, start + (time.monotonic() - began) * self.speedup)
        self.site.advance_to(when)
        return False

    @property
    def finished(self) -> bool:
        return self.site.finished

    def refresh(self) -> None:
        pass

    def instances(self) -> Sequence[Instance]:
        return self.site.list_instances()

    def excuse_vanished(self, why: str) -> None:
        pass  # the emulated site is always watched: it knows its own reclaims

    def cost_units(self, now: float) -> int:
        return self.site.cost_units(now)

    def bill(self, now: float) -> Bill:
        return self.site.bill(now)

    def flush_notes(self) -> None:
        # The emulated world has no input problems and runs its own condor; its market's reclaims are told.
        for at, instance_id, kind, lost in self.site.reclaims[self._reclaims_told :]:
            self.journal.publish(InstanceReclaimed(at, instance_id, kind, "", lost))
        self._reclaims_told = len(self.site.reclaims)

    def reconfigure(self, settings: Settings) -> None:
        _apply_steering(self.loop, settings)

    def workflows(self) -> list[dict[str, Any]]:
        state = self.loop.state
        return [
            {
                "name": state.workflow.name,
                "submit_dir": None,
                "trace": str(self.trace),
                "state": "finished" if self.site.finished else "running",
                "tasks": state.workflow.n_tasks,
                "done": self.site.n_done if self.site.finished else state.n_done(),
            }
        ]


class SubmitHostRuntime:
    """A real submit host: the workflows under ``site.submit_root``, a cloud, HTCondor."""

    speedup = 1.0
    virtual_clock = False

    def __init__(
        self,
        settings: Settings,
        store: StateStore,
        journal: Journal,
        sleep: Sleep = time.sleep,
        driver: Cloud | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.settings = settings
        self.store = store
        self.journal = journal
        journal.subscribe(StoreRecorder(store))  # the state file observes the lifecycle and the planned ends
        self.lifecycle = self._lifecycle()
        self.boosts = BoostLedger(store)
        journal.subscribe(self.boosts)
        self.sleep = sleep
        self.clock = clock
        self.control = PoolControl()
        self.finished_workflows: list[dict[str, Any]] = []  # newest last, at most FINISHED_KEPT
        self._woken_for: set[str] = set()  # finished workflows a sleep was cut short for, not read since
        self._decision_due = False  # a workflow ended: every sleep ends at once until the next iteration reads
        self.hosts = HostMap(r for r in store.instances(live_only=False) if r.address)  # type: ignore[misc]
        root = SubmitRootMonitor(
            settings.site.submit_root,
            store=FinishedMarkersOnly(store),
            hosts=self.hosts,
            settle_s=settings.condor.settle_s,
            clock=clock,
            read_finished=False,  # a root of thousands of old runs: their status files only
        )
        self.observations = SubmitHostObservations(root)
        self.condor = self._condor_control()
        self.cloud = self._guarded_cloud(driver or build_driver(settings, store.daemon_id()))
        self.spot_prices = self._spot_price_book()
        self.market = self._market_memory()  # what the loops learn of the spot market, kept from one DAG to the next
        self._market_saved = json.dumps(self.market.to_json(), sort_keys=True)
        self._reconcile()
        self.loop = self._new_loop(previous=None)

    # -- composition ------------------------------------------------------------

    def _condor_control(self) -> SubmitHostCondor:
        if self.settings.condor.control == "off":
            return LoggedCondorControl()
        return build_condor_control(self.settings, self._job_id_of)

    def _lifecycle(self) -> Lifecycle:
        """The lifecycle its loops share: our instances, persisted; in dry-run the phantoms, kept nowhere."""
        if self.settings.safety.dry_run:
            return Lifecycle()
        return Lifecycle(((r.instance_id, r.state) for r in self.store.instances()), journal=self.journal)

    def _guarded_cloud(self, driver: Cloud) -> GuardedCloud:
        """The guard over the provider, or in dry-run over a phantom pool that never calls it."""
        prices = {t.name: t.price for t in self.settings.steering.instance_types}
        if self.settings.safety.dry_run:
            return dry_run_guard(
                driver,
                self.settings.safety,
                self.settings.steering.billing,
                self.clock,
                self.journal,
                self.condor.holds_claims,
                prices,
                self.settings.steering.offers(),
            )
        return GuardedCloud(
            driver,
            self.store,
            self.settings.safety,
            self.settings.steering.billing,
            self.clock,
            journal=self.journal,
            joined=self.condor.has_joined,
            holds_claims=self.condor.holds_claims,
            prices=prices,
            lifecycle=self.lifecycle,
            offers=self.settings.steering.offers(),
        )

    def _spot_price_book(self) -> SpotPriceBook | None:
        """Spot prices read from the cloud, when its section asks for that (``CloudDriver.spot_price_source``)."""
        asked = getattr(unwrap(self.cloud.driver), "spot_price_source", None)  # a driver that can quote
        source = asked() if callable(asked) else None
        if source is None:
            return None
        read, period_s = source
        names = {key: key for key in self.settings.steering.offers()}  # "" is the cloud section's own type
        return SpotPriceBook(read, period_s, names, note=lambda line: self.journal.publish(Notice(line)))

    def _offers(self) -> dict[str, Offer]:
        """What the pool may launch at which price: the configured prices, with the spot prices read laid over."""
        offers = self.settings.steering.offers()
        return offers if self.spot_prices is None else self.spot_prices.apply(offers)

    def _refresh_prices(self) -> None:
        if self.spot_prices is not None and self.spot_prices.refresh(self.clock()):
            self.cloud.offers = self._offers()
            _apply_steering(self.loop, self._priced_settings())

    def _priced_settings(self) -> Settings:
        """The settings the policy steers with: once spot prices are read, the spot price ratio is the one the
        cloud quotes for the main type, not the configured one."""
        ratio = None if self.spot_prices is None else self.spot_prices.ratio(self.settings.steering.offers())
        if ratio is None:
            return self.settings
        return replace(self.settings, steering=replace(self.settings.steering, spot_price_ratio=ratio))

    def _market_memory(self) -> MarketMemory:
        """What the daemon before this one learned of the spot market (the state file keeps it), so that a
        restart does not retry at once a type it backed off, nor forget the reclaims it saw; a dry run's
        phantom pool starts with none."""
        if self.settings.safety.dry_run:
            return MarketMemory()
        terminating = {i for i, state in self.lifecycle.items() if state is LifecycleState.TERMINATING}
        try:
            return MarketMemory.from_json(json.loads(self.store.get_meta(MARKET_KEY) or "{}"), terminating)
        except ValidationError as exc:  # a hand edit, or a later version's shape: start afresh
            why = str(config_error(exc, MarketMemory, MARKET_KEY))
        except ValueError as exc:
            why = f"{MARKET_KEY} is not JSON ({exc})"
        self.journal.publish(Notice(f"state file: {why}; the daemon starts without its market memory"))
        return MarketMemory.from_json({}, terminating)

    def _save_market(self) -> None:
        """Keep what the loops learned of the market, when it changed (a write per reclaim or back-off)."""
        if self.settings.safety.dry_run:
            return
        current = json.dumps(self.market.to_json(), sort_keys=True)
        if current != self._market_saved:
            self.store.set_meta(MARKET_KEY, current)
            self._market_saved = current

    def _reconcile(self) -> None:
        try:
            self.cloud.reconcile()
        except CloudError as exc:  # the cloud is down at start: the loop retries its calls anyway
            self.journal.publish(cloud_error("reconciling at start", exc.kind, exc))

    def _new_loop(self, previous: MapeLoop | None) -> MapeLoop:
        """A loop over the current combined DAG, its RunState rebuilt from every event read."""
        s = self.settings
        state = RunState(self.observations.workflow)
        for event in self.observations.history():
            state.apply(event)
        sizer = memory_sizer(s, state, self.condor, s.memory.max_request_mib)
        if sizer is not None:  # a rebuilt loop keeps what the finished tasks taught
            sizer.learn(self.observations.history())
        # Requests are known only through the rightsizer, which reads them: without it the plan counts cores.
        loop = assemble_loop(
            s.policy,
            PolicyInputs(state, s.steering, s.prediction, s.policy_options),
            World(self.observations, self.cloud, self.condor, self.clock),
            s.steering.instance_memory_mib,
            sizer,
            LoopOptions(
                self.control,
                self.lifecycle,
                journal=self.journal,
                joined=None if s.safety.dry_run else self.condor.has_joined,  # no phantom's startd ever joins
                memory=sizer,
                market=self.market,
            ),
        )
        if previous is not None:
            loop.take_over_releases(previous.pending_releases)
            loop.terminated = previous.terminated
        else:  # a restart keeps every planned end the state file holds for the instances it follows
            ends = planned_ends(self.store)
            loop.take_over_releases({i: at for i, at in ends.items() if self.lifecycle.state_of(i) is not None})
        self.boosts.apply_to(loop)
        if self.spot_prices is not None:  # the ratio the cloud quotes, once read
            _apply_steering(loop, self._priced_settings())
        return loop

    def _job_id_of(self, task_id: str) -> str | None:
        found = self.observations.locate(task_id)
        if found is None:
            return None
        tracked, node = found
        if tracked.wf_uuid is None:
            return None
        return self.condor.queued_job_id(tracked.wf_uuid, node)

    # -- the runtime ------------------------------------------------------------

    def now(self) -> float:
        return self.clock()

    def sleep_until(self, when: float) -> bool:
        """Sleep until ``when``, glancing every ``END_GLANCE_S`` at whether DAGMan finished a followed workflow.

        True when one did, at once from then until the next ``refresh``: the decision is due now, so that the
        pool is let go rather than kept to the next interval. A sleep cut short (an operator's command, a
        signal) returns False at once: the daemon looks at why.
        """
        while not self._decision_due and (delay := when - self.clock()) > 0:
            if self.sleep(min(delay, END_GLANCE_S)):
                return False
            ended = self.observations.root.finished_now()
            self._woken_for &= ended  # forgotten by a poll since
            # Once per workflow: an iteration that could not read it (Condor away) does not wake the next sleep.
            self._decision_due = bool(ended - self._woken_for)
            self._woken_for |= ended
        return self._decision_due

    @property
    def finished(self) -> bool:
        return False  # a service: workflows come and go

    def refresh(self) -> None:
        """Read the world; first ask whether Condor is there (``CondorUnreachable`` when it is not): while it
        is away nothing is read or changed, so no worker is judged by a pool that cannot be asked."""
        self._decision_due = False  # this iteration is the decision a workflow's end asked for
        self.condor.probe()
        self._refresh_prices()
        for instance in self.cloud.list_instances():  # before reading: a new worker's first job resolves
            if instance.address:
                self.hosts.add(instance.instance_id, instance.address)
        for instance_id, address in self.condor.worker_addresses().items():  # the startd's own, whatever the cloud says
            self.hosts.add(instance_id, address)
        before = dict(self.observations.tracked)
        if self.observations.refresh():
            self._note_finished(before)
            self.loop = self._new_loop(previous=self.loop)
        self.condor.sync()

    def _note_finished(self, before: dict[str, TrackedWorkflow]) -> None:
        """Keep a line for each workflow DAGMan finished, for status: the monitor forgets them at once."""
        for key, tracked in before.items():
            if key in self.observations.tracked:
                continue
            marker = self.observations.root.finished.get(key, {})
            exit_code = marker.get("exit_code")
            self.finished_workflows.append(
                {
                    "name": tracked.label,
                    "submit_dir": shown(os.fspath(tracked.path)),
                    "state": "finished" if exit_code in (0, None) else "failed",
                    "exit_code": exit_code,
                    "tasks": tracked.workflow.n_tasks,
                    "done": _done_in(tracked),
                    "finished_at": self.clock(),
                }
            )
        del self.finished_workflows[:-FINISHED_KEPT]

    def instances(self) -> Sequence[Instance]:
        return self.cloud.list_instances()

    def excuse_vanished(self, why: str) -> None:
        """The loop's cloud: the guard, or the spot fallback around it, which passes the excuse on to the guard."""
        getattr(self.loop.cloud, "excuse_vanished", self.cloud.excuse_vanished)(why)

    def cost_units(self, now: float) -> int:
        return self.cloud.cost_units(now)

    def bill(self, now: float) -> Bill:
        return self.cloud.bill(now)

    def flush_notes(self) -> None:
        self._save_market()  # once an iteration, as the notes: what it learned of the market outlives the daemon
        notes = self.observations.problems.take_new()
        notes += _summarised(self.condor.take_notes())
        for line in notes:
            self.journal.publish(Notice(line))

    def reconfigure(self, settings: Settings) -> None:
        self.settings = settings  # the next rebuilt loop uses it too
        if self.spot_prices is not None:  # the types listed may have changed: read those from now on
            self.spot_prices.names = {key: key for key in settings.steering.offers()}
        if settings.safety.dry_run != isinstance(self.cloud.driver, DryRunCloud):
            self._swap_dry_run()
        self.cloud.config = settings.safety
        self.cloud.billing = settings.steering.billing
        self.cloud.offers = self._offers()
        _apply_steering(self.loop, self._priced_settings())

    def _swap_dry_run(self) -> None:
        """A reload flipped ``safety.dry_run``: go on as a restart into the new mode would.

        Into dry-run: a phantom pool, followed by a lifecycle of its own (the
        state file keeps the real pool as it was). Out of it: the real pool
        from the state file and the cloud (the reconcile a dry run skipped),
        with its planned ends.
        """
        self.lifecycle = self._lifecycle()
        self.cloud = self._guarded_cloud(unwrap(self.cloud.driver))
        self.cloud.offers = self._offers()
        self.market = self._market_memory()  # another pool: what the last one saw of the market is not its own
        self._reconcile()
        self.loop = self._new_loop(previous=None)

    def workflows(self) -> list[dict[str, Any]]:
        """Those followed now (their progress from the loop's RunState), then the latest finished ones."""
        done, total = _progress_by_label(self.loop.state)
        live = [
            {
                "name": t.label,
                "submit_dir": shown(os.fspath(t.path)),
                "state": "running" if t.events else "waiting",
                "tasks": total.get(t.label, t.workflow.n_tasks),
                "done": done.get(t.label, 0),
            }
            for t in self.observations.tracked.values()
        ]
        return live + list(self.finished_workflows)


def _progress_by_label(state: RunState) -> tuple[dict[str, int], dict[str, int]]:
    """Tasks done and tasks in all, per workflow label of a combined DAG (one bincount per stage)."""
    wf = state.workflow
    if wf.n_tasks == 0:
        return {}, {}
    stage_of = wf.stage_of.astype(np.int64)
    n_stages = len(wf.stages)
    done = np.bincount(stage_of[state.status == TaskStatus.DONE], minlength=n_stages)
    total = np.bincount(stage_of, minlength=n_stages)
    done_by: dict[str, int] = {}
    total_by: dict[str, int] = {}
    for k, stage in enumerate(wf.stages):
        label = split_task_id(stage.name)[0]
        done_by[label] = done_by.get(label, 0) + int(done[k])
        total_by[label] = total_by.get(label, 0) + int(total[k])
    return done_by, total_by


def _done_in(tracked: TrackedWorkflow) -> int:
    """Tasks of a finished workflow that ended well, from the events read (its RunState is gone)."""
    return len({e.task_id for e in tracked.events if e.kind is EventKind.FINISHED and e.exit_code in (None, 0)})


class BoostLedger:
    """Every task the priority boost raised, kept in the state file: a restart boosts no stage twice.

    An observer of the journal; each rebuilt loop (a workflow came or went, or
    the daemon restarted) starts from it, so each stage keeps its count.
    """

    KEY = "boosted"

    def __init__(self, store: StateStore) -> None:
        self.store = store
        self.boosted: dict[str, int] = json.loads(store.get_meta(self.KEY) or "{}")

    def notify(self, event: object) -> None:
        if isinstance(event, TasksBoosted):
            self.boosted.update(dict.fromkeys(event.task_ids, event.priority))
            self.store.set_meta(self.KEY, json.dumps(self.boosted, sort_keys=True))

    def apply_to(self, loop: MapeLoop) -> None:
        workflow = loop.state.workflow
        for task_id, priority in self.boosted.items():
            if task_id in workflow._index:
                loop.boost.mark(loop.state, workflow.index_of(task_id), priority)


def _summarised(notes: list[str]) -> list[str]:
    """Priority notes come five per stage: one line says how many, the drains are listed."""
    boosts = [n for n in notes if "JobPrio" in n]
    others = [n for n in notes if "JobPrio" not in n]
    return ([f"condor control off: would boost JobPrio of {len(boosts)} task(s)"] if boosts else []) + others


def planned_ends(store: StateStore) -> dict[str, float]:
    """The drained instances' termination times, as the state file keeps them."""
    return {
        r.instance_id: r.release_at
        for r in store.instances()
        if r.release_at is not None and r.state == LifecycleState.DRAINING
    }


def memory_sizer(
    settings: Settings, state: RunState, control: MemoryControl, cap_mib: float
) -> MemoryRightsizer | None:
    """The request_memory rightsizer when ``memory.rightsizing`` is on; in dry-run it only says what it would do."""
    if not settings.memory.rightsizing:
        return None
    return MemoryRightsizer(state.workflow, settings.memory, control, cap_mib, dry_run=settings.safety.dry_run)


def build_runtime(settings: Settings, store: StateStore, journal: Journal, sleep: Sleep = time.sleep) -> Runtime:
    if settings.site.kind == "condor":
        return SubmitHostRuntime(settings, store, journal, sleep)
    return EmulatedRuntime(settings, journal, sleep)
