"""The one billing rule: an instance pays every charging unit it has started, in full.

Every place that counts money (the emulated site, the guard's budget and cost,
the policies' release timing, status) asks this module; none does its own
arithmetic. The charging unit itself is one setting, ``steering.charging_unit_s``.

Two billing models share the rule:

* **per charging unit** (the WIRE paper, and some private and academic
  clouds): every started unit of ``charging_unit_s`` (1 to 60 min) is paid in
  full, from the launch;
* **per second with a minimum** (EC2, Google Cloud and Azure Linux VMs
  today): a unit of one second and a first charge of ``minimum_s`` (60 s).

The second is the first with ``charging_unit_s = 1`` plus a minimum, so the
policies' release timing (``time_to_next_charge``) means the same under both:
the time until the instance starts paying for more than it already has.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

# Float noise between a task end and a unit end must not start a new unit.
_EPS = 1e-9
# Within this of a boundary an instance is exactly at it: released now, it pays no new unit.
_AT_BOUNDARY_S = 1e-6
# What today's clouds charge at least for a Linux VM, per second after that.
PER_SECOND_MINIMUM_S = 60.0


@dataclass(frozen=True)
class Billing:
    charging_unit_s: float
    minimum_s: float = 0.0  # the first charge covers at least this long (0: one unit)

    @classmethod
    def per_second(cls, minimum_s: float = PER_SECOND_MINIMUM_S) -> Billing:
        return cls(1.0, minimum_s)

    @property
    def _minimum_units(self) -> int:
        return max(1, math.ceil(self.minimum_s / self.charging_unit_s - _EPS))

    def units(self, launch_time: float, end: float) -> int:
        """Units paid by an instance up from ``launch_time`` to ``end``: every started unit, at least the minimum."""
        return max(self._minimum_units, math.ceil((end - launch_time) / self.charging_unit_s - _EPS))

    def billed_seconds(self, launch_time: float, end: float) -> float:
        """The seconds an instance that ran from ``launch_time`` to ``end`` is billed for."""
        return self.units(launch_time, end) * self.charging_unit_s

    def time_to_next_charge(self, launch_time: float, now: float) -> float:
        """r_j: seconds until the instance has used what it paid for and a new charge starts."""
        age = now - launch_time
        minimum = self._minimum_units * self.charging_unit_s
        if _AT_BOUNDARY_S <= age < minimum - _AT_BOUNDARY_S:
            return minimum - age  # still inside the first charge (at the launch itself: at a boundary)
        used = age % self.charging_unit_s
        if used < _AT_BOUNDARY_S:
            return 0.0
        return self.charging_unit_s - used

    def unit_starts_between(self, launch_time: float, end: float, after: float, until: float) -> int:
        """How many of the instance's units (it ran from ``launch_time`` to ``end``) started in (after, until]."""
        units = self.units(launch_time, end)
        first_new = self._minimum_units  # the minimum is one charge, at the launch
        count = 1 if after < launch_time <= until else 0
        if units > first_new:
            # Unit k (first_new <= k < units) starts at launch + k * u: the arithmetic finds the
            # range, the same comparisons as a scan of every start settle its ends.
            u = self.charging_unit_s
            lo = max(first_new, math.floor((after - launch_time) / u))
            while lo < units and launch_time + lo * u <= after:
                lo += 1
            hi = min(units - 1, math.floor((until - launch_time) / u) + 1)
            while hi >= lo and launch_time + hi * u > until:
                hi -= 1
            count += max(0, hi - lo + 1)
        return count

    def units_per(self, seconds: float) -> float:
        """What ``seconds`` of one instance costs, in units (fractional: for per-interval budgets)."""
        return seconds / self.charging_unit_s
