"""What an instance costs in money: its type's price per hour in its market, under the billing rule.

One place for money. A type (an EC2 instance type, an OpenStack flavor) has
cores, memory and a price per hour for each market it is offered in:
on-demand always, spot where the cloud has it. Money is that price times the
seconds the billing rule charges (``core.billing``), so per-unit and
per-second billing price the same instance-hour the same way.

The paper's setting, charging units of one on-demand price, is the special
case ``unit_prices``: a type whose price per unit is 1, which makes money
equal to charging units.
"""

from __future__ import annotations

import enum
import logging
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from wire_daemon.core.billing import Billing
from wire_daemon.core.errors import WireError

log = logging.getLogger(__name__)

SECONDS_PER_HOUR = 3600.0
# Spot over on-demand, when nothing better is known: about a third (EC2's published history).
DEFAULT_SPOT_PRICE_RATIO = 0.35


class Market(enum.Enum):
    """How an instance is bought."""

    ON_DEMAND = "on-demand"
    SPOT = "spot"  # cheaper, and the cloud may reclaim it at any time

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True)
class Offer:
    """One instance type as the pool may buy it."""

    name: str
    cores: int
    memory_mib: float = 0.0  # 0: memory does not limit what fits
    on_demand_per_hour: float = 1.0
    spot_per_hour: float | None = None  # None: not offered on spot

    def price_per_hour(self, market: Market) -> float:
        if market is Market.ON_DEMAND:
            return self.on_demand_per_hour
        if self.spot_per_hour is None:
            raise ValueError(f"instance type {self.name!r} is not offered on the spot market")
        return self.spot_per_hour

    def offers(self, market: Market) -> bool:
        return market is Market.ON_DEMAND or self.spot_per_hour is not None

    def per_slot_second(self, market: Market) -> float:
        """Money per core-second: what the price expander compares across types."""
        return self.price_per_hour(market) / SECONDS_PER_HOUR / self.cores

    def with_spot_ratio(self, ratio: float) -> Offer:
        return Offer(self.name, self.cores, self.memory_mib, self.on_demand_per_hour, self.on_demand_per_hour * ratio)


def unit_priced(name: str, cores: int, price_per_unit: float, billing: Billing, memory_mib: float = 0.0) -> Offer:
    """A type priced per charging unit (the project's older settings) as a price per hour."""
    return Offer(name, cores, memory_mib, per_hour(price_per_unit, billing))


def per_hour(price_per_unit: float, billing: Billing) -> float:
    """A price per charging unit as a price per hour."""
    return price_per_unit * SECONDS_PER_HOUR / billing.charging_unit_s


def price_list(
    types: Sequence[Any], slots: int, billing: Billing, spot_ratio: float, price_per_hour: float = 1.0
) -> dict[str, Offer]:
    """Each type a pool may launch, by name: listed types priced per charging unit (``InstanceType``);
    without types, the one of ``slots`` cores (name "") at ``price_per_hour`` on-demand.

    Spot costs ``spot_ratio`` of on-demand, unless a listed type names its own spot price per charging unit
    (``spot_price``)."""
    offers = {"": Offer("", slots, on_demand_per_hour=price_per_hour).with_spot_ratio(spot_ratio)} if not types else {}
    for t in types:
        offer = unit_priced(t.name, t.cores, t.price, billing, t.memory_mib).with_spot_ratio(spot_ratio)
        spot = getattr(t, "spot_price", None)
        offers[t.name] = offer if spot is None else replace(offer, spot_per_hour=per_hour(spot, billing))
    return offers


# -- spot prices read from the cloud --------------------------------------------------------

# Reads the cloud's current spot price per hour of each type named (by the cloud's names); raises on failure.
SpotPriceReader = Callable[[Sequence[str]], Mapping[str, float]]


class SpotPriceBook:
    """Spot prices read from the cloud at a period, laid over the configured offers.

    A read is made at the first ``refresh`` and then once every ``period_s``
    (prices move over hours; a read per interval would only cost API calls).
    A read that fails, or that misses a type, keeps that type's last price
    read, or its configured one before any read succeeded; the failure is
    logged in one line. ``names`` maps an offer's key to the type name the
    cloud knows (the configured type of a pool without listed types has the
    key "").
    """

    def __init__(
        self,
        read: SpotPriceReader,
        period_s: float,
        names: Mapping[str, str],
        note: Callable[[str], None] = log.warning,
    ) -> None:
        self.read = read
        self.period_s = period_s
        self.names = dict(names)
        self.note = note
        self.prices: dict[str, float] = {}  # offer key -> the last spot price per hour read
        self.read_at = -math.inf  # when the last read was tried
        self.failures = 0

    def due(self, now: float) -> bool:
        return now - self.read_at >= self.period_s

    def refresh(self, now: float) -> bool:
        """Read the prices if a read is due; True when a read was made and succeeded."""
        if not self.due(now):
            return False
        self.read_at = now
        try:
            quoted = self.read(sorted(set(self.names.values())))
        except (WireError, OSError, ValueError) as exc:
            self.failures += 1
            kept = "the last prices read" if self.prices else "the configured prices"
            self.note(f"spot prices: reading them from the cloud failed ({exc}); keeping {kept}")
            return False
        read = {key: quoted[name] for key, name in self.names.items() if quoted.get(name, 0.0) > 0.0}
        missing = sorted(name for key, name in self.names.items() if key not in read)
        if missing:
            self.note(f"spot prices: the cloud quoted no spot price for {', '.join(missing)}; keeping the last known")
        self.prices.update(read)
        return True

    def ratio(self, offers: Mapping[str, Offer]) -> float | None:
        """Spot over on-demand for the pool's main type (the first offer) as last read; None before a read.

        What the policy weighs a spot launch with, in (0, 1]: a spot price above on-demand buys nothing.
        """
        main = next(iter(offers), None)
        if main is None or main not in self.prices or offers[main].on_demand_per_hour <= 0:
            return None
        return min(max(self.prices[main] / offers[main].on_demand_per_hour, 1e-6), 1.0)

    def apply(self, offers: Mapping[str, Offer]) -> dict[str, Offer]:
        """The offers with each spot price read laid over the configured one."""
        return {
            key: replace(offer, spot_per_hour=self.prices[key]) if key in self.prices else offer
            for key, offer in offers.items()
        }


def money(billing: Billing, price_per_hour: float, launch_time: float, end: float) -> float:
    """What one instance that ran from ``launch_time`` to ``end`` costs at ``price_per_hour``."""
    return billing.billed_seconds(launch_time, end) * price_per_hour / SECONDS_PER_HOUR


@dataclass(frozen=True)
class Bill:
    """Money paid so far: *spent* on time that has passed (or on an instance that ended), *committed*
    to time already charged and not yet used (the rest of a live instance's unit or minimum charge)."""

    spent: float = 0.0
    committed: float = 0.0

    @property
    def total(self) -> float:
        return self.spent + self.committed


@dataclass(frozen=True)
class Span:
    """One instance as the bill sees it: its price, its launch, its end (None: still live)."""

    price_per_hour: float
    launch_time: float
    end: float | None


def bill(spans: Sequence[Span], billing: Billing, now: float) -> Bill:
    """The bill of ``spans`` at ``now``."""
    spent = committed = 0.0
    for s in spans:
        charged = money(billing, s.price_per_hour, s.launch_time, now if s.end is None else s.end)
        if s.end is None:
            used = max(now - s.launch_time, 0.0) * s.price_per_hour / SECONDS_PER_HOUR
            spent, committed = spent + min(used, charged), committed + max(charged - used, 0.0)
        else:
            spent += charged
    return Bill(spent, committed)
