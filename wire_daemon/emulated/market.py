"""The spot market of the emulated cloud: reclaims, storms and capacity.

The model, and the choices made where reality offers several:

* A spot instance is reclaimed after an exponential time from its launch,
  at ``interruptions_per_hour`` expected reclaims per spot instance-hour
  (boot included: the cloud reclaims what it sold, used or not). Draws come
  from their own generator, seeded from the replay's seed, so a market with
  no interruptions replays exactly as a site without a market.
* A reclaim starts with a notice (EC2 gives two minutes through the instance
  metadata service): the worker takes no new job from then on, and at the
  end of the notice the instance ends and its running jobs are lost; Condor
  reruns them from the start.
* A *storm* reclaims ``storm_fraction`` of one type's live spot instances at
  once (rounded up), as when a zone runs short of that type; which ones is
  drawn from the same generator.
* ``capacity``: at most this many live spot instances of one type. A launch
  beyond it fails for the instances that do not fit, as EC2's
  ``InsufficientInstanceCapacity`` does.
* A reclaimed instance is billed up to its end, like any other (the cloud
  charges the seconds it ran; under unit billing, the started unit).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from wire_daemon.core.errors import ConfigError

RECLAIM_NOTICE_S = 120.0  # what EC2 gives: two minutes


@dataclass(frozen=True)
class SpotMarket:
    interruptions_per_hour: float = 0.0  # expected reclaims per spot instance-hour
    notice_s: float = RECLAIM_NOTICE_S
    storm_at_s: float | None = None  # when a storm hits (virtual seconds); None: no storm
    storm_fraction: float = 0.5
    capacity: int | None = None  # live spot instances of one type the cloud has room for; None: no limit
    seed: int = 0

    def __post_init__(self) -> None:
        if not (self.interruptions_per_hour >= 0 and math.isfinite(self.interruptions_per_hour)):
            rate = self.interruptions_per_hour
            raise ConfigError(f"interruptions must be a rate >= 0 per instance-hour (got {rate!r})")
        if self.notice_s < 0:
            raise ConfigError(f"the reclaim notice must be >= 0 s (got {self.notice_s!r})")
        if not 0.0 < self.storm_fraction <= 1.0:
            raise ConfigError(f"the storm's share of spot capacity must be in (0, 1] (got {self.storm_fraction!r})")
        if self.capacity is not None and self.capacity < 0:
            raise ConfigError(f"spot capacity must be >= 0 instances (got {self.capacity!r})")


def storm_time(seed: int, boot_lag_s: float, horizon_s: float) -> float:
    """When the run's storm hits: uniform over the time spot capacity can be up, drawn from the seed."""
    rng = np.random.default_rng([seed, 0x5707])
    return float(boot_lag_s + rng.uniform(0.0, max(horizon_s, 0.0)))


class Reclaimer:
    """Draws when each spot instance is reclaimed, and which ones a storm takes."""

    def __init__(self, market: SpotMarket) -> None:
        self.market = market
        # Its own stream: the world's generator (sibling order) must not see these draws.
        self._rng = np.random.default_rng([market.seed, 0x5B07])

    def time_to_reclaim(self) -> float:
        """Seconds from a spot launch to its reclaim notice (inf: never)."""
        rate = self.market.interruptions_per_hour
        if rate <= 0:
            return math.inf
        return float(self._rng.exponential(3600.0 / rate))

    def storm_victims(self, candidates: list[str]) -> list[str]:
        """The instances a storm reclaims among one type's live spot ones."""
        count = math.ceil(self.market.storm_fraction * len(candidates) - 1e-9)
        if count <= 0:
            return []
        picked = self._rng.choice(len(candidates), size=count, replace=False)
        return [candidates[i] for i in sorted(picked.tolist())]
