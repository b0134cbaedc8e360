"""Notice an iteration that does not end, and keep it from holding the daemon.

The service loop runs one iteration at a time in the main thread; signals only
set flags that the loop reads between iterations. An iteration that never
returns (a read hung on a dead network file system, a cloud call that never
times out) would then keep the daemon from SIGTERM and from the operator's
commands, while ``status`` still said "running". The watchdog is a thread that
watches the iteration from outside:

* an iteration running longer than ``stuck_after_s`` is logged once as stuck,
  shown in systemd's status line, and abandoned;
* an iteration still running ``stop_grace_s`` after SIGTERM is abandoned, so
  the daemon stops within seconds whatever the iteration is doing.

Abandoning raises ``IterationAbandoned`` in the main thread from a signal
handler (``SIGUSR1`` sent to the main thread), which also breaks a blocking
system call. It is what a ``kill -9`` at that point would do to the
iteration, which the daemon is built to survive (every launch is recorded
before it is made and reconciled with the cloud); the process itself goes on
to a clean stop, or to the next iteration. The abandoned iteration counts as
a failed one (the safe state counts it).

Under systemd (``WatchdogSec=`` in the unit) the thread also sends
``WATCHDOG=1`` while no iteration is stuck: a process so wedged that even
this thread cannot run (native code holding the interpreter) is killed and
restarted by systemd.
"""

from __future__ import annotations

import logging
import os
import signal
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from wire_daemon.service.systemd_notify import notify

log = logging.getLogger(__name__)
ABANDON_SIGNAL = signal.SIGUSR1
STUCK_AFTER_S = 300.0  # an iteration's worst honest case: cloud calls with their retries (TimeoutStopSec too)
STUCK_INTERVALS = 10  # ... or this many intervals, whichever is longer
STOP_GRACE_S = 5.0


class IterationAbandoned(BaseException):
    """Raised in the main thread to end an iteration that is stuck or outlives a stop request.

    A ``BaseException``: the loop's ``except Exception`` around one iteration must not swallow it.
    """


def stuck_bound(interval_s: float) -> float:
    return max(STUCK_AFTER_S, STUCK_INTERVALS * interval_s)


class IterationWatchdog:
    """The thread described in the module docstring; ``span()`` wraps each iteration."""

    def __init__(
        self,
        stuck_after_s: float,
        stop_requested: Callable[[], bool],
        stop_grace_s: float = STOP_GRACE_S,
        period_s: float = 1.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.stuck_after_s = stuck_after_s
        self.stop_requested = stop_requested
        self.stop_grace_s = stop_grace_s
        self.period_s = period_s
        self.clock = clock
        self.stuck_count = 0  # iterations found stuck since the start
        self.abandoned = ""  # why the current iteration is being abandoned ("" while it is not)
        self._lock = threading.RLock()  # re-entrant: the signal handler may run while the main thread holds it
        self._since: float | None = None  # start of the running iteration
        self._stop_seen: float | None = None
        self._reported = False
        self._main = threading.main_thread().ident
        self._can_interrupt = False
        self._closed = threading.Event()
        self._thread: threading.Thread | None = None
        self._pings = os.environ.get("WATCHDOG_USEC") is not None

    # -- the main thread's side ------------------------------------------------------

    def install(self) -> None:
        """The handler that turns the watchdog's signal into ``IterationAbandoned`` (main thread only)."""
        signal.signal(ABANDON_SIGNAL, self._on_signal)
        self._can_interrupt = True

    def start(self) -> IterationWatchdog:
        self._thread = threading.Thread(target=self._run, name="iteration-watchdog", daemon=True)
        self._thread.start()
        return self

    def close(self) -> None:
        self._closed.set()
        if self._thread is not None:
            self._thread.join(timeout=5.0)

    @contextmanager
    def span(self) -> Iterator[None]:
        """One iteration: watched while it runs."""
        with self._lock:
            self._since, self._stop_seen, self._reported, self.abandoned = self.clock(), None, False, ""
        try:
            yield
        finally:
            with self._lock:
                self._since = None

    @property
    def busy_s(self) -> float | None:
        """How long the running iteration has run (None between iterations)."""
        since = self._since
        return None if since is None else self.clock() - since

    def _on_signal(self, signum: int, frame: object) -> None:
        with self._lock:
            abandon = self._since is not None and bool(self.abandoned)
        if abandon:
            raise IterationAbandoned(self.abandoned)

    # -- the watchdog thread --------------------------------------------------------------

    def _run(self) -> None:
        while not self._closed.wait(self.period_s):
            try:
                self.check()
            except Exception:  # the watchdog must outlive anything it sees
                log.exception("iteration watchdog check failed")

    def check(self) -> None:
        """One look at the running iteration (the thread calls it every ``period_s``)."""
        with self._lock:
            since = self._since
            if since is None:
                self._ping()
                return
            now = self.clock()
            running = now - since
            if self.stop_requested() and self._stop_seen is None:
                self._stop_seen = now
            reason = ""
            if self._stop_seen is not None and now - self._stop_seen >= self.stop_grace_s and not self.abandoned:
                reason = f"stop requested {now - self._stop_seen:.0f} s ago and the iteration has not ended"
            elif running > self.stuck_after_s and not self._reported:
                self._reported = True
                self.stuck_count += 1
                reason = f"iteration stuck: running for {running:.0f} s (bound {self.stuck_after_s:.0f} s)"
                notify(STATUS=f"STUCK: an iteration ran {running:.0f} s; abandoning it")
            if not reason:
                if running <= self.stuck_after_s:
                    self._ping()
                return
            self.abandoned = reason
        self._abandon(reason)

    def _abandon(self, reason: str) -> None:
        if not self._can_interrupt or self._main is None:
            log.warning("%s; it cannot be interrupted here (no signal handler), waiting for it", reason)
            return
        log.warning("%s; abandoning it", reason)
        signal.pthread_kill(self._main, ABANDON_SIGNAL)

    def _ping(self) -> None:
        if self._pings:
            notify(WATCHDOG="1")
