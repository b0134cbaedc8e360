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
