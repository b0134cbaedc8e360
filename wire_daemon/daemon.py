"""``wire-daemon run``: the MAPE loop as a long-running service.

Every interval it runs one loop iteration, appends the decision to the
decisions log (JSON lines, rotated) and to the state file, refreshes the
status snapshot that ``wire-daemon status`` reads, and sleeps until the next
interval or the next timed release, whichever comes first.

Lifecycle: SIGTERM (or SIGINT) finishes the current iteration, persists and
exits; instances stay up unless ``scale_to_zero_on_exit``. SIGHUP reloads the
config file; a file that does not validate is refused with a one-line error
and the old settings stay. An iteration that takes longer than the interval
is logged as an overrun and the next one starts at once: none is skipped
silently. An exception inside an iteration is logged and the loop goes on.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import time
from dataclasses import dataclass, replace
from logging.handlers import RotatingFileHandler
from pathlib import Path
from typing import Any, Callable

import numpy as np

from wire_daemon.errors import ConfigError, WireError
from wire_daemon.loop import DecisionRecord, MapeLoop
from wire_daemon.monitor.run_state import RunState, TaskStatus
from wire_daemon.plan.policies import make_policy
from wire_daemon.settings import Settings, load_settings
from wire_daemon.sites.emulated import EmulatedSite
from wire_daemon.state import StateStore
from wire_daemon.workflow.wfformat import bundled_trace_path, load_trace

log = logging.getLogger(__name__)


class DecisionsLog:
    """JSON lines, one object per iteration, rotated by size."""

    def __init__(self, path: Path, max_bytes: int, backups: int) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self._logger = logging.getLogger(f"wire_daemon.decisions.{path}")
        self._logger.propagate = False
        self._logger.setLevel(logging.INFO)
        if not self._logger.handlers:
            handler = RotatingFileHandler(path, maxBytes=max_bytes, backupCount=backups, encoding="utf-8")
            handler.setFormatter(logging.Formatter("%(message)s"))
            self._logger.addHandler(handler)

    def append(self, record: dict[str, Any]) -> None:
        self._logger.info(json.dumps(record, sort_keys=True))

    def close(self) -> None:
        for handler in list(self._logger.handlers):
            handler.close()
            self._logger.removeHandler(handler)


@dataclass
class EmulatedWorld:
    """The emulated site in accelerated time: each virtual second lasts 1/speedup wall seconds.

    Virtual time moves only when the loop sleeps, so a slow iteration delays
    the world instead of letting it run ahead unobserved.
    """

    site: EmulatedSite
    speedup: float
    sleep: Callable[[float], None] = time.sleep

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


class Daemon:
    def __init__(self, settings: Settings, config_path: str | None = None) -> None:
        self.settings = settings
        self.config_path = config_path
        self.store = StateStore(settings.state_path)
        self.decisions = DecisionsLog(Path(settings.log.decisions_path), settings.log.max_bytes, settings.log.backups)
        self.stop_requested = False
        self.reload_requested = False
        self.iterations = 0
        self.overruns = 0
        self.world, self.state, self.loop = self._build()

    # -- composition -----------------------------------------------------------

    def _build(self) -> tuple[EmulatedWorld, RunState, MapeLoop]:
        if self.settings.site.kind != "emulated":
            raise ConfigError(
                f"{self.settings.source}: site.kind {self.settings.site.kind!r} needs the submit-host monitor, "
                "which this build of wire-daemon run does not wire yet; use site.kind emulated"
            )
        trace = Path(self.settings.site.trace) if self.settings.site.trace else bundled_trace_path()
        workflow = load_trace(trace)
        s = self.settings
        site = EmulatedSite(workflow, s.emulation, s.steering.slots_per_instance, s.steering.charging_unit_s)
        world = EmulatedWorld(site, s.site.speedup)
        state = RunState(workflow)
        truth = lambda: (site.true_occupancy_s, site.true_exec_s)  # noqa: E731
        policy = make_policy("wire", state, s.steering, s.prediction, truth=truth)
        loop = MapeLoop(state, site, site, site, policy, s.steering)
        return world, state, loop

    # -- signals -----------------------------------------------------------------

    def install_signal_handlers(self) -> None:
        signal.signal(signal.SIGTERM, self._on_stop)
        signal.signal(signal.SIGINT, self._on_stop)
        signal.signal(signal.SIGHUP, self._on_reload)

    def _on_stop(self, signum: int, frame: object) -> None:
        log.info("signal %d: finishing the current iteration, then exiting", signum)
        self.stop_requested = True

    def _on_reload(self, signum: int, frame: object) -> None:
        self.reload_requested = True

    def reload(self) -> None:
        self.reload_requested = False
        if not self.config_path:
            return
        try:
            fresh = load_settings(self.config_path)
        except WireError as exc:
            log.error("reload refused, keeping the running settings: %s", exc)
            return
        self.settings = replace(fresh, site=self.settings.site, state_path=self.settings.state_path)
        self.loop.steering = fresh.steering
        if hasattr(self.loop.policy, "config"):
            self.loop.policy.config = fresh.steering
        log.info("reloaded %s", self.config_path)

    # -- the service loop ----------------------------------------------------------

    def run(self, max_iterations: int | None = None) -> int:
        self.store.set_meta("pid", str(os.getpid()))
        interval = self.settings.steering.interval_s
        next_at = self.world.now()
        while not self.stop_requested and not self.world.finished:
            if max_iterations is not None and self.iterations >= max_iterations:
                break
            if self.reload_requested:
                self.reload()
            self.world.sleep_until(next_at)
            if self.world.finished:
                break
            started = time.monotonic()
            self._iterate(self.world.now())
            self._sleep_through_releases(next_at + interval)
            self._check_overrun(interval, time.monotonic() - started)
            next_at += interval  # already past after an overrun: the next iteration starts at once
        self._shutdown()
        return 0

    def _iterate(self, now: float) -> None:
        try:
            record = self.loop.iterate(now)
        except Exception:  # one bad iteration must not kill the service
            log.exception("iteration at t=%.0f failed; the loop goes on", now)
            return
        self.iterations += 1
        entry = record.to_json() | {"cost_units": self.world.site.cost_units(now), "notes": []}
        self.decisions.append(entry)
        self.store.append_decision(now, entry)
        self.store.set_meta("status", json.dumps(self.status_snapshot(now, record), sort_keys=True))
        self.store.set_meta("heartbeat", json.dumps({"wall": time.time(), "virtual": now}))

    def _sleep_through_releases(self, until: float) -> None:
        while (when := self.loop.next_release()) is not None and when < until and not self.stop_requested:
            self.world.sleep_until(when)
            self.loop.release_due(when)

    def _check_overrun(self, interval: float, took_wall_s: float) -> None:
        took = took_wall_s * getattr(self.world, "speedup", 1.0)
        if took > interval:
            self.overruns += 1
            log.warning("iteration overran its interval: %.1f s for a %.0f s interval; the next starts at once", took, interval)

    def _shutdown(self) -> None:
        if self.world.finished:
            live = [i.instance_id for i in self.world.site.list_instances()]
            self.world.site.terminate(live)  # the workflow is done: nothing left to pay for
        elif self.settings.scale_to_zero_on_exit:
            self.world.site.terminate([i.instance_id for i in self.world.site.list_instances()])
        self.store.set_meta("stopped", json.dumps({"wall": time.time(), "finished": self.world.finished}))
        self.decisions.close()
        self.store.close()

    # -- status ---------------------------------------------------------------------

    def status_snapshot(self, now: float, record: DecisionRecord) -> dict[str, Any]:
        u = self.settings.steering.charging_unit_s
        instances = self.world.site.list_instances()
        busy = {}
        for host in self.state.host.values():
            busy[host] = busy.get(host, 0) + 1
        return {
            "time": now,
            "pool": [
                {
                    "instance_id": i.instance_id,
                    "state": i.state,
                    "age_s": round(now - i.launch_time, 1),
                    "busy_slots": busy.get(i.instance_id, 0),
                    "slots": i.slots,
                    "next_charge_in_s": round(u - (now - i.launch_time) % u, 1),
                }
                for i in instances
            ],
            "stages": self._stage_counts(),
            "last_decision": {k: record.to_json()[k] for k in ("target", "planned", "launched", "released", "rule")},
            "cost_units": self.world.site.cost_units(now),
            "remaining_makespan_estimate_s": self._remaining_estimate(record),
        }

    def _stage_counts(self) -> list[dict[str, Any]]:
        wf = self.state.workflow
        out = []
        for stage, members in zip(wf.stages, wf.stage_members()):
            status = self.state.status[members]
            out.append(
                {
                    "stage": stage.name,
                    "tasks": int(members.size),
                    "done": int(np.count_nonzero(status == TaskStatus.DONE)),
                    "running": int(np.count_nonzero(status == TaskStatus.RUNNING)),
                    "idle": int(np.count_nonzero(status == TaskStatus.IDLE)),
                    "not_ready": int(np.count_nonzero(status == TaskStatus.WAITING)),
                }
            )
        return out

    def _remaining_estimate(self, record: DecisionRecord) -> float:
        """Predicted remaining work over the pool's slots: a rough lower bound for operators."""
        prediction = getattr(self.loop.policy, "last_prediction", None)
        if prediction is None:
            return 0.0
        remaining = np.nansum(prediction.remaining_s)
        slots = max(1, record.pool * self.settings.steering.slots_per_instance)
        return round(float(remaining) / slots, 1)


def run_from_config(path: str, max_iterations: int | None = None) -> int:
    daemon = Daemon(load_settings(path), config_path=path)
    daemon.install_signal_handlers()
    return daemon.run(max_iterations)
