"""OpenStack driver against recorded-shape Keystone v3 and Nova answers served by requests-mock.

Like openstacksdk's own unit tests, nothing leaves the process: requests-mock
answers the SDK's HTTP calls. The answers are built from the JSON documents in
data/ (a Keystone token with a compute endpoint in its catalog, Nova's version
document, a flavor list and a server), kept in a small in-memory Nova so that a
server created by one call shows up in the next listing.
"""

from __future__ import annotations

import base64
import copy
import json
import re
import uuid
from pathlib import Path

import pytest
import requests
import requests_mock

from wire_daemon.core.errors import (
    CloudAuthError,
    CloudCapacityError,
    CloudConfigError,
    CloudQuotaError,
    CloudThrottledError,
    CloudTransientError,
)
from wire_daemon.core.pricing import Market
from wire_daemon.execute.providers.base import (
    TAG_DAEMON,
    TAG_INDEX,
    TAG_LEASE,
    TAG_POOL,
    TAG_REQUEST,
    TAG_SLOTS,
    Lease,
    Ownership,
)
from wire_daemon.execute.providers.openstack import OpenStackConfig, OpenStackDriver, kind_of_status
from wire_daemon.execute.userdata import WorkerConfig, render_user_data

# openstacksdk announces its own API changes; they are not ours to act on here.
pytestmark = pytest.mark.filterwarnings("ignore::PendingDeprecationWarning")

DATA = Path(__file__).parent / "data"
IDENTITY = "https://identity.example.test/v3"
COMPUTE = "https://compute.example.test/v2.1"
SERVER_URL = re.compile(re.escape(COMPUTE) + r"/servers/(?P<id>[0-9a-f-]{36})$")
METADATA_URL = re.compile(re.escape(COMPUTE) + r"/servers/(?P<id>[0-9a-f-]{36})/metadata$")
FLAVOR_ID = "7d1a9c7e-0000-4000-8000-00000000f142"
IMAGE_ID = "5c4f1d2e-0000-4000-8000-0000000000a1"
NETWORK_ID = "a7e1b0c2-0000-4000-8000-0000000000b2"
PASSWORD = "not-a-real-password"


def load(name: str) -> dict:
    return json.loads((DATA / name).read_text())


def nova_error(status: int, message: str) -> tuple[int, dict]:
    key = {
        400: "badRequest",
        403: "forbidden",
        404: "itemNotFound",
        409: "conflictingRequest",
        413: "overLimit",
        429: "overLimit",
    }
    return status, {key.get(status, "computeFault"): {"code": status, "message": message}}


class FakeNova:
    """Keystone and Nova answers over requests-mock, with a little state and injectable failures."""

    def __init__(self, mocker: requests_mock.Mocker) -> None:
        self.servers: dict[str, dict] = {}
        self.create_bodies: list[dict] = []
        self.deleted: list[str] = []
        # (method, "servers" | "server") -> answers to give before serving normally:
        # (status, body) pairs, or exceptions to raise instead of answering.
        self.before: dict[tuple[str, str], list] = {}
        self.posts = 0  # server creations asked for
        self.create_answers: dict[int, tuple[int, dict]] = {}  # POST number -> error answer instead
        self.lost_create_replies: list[int] = []  # POST numbers whose server is created but whose reply is lost
        self.token_status = 201
        self._template = load("nova_server.json")["server"]
        mocker.post(f"{IDENTITY}/auth/tokens", json=self._token)
        mocker.get(COMPUTE, json=load("nova_version.json"))
        mocker.get(
            f"{COMPUTE}/flavors/m1.large",
            status_code=404,
            json=nova_error(404, "Flavor m1.large could not be found.")[1],
        )
        mocker.get(f"{COMPUTE}/flavors/m9.missing", status_code=404, json=nova_error(404, "Flavor not found.")[1])
        mocker.get(f"{COMPUTE}/flavors/m1.xxlarge", status_code=404, json=nova_error(404, "Flavor not found.")[1])
        mocker.get(f"{COMPUTE}/flavors/detail", json=load("nova_flavors.json"))
        mocker.get(f"{COMPUTE}/servers/detail", json=self._list)
        mocker.post(f"{COMPUTE}/servers", json=self._create)
        mocker.delete(SERVER_URL, json=self._delete)
        mocker.post(METADATA_URL, json=self._set_metadata)

    # -- state helpers used by the tests ------------------------------------

    def add(self, name: str, metadata: dict, status: str = "ACTIVE", task_state: str | None = None) -> str:
        server = copy.deepcopy(self._template)
        server.update(id=str(uuid.uuid4()), name=name, metadata=dict(metadata), status=status)
        server["OS-EXT-STS:task_state"] = task_state
        self.servers[server["id"]] = server
        return server["id"]

    def boot_all(self) -> None:
        for index, server in enumerate(self.servers.values()):
            if server["status"] == "BUILD":
                server["status"] = "ACTIVE"
                server["addresses"] = {
                    "wire-net": [{"version": 4, "addr": f"10.30.1.{index + 10}", "OS-EXT-IPS:type": "fixed"}]
                }

    def fail(self, method: str, what: str, *answers) -> None:
        self.before.setdefault((method, what), []).extend(answers)

    # -- the answers ----------------------------------------------------------

    def _injected(self, method: str, what: str, context):
        queue = self.before.get((method, what))
        if not queue:
            return None
        answer = queue.pop(0)
        if isinstance(answer, Exception):
            raise answer
        context.status_code, body = answer
        return body

    def _token(self, request, context):
        auth = request.json()["auth"]["identity"]
        assert auth["password"]["user"]["password"] == PASSWORD
        if self.token_status != 201:
            context.status_code = self.token_status
            return {
                "error": {
                    "code": self.token_status,
                    "title": "Unauthorized",
                    "message": "The request you have made requires authentication.",
                }
            }
        context.status_code = 201
        context.headers["X-Subject-Token"] = "gAAAAAB-fake-keystone-token"
        return load("keystone_v3_token.json")

    def _list(self, request, context):
        injected = self._injected("GET", "servers", context)
        if injected is not None:
            return injected
        return {"servers": [copy.deepcopy(s) for s in self.servers.values()]}

    def _create(self, request, context):
        injected = self._injected("POST", "servers", context)
        if injected is not None:
            return injected
        self.posts += 1
        if self.posts - 1 in self.create_answers:
            context.status_code, answer = self.create_answers[self.posts - 1]
            return answer
        body = request.json()["server"]
        self.create_bodies.append(body)
        server_id = self.add(body["name"], body.get("metadata", {}), status="BUILD")
        server = self.servers[server_id]
        server.update(addresses={}, key_name=body.get("key_name"), created="2024-05-01T10:00:00Z")
        server["OS-EXT-STS:task_state"] = "scheduling"
        if self.posts - 1 in self.lost_create_replies:
            raise requests.exceptions.ReadTimeout("reply lost")
        context.status_code = 202
        return {
            "server": {
                "id": server_id,
                "links": [],
                "OS-DCF:diskConfig": "MANUAL",
                "security_groups": [{"name": "wire-workers"}],
                "adminPass": "x",
            }
        }

    def _set_metadata(self, request, context):
        # Nova's "create or update metadata items": the keys given are set, the others kept; all are returned.
        server_id = METADATA_URL.match(request.url).group("id")
        if server_id not in self.servers:
            context.status_code = 404
            return nova_error(404, f"Instance {server_id} could not be found.")[1]
        metadata = self.servers[server_id]["metadata"]
        metadata.update(request.json()["metadata"])
        context.status_code = 200
        return {"metadata": dict(metadata)}

    def _delete(self, request, context):
        injected = self._injected("DELETE", "server", context)
        if injected is not None:
            return injected
        server_id = SERVER_URL.match(request.url).group("id")
        if server_id not in self.servers:
            context.status_code = 404
            return nova_error(404, f"Instance {server_id} could not be found.")[1]
        self.deleted.append(server_id)
        del self.servers[server_id]
        context.status_code = 204
        return None


@pytest.fixture
def nova():
    with requests_mock.Mocker() as mocker:
        yield FakeNova(mocker)


def connection():
    import openstack

    return openstack.connection.Connection(
        auth_type="v3password",
        auth={
            "auth_url": IDENTITY,
            "username": "wire-daemon",
            "password": PASSWORD,
            "project_name": "wire-workers",
            "user_domain_name": "Default",
            "project_domain_name": "Default",
        },
        region_name="RegionOne",
    )


@pytest.fixture
def os_config() -> OpenStackConfig:
    return OpenStackConfig(
        flavor="m1.large",
        image_id=IMAGE_ID,
        network_id=NETWORK_ID,
        key_name="wire-ops",
        security_groups=("wire-workers",),
        config_drive=True,
    )


@pytest.fixture
def user_data(ownership):
    worker = WorkerConfig(
        cloud="openstack",
        pool=ownership.pool,
        condor_host="cm.example.org",
        token_source="https://key-manager.example.test/v1/secrets/6a3b0c1d-0000-4000-8000-0000000000c3",
    )
    return render_user_data(worker)


@pytest.fixture
def driver(os_config, ownership, user_data, retrier):
    def make(
        owner: Ownership | None = None, conn=None, config: OpenStackConfig | None = None, **policy
    ) -> OpenStackDriver:
        return OpenStackDriver(
            config or os_config,
            owner or ownership,
            user_data,
            conn or connection(),
            retrier(**policy),
            clock=lambda: 1.7e9,
        )

    return make


def ours(ownership: Ownership, request_id: str, index: int, daemon: str = "daemon-a") -> dict:
    return {
        TAG_POOL: ownership.pool,
        TAG_DAEMON: daemon,
        TAG_REQUEST: request_id,
        TAG_SLOTS: "4",
        TAG_INDEX: str(index),
    }


def test_launch_creates_named_servers_with_metadata_and_user_data(nova, driver, ownership, user_data):
    launched = driver().launch(2, "req-1")

    assert [i.state for i in launched] == ["pending", "pending"]
    assert all(i.request_id == "req-1" and i.slots == 4 for i in launched)
    assert [b["name"] for b in nova.create_bodies] == [f"{ownership.pool}-req-1-0", f"{ownership.pool}-req-1-1"]
    for index, body in enumerate(nova.create_bodies):
        assert body["metadata"] == ours(ownership, "req-1", index)
        assert base64.b64decode(body["user_data"]).decode() == user_data
        assert body["flavorRef"] == FLAVOR_ID and body["imageRef"] == IMAGE_ID
        assert body["networks"] == [{"uuid": NETWORK_ID}]
        assert body["key_name"] == "wire-ops" and body["security_groups"] == [{"name": "wire-workers"}]
        assert body["config_drive"] is True


def test_a_launch_of_another_flavor_uses_its_id_and_slots(nova, driver, ownership):
    d = driver()
    d.type_slots = {"m1.xxlarge": 16}
    launched = d.launch(1, "req-big", instance_type="m1.xxlarge")
    d.launch(1, "req-small")

    assert [i.instance_type for i in launched] == ["m1.xxlarge"] and launched[0].slots == 16
    big, small = nova.create_bodies
    assert big["flavorRef"] == "7d1a9c7e-0000-4000-8000-00000000f162" and big["metadata"][TAG_SLOTS] == "16"
    assert small["flavorRef"] == FLAVOR_ID and small["metadata"][TAG_SLOTS] == "4"  # the configured flavor


def test_listing_reports_the_clouds_view_of_each_server(nova, driver):
    d = driver()
    launched = d.launch(2, "req-2")
    nova.boot_all()

    listed = d.list_instances()

    assert {i.instance_id for i in listed} == {i.instance_id for i in launched}
    for inst in listed:
        assert inst.state == "running" and inst.address.startswith("10.30.1.")
        assert inst.instance_type == "m1.large" and inst.slots == 4 and inst.request_id == "req-2"
        assert inst.launch_time == 1714557600.0  # 2024-05-01T10:00:00Z, Nova's "created"


def test_private_address_is_the_fixed_ipv4(nova, driver, ownership):
    nova.add("x", ours(ownership, "req-addr", 0))
    (inst,) = driver().list_instances()
    assert inst.address == "10.30.0.17"  # not the IPv6 one, not the floating one


def test_lists_only_our_live_servers(nova, driver, ownership):
    mine = nova.add(f"{ownership.pool}-r-0", ours(ownership, "r", 0))
    broken = nova.add(f"{ownership.pool}-r-1", ours(ownership, "r", 1), status="ERROR")
    nova.add(f"{ownership.pool}-r-2", ours(ownership, "r", 2), task_state="deleting")
    nova.add("someone-elses-vm", {})
    # Launched by a daemon whose state file was lost (another daemon id): still this pool's.
    earlier = nova.add(f"{ownership.pool}-q-0", ours(ownership, "q", 0, daemon="daemon-b"))
    nova.add("other-pool-q-0", {**ours(ownership, "q", 0), TAG_POOL: "other-pool"})
    d = driver()

    assert {i.instance_id for i in d.list_instances()} == {mine, earlier}
    states = {i.instance_id: i.state for i in d.list_instances(include_unusable=True)}
    assert states == {mine: "running", earlier: "running", broken: "failed"}


def test_a_lease_is_set_as_metadata_and_read_back_by_the_next_listing(nova, driver, ownership):
    d = driver(owner=Ownership(ownership.pool, "daemon-a", "host-a-0123"))
    first, second = d.launch(2, "req-lease")
    d.renew_lease([first.instance_id, second.instance_id], 1_700_000_000.0)

    assert nova.servers[first.instance_id]["metadata"][TAG_LEASE] == "host-a-0123@1700000000"
    assert nova.servers[first.instance_id]["metadata"][TAG_POOL] == ownership.pool  # the other keys are kept
    fresh = driver(owner=Ownership(ownership.pool, "daemon-z"))
    fresh.list_instances()
    assert fresh.leases == dict.fromkeys([first.instance_id, second.instance_id], Lease("host-a-0123", 1.7e9))


def test_terminate_deletes_only_our_servers(nova, driver, ownership):
    d = driver()
    first, second = d.launch(2, "req-term")
    foreign = nova.add("someone-elses-vm", {})

    assert d.terminate([first.instance_id, foreign]) == [first.instance_id]
    assert nova.deleted == [first.instance_id]
    assert foreign in nova.servers
    assert [i.instance_id for i in d.list_instances()] == [second.instance_id]


def test_retry_after_a_lost_create_reply_creates_only_what_is_missing(nova, driver, ownership, fake_time):
    nova.lost_create_replies = [1]  # the second server is created, but its reply never arrives

    launched = driver().launch(3, "req-lost")

    assert len(nova.create_bodies) == 3  # not 4
    assert sorted(b["name"] for b in nova.create_bodies) == [f"{ownership.pool}-req-lost-{n}" for n in range(3)]
    assert len(nova.servers) == 3 and {i.instance_id for i in launched} == set(nova.servers)
    assert len(fake_time.sleeps) == 1


def test_restarted_daemon_completes_an_interrupted_request(nova, driver, ownership):
    # The daemon died after creating the first server of a 3-server request.
    nova.add(f"{ownership.pool}-req-crash-0", ours(ownership, "req-crash", 0), status="BUILD")

    launched = driver().launch(3, "req-crash")

    assert [b["name"] for b in nova.create_bodies] == [f"{ownership.pool}-req-crash-1", f"{ownership.pool}-req-crash-2"]
    assert len(launched) == 3
    assert driver().launch(3, "req-crash") == driver().find_request("req-crash")
    assert len(nova.create_bodies) == 2


def test_name_is_a_second_guard_when_metadata_is_lost(nova, driver, ownership):
    nova.add(f"{ownership.pool}-req-name-0", {})  # metadata stripped by someone

    driver().launch(1, "req-name")

    assert nova.create_bodies == []


def test_restart_with_a_clouds_yaml_connection(nova, os_config, ownership, user_data, retrier, tmp_path, monkeypatch):
    clouds = tmp_path / "clouds.yaml"
    clouds.write_text(
        "clouds:\n  wire-test:\n    auth_type: v3password\n    auth:\n"
        f"      auth_url: {IDENTITY}\n      username: wire-daemon\n      password: {PASSWORD}\n"
        "      project_name: wire-workers\n      user_domain_name: Default\n      project_domain_name: Default\n"
        "    region_name: RegionOne\n"
    )
    for name in ("OS_CLOUD", "OS_AUTH_URL", "OS_USERNAME", "OS_PASSWORD", "OS_PROJECT_NAME", "OS_CLIENT_SECURE_FILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("OS_CLIENT_CONFIG_FILE", str(clouds))
    config = OpenStackConfig(**{**os_config.__dict__, "cloud": "wire-test", "region_name": "RegionOne"})
    first = OpenStackDriver(config, ownership, user_data, retrier=retrier()).launch(2, "req-r")

    restarted = OpenStackDriver(config, ownership, user_data, retrier=retrier())  # a new process
    assert {i.instance_id for i in restarted.list_instances()} == {i.instance_id for i in first}
    assert {i.instance_id for i in restarted.launch(2, "req-r")} == {i.instance_id for i in first}
    assert len(nova.create_bodies) == 2


def test_throttled_listing_backs_off_then_succeeds(nova, driver, fake_time):
    nova.fail(
        "GET",
        "servers",
        nova_error(429, "This request was rate-limited."),
        nova_error(429, "This request was rate-limited."),
    )

    assert driver().list_instances() == []
    assert len(fake_time.sleeps) == 2
    assert 0.5 <= fake_time.sleeps[0] <= 1.0 and 1.0 <= fake_time.sleeps[1] <= 2.0  # doubling, with jitter


def test_persistent_throttling_is_a_throttled_cloud_error(nova, driver, fake_time):
    nova.fail("GET", "servers", *[nova_error(429, "This request was rate-limited.")] * 10)

    with pytest.raises(CloudThrottledError) as caught:
        driver(max_attempts=3).list_instances()
    assert caught.value.code == "429" and "rate-limited" in str(caught.value) and "\n" not in str(caught.value)
    assert len(fake_time.sleeps) == 2


def test_server_errors_and_conflicts_are_retried(nova, driver, ownership, fake_time):
    d = driver()
    (inst,) = d.launch(1, "req-busy")
    nova.fail("DELETE", "server", nova_error(409, "Cannot 'delete' instance while it is in task_state scheduling"))
    nova.fail("GET", "servers", nova_error(500, "Unexpected API Error."))

    assert d.terminate([inst.instance_id]) == [inst.instance_id]
    assert nova.deleted == [inst.instance_id] and len(fake_time.sleeps) == 2


def test_quota_exceeded_stops_the_launch_and_reports_what_was_created(nova, driver, fake_time):
    nova.create_answers[1] = nova_error(
        403, "Quota exceeded for instances: Requested 1, but already used 10 of 10 instances"
    )

    with pytest.raises(CloudQuotaError) as caught:
        driver().launch(3, "req-quota")

    err = caught.value
    assert err.kind == "quota" and "Quota exceeded for instances" in str(err) and fake_time.sleeps == []
    assert [i.instance_id for i in err.partial] == list(nova.servers)  # the one created before the refusal
    assert len(nova.servers) == 1


@pytest.mark.parametrize(
    ("answer", "error_class"),
    [
        (nova_error(413, "Quota exceeded for cores"), CloudQuotaError),
        (nova_error(403, "Policy doesn't allow os_compute_api:servers:create to be performed."), CloudAuthError),
        (nova_error(400, "Invalid imageRef provided."), CloudConfigError),
        (nova_error(503, "No valid host was found. There are not enough hosts available."), CloudCapacityError),
    ],
)
def test_fatal_create_errors_are_reported_at_once(nova, driver, fake_time, answer, error_class):
    nova.fail("POST", "servers", answer)

    with pytest.raises(error_class) as caught:
        driver().launch(1, "req-fatal")
    assert not caught.value.retryable and fake_time.sleeps == [] and nova.servers == {}


def test_bad_credentials_are_an_auth_error_without_the_password(nova, driver, fake_time):
    nova.token_status = 401

    with pytest.raises(CloudAuthError) as caught:
        driver().list_instances()
    assert PASSWORD not in str(caught.value) and fake_time.sleeps == []


def test_unknown_flavor_is_a_config_error(nova, driver, os_config):
    config = OpenStackConfig(**{**os_config.__dict__, "flavor": "m9.missing"})

    with pytest.raises(CloudConfigError) as caught:
        driver(config=config).launch(1, "req-flavor")
    assert "m9.missing" in str(caught.value) and nova.create_bodies == []


def test_dropped_connections_are_transient(nova, driver, fake_time):
    nova.fail("GET", "servers", *[requests.exceptions.ConnectionError("connection refused")] * 3)

    with pytest.raises(CloudTransientError):
        driver(max_attempts=3).list_instances()
    assert len(fake_time.sleeps) == 2


@pytest.mark.parametrize(
    ("status", "message", "kind"),
    [
        (401, "", "auth"),
        (403, "Quota exceeded for ram", "quota"),
        (403, "Policy does not allow", "auth"),
        (413, "Quota exceeded", "quota"),
        (413, "Rate limit", "throttled"),
        (429, "", "throttled"),
        (404, "", "not_found"),
        (409, "", "transient"),
        (500, "", "transient"),
        (500, "No valid host was found", "capacity"),
        (400, "", "invalid_config"),
    ],
)
def test_status_table(status, message, kind):
    assert kind_of_status(status, message) == kind


def test_a_spot_launch_is_refused_in_one_line_before_any_call(driver):
    with pytest.raises(CloudConfigError, match="does not buy spot capacity"):
        driver().launch(1, "req-spot", market=Market.SPOT)
