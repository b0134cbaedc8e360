"""Bounded retries with exponential backoff and jitter for cloud calls.

Only errors the drivers mapped to a retryable ``CloudError`` (throttled,
transient) are retried; auth, quota, capacity and configuration errors are
raised at once, since repeating the call cannot help. The drivers turn off
their SDK's own retries so that every retry goes through here, where a
launch looks for its request id before it tries again.
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable
from typing import Annotated, TypeVar

from wire_daemon.core.errors import CloudError
from wire_daemon.core.sections import AtLeastOne, AtLeastZero, Positive, check, section

log = logging.getLogger(__name__)

T = TypeVar("T")


@section("cloud.retry")
class RetryPolicy:
    """``cloud.retry``: how a real cloud's calls are retried."""

    max_attempts: Annotated[int, AtLeastOne] = 5
    base_delay_s: Annotated[float, Positive] = 1.0
    max_delay_s: Annotated[float, Positive] = 20.0
    # Give up rather than sleep past this, counted from the first attempt, so one
    # call cannot hold the MAPE interval (about 3 min) for long.
    max_total_s: Annotated[float, AtLeastZero] = 60.0

    def __post_init__(self) -> None:
        check(self.base_delay_s <= self.max_delay_s, "cloud.retry.base_delay_s must not exceed cloud.retry.max_delay_s")

    def delay(self, attempt: int, rng: random.Random) -> float:
        """Sleep before attempt ``attempt + 1``: "equal jitter" over a doubling cap.

        Half the cap is always waited (a throttled API needs us to really slow
        down); the random other half spreads out daemons that failed together.
        """
        cap = min(self.max_delay_s, self.base_delay_s * 2 ** (attempt - 1))
        return cap / 2 + rng.uniform(0, cap / 2)


class Retrier:
    """Runs one cloud operation under a RetryPolicy; sleep, clock and rng are injectable for tests."""

    def __init__(
        self,
        policy: RetryPolicy | None = None,
        sleep: Callable[[float], None] = time.sleep,
        clock: Callable[[], float] = time.monotonic,
        rng: random.Random | None = None,
    ) -> None:
        self.policy = policy or RetryPolicy()
        self.sleep = sleep
        self.clock = clock
        self.rng = rng or random.Random()

    def call(self, operation: str, attempt: Callable[[], T]) -> T:
        started = self.clock()
        tries = 0
        while True:
            tries += 1
            try:
                return attempt()
            except CloudError as err:
                if not err.retryable:
                    raise
                wait = self.policy.delay(tries, self.rng)
                elapsed = self.clock() - started
                if tries >= self.policy.max_attempts or elapsed + wait > self.policy.max_total_s:
                    raise err.again(f"{err.detail} (gave up after {tries} attempts in {elapsed:.1f} s)") from err
                log.warning("%s; retry %d of %s in %.1f s", err, tries, operation, wait)
                self.sleep(wait)
