"""The iteration watchdog: a stuck iteration, or one outliving a stop request, is abandoned, even in a blocking call."""

from __future__ import annotations

import os
import signal
import threading
import time

import pytest

from wire_daemon.service.watchdog import ABANDON_SIGNAL, IterationAbandoned, IterationWatchdog, stuck_bound


@pytest.fixture
def restore_handler():
    before = signal.getsignal(ABANDON_SIGNAL)
    yield
    signal.signal(ABANDON_SIGNAL, before)


def _blocked_read() -> None:
    """A system call that never returns by itself: a read of a pipe nobody writes to."""
    r, w = os.pipe()
    try:
        os.read(r, 1)
    finally:
        os.close(r)
        os.close(w)


def test_a_stuck_iteration_is_abandoned_inside_a_blocking_call(restore_handler, caplog):
    dog = IterationWatchdog(0.3, stop_requested=lambda: False, period_s=0.05)
    dog.install()
    dog.start()
    started = time.monotonic()
    try:
        with pytest.raises(IterationAbandoned, match="stuck"), dog.span():
            _blocked_read()
    finally:
        dog.close()
    assert time.monotonic() - started < 5.0
    assert dog.stuck_count == 1 and dog.busy_s is None
    assert sum("iteration stuck" in r.getMessage() for r in caplog.records) == 1


def test_a_stop_request_abandons_the_iteration_after_the_grace(restore_handler):
    stop = threading.Event()
    dog = IterationWatchdog(3600.0, stop_requested=stop.is_set, stop_grace_s=0.2, period_s=0.05)
    dog.install()
    dog.start()
    threading.Timer(0.1, stop.set).start()
    started = time.monotonic()
    try:
        with pytest.raises(IterationAbandoned, match="stop requested"), dog.span():
            _blocked_read()
    finally:
        dog.close()
    assert time.monotonic() - started < 5.0


def test_a_quick_iteration_is_left_alone(restore_handler):
    dog = IterationWatchdog(0.5, stop_requested=lambda: False, period_s=0.01)
    dog.install()
    dog.start()
    try:
        for _ in range(5):
            with dog.span():
                time.sleep(0.02)
    finally:
        dog.close()
    assert dog.stuck_count == 0 and dog.abandoned == ""


def test_without_a_handler_it_only_says_so(caplog):
    clock = [0.0]
    dog = IterationWatchdog(10.0, stop_requested=lambda: False, clock=lambda: clock[0])
    with dog.span():
        clock[0] = 11.0
        dog.check()
        dog.check()  # said once
    assert dog.stuck_count == 1
    assert sum("cannot be interrupted" in r.getMessage() for r in caplog.records) == 1


def test_the_bound_is_minutes_or_ten_intervals():
    assert stuck_bound(1.0) == 300.0 and stuck_bound(60.0) == 600.0


@pytest.mark.slow
def test_sigterm_ends_a_daemon_whose_iteration_hangs_in_a_system_call(tmp_path, monkeypatch, restore_handler, caplog):
    """The service loop end to end: an iteration blocked for good, SIGTERM, a clean stop within seconds."""
    from wire_daemon.runtime.settings import load_settings
    from wire_daemon.service.daemon import Daemon

    from .emulated_config import emulated_config

    config = emulated_config(tmp_path, extra="policy: wire\n")
    daemon = Daemon(load_settings(config), str(config), sleep=lambda s: None)
    daemon.watchdog.period_s = 0.05
    calls = {"n": 0}
    real = daemon.runtime.refresh

    def refresh() -> None:
        calls["n"] += 1
        if calls["n"] == 2:
            _blocked_read()
        real()

    monkeypatch.setattr(daemon.runtime, "refresh", refresh)
    before = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)}
    daemon.install_signal_handlers()
    threading.Timer(0.5, os.kill, (os.getpid(), signal.SIGTERM)).start()

    def _hung(signum, frame):
        raise AssertionError("the daemon did not stop within 20 s of SIGTERM")

    before[signal.SIGALRM] = signal.signal(signal.SIGALRM, _hung)
    signal.setitimer(signal.ITIMER_REAL, 20.0)  # a failure here is a hang: this turns it into a failed test
    started = time.monotonic()
    try:
        assert daemon.run(max_iterations=50) == 0
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        for s, handler in before.items():
            signal.signal(s, handler)
    assert time.monotonic() - started < 10.0
    assert calls["n"] == 2 and daemon.stop_reason == "SIGTERM received"
    assert daemon.watch.state.failed_in_a_row == 1  # the abandoned iteration counts as a failed one
    assert any("abandoned" in r.getMessage() for r in caplog.records)
