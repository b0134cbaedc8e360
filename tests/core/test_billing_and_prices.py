"""The billing rule under both models, and money from a type's price per hour."""

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from wire_daemon.core.billing import Billing
from wire_daemon.core.pricing import Market, Offer, Span, bill, money, price_list, unit_priced


def _scan_starts(billing: Billing, launch: float, end: float, after: float, until: float) -> int:
    """Every charge's start, listed one by one: what unit_starts_between must count."""
    units = billing.units(launch, end)
    minimum = max(1, math.ceil(billing.minimum_s / billing.charging_unit_s - 1e-9))
    starts = [launch] + [launch + k * billing.charging_unit_s for k in range(minimum, units)]
    return sum(1 for s in starts if after < s <= until)


@given(
    unit=st.sampled_from([1.0, 60.0, 900.0, 3600.0]),
    minimum=st.sampled_from([0.0, 60.0]),
    launch=st.floats(-500, 500),
    length=st.floats(0, 20_000),
    after=st.floats(-600, 20_000),
    span=st.floats(0, 20_000),
)
def test_unit_starts_between_counts_what_a_scan_of_every_charge_counts(unit, minimum, launch, length, after, span):
    billing = Billing(unit, minimum)
    end, until = launch + length, after + span
    assert billing.unit_starts_between(launch, end, after, until) == _scan_starts(billing, launch, end, after, until)


def test_unit_billing_pays_every_started_unit_in_full():
    hourly = Billing(3600.0)
    assert hourly.units(0.0, 1.0) == 1 and hourly.units(0.0, 3600.0) == 1 and hourly.units(0.0, 3601.0) == 2
    assert hourly.billed_seconds(0.0, 3601.0) == 7200.0
    assert hourly.time_to_next_charge(0.0, 600.0) == 3000.0
    assert hourly.time_to_next_charge(0.0, 0.0) == 0.0  # at a boundary: released now, nothing new is paid


def test_per_second_billing_has_a_one_minute_minimum_then_counts_seconds():
    billing = Billing.per_second()
    assert billing.billed_seconds(0.0, 10.0) == 60.0
    assert billing.billed_seconds(0.0, 61.2) == 62.0
    assert billing.time_to_next_charge(0.0, 10.0) == 50.0  # the minimum is paid: keep it until then
    assert billing.time_to_next_charge(0.0, 70.25) == pytest.approx(0.75)


def test_money_is_the_price_per_hour_times_the_billed_seconds():
    offer = Offer("c5.xlarge", 4, 8192, on_demand_per_hour=0.17, spot_per_hour=0.06)
    assert money(Billing.per_second(), offer.price_per_hour(Market.SPOT), 0.0, 1800.0) == pytest.approx(0.03)
    assert money(Billing(3600.0), offer.price_per_hour(Market.ON_DEMAND), 0.0, 1800.0) == pytest.approx(0.17)
    assert offer.per_slot_second(Market.ON_DEMAND) == pytest.approx(0.17 / 3600 / 4)


def test_a_type_not_sold_on_spot_says_so():
    with pytest.raises(ValueError, match="not offered on the spot market"):
        Offer("m1.large", 4).price_per_hour(Market.SPOT)


def test_a_price_per_unit_is_the_same_money_per_hour():
    billing = Billing(900.0)
    offer = unit_priced("small", 2, 1.5, billing)
    assert offer.on_demand_per_hour == pytest.approx(6.0)
    assert money(billing, offer.on_demand_per_hour, 0.0, 1000.0) == pytest.approx(2 * 1.5)


def test_a_bill_splits_time_passed_from_time_charged_and_not_yet_used():
    hourly = Billing(3600.0)
    spans = [Span(2.0, 0.0, 1800.0), Span(2.0, 0.0, None)]  # one ended after half an hour, one still up
    now_bill = bill(spans, hourly, 900.0)
    assert now_bill.spent == pytest.approx(2.0 + 0.5) and now_bill.committed == pytest.approx(1.5)
    assert now_bill.total == pytest.approx(4.0)
    per_second = bill([Span(3.6, 0.0, None)], Billing.per_second(), 30.0)  # the 60 s minimum is charged
    assert per_second.spent == pytest.approx(0.03) and per_second.committed == pytest.approx(0.03)


def test_the_price_list_of_one_configured_type_is_its_price_per_hour_with_spot_at_the_ratio():
    offers = price_list((), 4, Billing(3600.0), 0.35, price_per_hour=0.2)
    assert offers[""].price_per_hour(Market.ON_DEMAND) == 0.2
    assert offers[""].price_per_hour(Market.SPOT) == pytest.approx(0.07)


def test_an_hourly_price_is_the_same_money_whatever_the_billing_and_survives_a_change_of_billing():
    from dataclasses import replace

    from wire_daemon.core.config import InstanceType, SteeringConfig

    listed = (InstanceType("c5.xlarge", 4, price_per_hour=0.17, spot_price_per_hour=0.06),)
    per_second = SteeringConfig(billing_model="second", instance_types=listed)
    (kind,) = per_second.instance_types
    assert kind.price == pytest.approx(0.17 / 3600) and kind.spot_price == pytest.approx(0.06 / 3600)
    hourly = replace(per_second, billing_model="unit", charging_unit_s=900.0)  # a copy re-prices for its billing
    assert hourly.instance_types[0].price == pytest.approx(0.17 / 4)
    for steering in (per_second, hourly):
        offer = steering.offers()["c5.xlarge"]
        assert offer.on_demand_per_hour == pytest.approx(0.17) and offer.spot_per_hour == pytest.approx(0.06)
    # A price per unit, as before: per second it is per second.
    assert SteeringConfig(billing_model="second", instance_types=(InstanceType("x", 4, price=0.17),)).offers()[
        "x"
    ].on_demand_per_hour == pytest.approx(0.17 * 3600)
