"""Spot prices read from the cloud at a period, laid over the configured prices; a failed read keeps the last."""

from wire_daemon.core.billing import Billing
from wire_daemon.core.config import InstanceType, SteeringConfig
from wire_daemon.core.errors import CloudTransientError
from wire_daemon.core.pricing import Market, SpotPriceBook, price_list


class Quotes:
    """A cloud that quotes what it is told to, or fails, and counts its reads."""

    def __init__(self, prices: dict[str, float]) -> None:
        self.prices = prices
        self.fail = False
        self.reads: list[list[str]] = []

    def __call__(self, names):
        self.reads.append(list(names))
        if self.fail:
            raise CloudTransientError("ec2", "spot prices", "connection reset")
        return {n: self.prices[n] for n in names if n in self.prices}


def _offers():
    types = (InstanceType("c5.xlarge", 4, price=0.17), InstanceType("c5.4xlarge", 16, price=0.68, spot_price=0.2))
    return price_list(types, 4, Billing(3600.0), 0.35)


def test_a_type_may_name_its_own_spot_price_per_charging_unit_and_the_others_take_the_ratio():
    offers = _offers()
    assert offers["c5.4xlarge"].price_per_hour(Market.SPOT) == 0.2
    assert abs(offers["c5.xlarge"].price_per_hour(Market.SPOT) - 0.17 * 0.35) < 1e-12
    per_minute = price_list((InstanceType("a.b", 2, price=0.01, spot_price=0.004),), 2, Billing(60.0), 0.35)
    assert abs(per_minute["a.b"].spot_per_hour - 0.24) < 1e-12  # 0.004 a minute is 0.24 an hour


def test_the_first_refresh_reads_and_the_next_read_waits_for_the_period():
    quotes = Quotes({"c5.xlarge": 0.05, "c5.4xlarge": 0.21})
    book = SpotPriceBook(quotes, 3600.0, {"c5.xlarge": "c5.xlarge", "c5.4xlarge": "c5.4xlarge"}, note=print)
    assert book.refresh(0.0) and quotes.reads == [["c5.4xlarge", "c5.xlarge"]]
    assert not book.refresh(180.0) and not book.refresh(3599.0)  # every interval: no call
    quotes.prices["c5.xlarge"] = 0.07
    assert book.refresh(3600.0) and len(quotes.reads) == 2
    offers = book.apply(_offers())
    assert offers["c5.xlarge"].spot_per_hour == 0.07 and offers["c5.4xlarge"].spot_per_hour == 0.21
    assert offers["c5.xlarge"].on_demand_per_hour == 0.17  # on-demand prices stay the configured ones


def test_a_failed_read_keeps_the_configured_price_then_the_last_read_and_says_so_in_one_line():
    quotes = Quotes({"c5.xlarge": 0.05})
    notes: list[str] = []
    book = SpotPriceBook(quotes, 600.0, {"c5.xlarge": "c5.xlarge"}, note=notes.append)
    quotes.fail = True
    assert not book.refresh(0.0)
    assert book.apply(_offers()) == _offers()  # nothing read yet: the config's prices
    assert len(notes) == 1 and "\n" not in notes[0] and "keeping the configured prices" in notes[0]
    assert not book.refresh(300.0) and len(quotes.reads) == 1  # a failure waits for the period too
    quotes.fail = False
    assert book.refresh(600.0) and book.apply(_offers())["c5.xlarge"].spot_per_hour == 0.05
    quotes.fail = True
    assert not book.refresh(1200.0) and "keeping the last prices read" in notes[-1]
    assert book.apply(_offers())["c5.xlarge"].spot_per_hour == 0.05 and book.failures == 2


def test_a_type_the_cloud_does_not_quote_keeps_its_price_and_is_named():
    quotes = Quotes({"c5.xlarge": 0.05})
    notes: list[str] = []
    book = SpotPriceBook(quotes, 600.0, {"c5.xlarge": "c5.xlarge", "c5.4xlarge": "c5.4xlarge"}, note=notes.append)
    assert book.refresh(0.0)
    offers = book.apply(_offers())
    assert offers["c5.xlarge"].spot_per_hour == 0.05 and offers["c5.4xlarge"].spot_per_hour == 0.2
    assert notes == ["spot prices: the cloud quoted no spot price for c5.4xlarge; keeping the last known"]


def test_the_pool_of_one_type_reads_the_cloud_sections_type_under_the_key_of_the_configured_offer():
    quotes = Quotes({"": 0.04})
    book = SpotPriceBook(quotes, 3600.0, {"": ""}, note=print)
    assert book.refresh(0.0)
    offers = book.apply(SteeringConfig(price_per_hour=0.17).offers())
    assert offers[""].spot_per_hour == 0.04 and offers[""].on_demand_per_hour == 0.17
