"""``wire-daemon run``: the MAPE loop as a long-running service.

Every interval it runs one loop iteration, appends the decision to the
decisions log (JSON lines, rotated) and to the state file, refreshes the
status snapshot that ``wire-daemon status`` reads, and sleeps until the next
interval or the next timed release, whichever comes first.

Lifecycle: SIGTERM (or SIGINT) finishes the current iteration, persists and
exits; instances stay up unless ``scale_to_zero_on_exit``. SIGHUP reloads the
config file; a file that cannot be read, decoded, validated or applied (any
exception) is refused with a one-line error naming it and the old settings
stay. An iteration that takes longer than the interval
is logged as an overrun and the next one starts at once: none is skipped
silently. An exception inside an iteration is logged and the loop goes on;
iterations failing in a row, or a crash loop across restarts, put the daemon
in its safe state (``service/safe_state.py``): it keeps watching and changes
nothing in the pool until iterations succeed again. HTCondor going away (a
schedd or collector that does not answer, at start or mid-run, a
``condor_restart``) is weather, not a fault: the daemon says so in one line,
holds the pool as it is (no launch, no termination, timed releases wait),
asks again after 5 s, then twice as long each time up to one interval, and
says in one line when HTCondor answers again; it counts toward no safe
state. One daemon per state file:
it holds the file's lock (``persist/store.py``) for its life.
Every run ends with a shutdown record in the decisions log (why it stopped,
the final counts) and a final status snapshot.

The log (stderr: the journal under systemd) says at INFO, one line each, what
an operator needs: the start (site, cloud, policy, dry-run, files), each
decision in plain words, reloads, the operator's commands, instances adopted,
the metrics address and the stop. Times are UTC; on the emulated site the
loop's virtual times are shown as offsets from the replay's start.

Operator's commands (``wire-daemon pause`` and the like) arrive through the
state file. The daemon looks for them at every iteration and, while it
sleeps, about once a second; a command that changes the pool (hold,
drain-all, terminate-all) starts an iteration at once on a real site.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import signal
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from wire_daemon.core.errors import CondorUnreachable, WireError
from wire_daemon.core.instances import Instance
from wire_daemon.core.journal import ControlChanged, Journal, NoticeBox
from wire_daemon.core.run_state import RunState, TaskStatus
from wire_daemon.core.secrets import ScrubSecrets
from wire_daemon.execute.market_fallback import SpotFallback
from wire_daemon.execute.providers import quieted_loggers
from wire_daemon.loop.mape import MapeLoop
from wire_daemon.loop.schedule import iteration_times, release_until
from wire_daemon.runtime.control import PoolControl
from wire_daemon.runtime.runtimes import Runtime, build_runtime
from wire_daemon.runtime.settings import Settings, check_paths, load_settings
from wire_daemon.service.decisions_log import DecisionsLog, ShutdownRecord
from wire_daemon.service.interruptions import INTERRUPTIONS_KEY, InterruptionTally
from wire_daemon.service.load_change import LoadWatch
from wire_daemon.service.metrics import Metrics
from wire_daemon.service.safe_state import RUNNING_STATUS, CrashWatch
from wire_daemon.service.state_room import open_state
from wire_daemon.service.status import (
    CONDOR_AWAY_KEY,
    STATUS_KEY,
    ControlStatus,
    Cost,
    EndedInstance,
    Interruptions,
    LastDecision,
    PoolInstance,
    SafeStateStatus,
    StatusSnapshot,
    Stopped,
    interruption_status,
    remaining_estimate,
    stage_statuses,
    task_counts,
    workflow_statuses,
)
from wire_daemon.service.systemd_notify import notify
from wire_daemon.service.watchdog import IterationAbandoned, IterationWatchdog, stuck_bound
from wire_daemon.service.wording import decision_details, decision_words, duration, offset

log = logging.getLogger(__name__)
CONTROL_POLL_S = 1.0  # how often a sleeping daemon looks for an operator's command
_POOL_CHANGING = ("hold", "drain-all", "terminate-all")
_ACTIONS = ("drain-all", "terminate-all")
CONDOR_RETRY_FIRST_S = 5.0  # the first wait for an HTCondor that does not answer; doubled up to one interval


@dataclass
class CondorAway:
    """HTCondor does not answer: since when (wall clock), why, and how long until it is asked again."""

    since: float
    reason: str
    retry_in_s: float


class _JournalFormatter(logging.Formatter):
    """``2025-11-05T12:03:00Z INFO message``; other modules' lines name their module."""

    def __init__(self) -> None:
        super().__init__("%(asctime)s %(levelname)s %(message)s", datefmt="%Y-%m-%dT%H:%M:%SZ")

    def formatTime(self, record: logging.LogRecord, datefmt: str | None = None) -> str:  # noqa: N802 (logging's name)
        return time.strftime(datefmt or "%Y-%m-%dT%H:%M:%SZ", time.gmtime(record.created))

    def format(self, record: logging.LogRecord) -> str:
        line = super().format(record)
        if record.name != __name__ and record.levelno != logging.INFO:
            head = f"{self.formatTime(record, self.datefmt)} {record.levelname} "
            line = head + f"{record.name}: " + line[len(head) :]
        return line


def configure_logging(level: str = "INFO") -> None:
    """The service's log: one line per event, UTC timestamps, on stderr (the journal under systemd)."""
    root = logging.getLogger()
    for handler in list(root.handlers):
        root.removeHandler(handler)
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(_JournalFormatter())
    handler.addFilter(ScrubSecrets())  # an SDK's debug line or an exception may quote a token or a header
    root.addHandler(handler)
    root.setLevel(level.upper())
    quiet = logging.DEBUG if level.upper() == "DEBUG" else logging.WARNING
    for chatty in quieted_loggers():
        logging.getLogger(chatty).setLevel(quiet)  # the SDKs' INFO lines ("Found credentials ...") are noise here


class Daemon:
    def __init__(
        self, settings: Settings, config_path: str | None = None, sleep: Callable[[float], None] | None = None
    ) -> None:
        check_paths(settings)
        self.settings = settings
        self.config_path = config_path
        # Before anything writes to the state file: one daemon per state file (persist/store.py).
        self.lock, self.store = open_state(settings.state_path)  # waits while its disk has no room
        try:
            self.watch = CrashWatch(settings.safe_state, self.store)
            self.watch.record_start()  # before the runtime: a start that fails in it is an unclean end too
            # What the state file knew before the cloud was asked: the start announces the rest (adopted) apart.
            self._known_at_start = {r.instance_id for r in self.store.instances()}
            self._build(sleep)
        except BaseException:
            self.lock.release()
            raise
        self._hold_pool()
        if not self.watch.active:  # the safe state has said so itself
            notify(STATUS=RUNNING_STATUS)

    def _build(self, sleep: Callable[[float], None] | None) -> None:
        settings = self.settings
        self.journal = Journal()
        self.notices = NoticeBox()  # what one decision record lists
        self.journal.subscribe(self.notices)
        # Spot reclaims, per type and zone, and their lost work; a submit host's survive a restart (the
        # emulated site replays its trace from the start: its count does too).
        kept = self.store.get_meta(INTERRUPTIONS_KEY) if settings.site.kind == "condor" else None
        self.interruptions = InterruptionTally.from_json(kept)
        self.journal.subscribe(self.interruptions)
        self.stop_requested = False
        self.stop_reason = ""
        self.reload_requested = False
        self.watchdog = IterationWatchdog(stuck_bound(settings.steering.interval_s), lambda: self.stop_requested)
        self.controls_waiting = False
        self.no_room = False  # the state file's disk refused a write, kept in memory since
        self.actions_given: list[int] = []  # drain-all / terminate-all requests applied, not yet carried out
        self.iterations = 0
        self.overruns = 0
        self.last_record: dict[str, Any] | None = None
        # This run's id in the decisions log and the state file: its number among the state file's runs.
        runs = self.store.get_meta("run_number") or ""
        self.run_id = str(int(runs) + 1 if runs.isdigit() else 1)
        self.load_watch = LoadWatch()
        self.condor_away: CondorAway | None = None
        # Before the runtime: an unwritable log is refused before any cloud call.
        self.decisions = DecisionsLog(
            Path(settings.log.decisions_path),
            settings.log.max_bytes,
            settings.log.backups,
            virtual=settings.site.kind == "emulated",
        )
        self.journal.subscribe(self.decisions)
        self.runtime: Runtime = build_runtime(settings, self.store, self.journal, sleep or self._interruptible_sleep)
        self._restore_control()
        self.metrics = self._start_metrics()

    def _start_metrics(self) -> Metrics | None:
        if not self.settings.metrics.enabled:
            return None
        metrics = Metrics()
        metrics.dry_run = self.settings.safety.dry_run
        port = metrics.serve(self.settings.metrics.address, self.settings.metrics.port)
        self.journal.subscribe(metrics)
        log.info("metrics at http://%s:%d/metrics", self.settings.metrics.address, port)
        return metrics

    def _restore_control(self) -> None:
        """The operator's mode survives a restart (it lives in the state file), on a real site.

        On the emulated site each run replays the workflow from its start: a
        mode or a command given to an earlier run ended with it, and is not
        carried into this one (commands given before the first run are kept).
        """
        if self.settings.site.kind == "emulated" and self.store.get_meta("started") is not None:
            for request in self.store.pending_controls():
                self.store.mark_control_applied(request.seq, "refused: given to an emulated run that had stopped")
            self._save_control()  # this run starts in the automatic mode
            return
        saved = self.store.get_meta("control")
        if saved:
            restored = PoolControl.from_json(json.loads(saved))
            control = self.runtime.control
            control.mode, control.count, control.action = restored.mode, restored.count, restored.action
            control.command, control.since = restored.command, restored.since
        if self.runtime.control.action:  # given before the restart, not carried out yet: its command still waits
            self.actions_given = [
                c.seq
                for c in self.store.controls(last=50)
                if c.command in _ACTIONS and (c.outcome or "").startswith("pending")
            ]

    @property
    def loop(self) -> MapeLoop:
        return self.runtime.loop

    @property
    def state(self) -> RunState:
        return self.runtime.loop.state

    def _interruptible_sleep(self, seconds: float) -> bool:
        """Sleep; wake within a fraction of a second of SIGTERM or SIGHUP, within a second of an operator's command.

        True when woken before ``seconds`` were up: the emulated site's virtual clock then moves only as far.
        """
        deadline = time.monotonic() + seconds
        look_at = time.monotonic()
        while (
            not (self.stop_requested or self.controls_waiting or self.reload_requested)
            and (left := deadline - time.monotonic()) > 0
        ):
            if time.monotonic() >= look_at:
                look_at = time.monotonic() + CONTROL_POLL_S
                if self.store.has_pending_controls():
                    self.controls_waiting = True
                    return True
            time.sleep(min(left, 0.2))
        return deadline - time.monotonic() > 0

    # -- signals -----------------------------------------------------------------

    def install_signal_handlers(self) -> None:
        signal.signal(signal.SIGTERM, self._on_stop)
        signal.signal(signal.SIGINT, self._on_stop)
        signal.signal(signal.SIGHUP, self._on_reload)
        self.watchdog.install()  # a stuck iteration, or one outliving SIGTERM, is abandoned (service/watchdog.py)

    def _on_stop(self, signum: int, frame: object) -> None:
        self.stop_reason = f"{signal.Signals(signum).name} received"
        self.stop_requested = True

    def _on_reload(self, signum: int, frame: object) -> None:
        self.reload_requested = True

    def reload(self) -> None:
        self.reload_requested = False
        if not self.config_path:
            return
        running = self.settings
        try:
            fresh = load_settings(self.config_path)
        except WireError as exc:
            log.error("reload refused, keeping the running settings: %s", exc)
            return
        except Exception as exc:  # load_settings names what it knows; anything else must not stop the loop either
            log.error("reload refused, keeping the running settings: %s: %s", self.config_path, type(exc).__name__)
            return
        # The site, the cloud and the state file are what the running daemon is made of: a restart changes them.
        kept = [
            key
            for key in ("site", "cloud", "state_path", "log", "metrics")
            if getattr(fresh, key) != getattr(running, key)
        ]
        candidate = replace(fresh, site=running.site, cloud=running.cloud, state_path=running.state_path)
        try:
            self.runtime.reconfigure(candidate)
        except Exception as exc:  # half applied: put the running settings back in every part
            with contextlib.suppress(Exception):  # they were applied once already; this line says what failed
                self.runtime.reconfigure(running)
            log.error(
                "reload refused, keeping the running settings: %s: applying them failed (%s)",
                self.config_path,
                type(exc).__name__,
            )
            return
        self.settings = candidate
        if self.metrics is not None:
            self.metrics.dry_run = candidate.safety.dry_run
        self.watch.settings = candidate.safe_state
        self.watchdog.stuck_after_s = stuck_bound(candidate.steering.interval_s)
        safety = self.settings.safety
        restart = f"; changes to {', '.join(kept)} need a restart" if kept else ""
        log.info(
            "reloaded %s: interval %g s, max %d instances, dry-run %s%s",
            self.config_path,
            self.settings.steering.interval_s,
            safety.max_instances,
            "on" if safety.dry_run else "off",
            restart,
        )

    # -- the service loop ----------------------------------------------------------

    def run(self, max_iterations: int | None = None) -> int:
        self.store.set_meta("pid", str(os.getpid()))
        self.store.set_meta("started", json.dumps({"wall": time.time(), "pid": os.getpid()}))
        self._log_start()
        self.decisions.append(self._run_header())
        self.store.set_meta("run_number", self.run_id)
        interval = self.settings.steering.interval_s
        times = iteration_times(self.runtime.now(), interval)
        next_at = on_grid = next(times)
        self.watchdog.start()
        while not self.stop_requested and not self.runtime.finished:
            if max_iterations is not None and self.iterations >= max_iterations:
                self.stop_reason = f"{max_iterations} iteration(s) done (--max-iterations)"
                break
            if self.reload_requested:
                self.reload()
            ended = self.runtime.sleep_until(next_at)
            if self.runtime.finished or self.stop_requested:
                break
            acted = self._apply_controls()
            if not (acted or ended) and self.runtime.now() < next_at:
                continue  # woken by SIGHUP or a command that changes no pool (pause, resume): sleep on
            if ended:
                log.info("a workflow finished: deciding now, not in %.0f s", next_at - self.runtime.now())
            started = time.monotonic()
            self._watched_iteration(self.runtime.now())
            if self.runtime.now() >= on_grid:
                on_grid = next(times)  # already past after an overrun: the next iteration starts at once
            next_at = on_grid
            if self.condor_away is not None:  # asked again sooner than the next interval, with back-off
                next_at = min(on_grid, self.runtime.now() + self.condor_away.retry_in_s)
            self._release_until(next_at)
            self._check_overrun(interval, time.monotonic() - started)
        if self.runtime.finished:
            self.stop_reason = "the workflow finished"
        self._shutdown()
        return 0

    def _watched_iteration(self, now: float) -> None:
        """One iteration under the watchdog: a stuck one, or one outliving SIGTERM, is abandoned."""
        try:
            with self.watchdog.span():
                self._iterate(now)
        except IterationAbandoned as exc:
            log.error("iteration at %s abandoned: %s", self._when(now), exc)
            self.watch.failed(f"iteration abandoned: {exc}")

    def _log_start(self) -> None:
        s = self.settings
        if s.site.kind == "condor":
            site = f"submit host, watching {s.site.submit_root}; cloud {s.cloud.kind}, pool {s.cloud.pool}"
        else:
            name = self.state.workflow.name
            site = f"emulated site replaying {name} at {s.site.speedup:g}x (times below are virtual offsets)"
        log.info(
            "wire-daemon %s started (pid %d), run %s: %s; policy %s, interval %g s, %d slots per instance, "
            "max %d instances, dry-run %s",
            _version(),
            os.getpid(),
            self.run_id,
            site,
            s.policy,
            s.steering.interval_s,
            s.steering.slots_per_instance,
            min(s.safety.max_instances, s.steering.max_instances),
            "on" if s.safety.dry_run else "off",
        )
        log.info("state %s; decisions log %s", s.state_path, s.log.decisions_path)
        live = [(i, st) for i, st in self.loop.lifecycle.items() if st.is_live and i in self._known_at_start]
        if live:
            log.info(
                "adopting %d instance(s) from the previous run: %s",
                len(live),
                ", ".join(f"{i} ({st.value})" for i, st in live),
            )
        control = self.runtime.control
        if control.mode != "auto":
            log.info("operator's mode kept from before the restart: %s", control.describe())

    def _run_header(self) -> dict[str, Any]:
        """The decisions log's first record of this run: which run, where, with what; readers split runs at it."""
        s = self.settings
        if s.site.kind == "condor":
            site = f"submit host {s.site.submit_root}, cloud {s.cloud.kind} pool {s.cloud.pool}"
        else:
            site = f"emulated site replaying {self.state.workflow.name} at {s.site.speedup:g}x"
        config = str(Path(self.config_path).resolve()) if self.config_path else None
        return {
            "time": self.runtime.now(),
            "event": "run",
            "run": self.run_id,
            "site": site,
            "policy": s.policy,
            "config": config,
            "dry_run": s.safety.dry_run,
            "pid": os.getpid(),
        }

    def _apply_controls(self) -> bool:
        """Carry out the operator's pending commands, in order; True if one changes the pool now."""
        self.controls_waiting = False
        pending = self.store.pending_controls()
        if not pending:
            return False
        control, acted = self.runtime.control, False
        for request in pending:
            try:
                outcome = control.apply(
                    request.command, request.count, when=time.time(), argument=request.argument or ""
                )
            except ValueError as exc:
                self.store.mark_control_applied(request.seq, f"refused: {exc}")
                log.warning("operator's command %s refused: %s", request.command, exc)
                continue
            self._save_control()  # before marking it applied: the command then reads the new mode
            if request.command in _ACTIONS:  # done once the decision that carries it out is made
                self.actions_given.append(request.seq)
                self.store.mark_control_applied(request.seq, f"pending: {outcome}")
            else:
                self.store.mark_control_applied(request.seq, f"applied: {outcome}")
            acted = acted or request.command in _POOL_CHANGING or bool(control.action)
            event = ControlChanged(
                self.runtime.now(),
                request.command,
                control.mode,
                control.count if control.mode == "hold" else None,
                request.requested_at,
                request.requested_by,
                outcome,
            )
            self.journal.publish(event)
            log.info("%s", event.line)
        return acted

    def _report_actions(self, entry: dict[str, Any]) -> None:
        """Tell the operator's drain-all / terminate-all what was done, once a decision carried it out."""
        if not self.actions_given:
            return
        control = self.runtime.control
        if control.action:  # held back (the safe state): the command says so, and why
            why = f"waits: {control.safe}" if control.safe else "waits for the next decision"
            for seq in self.actions_given:
                self.store.mark_control_applied(seq, f"pending: {control.action} {why}")
            return
        released = sorted(entry.get("released") or [])
        terminated = "terminate-all" in entry.get("rule", "")
        how = "terminated now" if terminated else "drained, each terminated when its unit ends"
        ids = f": {', '.join(released)}" if released else ""
        outcome = f"done: {len(released)} instance(s) {how}{ids}; {control.after_action()}"
        for seq in self.actions_given:
            self.store.mark_control_applied(seq, outcome)
        self.actions_given = []

    def _release_until(self, until: float) -> None:
        """The timed releases before ``until``; a failure there counts like a failed iteration."""
        self._hold_pool()
        try:
            release_until(self.loop, self.runtime, until, stop=lambda: self.stop_requested or self.controls_waiting)
        except Exception as exc:  # one bad termination must not kill the service
            log.exception("timed releases failed; the loop goes on")
            self.watch.failed(_summary(exc))

    def _hold_pool(self) -> None:
        """Carry the safe state, or HTCondor's absence, to the policy's wrapper and to the loop (a rebuilt
        loop starts unfrozen)."""
        active, away = self.watch.active, self.condor_away
        held = self.watch.state.reason if active else f"HTCondor unreachable: {away.reason}" if away else ""
        self.runtime.control.safe = held
        self.loop.frozen = bool(held)

    def _condor_is_away(self, exc: CondorUnreachable) -> None:
        """Said once when HTCondor goes away; then asked again with back-off, quietly, until it answers."""
        away, reason = self.condor_away, str(exc)
        if away is None:
            self.condor_away = CondorAway(time.time(), reason, CONDOR_RETRY_FIRST_S)
            log.warning(
                "HTCondor unreachable (%s): the pool is held as it is, no launch and no termination; "
                "asking again in %.0f s, then less often",
                reason,
                CONDOR_RETRY_FIRST_S,
            )
            notify(STATUS=f"WAITING FOR HTCONDOR: {reason}; the pool is left as it is")
            self._record_condor_away()
        else:
            away.reason = reason
            away.retry_in_s = min(away.retry_in_s * 2, max(self.settings.steering.interval_s, CONDOR_RETRY_FIRST_S))
            log.debug("HTCondor still unreachable (%s); asking again in %.0f s", reason, away.retry_in_s)
        # Re-armed at every failed probe, so the first listing after HTCondor answers is the one excused.
        self.runtime.excuse_vanished("HTCondor was away (its worker's dead-man switch may have powered it off)")
        self._hold_pool()

    def _condor_is_back(self) -> None:
        away, self.condor_away = self.condor_away, None
        if away is None:
            return
        self._record_condor_away()
        log.info(
            "HTCondor answers again after %s; the scaling policy decides again",
            duration(max(time.time() - away.since, 0.0)),
        )
        if not self.watch.active:
            notify(STATUS=RUNNING_STATUS)

    def _record_condor_away(self) -> None:
        """For ``status``: HTCondor's absence as the state file keeps it (null once it answers)."""
        away = self.condor_away
        value = None if away is None else {"since": away.since, "reason": away.reason}
        self.store.set_meta(CONDOR_AWAY_KEY, json.dumps(value))  # a full disk keeps it in memory (persist/store.py)

    def _save_control(self) -> None:
        self.store.set_meta("control", json.dumps(self.runtime.control.to_json(), sort_keys=True))

    def _iterate(self, now: float) -> None:
        known = {i for i, state in self.loop.lifecycle.items()}
        action = self.runtime.control.action
        try:
            self.runtime.refresh()
            self._condor_is_back()
            self._hold_pool()
            record = self.loop.iterate(now)
        except CondorUnreachable as exc:  # weather: no decision, no failure counted
            self._condor_is_away(exc)
            self.store.set_meta("heartbeat", json.dumps({"wall": time.time(), "virtual": now}))  # alive, waiting
            return
        except Exception as exc:  # one bad iteration must not kill the service
            log.exception("iteration at %s failed; the loop goes on", self._when(now))
            self.watch.failed(_summary(exc))  # in the state file at once: status shows it between snapshots
            return
        self.watch.succeeded()
        if action and not self.runtime.control.action:  # drain-all / terminate-all carried out
            self._save_control()
        self.iterations += 1
        self.runtime.flush_notes()
        record.cost_units = self.runtime.cost_units(now)
        bill = self.runtime.bill(now)
        record.cost_money, record.money_committed = bill.total, bill.committed
        record.currency = self.settings.steering.currency
        record.notices = self.notices.take()
        record.dry_run = self.settings.safety.dry_run
        prediction = self.loop.last_plan.prediction if self.loop.last_plan else None
        record.load_change = self.load_watch.explain(record.upcoming_load_s, stage_statuses(self.state, prediction))
        self.journal.publish(record)
        entry = record.to_json()
        self.last_record = entry
        self._report_actions(entry)
        adopted = sorted({i for i, _ in self.loop.lifecycle.items()} - known - set(record.launched))
        if adopted:
            log.info("adopted %d instance(s) the cloud lists as this pool's: %s", len(adopted), ", ".join(adopted))
        if self.runtime.virtual_clock:
            log.info("at %s %s", offset(now).removesuffix(" (virtual)"), decision_words(entry))
        else:
            log.info("%s", decision_words(entry))
        self._write_status(now, entry)
        self._tell_room()

    def _tell_room(self) -> None:
        """systemd's status line says when the state file's disk has no room: it is shown without a write."""
        kept = self.store.kept_writes
        if kept and not self.no_room:
            notify(STATUS=f"NO ROOM on the state file's disk: {kept} write(s) kept in memory; running on")
        elif self.no_room and not kept:
            notify(
                STATUS=f"SAFE STATE: {self.watch.state.reason}; the pool is left as it is"
                if self.watch.active
                else RUNNING_STATUS
            )
        self.no_room = bool(kept)

    def _write_status(self, now: float, entry: dict[str, Any] | None, stopped: Stopped | None = None) -> None:
        snapshot = self.status_snapshot(now, entry, stopped)
        self.store.set_meta(STATUS_KEY, json.dumps(snapshot.to_json(), sort_keys=True))
        if self.interruptions.changed:
            self.store.set_meta(INTERRUPTIONS_KEY, self.interruptions.to_json())
        self.store.set_meta("heartbeat", json.dumps({"wall": time.time(), "virtual": now}))

    def _when(self, now: float) -> str:
        return offset(now) if self.runtime.virtual_clock else time.strftime("%Y-%m-%d %H:%M:%SZ", time.gmtime(now))

    def _check_overrun(self, interval: float, took_wall_s: float) -> None:
        took = took_wall_s * self.runtime.speedup
        if took > interval:
            self.overruns += 1
            log.warning(
                "iteration overran its interval: %.1f s for a %.0f s interval; the next starts at once", took, interval
            )

    def _shutdown(self) -> None:
        finished = self.runtime.finished
        reason = self.stop_reason or "stopped"
        if finished:
            # The events since the last iteration (the last tasks' ends): the final counts are the true ones.
            self.state.apply_all(self.loop.observations.poll_events())
        if finished or self.settings.scale_to_zero_on_exit:  # a finished replay has nothing left to pay for
            ended = self._terminate_everything()
            if self.settings.scale_to_zero_on_exit and not finished:
                reason += "; scale_to_zero_on_exit: the pool was terminated"
        else:
            ended = []
        now = self.runtime.now()
        record = self._final_record(now, reason, finished, ended)
        left = [i.instance_id for i in self.status_snapshot(now, None).pool if i.lifecycle != "terminated"]
        stopped = Stopped(time.time(), finished, reason)
        self._write_status(now, self.last_record, stopped)
        self.store.set_meta("stopped", json.dumps(asdict(stopped)))
        log.info(
            "stopped: %s, after %d decision(s); %s; cost %d unit(s) in all",
            reason,
            self.iterations,
            (
                f"phantom instances of the dry run (none launched): {', '.join(left)}"
                if self.settings.safety.dry_run
                else f"instances left up: {', '.join(left)}"
            )
            if left
            else "no instance left up",
            record.cost_units,
        )
        self.watch.record_clean_stop()
        self.watchdog.close()
        notify(STOPPING="1", STATUS=f"stopped: {reason}")
        self.decisions.close()
        self.store.close()
        self.lock.release()
        if self.metrics is not None:
            self.metrics.stop()

    def _terminate_everything(self) -> list[str]:
        """Terminate what is left, through the loop's lifecycle, so status shows the instances as terminated."""
        live = [i.instance_id for i in self.runtime.instances()]
        going = [i for i in live if (st := self.loop.lifecycle.state_of(i)) is not None and st.is_live]
        self.loop.terminate(live)
        still = {i.instance_id for i in self.runtime.instances()}
        return [i for i in going if i not in still]

    def _final_record(self, now: float, reason: str, finished: bool, ended: list[str]) -> ShutdownRecord:
        """The run's last line in the decisions log: terminations after the last decision, why it stopped, counts."""
        done = list(dict.fromkeys(self.loop.take_terminated() + ended))
        self.runtime.flush_notes()
        state = self.state
        record = ShutdownRecord(
            now,
            done,
            self.runtime.cost_units(now),
            self.notices.take(),
            reason=reason,
            finished=finished,
            done=state.n_done(),
            running=state.count(TaskStatus.RUNNING),
            idle=state.count(TaskStatus.IDLE),
            pool=len(self.runtime.instances()),
            dry_run=self.settings.safety.dry_run,
        )
        self.journal.publish(record)
        return record

    # -- status ---------------------------------------------------------------------

    def status_snapshot(
        self, now: float, entry: dict[str, Any] | None, stopped: Stopped | None = None
    ) -> StatusSnapshot:
        """What ``wire-daemon status`` shows: workflows, pool and lifecycle, last decision, cost, mode."""
        listed = {i.instance_id: i for i in self.runtime.instances()}
        busy: dict[str, int] = {}
        for host in self.state.host.values():
            busy[host] = busy.get(host, 0) + 1
        lifecycle = dict(self.loop.lifecycle.items())
        pool = [self._listed(i, now, busy.get(i.instance_id, 0)) for i in listed.values()]
        pool += [  # ours, but not in the cloud's listing: a launch not answered yet, a termination under way
            PoolInstance(i, st.value, release_at=self.loop.pending_releases.get(i))
            for i, st in lifecycle.items()
            if i not in listed and st.is_live
        ]
        ended = [EndedInstance(i, st.value) for i, st in lifecycle.items() if not st.is_live and i not in listed]
        total = self.runtime.cost_units(now)
        committed = min(len(listed), total)  # each live instance is inside one started, unfinished unit
        money = self.runtime.bill(now)
        currency = self.settings.steering.currency
        prediction = self.loop.last_plan.prediction if self.loop.last_plan else None
        return StatusSnapshot(
            time=now,
            clock="virtual" if self.runtime.virtual_clock else "wall",
            workflows=workflow_statuses(self.runtime.workflows()),
            tasks=task_counts(self.state),
            pool=pool,
            ended_instances=ended[-10:],
            ended_instances_count=len(ended),
            stages=stage_statuses(self.state, prediction),
            last_decision=None if entry is None else _last_decision(entry),
            cost_units=total,
            cost=Cost(total, total - committed, committed, round(money.spent, 4), round(money.committed, 4), currency),
            charging_unit_s=self.settings.steering.billing.charging_unit_s,
            control=ControlStatus.of(self.runtime.control),
            remaining_makespan_estimate_s=0.0
            if entry is None
            else remaining_estimate(
                self.state, prediction, int(entry.get("pool") or 0), self.settings.steering.slots_per_instance
            ),
            dry_run=self.settings.safety.dry_run,
            safe_state=SafeStateStatus.from_json(self.watch.to_json()),
            stopped=stopped,
            interruptions=self._interruption_status(now),
        )

    def _interruption_status(self, now: float) -> Interruptions:
        lost = self.interruptions.lost_slot_s(self.state, now)
        fallback = self.loop.cloud
        back_offs = fallback.back_offs() if isinstance(fallback, SpotFallback) else {}
        if self.metrics is not None:
            self.metrics.interrupted_work.set(lost)
            self.metrics.back_offs(now, back_offs)
        return interruption_status(self.interruptions.counts(), lost, back_offs)

    def _listed(self, i: Instance, now: float, busy: int) -> PoolInstance:
        """One instance the cloud lists, with its lifecycle, its busy slots and its next charge."""
        billing = self.settings.steering.billing
        return PoolInstance(
            instance_id=i.instance_id,
            lifecycle=_lifecycle(self.loop, i.instance_id),
            state=i.state,
            launched_at=i.launch_time,
            age_s=round(max(now - i.launch_time, 0.0), 1),  # launched during this decision: 0, not -0.1
            busy_slots=busy,
            slots=i.slots,
            next_charge_in_s=round(billing.time_to_next_charge(i.launch_time, max(now, i.launch_time)), 1),
            release_at=self.loop.pending_releases.get(i.instance_id),
        )


def _last_decision(entry: dict[str, Any]) -> LastDecision:
    return LastDecision(
        time=entry.get("time"),
        target=entry.get("target"),
        planned=entry.get("planned"),
        pool=entry.get("pool"),
        launched=list(entry.get("launched", [])),
        released=list(entry.get("released", [])),
        rule=entry.get("rule", ""),
        words=decision_words(entry),
        details=decision_details(entry) if entry.get("event") is None else "",
    )


def _summary(exc: BaseException) -> str:
    """An exception for the safe state's reason: its type only. The reason reaches status and the decisions
    log, and an exception's text may quote anything (a token included); the log above has the traceback."""
    return type(exc).__name__


def _lifecycle(loop: MapeLoop, instance_id: str) -> str | None:
    state = loop.lifecycle.state_of(instance_id)
    return state.value if state is not None else None


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("wire-daemon")
    except PackageNotFoundError:  # pragma: no cover - a source tree without an install
        return "(not installed)"


def run_from_config(path: str, max_iterations: int | None = None) -> int:
    daemon = Daemon(load_settings(path), config_path=path)
    daemon.install_signal_handlers()
    return daemon.run(max_iterations)
