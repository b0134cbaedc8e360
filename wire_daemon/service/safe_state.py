"""The daemon's safe state: a daemon that keeps failing stops changing the pool.

Two things put it there:

* **iterations failing in a row** (``safe_state.failed_iterations``, 3): an
  iteration that raises is logged and the loop goes on, but one that keeps
  raising may have left the pool half changed each time;
* **a crash loop across restarts** (``safe_state.unclean_starts``, 3, within
  ``safe_state.window_s``): every start is recorded in the state file and
  marked clean when the run stops cleanly. A run that is not marked when the
  next one starts ended without stopping (a segfault, kill -9, an exception
  out of ``run``, an error at start). The next start can tell for sure: it
  holds the state file's lock, so no run it finds unmarked is still alive.

In the safe state the loop keeps watching (events, the cloud's listing,
predictions, status) but launches nothing and terminates nothing: the policy's
decision is replaced by "no change" (``runtime.control``) and the timed
releases wait (``MapeLoop.frozen``). It ends after
``safe_state.recover_iterations`` (3) iterations succeed in a row; the history
of unclean ends is kept, so a run that crashes again soon after starts in the
safe state again. The state is logged once when entered and once when left,
and ``wire-daemon status`` shows it (text and ``--json``).
"""

from __future__ import annotations

import json
import logging
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from wire_daemon.persist.store import StateStore
from wire_daemon.runtime.settings import SafeStateSettings
from wire_daemon.service.systemd_notify import notify
from wire_daemon.service.wording import duration

log = logging.getLogger(__name__)
RUNS_KEY = "runs"  # meta: the recent starts, each marked clean or not
STATE_KEY = "safe_state"  # meta: what status shows, fresher than the last snapshot
RUNNING_STATUS = "running: the scaling policy decides"  # systemd's status line outside the safe state
KEPT_RUNS = 50


@dataclass
class SafeState:
    """Whether the daemon is in its safe state and why, and the counts that move it in and out."""

    active: bool = False
    reason: str = ""
    since: float | None = None  # wall clock
    failed_in_a_row: int = 0
    succeeded_in_a_row: int = 0  # while active: toward recover_iterations

    def to_json(self, recover_iterations: int) -> dict[str, Any]:
        return {
            "active": self.active,
            "reason": self.reason,
            "since": self.since,
            "failed_in_a_row": self.failed_in_a_row,
            "succeeded_in_a_row": self.succeeded_in_a_row,
            "recover_iterations": recover_iterations,
        }


class CrashWatch:
    """Counts failures and unclean ends; enters and leaves the safe state (see the module docstring)."""

    def __init__(self, settings: SafeStateSettings, store: StateStore, clock: Callable[[], float] = time.time) -> None:
        self.settings = settings
        self.store = store
        self.clock = clock
        self.state = SafeState()
        self._started: float | None = None

    @property
    def active(self) -> bool:
        return self.state.active

    def to_json(self) -> dict[str, Any]:
        return self.state.to_json(self.settings.recover_iterations)

    # -- across restarts ----------------------------------------------------------------

    def record_start(self) -> None:
        """Mark the runs that never stopped cleanly, record this one, and enter the safe state on a crash loop."""
        now = self.clock()
        runs = [r for r in self._runs() if isinstance(r, dict) and isinstance(r.get("started"), (int, float))]
        for run in runs:
            if run.get("clean") is None:  # we hold the lock: that run is over, and it did not say so
                run["clean"] = False
        unclean = [r for r in runs if r["clean"] is False and r["started"] >= now - self.settings.window_s]
        runs.append({"started": now, "pid": os.getpid(), "clean": None})
        self._started = now
        self.store.set_meta(RUNS_KEY, json.dumps(runs[-KEPT_RUNS:]))
        limit = self.settings.unclean_starts
        if limit and len(unclean) >= limit:
            self._enter(
                f"a crash loop: {len(unclean)} run(s) ended without stopping in the last "
                f"{duration(self.settings.window_s)}"
            )
        else:
            self._save()

    def record_clean_stop(self) -> None:
        runs = self._runs()
        for run in runs:
            if isinstance(run, dict) and run.get("started") == self._started and run.get("pid") == os.getpid():
                run["clean"] = True
        self.store.set_meta(RUNS_KEY, json.dumps(runs))

    def _runs(self) -> list[Any]:
        try:
            runs = json.loads(self.store.get_meta(RUNS_KEY) or "[]")
        except json.JSONDecodeError:  # a damaged entry costs the history, never the start
            return []
        return runs if isinstance(runs, list) else []

    # -- within a run -----------------------------------------------------------------

    def failed(self, what: str) -> None:
        state = self.state
        state.failed_in_a_row += 1
        state.succeeded_in_a_row = 0
        limit = self.settings.failed_iterations
        if state.active:
            self._save()
        elif limit and state.failed_in_a_row >= limit:
            self._enter(f"{state.failed_in_a_row} iterations in a row failed (the last: {what})")

    def succeeded(self) -> None:
        state = self.state
        state.failed_in_a_row = 0
        if not state.active:
            return
        state.succeeded_in_a_row += 1
        if state.succeeded_in_a_row >= self.settings.recover_iterations:
            self._leave()
        else:
            self._save()

    def _enter(self, reason: str) -> None:
        self.state = SafeState(True, reason, self.clock(), self.state.failed_in_a_row, 0)
        self._save()
        log.warning(
            "safe state: %s; no launch and no termination until %d iteration(s) in a row succeed "
            "(the loop keeps watching)",
            reason,
            self.settings.recover_iterations,
        )
        notify(STATUS=f"SAFE STATE: {reason}; the pool is left as it is")

    def _leave(self) -> None:
        was = self.state
        self.state = SafeState()
        self._save()
        log.info(
            "safe state ended after %s: %d iteration(s) in a row succeeded; the scaling policy decides again",
            duration(max(self.clock() - (was.since or self.clock()), 0.0)),
            was.succeeded_in_a_row,
        )
        notify(STATUS=RUNNING_STATUS)

    def _save(self) -> None:
        self.store.set_meta(STATE_KEY, json.dumps(self.to_json(), sort_keys=True))
