"""Issue 14, "the cap counts the cloud": ``max_instances`` and the budget hold on every path.

Before a launch the guard counts what the cloud lists under the pool's tag,
plus the open launch requests it cannot settle (a reply lost: the launch may
have happened) as possibly live; a listing that fails launches nothing.

EC2 runs against moto's server, with faults injected at the HTTP layer by
botocore's ``before-send`` event: a lost reply forwards the request to moto
and then drops the answer; throttling answers 503 RequestLimitExceeded
without forwarding. OpenStack runs against the recorded-shape Nova of
test_openstack.py. The rest uses the in-memory driver of test_guarded_cloud.py.
"""

from __future__ import annotations

import time
import urllib.request

import pytest

from tests.execute.test_guarded_cloud import FakeDriver, dry_run, make_guard, notes_of
from wire_daemon.core.errors import CloudThrottledError, CloudTransientError
from wire_daemon.core.instances import CloudState, Instance
from wire_daemon.execute.guarded_cloud import REQUEST_VISIBLE_S, GuardedCloud, SafetyConfig
from wire_daemon.execute.providers.base import TAG_POOL, Ownership
from wire_daemon.persist.store import StateStore

pytestmark = pytest.mark.filterwarnings("ignore::PendingDeprecationWarning", "ignore::DeprecationWarning")

_THROTTLED_BODY = (
    b'<?xml version="1.0" encoding="UTF-8"?>\n<Response><Errors><Error><Code>RequestLimitExceeded</Code>'
    b"<Message>Request limit exceeded.</Message></Error></Errors><RequestID>fault</RequestID></Response>"
)


class _Raw:
    """The raw-stream half of a botocore response, holding a canned body."""

    def __init__(self, body: bytes) -> None:
        self.body = body

    def stream(self, **_: object):
        yield self.body


class HttpFaults:
    """Faults on a boto3 client's HTTP exchanges with moto, through botocore's ``before-send`` event."""

    def __init__(self, client) -> None:
        self.lose_replies: dict[str, int] = {}  # operation -> replies still to drop after forwarding
        self.throttled: set[str] = set()  # operations answered 503 RequestLimitExceeded, not forwarded
        self.throttle_after_loss: set[str] = set()  # added to ``throttled`` once a reply is lost
        self.sent: dict[str, int] = {}  # operation -> requests that reached moto
        client.meta.events.register("before-send.ec2.*", self._before_send)

    def _before_send(self, request, **kwargs):
        from botocore.awsrequest import AWSResponse
        from botocore.exceptions import ReadTimeoutError

        operation = kwargs["event_name"].rsplit(".", 1)[-1]
        if operation in self.throttled:
            return AWSResponse(request.url, 503, {"Content-Type": "text/xml"}, _Raw(_THROTTLED_BODY))
        if self.lose_replies.get(operation, 0) > 0:
            self.lose_replies[operation] -= 1
            self._forward(request)  # the cloud acts on it...
            self.sent[operation] = self.sent.get(operation, 0) + 1
            self.throttled |= self.throttle_after_loss
            raise ReadTimeoutError(endpoint_url=request.url)  # ...and its answer never arrives
        self.sent[operation] = self.sent.get(operation, 0) + 1
        return None  # botocore sends it itself

    @staticmethod
    def _forward(request) -> None:
        body = request.body if isinstance(request.body, (bytes, type(None))) else request.body.encode()
        headers = {k: v.decode() if isinstance(v, bytes) else v for k, v in request.headers.items()}
        forwarded = urllib.request.Request(request.url, data=body, headers=headers, method=request.method)
        with urllib.request.urlopen(forwarded, timeout=30) as reply:
            reply.read()


@pytest.fixture
def ec2_world(tmp_path, moto_ec2_config, ownership, retrier):
    """A guard over the EC2 driver on moto, its client wired to ``HttpFaults``; the guard's clock is the wall's."""
    from wire_daemon.execute.providers.ec2 import Ec2Driver, make_client

    config = moto_ec2_config
    client = make_client(config)
    faults = HttpFaults(client)
    driver = Ec2Driver(config, ownership, "#!/bin/sh\ntrue\n", client, retrier(max_attempts=3))
    store = StateStore(tmp_path / "state.sqlite")

    def guarded(**safety) -> GuardedCloud:
        return make_guard(driver, store, SafetyConfig(**safety), time.time)

    return guarded, driver, faults, store


def live_on_moto(boto_client, pool: str) -> list[str]:
    reply = boto_client("ec2").describe_instances(Filters=[{"Name": f"tag:{TAG_POOL}", "Values": [pool]}])
    return [
        i["InstanceId"]
        for r in reply["Reservations"]
        for i in r["Instances"]
        if i["State"]["Name"] in ("pending", "running")
    ]


def test_ec2_a_lost_reply_with_throttled_lookups_never_takes_the_pool_past_the_cap(ec2_world, boto_client, ownership):
    guarded, _, faults, store = ec2_world
    cloud = guarded(max_instances=4, max_launches_per_interval=4)
    faults.lose_replies["RunInstances"] = 1
    faults.throttle_after_loss.add("DescribeInstances")  # the look-ups after the lost reply are throttled

    assert cloud.launch(4) == []
    assert len(live_on_moto(boto_client, ownership.pool)) == 4  # the launch took effect all the same
    assert len(store.open_requests()) == 1  # and cannot be settled

    assert cloud.launch(4) == []  # the cloud cannot be counted: nothing launched
    faults.throttled.clear()
    assert cloud.launch(4) == []  # the cloud lists 4: the cap is reached
    assert len(live_on_moto(boto_client, ownership.pool)) == 4
    assert faults.sent.get("RunInstances") == 1
    assert store.open_requests() == [] and len(store.instances()) == 4  # settled, the 4 recorded


def test_ec2_a_lost_reply_counts_against_the_hourly_budget(ec2_world, boto_client, ownership):
    guarded, _, faults, store = ec2_world
    cloud = guarded(max_instances=20, max_launches_per_interval=10, budget_units_per_hour=4)
    faults.lose_replies["RunInstances"] = 1
    faults.throttle_after_loss.add("DescribeInstances")

    assert cloud.launch(4) == []
    faults.throttled.clear()
    assert cloud.launch(4) == []
    assert any("budget_units_per_hour" in n for n in notes_of(cloud))
    assert len(live_on_moto(boto_client, ownership.pool)) == 4


def test_ec2_instances_of_a_previous_life_count_before_they_are_adopted(ec2_world, boto_client, ownership):
    guarded, driver, _, store = ec2_world
    driver.launch(3, request_id="previous-life")  # launched, then the daemon died before recording them
    cloud = guarded(max_instances=4, max_launches_per_interval=4)  # no reconcile: the cloud was down at start

    assert len(cloud.launch(4)) == 1
    assert len(live_on_moto(boto_client, ownership.pool)) == 4
    assert len(store.instances()) == 4  # the three were adopted on the way


def test_openstack_a_lost_create_reply_with_failing_lookups_never_takes_the_pool_past_the_cap(
    tmp_path, ownership, retrier
):
    pytest.importorskip("openstack", reason="the [openstack] extra is not installed")
    import requests
    import requests_mock

    from tests.execute.test_openstack import IMAGE_ID, NETWORK_ID, FakeNova, connection, nova_error
    from wire_daemon.execute.providers.openstack import OpenStackConfig, OpenStackDriver

    class ThrottledAfterLoss(FakeNova):
        """Once a create reply is lost, the next three server listings are answered 429."""

        def _create(self, request, context):
            try:
                return super()._create(request, context)
            except requests.exceptions.ReadTimeout:
                self.fail("GET", "servers", *[nova_error(429, "rate-limited")] * 3)
                raise

    with requests_mock.Mocker() as mocker:
        nova = ThrottledAfterLoss(mocker)
        config = OpenStackConfig(flavor="m1.large", image_id=IMAGE_ID, network_id=NETWORK_ID)
        driver = OpenStackDriver(config, ownership, "", connection(), retrier(max_attempts=3), clock=time.time)
        store = StateStore(tmp_path / "state.sqlite")
        cloud = make_guard(driver, store, SafetyConfig(max_instances=2), time.time)
        nova.lost_create_replies = [0]  # the first server is created; its reply is lost, then the look-ups fail

        assert cloud.launch(2) == []
        assert len(nova.servers) == 1 and len(store.open_requests()) == 1
        assert len(cloud.launch(2)) == 1  # one listed, and the request settled on it
        assert len(nova.servers) == 2 and store.open_requests() == []


# -- the guard's rules, over the in-memory driver ----------------------------------------------------


@pytest.fixture
def world(tmp_path):
    clock = {"t": 10_000.0}
    driver = FakeDriver(lambda: clock["t"])
    store = StateStore(tmp_path / "state.sqlite")

    def guarded(**config) -> GuardedCloud:
        return make_guard(driver, store, SafetyConfig(**config), lambda: clock["t"])

    return clock, driver, store, guarded


class Unlisted(FakeDriver):
    """A cloud whose listing and request look-ups can fail or lag, each on its own."""

    def __init__(self, clock) -> None:
        super().__init__(clock)
        self.list_error: Exception | None = None
        self.find_error: Exception | None = None
        self.hidden: set[str] = set()  # launched, not listed yet (eventual consistency)
        self.ended: list[Instance] = []  # ran and ended, still reported for their request

    def list_instances(self, include_unusable=False):
        if self.list_error:
            raise self.list_error
        return [i for i in super().list_instances(include_unusable) if i.instance_id not in self.hidden]

    def find_request(self, request_id):
        if self.find_error:
            raise self.find_error
        return super().find_request(request_id) + [i for i in self.ended if i.request_id == request_id]


@pytest.fixture
def lagging(tmp_path):
    clock = {"t": 10_000.0}
    driver = Unlisted(lambda: clock["t"])
    store = StateStore(tmp_path / "state.sqlite")

    def guarded(**config) -> GuardedCloud:
        return make_guard(driver, store, SafetyConfig(**config), lambda: clock["t"])

    return clock, driver, store, guarded


def test_a_listing_that_fails_launches_nothing_and_says_why(lagging):
    clock, driver, store, guarded = lagging
    cloud = guarded(max_instances=4)
    driver.list_error = CloudTransientError("ec2", "list", "connection reset")

    assert cloud.launch(2) == []
    assert not [c for c in driver.calls if c[0] == "launch"]
    assert store.open_requests() == []
    (note,) = notes_of(cloud)
    assert note.startswith("cloud error (transient) counting the pool before a launch: ")


def test_an_open_request_that_cannot_be_looked_up_counts_as_live(lagging):
    clock, driver, store, guarded = lagging
    store.open_request(3, now=clock["t"] - 30.0)  # its reply was lost; the look-up is throttled
    driver.find_error = CloudThrottledError("ec2", "find request", "Request limit exceeded.")

    assert len(guarded(max_instances=4).launch(4)) == 1
    assert len(store.open_requests()) == 1  # still open: it may yet show up


def test_an_open_request_counts_against_the_budget(lagging):
    clock, driver, store, guarded = lagging
    store.open_request(3, now=clock["t"] - 30.0)
    driver.find_error = CloudThrottledError("ec2", "find request", "Request limit exceeded.")

    cloud = guarded(max_instances=20, max_launches_per_interval=10, budget_units_per_hour=4)
    assert len(cloud.launch(4)) == 1
    assert "limit budget_units_per_hour: launching 1 of 4" in notes_of(cloud)


def test_a_request_the_cloud_holds_nothing_for_is_counted_until_it_would_be_visible(lagging):
    clock, driver, store, guarded = lagging
    store.open_request(3, now=clock["t"])  # just asked: the cloud may not show its instances yet
    cloud = guarded(max_instances=4)

    assert len(cloud.launch(4)) == 1
    clock["t"] += REQUEST_VISIBLE_S + 1.0
    assert len(cloud.launch(4)) == 3  # nothing ever showed up: rolled back
    assert store.open_requests() == []


def test_a_launch_seen_only_by_its_request_is_counted(lagging):
    clock, driver, store, guarded = lagging
    request = store.open_request(2, now=clock["t"] - 30.0)
    for instance in driver.launch(2, request_id=request):
        driver.hidden.add(instance.instance_id)  # not in the listing yet, but the request look-up has them

    assert len(guarded(max_instances=4).launch(4)) == 2
    assert len(store.instances()) == 4 and store.open_requests() == []


def test_instances_of_a_lost_reply_that_already_ended_still_count_for_the_budget(lagging):
    clock, driver, store, guarded = lagging
    request = store.open_request(2, now=clock["t"] - 60.0)
    driver.ended = [
        Instance(f"i-gone-{n}", clock["t"] - 60.0, 4, CloudState.TERMINATED, request_id=request) for n in range(2)
    ]

    cloud = guarded(max_instances=20, max_launches_per_interval=10, budget_units_per_hour=3)
    assert len(cloud.launch(4)) == 1  # the two that ran paid a unit each
    assert {r.instance_id for r in store.instances(live_only=False)} >= {"i-gone-0", "i-gone-1"}


def test_reconcile_keeps_a_young_request_open(lagging):
    clock, driver, store, guarded = lagging
    store.open_request(2, now=clock["t"] - 5.0)  # killed right after asking; the cloud shows nothing yet
    report = guarded().reconcile()
    assert report.requests_rolled_back == [] and len(store.open_requests()) == 1


def test_dry_run_still_counts_only_its_phantoms(world):
    clock, driver, store, guarded = world
    cloud = dry_run(driver, clock, max_instances=3)
    assert len(cloud.launch(5)) == 3
    assert driver.calls == []


def test_ownership_keeps_other_pools_out_of_the_count(ec2_world, boto_client, ownership, network):
    from wire_daemon.execute.providers.ec2 import Ec2Driver

    guarded, driver, _, _ = ec2_world
    other = Ec2Driver(driver.config, Ownership(f"{ownership.pool}-other", "daemon-a"), "", driver.client)
    other.launch(2, request_id="someone-else")
    assert len(guarded(max_instances=3, max_launches_per_interval=3).launch(3)) == 3


def test_the_pools_tag_not_the_daemon_id_is_what_the_cap_counts(ec2_world, boto_client, ownership, network):
    from wire_daemon.execute.providers.ec2 import Ec2Driver

    guarded, driver, _, store = ec2_world
    # Launched under another daemon id (a state file lost since): this pool's all the same.
    earlier = Ec2Driver(driver.config, Ownership(ownership.pool, "daemon-lost"), "", driver.client)
    before = {i.instance_id for i in earlier.launch(2, request_id="before-the-loss")}
    assert len(guarded(max_instances=3, max_launches_per_interval=3).launch(3)) == 1
    assert before <= {r.instance_id for r in store.instances()}  # adopted, not only counted
    assert len(live_on_moto(boto_client, ownership.pool)) == 3
