"""EC2 driver against moto's EC2 server over HTTP on 127.0.0.1."""

from __future__ import annotations

import base64
import time
from collections import Counter

import pytest
from botocore.exceptions import ClientError, EndpointConnectionError, ReadTimeoutError

from wire_daemon.core.errors import (
    CloudAuthError,
    CloudCapacityError,
    CloudConfigError,
    CloudError,
    CloudQuotaError,
    CloudThrottledError,
    CloudTransientError,
    ConfigError,
)
from wire_daemon.core.pricing import Market
from wire_daemon.execute.providers.base import (
    TAG_DAEMON,
    TAG_LEASE,
    TAG_POOL,
    TAG_REQUEST,
    TAG_SLOTS,
    Lease,
    Ownership,
)
from wire_daemon.execute.providers.ec2 import Ec2Config, Ec2Driver, kind_of_code, make_client
from wire_daemon.execute.userdata import WorkerConfig, render_user_data


def client_error(code: str, message: str = "", status: int = 400, operation: str = "RunInstances") -> ClientError:
    return ClientError(
        {"Error": {"Code": code, "Message": message or code}, "ResponseMetadata": {"HTTPStatusCode": status}}, operation
    )


def throttle() -> ClientError:
    return client_error("RequestLimitExceeded", "Request limit exceeded.", 503, "DescribeInstances")


class Flaky:
    """The real moto client, with chosen errors raised before or after chosen calls."""

    def __init__(self, client, before=None, after=None) -> None:
        self._client = client
        self.before = {op: list(errors) for op, errors in (before or {}).items()}
        self.after = {op: list(errors) for op, errors in (after or {}).items()}
        self.calls: Counter[str] = Counter()

    def __getattr__(self, name):
        real = getattr(self._client, name)

        def call(**kwargs):
            self.calls[name] += 1
            if self.before.get(name):
                raise self.before[name].pop(0)
            result = real(**kwargs)
            if self.after.get(name):
                raise self.after[name].pop(0)  # the call reached the cloud, the reply was lost
            return result

        return call


@pytest.fixture
def user_data(ownership):
    worker = WorkerConfig(
        cloud="ec2", pool=ownership.pool, condor_host="cm.example.org", token_source="/wire/pool/condor-token"
    )
    return render_user_data(worker)


@pytest.fixture
def ec2_config(network, aws_region) -> Ec2Config:
    return Ec2Config(
        region=aws_region,
        image_id=network.image_id,
        instance_type="c5.xlarge",
        subnet_id=network.subnet_id,
        security_group_ids=(network.security_group_id,),
        key_name=network.key_name,
        instance_profile=network.instance_profile,
        extra_tags={"project": "montage"},
    )


@pytest.fixture
def driver(ec2_config, ownership, user_data, boto_client, retrier):
    def make(client=None, owner: Ownership | None = None, **policy) -> Ec2Driver:
        return Ec2Driver(
            ec2_config, owner or ownership, user_data, client or boto_client(), retrier(**policy), slots_per_instance=3
        )

    return make


def raw_instances(ec2, **filters):
    args = {"Filters": [{"Name": f"tag:{k}", "Values": [v]} for k, v in filters.items()]}
    return [i for r in ec2.describe_instances(**args)["Reservations"] for i in r["Instances"]]


def launch_foreign(ec2, network, tags=None):
    args = dict(ImageId=network.image_id, MinCount=1, MaxCount=1, InstanceType="t3.micro", SubnetId=network.subnet_id)
    if tags:
        args["TagSpecifications"] = [
            {"ResourceType": "instance", "Tags": [{"Key": k, "Value": v} for k, v in tags.items()]}
        ]
    return ec2.run_instances(**args)["Instances"][0]["InstanceId"]


def test_launch_tags_instances_and_passes_user_data_and_config(driver, ownership, user_data, boto_client, network):
    before = time.time()
    launched = driver().launch(2, "req-1")

    assert len(launched) == 2
    for inst in launched:
        assert inst.state in ("pending", "running")
        assert inst.slots == 3 and inst.instance_type == "c5.xlarge" and inst.request_id == "req-1"
        assert inst.address.startswith("10.20.1.")
        assert before - 5 <= inst.launch_time <= time.time() + 5
    ec2 = boto_client()
    raw = {i["InstanceId"]: i for i in raw_instances(ec2, **{TAG_REQUEST: "req-1", TAG_POOL: ownership.pool})}
    assert set(raw) == {i.instance_id for i in launched}
    for instance_id, inst in raw.items():
        tags = {t["Key"]: t["Value"] for t in inst["Tags"]}
        assert tags[TAG_POOL] == ownership.pool and tags[TAG_DAEMON] == "daemon-a"
        assert tags[TAG_SLOTS] == "3" and tags["project"] == "montage"
        assert tags["Name"] == f"{ownership.pool}-req-1"
        assert inst["SubnetId"] == network.subnet_id and inst["KeyName"] == network.key_name
        assert [g["GroupId"] for g in inst["SecurityGroups"]] == [network.security_group_id]
        attribute = ec2.describe_instance_attribute(InstanceId=instance_id, Attribute="userData")
        assert base64.b64decode(attribute["UserData"]["Value"]).decode() == user_data
        behaviour = ec2.describe_instance_attribute(
            InstanceId=instance_id, Attribute="instanceInitiatedShutdownBehavior"
        )
        assert behaviour["InstanceInitiatedShutdownBehavior"]["Value"] == "terminate"
    # moto 5.2 associates the profile with one instance of a multi-instance launch only.
    ids = list(raw)
    associations = ec2.describe_iam_instance_profile_associations(Filters=[{"Name": "instance-id", "Values": ids}])
    profiles = {
        a["IamInstanceProfile"]["Arn"].rsplit("/", 1)[-1] for a in associations["IamInstanceProfileAssociations"]
    }
    assert profiles == {"wire-worker"}


def test_a_spot_launch_buys_spot_and_the_listing_says_which_market_each_instance_is_on(driver, boto_client):
    cloud = driver()
    (spot,) = cloud.launch(1, "req-spot", market=Market.SPOT)
    (plain,) = cloud.launch(1, "req-plain")
    assert spot.market is Market.SPOT and plain.market is Market.ON_DEMAND
    listed = {i.instance_id: i.market for i in cloud.list_instances()}
    assert listed == {spot.instance_id: Market.SPOT, plain.instance_id: Market.ON_DEMAND}
    raw = boto_client().describe_instances(InstanceIds=[spot.instance_id])["Reservations"][0]["Instances"][0]
    assert raw["InstanceLifecycle"] == "spot"


def test_lists_every_instance_of_our_pool_whichever_daemon_launched_it(driver, ownership, boto_client, network):
    ec2 = boto_client()
    ours = {i.instance_id for i in driver().launch(2, "req-own")}
    launch_foreign(ec2, network)  # untagged
    # Launched by a daemon whose state file was lost (another daemon id): still this pool's.
    ours.add(launch_foreign(ec2, network, {TAG_POOL: ownership.pool, TAG_DAEMON: "daemon-b", TAG_REQUEST: "x"}))
    launch_foreign(ec2, network, {TAG_POOL: "someone-else", TAG_DAEMON: "daemon-a", TAG_REQUEST: "x"})

    assert {i.instance_id for i in driver().list_instances()} == ours


def test_stopped_instances_are_listed_only_on_request(driver, boto_client):
    d = driver()
    first, second = d.launch(2, "req-stop")
    boto_client().stop_instances(InstanceIds=[first.instance_id])

    assert [i.instance_id for i in d.list_instances()] == [second.instance_id]
    states = {i.instance_id: i.state for i in d.list_instances(include_unusable=True)}
    assert states[first.instance_id] == "stopped" and states[second.instance_id] in ("pending", "running")
    assert len(states) == 2


def test_terminate_touches_only_our_instances(driver, ownership, boto_client, network):
    ec2 = boto_client()
    d = driver()
    first, second = d.launch(2, "req-term")
    foreign = launch_foreign(ec2, network, {TAG_POOL: "someone-else", TAG_DAEMON: "daemon-a"})

    done = d.terminate([first.instance_id, foreign, "i-0123456789abcdef0", first.instance_id])

    assert done == [first.instance_id]
    assert [i.instance_id for i in d.list_instances()] == [second.instance_id]
    state = ec2.describe_instances(InstanceIds=[foreign])["Reservations"][0]["Instances"][0]["State"]["Name"]
    assert state == "running"
    assert d.terminate([first.instance_id]) == []  # already terminated: nothing to do, no error
    assert d.terminate([]) == []


def test_retry_after_a_lost_reply_finds_the_launched_instances(driver, ownership, boto_client, fake_time):
    lost = ReadTimeoutError(endpoint_url="http://127.0.0.1")
    client = Flaky(boto_client(), after={"run_instances": [lost]})

    launched = driver(client).launch(3, "req-lost")

    assert client.calls["run_instances"] == 1  # the retry looked the request up instead of launching again
    assert len(fake_time.sleeps) == 1
    on_cloud = raw_instances(boto_client(), **{TAG_REQUEST: "req-lost", TAG_POOL: ownership.pool})
    assert len(on_cloud) == 3
    assert {i.instance_id for i in launched} == {i["InstanceId"] for i in on_cloud}


def test_restarted_daemon_sees_its_instances_and_does_not_relaunch_a_request(driver, ownership, boto_client):
    first = driver().launch(2, "req-restart")

    restarted = driver(boto_client(fresh=True))  # a new process: new driver, new client, no local state
    assert {i.instance_id for i in restarted.list_instances()} == {i.instance_id for i in first}
    again = restarted.launch(2, "req-restart")
    assert [i.instance_id for i in again] == sorted(i.instance_id for i in first)
    assert len(raw_instances(boto_client(), **{TAG_REQUEST: "req-restart", TAG_POOL: ownership.pool})) == 2
    assert restarted.find_request("req-restart") == again

    # A daemon whose state file was lost has a new daemon id: the pool's tag still finds every instance.
    lost_state = driver(owner=Ownership(ownership.pool, "daemon-b"))
    assert {i.instance_id for i in lost_state.list_instances()} == {i.instance_id for i in first}
    assert driver(owner=Ownership("another-pool", "daemon-a")).list_instances() == []


def test_a_lease_is_written_on_the_instances_and_read_back_by_the_next_listing(driver, ownership, boto_client):
    d = driver(owner=Ownership(ownership.pool, "daemon-a", "host-a-0123"))
    first, second = d.launch(2, "req-lease")
    d.renew_lease([first.instance_id, second.instance_id], 1_700_000_000.0)

    fresh = driver(boto_client(fresh=True), owner=Ownership(ownership.pool, "daemon-z"))
    fresh.list_instances()
    assert fresh.leases == {
        first.instance_id: Lease("host-a-0123", 1_700_000_000.0),
        second.instance_id: Lease("host-a-0123", 1_700_000_000.0),
    }
    raw = raw_instances(boto_client(), **{TAG_LEASE: "host-a-0123@1700000000"})
    assert {i["InstanceId"] for i in raw} == {first.instance_id, second.instance_id}


def test_a_restart_without_state_draws_new_client_tokens(driver, ownership, boto_client):
    sent = []
    client = boto_client()
    client.meta.events.register("provide-client-params.ec2.RunInstances", lambda params, **_: sent.append(params))
    before = driver(client).launch(1)
    after = driver(client, owner=Ownership(ownership.pool, "daemon-new")).launch(1)  # the state file was lost

    tokens = [p["ClientToken"] for p in sent]
    assert len(tokens) == 2 and tokens[0] != tokens[1]
    assert before[0].request_id != after[0].request_id
    assert len(driver().list_instances()) == 2


def test_throttled_calls_back_off_and_then_succeed(driver, boto_client, fake_time):
    client = Flaky(boto_client(), before={"describe_instances": [throttle(), throttle()]})
    d = driver(client, base_delay_s=1.0, max_delay_s=8.0)

    assert d.list_instances() == []
    assert client.calls["describe_instances"] == 3
    assert len(fake_time.sleeps) == 2
    assert 0.5 <= fake_time.sleeps[0] <= 1.0 and 1.0 <= fake_time.sleeps[1] <= 2.0  # doubling, with jitter


def test_throttled_launch_looks_the_request_up_before_each_retry(driver, ownership, boto_client, fake_time):
    throttled = client_error("RequestLimitExceeded", status=503)
    client = Flaky(boto_client(), before={"run_instances": [throttled, throttled]})

    launched = driver(client).launch(2, "req-throttled")

    assert len(launched) == 2 and client.calls["run_instances"] == 3
    assert client.calls["describe_instances"] == 3
    assert len(fake_time.sleeps) == 2
    assert len(raw_instances(boto_client(), **{TAG_REQUEST: "req-throttled", TAG_POOL: ownership.pool})) == 2


def test_persistent_throttling_gives_a_throttled_cloud_error(driver, boto_client, fake_time):
    client = Flaky(boto_client(), before={"describe_instances": [throttle() for _ in range(10)]})

    with pytest.raises(CloudThrottledError) as caught:
        driver(client, max_attempts=4).list_instances()

    err = caught.value
    assert err.kind == "throttled" and err.code == "RequestLimitExceeded"
    assert "\n" not in str(err) and "gave up after 4 attempts" in str(err)
    assert client.calls["describe_instances"] == 4 and len(fake_time.sleeps) == 3


def test_retries_stop_at_the_time_budget(driver, boto_client, fake_time):
    client = Flaky(boto_client(), before={"describe_instances": [throttle() for _ in range(10)]})

    with pytest.raises(CloudThrottledError):
        driver(client, max_attempts=10, base_delay_s=2.0, max_delay_s=8.0, max_total_s=7.0).list_instances()

    assert sum(fake_time.sleeps) <= 7.0
    assert client.calls["describe_instances"] < 10


def test_connection_errors_are_transient(driver, boto_client, fake_time):
    down = [EndpointConnectionError(endpoint_url="http://127.0.0.1:1") for _ in range(3)]
    client = Flaky(boto_client(), before={"describe_instances": down})

    with pytest.raises(CloudTransientError) as caught:
        driver(client, max_attempts=3).list_instances()
    assert caught.value.kind == "transient" and len(fake_time.sleeps) == 2


@pytest.mark.parametrize(
    ("code", "status", "error_class", "kind"),
    [
        ("AuthFailure", 401, CloudAuthError, "auth"),
        ("UnauthorizedOperation", 403, CloudAuthError, "auth"),
        ("InstanceLimitExceeded", 400, CloudQuotaError, "quota"),
        ("VcpuLimitExceeded", 400, CloudQuotaError, "quota"),
        ("InsufficientInstanceCapacity", 500, CloudCapacityError, "capacity"),
        ("InvalidAMIID.NotFound", 400, CloudConfigError, "invalid_config"),
    ],
)
def test_fatal_errors_are_reported_at_once_and_launch_nothing(
    driver, ownership, boto_client, fake_time, code, status, error_class, kind
):
    client = Flaky(boto_client(), before={"run_instances": [client_error(code, f"{code} happened", status)]})

    with pytest.raises(error_class) as caught:
        driver(client).launch(2, "req-fatal")

    err = caught.value
    assert isinstance(err, CloudError) and err.kind == kind and err.code == code and not err.retryable
    assert str(err).startswith(f"ec2 launch: {kind} ({code}): ") and "\n" not in str(err)
    assert fake_time.sleeps == []
    assert raw_instances(boto_client(), **{TAG_REQUEST: "req-fatal", TAG_POOL: ownership.pool}) == []


def test_error_messages_hold_no_secret(driver, boto_client):
    message = (
        "You are not authorized to perform this operation. User AKIAIOSFODNN7EXAMPLE.\n"
        "Encoded authorization failure message: QmFzZTY0IGJsb2I= token=eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJ4In0.c2ln"
    )
    client = Flaky(boto_client(), before={"run_instances": [client_error("UnauthorizedOperation", message, 403)]})

    with pytest.raises(CloudAuthError) as caught:
        driver(client).launch(1, "req-secret")

    text = str(caught.value)
    for secret in ("AKIAIOSFODNN7EXAMPLE", "QmFzZTY0IGJsb2I=", "eyJhbGciOiJIUzI1NiJ9"):
        assert secret not in text
    assert "not authorized" in text and "\n" not in text


def test_unreachable_endpoint_is_a_transient_error(aws_region, ownership, user_data, retrier, monkeypatch):
    # Dummy credentials from the environment; nothing listens on the port.
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_CONFIG_FILE", "/nonexistent")
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent")
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    config = Ec2Config(
        region=aws_region, image_id="ami-12345678", instance_type="t3.micro", endpoint_url=f"http://127.0.0.1:{port}"
    )
    d = Ec2Driver(config, ownership, user_data, make_client(config), retrier(max_attempts=2))

    with pytest.raises(CloudTransientError):
        d.list_instances()


def test_launch_checks_its_arguments_before_calling_the_cloud(driver, boto_client):
    client = Flaky(boto_client())
    d = driver(client)

    assert d.launch(0) == []
    with pytest.raises(ConfigError):
        d.launch(1, "bad id; rm -rf /")
    with pytest.raises(CloudConfigError):
        d.launch(1, "req-big", user_data="x" * 20000)
    assert client.calls["run_instances"] == 0


def test_launch_without_request_id_makes_one(driver):
    launched = driver().launch(1)
    assert len(launched) == 1 and launched[0].request_id


@pytest.mark.parametrize(
    ("code", "status", "kind"),
    [
        ("Throttling", 400, "throttled"),
        ("InternalError", 500, "transient"),
        ("SomethingNew", 503, "transient"),
        ("InvalidInstanceID.NotFound", 400, "not_found"),
        ("InvalidSubnetID.NotFound", 400, "invalid_config"),
        ("SomethingNew", 400, "unknown"),
    ],
)
def test_error_code_table(code, status, kind):
    assert kind_of_code(code, status) == kind
