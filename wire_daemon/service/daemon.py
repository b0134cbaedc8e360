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
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from wire_daemon.core.errors import WireError
from wire_daemon.core.journal import Journal, NoticeBox
from wire_daemon.core.run_state import RunState, TaskStatus
from wire_daemon.core.store import StateStore
from wire_daemon.loop.mape import DecisionRecord, MapeLoop
from wire_daemon.loop.schedule import iteration_times, release_until
from wire_daemon.runtime.runtimes import Runtime, build_runtime
from wire_daemon.runtime.settings import Settings, load_settings
from wire_daemon.service.decisions_log import DecisionsLog, ShutdownRecord
from wire_daemon.service.metrics import Metrics

log = logging.getLogger(__name__)


class Daemon:
    def __init__(
        self, settings: Settings, config_path: str | None = None, sleep: Callable[[float], None] | None = None
    ) -> None:
        self.settings = settings
        self.config_path = config_path
        self.store = StateStore(settings.state_path)
        self.journal = Journal()
        self.notices = NoticeBox()  # what one decision record lists
        self.journal.subscribe(self.notices)
        self.decisions = DecisionsLog(
            Path(settings.log.decisions_path), settings.log.max_bytes, settings.log.backups, self.store
        )
        self.journal.subscribe(self.decisions)
        self.stop_requested = False
        self.reload_requested = False
        self.iterations = 0
        self.overruns = 0
        self.runtime: Runtime = build_runtime(settings, self.store, self.journal, sleep or self._interruptible_sleep)
        self.metrics = self._start_metrics()

    def _start_metrics(self) -> Metrics | None:
        if not self.settings.metrics.enabled:
            return None
        metrics = Metrics()
        port = metrics.serve(self.settings.metrics.address, self.settings.metrics.port)
        self.journal.subscribe(metrics)
        log.info("metrics at http://%s:%d/metrics", self.settings.metrics.address, port)
        return metrics

    @property
    def loop(self) -> MapeLoop:
        return self.runtime.loop

    @property
    def state(self) -> RunState:
        return self.runtime.loop.state

    def _interruptible_sleep(self, seconds: float) -> None:
        """Sleep, but wake within a fraction of a second of SIGTERM."""
        deadline = time.monotonic() + seconds
        while not self.stop_requested and (left := deadline - time.monotonic()) > 0:
            time.sleep(min(left, 0.2))

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
        # The site, the cloud and the state file are what the running daemon is made of: a restart changes them.
        self.settings = replace(
            fresh, site=self.settings.site, cloud=self.settings.cloud, state_path=self.settings.state_path
        )
        self.runtime.reconfigure(self.settings)
        log.info("reloaded %s", self.config_path)

    # -- the service loop ----------------------------------------------------------

    def run(self, max_iterations: int | None = None) -> int:
        self.store.set_meta("pid", str(os.getpid()))
        interval = self.settings.steering.interval_s
        times = iteration_times(self.runtime.now(), interval)
        next_at = next(times)
        while not self.stop_requested and not self.runtime.finished:
            if max_iterations is not None and self.iterations >= max_iterations:
                break
            if self.reload_requested:
                self.reload()
            self.runtime.sleep_until(next_at)
            if self.runtime.finished or self.stop_requested:
                break
            started = time.monotonic()
            self._iterate(self.runtime.now())
            next_at = next(times)  # already past after an overrun: the next iteration starts at once
            release_until(self.loop, self.runtime, next_at, stop=lambda: self.stop_requested)
            self._check_overrun(interval, time.monotonic() - started)
        self._shutdown()
        return 0

    def _iterate(self, now: float) -> None:
        try:
            self.runtime.refresh()
            record = self.loop.iterate(now)
        except Exception:  # one bad iteration must not kill the service
            log.exception("iteration at t=%.0f failed; the loop goes on", now)
            return
        self.iterations += 1
        self.runtime.flush_notes()
        record.cost_units = self.runtime.cost_units(now)
        record.notices = self.notices.take()
        self.journal.publish(record)
        self.store.set_meta("status", json.dumps(self.status_snapshot(now, record), sort_keys=True))
        self.store.set_meta("heartbeat", json.dumps({"wall": time.time(), "virtual": now}))

    def _check_overrun(self, interval: float, took_wall_s: float) -> None:
        took = took_wall_s * self.runtime.speedup
        if took > interval:
            self.overruns += 1
            log.warning(
                "iteration overran its interval: %.1f s for a %.0f s interval; the next starts at once", took, interval
            )

    def _shutdown(self) -> None:
        finished = self.runtime.finished
        if finished or self.settings.scale_to_zero_on_exit:  # a finished replay has nothing left to pay for
            self.runtime.terminate_all()
        self._log_final_terminations()
        self.store.set_meta("stopped", json.dumps({"wall": time.time(), "finished": finished}))
        self.decisions.close()
        self.store.close()
        if self.metrics is not None:
            self.metrics.stop()

    def _log_final_terminations(self) -> None:
        """Terminations after the last iteration (timed releases, scale-to-zero) still reach the log."""
        done = self.loop.take_terminated()
        self.runtime.flush_notes()
        notices = self.notices.take()
        if done or notices:
            now = self.runtime.now()
            self.journal.publish(ShutdownRecord(now, done, self.runtime.cost_units(now), notices))

    # -- status ---------------------------------------------------------------------

    def status_snapshot(self, now: float, record: DecisionRecord) -> dict[str, Any]:
        billing = self.settings.steering.billing
        instances = self.runtime.instances()
        busy: dict[str, int] = {}
        for host in self.state.host.values():
            busy[host] = busy.get(host, 0) + 1
        return {
            "time": now,
            "pool": [
                {
                    "instance_id": i.instance_id,
                    "state": i.state,
                    "lifecycle": _lifecycle(self.loop, i.instance_id),
                    "age_s": round(now - i.launch_time, 1),
                    "busy_slots": busy.get(i.instance_id, 0),
                    "slots": i.slots,
                    "next_charge_in_s": round(billing.time_to_next_charge(i.launch_time, now), 1),
                }
                for i in instances
            ],
            "stages": self._stage_counts(),
            "last_decision": {
                "target": record.target,
                "planned": record.planned,
                "launched": record.launched,
                "released": record.released,
                "rule": record.rule,
            },
            "cost_units": self.runtime.cost_units(now),
            "remaining_makespan_estimate_s": self._remaining_estimate(record),
        }

    def _stage_counts(self) -> list[dict[str, Any]]:
        """Per stage: task counts by state, and the prediction for its unfinished tasks.

        Counted with bincounts over the task arrays: one pass, whatever the number of stages.
        """
        wf, status = self.state.workflow, self.state.status.astype(np.int64)
        n_stages = len(wf.stages)
        stage_of = wf.stage_of.astype(np.int64)
        counts = np.bincount(stage_of * 8 + status, minlength=n_stages * 8).reshape(n_stages, 8)
        prediction = self.loop.last_plan.prediction if self.loop.last_plan else None
        mean_s, policy = self._stage_predictions(prediction, stage_of, n_stages)
        return [
            {
                "stage": stage.name,
                "tasks": int(counts[k].sum()),
                "done": int(counts[k, TaskStatus.DONE]),
                "running": int(counts[k, TaskStatus.RUNNING]),
                "idle": int(counts[k, TaskStatus.IDLE]),
                "not_ready": int(counts[k, TaskStatus.WAITING]),
                "predicted_occupancy_s": mean_s[k],
                "prediction_policy": policy[k],
            }
            for k, stage in enumerate(wf.stages)
        ]

    @staticmethod
    def _stage_predictions(prediction: Any, stage_of: np.ndarray, n_stages: int) -> tuple[list, list]:
        """Mean predicted occupancy of each stage's unfinished tasks, and the policy most of them use."""
        if prediction is None or n_stages == 0:
            return [None] * n_stages, [None] * n_stages
        open_ = prediction.policy > 0
        stages = stage_of[open_]
        n = np.bincount(stages, minlength=n_stages)
        total = np.bincount(stages, weights=np.nan_to_num(prediction.occupancy_s[open_]), minlength=n_stages)
        by_policy = np.bincount(stages * 10 + prediction.policy[open_].astype(np.int64), minlength=n_stages * 10)
        dominant = by_policy.reshape(n_stages, 10).argmax(axis=1)
        mean_s = [round(float(t / c), 1) if c else None for t, c in zip(total, n)]
        policy = [int(p) if c else None for p, c in zip(dominant, n)]
        return mean_s, policy

    def _remaining_estimate(self, record: DecisionRecord) -> float:
        """Predicted remaining work over the pool's slots: a rough lower bound for operators."""
        prediction = self.loop.last_plan.prediction if self.loop.last_plan else None
        if prediction is None:
            return 0.0
        remaining = np.nansum(prediction.remaining_s)
        slots = max(1, record.pool * self.settings.steering.slots_per_instance)
        return round(float(remaining) / slots, 1)


def _lifecycle(loop: MapeLoop, instance_id: str) -> str | None:
    state = loop.lifecycle.state_of(instance_id)
    return state.value if state is not None else None


def run_from_config(path: str, max_iterations: int | None = None) -> int:
    daemon = Daemon(load_settings(path), config_path=path)
    daemon.install_signal_handlers()
    return daemon.run(max_iterations)
