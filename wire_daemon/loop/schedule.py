"""When the loop runs: once per interval on a clock, with the timed releases in between.

The replay and the service both drive the loop with these, so the tick and
the releases are written once.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

from wire_daemon.loop.mape import MapeLoop
from wire_daemon.ports import Clock


def iteration_times(start: float, interval_s: float) -> Iterator[float]:
    """start + k * interval: a product, not a running sum, so long runs do not drift."""
    k = 0
    while True:
        yield start + k * interval_s
        k += 1


def release_until(loop: MapeLoop, clock: Clock, until: float, stop: Callable[[], bool] = lambda: False) -> None:
    """Carry out the releases that fall before ``until``, each at its own time."""
    while (when := loop.next_release()) is not None and when < until and not stop():
        clock.sleep_until(when)
        if clock.now() < when:  # the wait was cut short (a signal, an operator's command): the release waits too
            break
        loop.release_due(when)
