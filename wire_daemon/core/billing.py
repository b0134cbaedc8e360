"""The one billing rule: an instance pays every charging unit it has started, in full.

Every place that counts money (the emulated site, the guard's budget and cost,
the policies' release timing, status) asks this module; none does its own
arithmetic. The charging unit itself is one setting, ``steering.charging_unit_s``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

# Float noise between a task end and a unit end must not start a new unit.
_EPS = 1e-9
# Within this of a boundary an instance is exactly at it: released now, it pays no new unit.
_AT_BOUNDARY_S = 1e-6


@dataclass(frozen=True)
class Billing:
    charging_unit_s: float

    def units(self, launch_time: float, end: float) -> int:
        """Units paid by an instance up from ``launch_time`` to ``end``: every started unit, at least one."""
        return max(1, math.ceil((end - launch_time) / self.charging_unit_s - _EPS))

    def time_to_next_charge(self, launch_time: float, now: float) -> float:
        """r_j: seconds until the instance's current unit ends and a new one starts."""
        used = (now - launch_time) % self.charging_unit_s
        if used < _AT_BOUNDARY_S:
            return 0.0
        return self.charging_unit_s - used

    def unit_starts_between(self, launch_time: float, end: float, after: float, until: float) -> int:
        """How many of the instance's units (it ran from ``launch_time`` to ``end``) started in (after, until]."""
        starts = (launch_time + k * self.charging_unit_s for k in range(self.units(launch_time, end)))
        return sum(1 for start in starts if after < start <= until)

    def units_per(self, seconds: float) -> float:
        """What ``seconds`` of one instance costs, in units (fractional: for per-interval budgets)."""
        return seconds / self.charging_unit_s
