"""The Execute step's guard rails: limits, dry-run, back-off, reconcile, and a real crash."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap

import pytest

from wire_daemon.core.billing import Billing
from wire_daemon.core.errors import CloudQuotaError
from wire_daemon.core.instances import Instance
from wire_daemon.core.journal import Journal, NoticeBox
from wire_daemon.core.pricing import Market, price_list
from wire_daemon.execute.dry_run import dry_run_guard
from wire_daemon.execute.guarded_cloud import GuardedCloud, SafetyConfig
from wire_daemon.persist.store import StateStore


class FakeDriver:
    """An in-memory cloud that records every call."""

    slots_per_instance = 4

    def __init__(self, clock):
        self.clock = clock
        self.live: dict[str, Instance] = {}
        self.calls: list[tuple] = []
        self.fail_launch: Exception | None = None
        self._n = 0

    def list_instances(self, include_unusable=False):
        self.calls.append(("list",))
        return [i for i in self.live.values() if include_unusable or i.state in ("pending", "running")]

    def find_request(self, request_id):
        return [i for i in self.live.values() if i.request_id == request_id]

    def launch(self, count, request_id=None, user_data=None):
        self.calls.append(("launch", count))
        if self.fail_launch:
            raise self.fail_launch
        out = []
        for _ in range(count):
            self._n += 1
            inst = Instance(f"i-{self._n}", self.clock(), 4, "pending", request_id=request_id or "")
            self.live[inst.instance_id] = inst
            out.append(inst)
        return out

    def terminate(self, ids):
        self.calls.append(("terminate", tuple(ids)))
        ended = [i for i in ids if i in self.live]
        for i in ended:
            del self.live[i]
        return ended


_boxes: dict[int, NoticeBox] = {}


def make_guard(driver, store, config, clock, charging_unit_s=3600.0, **kwargs) -> GuardedCloud:
    """A guard whose published notices a test can read back with ``notes_of``."""
    journal, box = Journal(), NoticeBox()
    journal.subscribe(box)
    cloud = GuardedCloud(driver, store, config, Billing(charging_unit_s), clock, journal=journal, **kwargs)
    _boxes[id(cloud)] = box
    return cloud


def notes_of(cloud: GuardedCloud) -> list[str]:
    """The lines the guard published since the last call, as the decisions log shows them."""
    return [n.line for n in _boxes[id(cloud)].take()]


@pytest.fixture
def world(tmp_path):
    clock = {"t": 0.0}
    driver = FakeDriver(lambda: clock["t"])
    store = StateStore(tmp_path / "state.sqlite")

    def guarded(charging_unit_s=3600.0, **config):
        return make_guard(driver, store, SafetyConfig(**config), lambda: clock["t"], charging_unit_s)

    return clock, driver, store, guarded


def test_limits_cap_every_launch(world):
    clock, driver, store, guarded = world
    cloud = guarded(max_instances=5, max_launches_per_interval=3)
    assert len(cloud.launch(10)) == 3
    assert "limit max_launches_per_interval: launching 3 of 10" in notes_of(cloud)
    assert len(cloud.launch(10)) == 2  # max_instances: 5 live
    assert cloud.launch(1) == []
    assert len(driver.live) == 5


def test_hourly_budget(world):
    clock, driver, store, guarded = world
    cloud = guarded(charging_unit_s=900.0, budget_units_per_hour=4, max_launches_per_interval=10)
    assert len(cloud.launch(3)) == 3  # 3 units started now
    clock["t"] = 1000.0  # each of them started its second 15-min unit at t=900
    assert cloud.launch(3) == []  # 6 units started within the hour > 4
    notes = notes_of(cloud)
    assert any("budget_units_per_hour" in n for n in notes)


def dry_run(driver, clock, charging_unit_s=3600.0, **config) -> GuardedCloud:
    """The guard a dry run has: over phantoms standing in for ``driver``, notes readable with ``notes_of``."""
    journal, box = Journal(), NoticeBox()
    journal.subscribe(box)
    cloud = dry_run_guard(
        driver, SafetyConfig(dry_run=True, **config), Billing(charging_unit_s), lambda: clock["t"], journal
    )
    _boxes[id(cloud)] = box
    return cloud


def test_dry_run_makes_no_call_and_says_what_it_would_do(world):
    clock, driver, store, guarded = world
    cloud = dry_run(driver, clock, charging_unit_s=60.0)
    phantoms = cloud.launch(2)
    assert [i.instance_id for i in phantoms] == ["dry-run-0001", "dry-run-0002"]
    assert cloud.list_instances() == phantoms  # the pool it would have, not the cloud's
    clock["t"] = 90.0
    cloud.terminate(["dry-run-0001"])
    assert [i.instance_id for i in cloud.list_instances()] == ["dry-run-0002"]
    cloud.reconcile()
    assert driver.calls == []  # not even a listing
    assert notes_of(cloud) == [
        "dry-run: reconcile skipped (it would list the cloud)",  # said when the dry run starts
        "dry-run: would launch 2 instance(s)",
        "dry-run: would terminate dry-run-0001",
    ]
    clock["t"] = 130.0
    assert cloud.cost_units(130.0) == 2 + 3  # ended at 90 s: 2 units; still up at 130 s: 3 units
    assert store.instances(live_only=False) == []  # phantoms never reach the state file


def test_cloud_errors_become_notes_not_exceptions(world):
    clock, driver, store, guarded = world
    cloud = guarded()
    driver.fail_launch = CloudQuotaError(
        "ec2", "run_instances", "InstanceLimitExceeded: too many", code="InstanceLimitExceeded"
    )
    assert cloud.launch(2) == []
    (note,) = notes_of(cloud)
    assert note.startswith("cloud error (quota) launching 2")
    assert store.open_requests() == []  # a refused request is rolled back


def test_instances_dying_young_pause_launches_with_growing_back_off(world):
    clock, driver, store, guarded = world
    cloud = guarded(backoff_initial_s=300.0, died_young_s=600.0)
    cloud.launch(2)
    clock["t"] = 120.0
    driver.live.clear()  # both died (bad image), not by our hand
    cloud.list_instances()
    assert cloud.launch(1) == []
    clock["t"] = 120.0 + 301.0
    assert len(cloud.launch(1)) == 1
    clock["t"] = 500.0
    driver.live.clear()
    cloud.list_instances()
    clock["t"] = 500.0 + 301.0
    assert cloud.launch(1) == []  # the pause doubled to 600 s
    clock["t"] = 500.0 + 601.0
    assert len(cloud.launch(1)) == 1


def test_a_reclaimed_spot_instance_is_an_interruption_not_a_failure_and_pauses_no_launch(world):
    clock, driver, store, guarded = world
    cloud = guarded(backoff_initial_s=300.0, died_young_s=600.0)
    driver.live["i-spot"] = Instance("i-spot", 0.0, 4, "running", market=Market.SPOT)
    cloud.list_instances()  # adopted, with its market
    clock["t"] = 120.0
    driver.live.clear()  # reclaimed by the cloud two minutes after launch
    cloud.list_instances()
    assert not [n for n in notes_of(cloud) if "died" in n]
    assert len(cloud.launch(1)) == 1  # its capacity can be replaced at once


def test_instances_that_never_join_are_terminated_and_count_as_failures(world):
    clock, driver, store, guarded = world
    cloud = make_guard(driver, store, SafetyConfig(join_timeout_s=600.0), lambda: clock["t"], joined=lambda i: False)
    (inst,) = cloud.launch(1)
    clock["t"] = 700.0
    cloud.list_instances()
    assert ("terminate", (inst.instance_id,)) in driver.calls
    assert any("did not join the pool within 600 s" in n for n in notes_of(cloud))
    assert cloud.launch(1) == []  # back-off


def test_reconcile_adopts_forgets_and_settles_requests(world):
    clock, driver, store, guarded = world
    cloud = guarded()
    stale = cloud.launch(1)[0]
    driver.live.pop(stale.instance_id)  # gone while we were down
    ours = driver.launch(1, request_id="req-before-crash")  # launched, never recorded
    store.open_request(1, now=-1000.0)  # a request whose launch never happened, old enough to show
    report = make_guard(driver, store, SafetyConfig(), lambda: clock["t"]).reconcile()
    assert report.adopted == [ours[0].instance_id]
    assert report.forgotten == [stale.instance_id]
    assert len(report.requests_rolled_back) == 1
    assert store.open_requests() == []


def test_a_still_claimed_instance_is_not_terminated(world):
    clock, driver, store, guarded = world
    cloud = make_guard(driver, store, SafetyConfig(), lambda: clock["t"], holds_claims=lambda i: i == "i-1")
    cloud.launch(2)
    cloud.terminate(["i-1", "i-2"])
    assert ("terminate", ("i-2",)) in driver.calls and "i-1" in driver.live
    assert any("i-1: a slot is still claimed" in n for n in notes_of(cloud))


CHILD = textwrap.dedent(
    """
    import sys, time
    from wire_daemon.execute.providers.base import Ownership
    from wire_daemon.execute.providers.ec2 import Ec2Config, Ec2Driver, make_client
    from wire_daemon.persist.store import StateStore
    endpoint, image, subnet, pool, state_path = sys.argv[1:6]
    config = Ec2Config(
        region="us-east-1", image_id=image, instance_type="c5.xlarge", subnet_id=subnet, endpoint_url=endpoint
    )
    driver = Ec2Driver(config, Ownership(pool, "daemon-a"), "#!/bin/sh\\ntrue\\n", make_client(config))
    store = StateStore(state_path)
    request = store.open_request(2)          # "launch requested" is durable
    driver.launch(2, request_id=request)     # the cloud launched...
    print("LAUNCHED", flush=True)
    time.sleep(60)                           # ...and we are killed before recording
    """
)


@pytest.mark.slow
def test_a_daemon_killed_between_launch_and_record_adopts_instead_of_duplicating(
    tmp_path, moto_endpoint, network, ownership, boto_client
):
    from wire_daemon.execute.providers.ec2 import Ec2Config, Ec2Driver, make_client

    state_path = tmp_path / "state.sqlite"
    env = os.environ | {
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_DEFAULT_REGION": "us-east-1",
    }
    child = subprocess.Popen(
        [
            sys.executable,
            "-c",
            CHILD,
            moto_endpoint,
            network.image_id,
            network.subnet_id,
            ownership.pool,
            str(state_path),
        ],
        stdout=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        assert child.stdout.readline().strip() == "LAUNCHED"
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait(timeout=30)

    os.environ.update({k: env[k] for k in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY")})
    config = Ec2Config(
        region="us-east-1",
        image_id=network.image_id,
        instance_type="c5.xlarge",
        subnet_id=network.subnet_id,
        endpoint_url=moto_endpoint,
    )
    driver = Ec2Driver(config, ownership, "#!/bin/sh\ntrue\n", make_client(config))
    store = StateStore(state_path)
    assert len(store.open_requests()) == 1 and store.instances() == []
    cloud = make_guard(driver, store, SafetyConfig(max_instances=3), lambda: 0.0)
    report = cloud.reconcile()
    assert len(report.requests_finished) == 1
    assert len(store.instances()) == 2
    assert len(cloud.launch(5)) == 1  # never above max_instances = 3
    tagged = boto_client("ec2").describe_instances(Filters=[{"Name": "tag:wire:pool", "Values": [ownership.pool]}])
    states = [i["State"]["Name"] for r in tagged["Reservations"] for i in r["Instances"]]
    assert len([s for s in states if s in ("pending", "running")]) == 3


def test_the_bill_prices_each_instance_at_its_market(world, tmp_path):
    clock, driver, store, _ = world
    offers = price_list((), 4, Billing(3600.0), 0.25, price_per_hour=0.4)
    cloud = make_guard(driver, store, SafetyConfig(), lambda: clock["t"], offers=offers)
    (on_demand,) = cloud.launch(1)
    driver.live["i-spot"] = Instance("i-spot", 0.0, 4, "running", market=Market.SPOT)
    cloud.reconcile()  # adopts the spot one, as a restart would
    clock["t"] = 900.0
    money = cloud.bill(900.0)
    assert money.total == pytest.approx(0.4 + 0.1)  # an hour each is charged: on-demand 0.4, spot 0.25 x 0.4
    assert money.spent == pytest.approx(0.25 * 0.5) and money.committed == pytest.approx(0.75 * 0.5)
    assert on_demand.market is Market.ON_DEMAND
