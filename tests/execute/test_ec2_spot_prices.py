"""EC2 spot prices read through DescribeSpotPriceHistory: moto's answer, and the choice of zone and time."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from wire_daemon.core.errors import CloudTransientError, ConfigError
from wire_daemon.core.sections import parse
from wire_daemon.execute.providers.base import Ownership
from wire_daemon.execute.providers.ec2 import Ec2Config, Ec2Driver


def _config(**more) -> Ec2Config:
    return Ec2Config(region="us-east-1", image_id="ami-0123456789abcdef0", instance_type="c5.large", **more)


class History:
    """DescribeSpotPriceHistory and DescribeSubnets as EC2 answers them, from a list of quotes."""

    def __init__(self, quotes: list[tuple[str, str, str, int]], zone: str = "us-east-1b") -> None:
        self.quotes = [
            {
                "InstanceType": kind,
                "AvailabilityZone": az,
                "SpotPrice": price,
                "Timestamp": datetime(2026, 11, 26, hour, tzinfo=UTC),
            }
            for kind, az, price, hour in quotes
        ]
        self.zone = zone
        self.calls: list[dict] = []
        self.fail = False

    def describe_spot_price_history(self, **args):
        self.calls.append(args)
        if self.fail:
            from botocore.exceptions import EndpointConnectionError

            raise EndpointConnectionError(endpoint_url="https://ec2.us-east-1.amazonaws.com")
        half = len(self.quotes) // 2  # two pages, as EC2 pages a long answer
        if "NextToken" not in args:
            return {"SpotPriceHistory": self.quotes[:half], "NextToken": "page-2"}
        return {"SpotPriceHistory": self.quotes[half:]}

    def describe_subnets(self, SubnetIds):
        return {"Subnets": [{"SubnetId": SubnetIds[0], "AvailabilityZone": self.zone}]}


QUOTES = [
    ("c5.large", "us-east-1a", "0.031", 10),
    ("c5.large", "us-east-1a", "0.029", 12),  # the latest quote of a zone is its price now
    ("c5.large", "us-east-1a", "n/a", 13),  # not a price: left out, not a failure of the read
    ("c5.large", "us-east-1b", "0.035", 9),
    ("c5.xlarge", "us-east-1b", "0.061", 11),
    ("c5.xlarge", "us-east-1a", "0.055", 11),
]


def _driver(config: Ec2Config, client: History) -> Ec2Driver:
    return Ec2Driver(config, Ownership("price-pool", "d1"), "", client=client)


def test_without_a_subnet_each_type_costs_its_dearest_zones_latest_price():
    client = History(QUOTES)
    prices = _driver(_config(spot_prices="cloud"), client).read_spot_prices(["", "c5.xlarge", "m5.large"])
    assert prices == {"": 0.035, "c5.xlarge": 0.061}  # "" is the section's own type; m5.large not quoted
    assert client.calls[0]["InstanceTypes"] == ["c5.large", "c5.xlarge", "m5.large"]
    assert "AvailabilityZone" not in client.calls[0] and client.calls[1]["NextToken"] == "page-2"


def test_with_a_subnet_the_price_is_its_zones_the_zone_launches_go_to():
    client = History(QUOTES, zone="us-east-1a")
    driver = _driver(_config(spot_prices="cloud", subnet_id="subnet-0123456789abcdef0"), client)
    assert driver.read_spot_prices(["c5.large", "c5.xlarge"]) == {"c5.large": 0.029, "c5.xlarge": 0.055}
    assert client.calls[0]["AvailabilityZone"] == "us-east-1a"


def test_a_failed_read_is_a_cloud_error_and_the_source_is_offered_only_when_the_section_asks():
    client = History(QUOTES)
    client.fail = True
    driver = _driver(_config(spot_prices="cloud", spot_price_refresh_s=1800), client)
    with pytest.raises(CloudTransientError):
        driver.read_spot_prices(["c5.large"])
    source = driver.spot_price_source()
    assert source is not None and source[1] == 1800
    assert _driver(_config(), client).spot_price_source() is None  # the default: prices from the config


def test_the_section_says_where_prices_come_from_in_one_line():
    with pytest.raises(ConfigError, match="spot_prices"):
        parse(Ec2Config, _config().__dict__ | {"spot_prices": "aws"}, "ops.yaml", "cloud.ec2")
    with pytest.raises(ConfigError, match="spot_price_refresh_s"):
        parse(Ec2Config, _config().__dict__ | {"spot_price_refresh_s": 5}, "ops.yaml", "cloud.ec2")


@pytest.mark.slow
def test_moto_quotes_a_price_for_each_known_type_and_none_for_an_unknown_one(moto_ec2_config, boto_client):
    from dataclasses import replace

    config = replace(moto_ec2_config, spot_prices="cloud")
    driver = Ec2Driver(config, Ownership("price-pool", "d1"), "", client=boto_client())
    prices = driver.read_spot_prices(["", "m5.xlarge", "zz9.nosuch"])
    assert set(prices) == {"", "m5.xlarge"} and all(p > 0 for p in prices.values())


@pytest.mark.slow
def test_each_listed_instance_carries_its_zone_for_the_interruption_counts(moto_ec2_config, boto_client, ownership):
    driver = Ec2Driver(moto_ec2_config, ownership, "", client=boto_client())
    (launched,) = driver.launch(1, "req-zone")
    subnet = boto_client().describe_subnets(SubnetIds=[moto_ec2_config.subnet_id])["Subnets"][0]
    (listed,) = [i for i in driver.list_instances() if i.instance_id == launched.instance_id]
    assert listed.zone == subnet["AvailabilityZone"] != ""


@pytest.mark.slow
def test_the_probe_reads_a_spot_price_only_when_the_section_asks(moto_ec2_config, boto_client, ownership):
    from dataclasses import replace

    from wire_daemon.execute.providers.ec2 import probe

    def spot_lines(config):
        return [c for c in probe(config, ownership, client=boto_client()) if c.call == "ec2 DescribeSpotPriceHistory"]

    assert spot_lines(moto_ec2_config) == []
    (line,) = spot_lines(replace(moto_ec2_config, spot_prices="cloud"))
    assert line.ok and "USD an hour" in line.detail, line.line()


def test_prices_read_from_ec2_need_the_currency_ec2_quotes(tmp_path):
    from wire_daemon.runtime.settings import load_settings

    def config(currency: str) -> str:
        path = tmp_path / f"{currency}.yaml"
        path.write_text(
            f"site: {{kind: condor, submit_root: {tmp_path}}}\n"
            "cloud: {kind: ec2, ec2: {region: us-east-1, image_id: ami-0123456789abcdef0, "
            "instance_type: c5.large, spot_prices: cloud}}\n"
            f"steering: {{currency: {currency}}}\n"
        )
        return str(path)

    assert load_settings(config("USD")).steering.currency == "USD"
    with pytest.raises(ConfigError, match=r"cloud.ec2 reads its prices from the cloud, in USD.*got 'EUR'"):
        load_settings(config("EUR"))
