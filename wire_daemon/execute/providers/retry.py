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
from dataclasses import dataclass
from typing import TypeVar

from wire_daemon.core.errors import CloudError, ConfigError

log = logging.getLogger(__name__)

T = TypeVar("T")


@dataclass(frozen=True)
class RetryPolicy:
    max_attempts: int = 5
    base_delay_s: float = 1.0
    max_delay_s: float = 20.0
    # Give up rather than sleep past this, counted from the first attempt, so one
    # call cannot hold the MAPE interval (about 3 min) for long.
    max_total_s: float = 60.0

    def validate(self) -> RetryPolicy:
        if self.max_attempts < 1:
            raise ConfigError(f"cloud.retry.max_attempts must be >= 1 (got {self.max_attempts!r})")
        if not 0 < self.base_delay_s <= self.max_delay_s:
            raise ConfigError("cloud.retry needs 0 < base_delay_s <= max_delay_s")
        if self.max_total_s < 0:
            raise ConfigError(f"cloud.retry.max_total_s must be >= 0 (got {self.max_total_s!r})")
        return self

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
        self.policy = (policy or RetryPolicy()).validate()
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
