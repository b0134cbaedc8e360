"""A launch of a chosen instance type (issue 15): EC2 InstanceType against moto, and the money budget."""

from __future__ import annotations

import pytest

from wire_daemon.core.billing import Billing
from wire_daemon.core.instances import Instance
from wire_daemon.execute.guarded_cloud import GuardedCloud, SafetyConfig
from wire_daemon.execute.providers.base import TAG_REQUEST, TAG_SLOTS
from wire_daemon.execute.providers.ec2 import Ec2Config, Ec2Driver
from wire_daemon.persist.store import StateStore


@pytest.fixture
def ec2_driver(network, aws_region, ownership, boto_client, retrier) -> Ec2Driver:
    config = Ec2Config(
        region=aws_region,
        image_id=network.image_id,
        instance_type="c5.xlarge",
        subnet_id=network.subnet_id,
    )
    driver = Ec2Driver(config, ownership, "#!/bin/sh\n", boto_client(), retrier())
    driver.type_slots = {"c5.4xlarge": 16}
    driver.type_user_data = {"c5.4xlarge": "#!/bin/sh\n# sixteen\n"}
    return driver


def test_ec2_launches_the_named_type_with_its_slots(ec2_driver, boto_client):
    (big,) = ec2_driver.launch(1, "req-type-big", instance_type="c5.4xlarge")
    (small,) = ec2_driver.launch(1, "req-type-small")

    assert big.instance_type == "c5.4xlarge" and big.slots == 16
    assert small.instance_type == "c5.xlarge" and small.slots == 4
    ec2 = boto_client()
    for request, kind, slots in (("req-type-big", "c5.4xlarge", "16"), ("req-type-small", "c5.xlarge", "4")):
        reply = ec2.describe_instances(Filters=[{"Name": f"tag:{TAG_REQUEST}", "Values": [request]}])
        (raw,) = [i for r in reply["Reservations"] for i in r["Instances"]]
        assert raw["InstanceType"] == kind
        assert {t["Key"]: t["Value"] for t in raw["Tags"]}[TAG_SLOTS] == slots
    listed = {i.instance_id: i for i in ec2_driver.list_instances()}
    assert listed[big.instance_id].slots == 16  # read back from the slot tag


class _TypedDriver:
    """An in-memory cloud that launches instances of the type it is asked for."""

    slots_per_instance = 4

    def __init__(self, clock) -> None:
        self.clock = clock
        self.live: dict[str, Instance] = {}
        self.types: list[str] = []

    def list_instances(self, include_unusable=False):
        return list(self.live.values())

    def find_request(self, request_id):
        return [i for i in self.live.values() if i.request_id == request_id]

    def launch(self, count, request_id=None, user_data=None, instance_type=""):
        self.types.append(instance_type)
        made = []
        for _ in range(count):
            n = len(self.live) + 1
            inst = Instance(f"i-{n}", self.clock(), 4, "pending", instance_type=instance_type, request_id=request_id)
            self.live[inst.instance_id] = inst
            made.append(inst)
        return made

    def terminate(self, ids):
        return [i for i in ids if self.live.pop(i, None) is not None]


def test_the_budget_counts_money_at_each_types_price(tmp_path):
    clock = {"t": 0.0}
    driver = _TypedDriver(lambda: clock["t"])
    store = StateStore(tmp_path / "state.sqlite")
    config = SafetyConfig(max_instances=20, max_launches_per_interval=20, budget_units_per_hour=10.0)
    prices = {"c.small": 1.0, "c.large": 4.0}
    cloud = GuardedCloud(driver, store, config, Billing(3600.0), lambda: clock["t"], prices=prices)

    assert len(cloud.launch(5, instance_type="c.large")) == 2  # 8 of 10 spent: a third large would cost 12
    assert driver.types == ["c.large"]
    assert len(cloud.launch(5, instance_type="c.small")) == 2  # 2 left: two small units
    assert cloud.launch(1, instance_type="c.small") == []


def test_without_prices_the_budget_counts_units_as_before(tmp_path):
    clock = {"t": 0.0}
    driver = _TypedDriver(lambda: clock["t"])
    store = StateStore(tmp_path / "state.sqlite")
    config = SafetyConfig(max_instances=20, max_launches_per_interval=20, budget_units_per_hour=3.0)
    cloud = GuardedCloud(driver, store, config, Billing(3600.0), lambda: clock["t"])
    assert len(cloud.launch(5)) == 3
    assert driver.types == [""]  # no type named: the driver is asked as before
