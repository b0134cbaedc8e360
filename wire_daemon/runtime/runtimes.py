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
  the steering policy lets the pool go as its charging units end.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Protocol

import numpy as np

from wire_daemon.core.errors import CloudError
from wire_daemon.core.instances import Instance, Lifecycle
from wire_daemon.core.journal import Journal, Notice, cloud_error
from wire_daemon.core.run_state import RunState
from wire_daemon.core.store import StateStore
from wire_daemon.emulated.site import EmulatedSite
from wire_daemon.emulated.traces import bundled_trace_path, load_trace
from wire_daemon.execute.condor_control import HTCondorControl, LoggedCondorControl, queued_job_id
from wire_daemon.execute.guarded_cloud import GuardedCloud
from wire_daemon.loop.mape import MapeLoop
from wire_daemon.monitor.hosts import HostMap
from wire_daemon.monitor.observations import FinishedMarkersOnly, SubmitHostObservations
from wire_daemon.monitor.submit_monitor import SubmitRootMonitor
from wire_daemon.ports import Cloud
from wire_daemon.runtime.builders import build_condor_control, build_driver
from wire_daemon.runtime.policies import PolicyInputs, make_policy
from wire_daemon.runtime.settings import Settings

log = logging.getLogger(__name__)

Sleep = Callable[[float], None]


class Runtime(Protocol):
    loop: MapeLoop
    speedup: float  # virtual seconds per wall second (1 on a real site)

    def now(self) -> float: ...

    def sleep_until(self, when: float) -> None: ...

    @property
    def finished(self) -> bool: ...

    def refresh(self) -> None:
        """Read the world before an iteration; may replace ``loop`` (a workflow came or went)."""

    def instances(self) -> Sequence[Instance]: ...

    def cost_units(self, now: float) -> int: ...

    def flush_notes(self) -> None:
        """Publish what the site has to say since the last call (input problems, dry-run condor calls)."""

    def terminate_all(self) -> None: ...

    def reconfigure(self, settings: Settings) -> None:
        """Apply reloaded settings (steering; safety on a real cloud) to the running loop."""


def _apply_steering(loop: MapeLoop, settings: Settings) -> None:
    loop.steering = settings.steering
    loop.policy.reconfigure(settings.steering)


class EmulatedRuntime:
    """A trace on the emulated site: each virtual second lasts 1/speedup wall seconds.

    Virtual time moves only when the loop sleeps, so a slow iteration delays
    the world instead of letting it run ahead unobserved.
    """

    def __init__(self, settings: Settings, journal: Journal, sleep: Sleep = time.sleep) -> None:
        s = settings
        trace = Path(s.site.trace) if s.site.trace else bundled_trace_path()
        workflow = load_trace(trace)
        self.site = EmulatedSite(workflow, s.emulation, s.steering.slots_per_instance, s.steering.billing)
        self.speedup = s.site.speedup
        self.sleep = sleep
        state = RunState(workflow)
        site = self.site
        truth = lambda: (site.true_occupancy_s, site.true_exec_s)  # noqa: E731
        policy = make_policy(s.policy, PolicyInputs(state, s.steering, s.prediction, s.pfa, truth))
        self.loop = MapeLoop(state, site, site, site, policy, s.steering, journal=journal)

    def now(self) -> float:
        return self.site.now()

    def sleep_until(self, when: float) -> None:
        delay = (when - self.site.now()) / self.speedup
        if delay > 0:
            self.sleep(delay)
        self.site.advance_to(when)

    @property
    def finished(self) -> bool:
        return self.site.finished

    def refresh(self) -> None:
        pass

    def instances(self) -> Sequence[Instance]:
        return self.site.list_instances()

    def cost_units(self, now: float) -> int:
        return self.site.cost_units(now)

    def flush_notes(self) -> None:
        pass  # the emulated world has no input problems and runs its own condor

    def terminate_all(self) -> None:
        self.site.terminate([i.instance_id for i in self.site.list_instances()])

    def reconfigure(self, settings: Settings) -> None:
        _apply_steering(self.loop, settings)


class SubmitHostRuntime:
    """A real submit host: the workflows under ``site.submit_root``, a cloud, HTCondor."""

    speedup = 1.0

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
        # One lifecycle for every loop this runtime builds, persisted in the state file.
        self.lifecycle = Lifecycle(((r.instance_id, r.state) for r in store.instances()), on_move=store.set_lifecycle)
        self.sleep = sleep
        self.clock = clock
        self.hosts = HostMap(r for r in store.instances(live_only=False) if r.address)  # type: ignore[misc]
        root = SubmitRootMonitor(
            settings.site.submit_root,
            store=FinishedMarkersOnly(store),
            hosts=self.hosts,
            settle_s=settings.condor.settle_s,
            clock=clock,
        )
        self.observations = SubmitHostObservations(root)
        self.control = self._condor_control()
        self.cloud = self._guarded_cloud(driver or build_driver(settings, store.daemon_id()))
        self._reconcile()
        self.loop = self._new_loop(previous=None)

    # -- composition ------------------------------------------------------------

    def _condor_control(self) -> HTCondorControl | LoggedCondorControl:
        if self.settings.condor.control == "off":
            return LoggedCondorControl()
        return build_condor_control(self.settings, self._job_id_of)

    def _guarded_cloud(self, driver: Cloud) -> GuardedCloud:
        real = self.control if isinstance(self.control, HTCondorControl) else None
        return GuardedCloud(
            driver,
            self.store,
            self.settings.safety,
            self.settings.steering.billing,
            self.clock,
            journal=self.journal,
            joined=real.has_joined if real else None,
            holds_claims=real.holds_claims if real else None,
        )

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
        policy = make_policy(s.policy, PolicyInputs(state, s.steering, s.prediction, s.pfa))
        real = self.control if isinstance(self.control, HTCondorControl) else None
        loop = MapeLoop(
            state,
            self.observations,
            self.cloud,
            self.control,
            policy,
            s.steering,
            journal=self.journal,
            lifecycle=self.lifecycle,
            joined=real.has_joined if real else None,
        )
        if previous is not None:
            loop.pending_releases = previous.pending_releases
            loop.terminated = previous.terminated
            _carry_boosts(previous, loop)
        return loop

    def _job_id_of(self, task_id: str) -> str | None:
        found = self.observations.locate(task_id)
        if found is None or not isinstance(self.control, HTCondorControl):
            return None
        tracked, node = found
        if tracked.wf_uuid is None:
            return None
        return queued_job_id(self.control.schedd, tracked.wf_uuid, node)

    # -- the runtime ------------------------------------------------------------

    def now(self) -> float:
        return self.clock()

    def sleep_until(self, when: float) -> None:
        delay = when - self.clock()
        if delay > 0:
            self.sleep(delay)

    @property
    def finished(self) -> bool:
        return False  # a service: workflows come and go

    def refresh(self) -> None:
        for instance in self.cloud.list_instances():  # before reading: a new worker's first job resolves
            if instance.address:
                self.hosts.add(instance.instance_id, instance.address)
        if self.observations.refresh():
            self.loop = self._new_loop(previous=self.loop)
        if isinstance(self.control, HTCondorControl):
            self.control.sync()

    def instances(self) -> Sequence[Instance]:
        return self.cloud.list_instances()

    def cost_units(self, now: float) -> int:
        return self.cloud.cost_units(now)

    def flush_notes(self) -> None:
        notes = self.observations.problems.take_new()
        if isinstance(self.control, LoggedCondorControl):
            notes += _summarised(self.control.take_notes())
        for line in notes:
            self.journal.publish(Notice(line))

    def terminate_all(self) -> None:
        self.cloud.terminate([i.instance_id for i in self.cloud.list_instances()])

    def reconfigure(self, settings: Settings) -> None:
        self.settings = settings  # the next rebuilt loop uses it too
        self.cloud.config = settings.safety.validate()
        self.cloud.billing = settings.steering.billing
        _apply_steering(self.loop, settings)


def _carry_boosts(previous: MapeLoop, loop: MapeLoop) -> None:
    """Keep the tasks already boosted (and each stage's count) across a rebuilt combined DAG."""
    old_wf, new_wf = previous.state.workflow, loop.state.workflow
    for task in np.flatnonzero(previous.boost.priority_of):
        task_id = old_wf.task_ids[task]
        if task_id in new_wf._index:
            new = new_wf.index_of(task_id)
            loop.boost.priority_of[new] = previous.boost.priority_of[task]
            loop.boost.used[new_wf.stage_of[new]] += 1


def _summarised(notes: list[str]) -> list[str]:
    """Priority notes come five per stage: one line says how many, the drains are listed."""
    boosts = [n for n in notes if "JobPrio" in n]
    others = [n for n in notes if "JobPrio" not in n]
    return ([f"condor control off: would boost JobPrio of {len(boosts)} task(s)"] if boosts else []) + others


def build_runtime(settings: Settings, store: StateStore, journal: Journal, sleep: Sleep = time.sleep) -> Runtime:
    if settings.site.kind == "condor":
        return SubmitHostRuntime(settings, store, journal, sleep)
    return EmulatedRuntime(settings, journal, sleep)
