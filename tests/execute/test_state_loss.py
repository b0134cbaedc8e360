"""The cloud is the record of what we own: a state file lost mid-run orphans nothing and breaks no cap.

A guard over each real driver (EC2 on moto's server, OpenStack on the
recorded-shape Nova of test_openstack.py) fills the pool to ``max_instances``;
the state file is then truncated to 0 bytes or deleted, and a new guard
starts on a fresh file, so with a new daemon id. It must adopt every live
instance of the pool, say so in one line, and launch nothing past the cap.
The cloud's own listing is audited after every step.

The pool's lease (``wire:lease``) keeps a second daemon off the pool: a fresh
lease of another holder refuses the start; a stale one is taken over.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.execute.test_guarded_cloud import make_guard, notes_of
from wire_daemon.execute.guarded_cloud import GuardedCloud, PoolInUseError, SafetyConfig
from wire_daemon.execute.providers.base import LEASE_RENEW_S, LEASE_TTL_S, TAG_LEASE, CloudDriver, Ownership
from wire_daemon.persist.store import StateStore

pytestmark = pytest.mark.filterwarnings("ignore::PendingDeprecationWarning", "ignore::DeprecationWarning")

MAX = 4
HOLDER = "submit-host-0a1b2c3d4e5f"


@dataclass
class Provider:
    """One cloud for the test: a driver per (daemon id, lease holder), and the cloud's own count of the pool."""

    pool: str
    make_driver: Callable[[str, str], CloudDriver]
    live: Callable[[], list[str]]  # the pool's live instances, as the cloud lists them
    lease_of: Callable[[str], str]  # an instance's lease tag, as the cloud holds it


@pytest.fixture
def ec2(moto_ec2_config, ownership, retrier, boto_client) -> Provider:
    from wire_daemon.execute.providers.ec2 import Ec2Driver, make_client

    config = moto_ec2_config

    def make(daemon_id: str, holder: str) -> CloudDriver:
        owner = Ownership(ownership.pool, daemon_id, holder)
        return Ec2Driver(config, owner, "#!/bin/sh\ntrue\n", make_client(config), retrier(max_attempts=3))

    def raw() -> list[dict]:
        reply = boto_client().describe_instances(Filters=[{"Name": "tag:wire:pool", "Values": [ownership.pool]}])
        return [i for r in reply["Reservations"] for i in r["Instances"]]

    def live() -> list[str]:
        return [i["InstanceId"] for i in raw() if i["State"]["Name"] in ("pending", "running")]

    def lease_of(instance_id: str) -> str:
        (found,) = [i for i in raw() if i["InstanceId"] == instance_id]
        return {t["Key"]: t["Value"] for t in found.get("Tags", [])}.get(TAG_LEASE, "")

    return Provider(ownership.pool, make, live, lease_of)


@pytest.fixture
def openstack(ownership, retrier) -> Iterator[Provider]:
    pytest.importorskip("openstack", reason="the [openstack] extra is not installed")
    import requests_mock

    from tests.execute.test_openstack import IMAGE_ID, NETWORK_ID, FakeNova, connection
    from wire_daemon.execute.providers.openstack import OpenStackConfig, OpenStackDriver

    config = OpenStackConfig(image_id=IMAGE_ID, flavor="m1.large", network_id=NETWORK_ID)
    with requests_mock.Mocker() as mocker:
        nova = FakeNova(mocker)

        def make(daemon_id: str, holder: str) -> CloudDriver:
            owner = Ownership(ownership.pool, daemon_id, holder)
            return OpenStackDriver(config, owner, "", connection(), retrier(max_attempts=3), clock=time.time)

        def live() -> list[str]:
            return [k for k, s in nova.servers.items() if s["metadata"].get("wire:pool") == ownership.pool]

        def lease_of(instance_id: str) -> str:
            return str(nova.servers[instance_id]["metadata"].get(TAG_LEASE, ""))

        yield Provider(ownership.pool, make, live, lease_of)


@pytest.fixture(params=[pytest.param("ec2", marks=pytest.mark.slow), "openstack"])
def provider(request) -> Provider:
    return request.getfixturevalue(request.param)


class Daemon:
    """What a daemon's start makes of a state file: a store, its daemon id, and a guard that reconciled."""

    def __init__(self, provider: Provider, path: Path, clock: Callable[[], float], holder: str = HOLDER) -> None:
        self.store = StateStore(path)
        self.driver = provider.make_driver(self.store.daemon_id(), holder)
        self.cloud: GuardedCloud = make_guard(
            self.driver, self.store, SafetyConfig(max_instances=MAX, max_launches_per_interval=MAX), clock
        )

    def start(self) -> Daemon:
        self.cloud.reconcile()
        return self

    def close(self) -> None:
        self.store.close()


def lose(path: Path, how: str) -> None:
    """The state file gone: truncated to 0 bytes, or deleted (with SQLite's side files)."""
    for side in (path.with_name(path.name + "-wal"), path.with_name(path.name + "-shm")):
        side.unlink(missing_ok=True)
    if how == "truncate":
        path.write_bytes(b"")
    else:
        path.unlink()


@pytest.mark.parametrize("how", ["truncate", "delete"])
def test_a_lost_state_file_orphans_nothing_and_the_cloud_never_exceeds_the_cap(provider, tmp_path, how, caplog):
    path, clock = tmp_path / "state.sqlite", time.time
    peak = 0

    def audit() -> list[str]:
        nonlocal peak
        live = provider.live()
        peak = max(peak, len(live))
        assert len(live) <= MAX, f"{len(live)} live against max_instances {MAX}"
        return live

    first = Daemon(provider, path, clock).start()
    audit()
    launched = first.cloud.launch(MAX)
    assert len(launched) == MAX
    first.cloud.list_instances()  # an iteration: the lease is written on the new instances
    owned = set(audit())
    assert owned == {i.instance_id for i in launched}
    old_id = first.store.daemon_id()
    first.close()

    lose(path, how)
    caplog.clear()
    with caplog.at_level(logging.INFO):
        second = Daemon(provider, path, clock).start()
    assert second.store.daemon_id() != old_id  # a new file: a new daemon id, and that must not matter
    audit()
    adopted = [r.getMessage() for r in caplog.records if "adopted" in r.getMessage()]
    assert len(adopted) == 1, adopted
    assert f"adopted {MAX} instance(s)" in adopted[0]
    assert all(i in adopted[0] for i in owned)
    assert {r.instance_id for r in second.store.instances()} == owned  # 0 orphaned

    for _ in range(3):  # iterations that want more than the cap
        assert second.cloud.launch(MAX) == []
        assert set(audit()) == owned
    assert any("limit max_instances" in n for n in notes_of(second.cloud))
    assert peak == MAX

    # Released one by one, the restarted daemon ends every instance: none runs on unmanaged.
    second.cloud.terminate(sorted(owned))
    assert audit() == []
    assert second.store.instances() == []
    second.close()


def test_a_restart_with_a_lost_file_keeps_its_own_lease_and_renews_it(provider, tmp_path):
    path = tmp_path / "state.sqlite"
    now = {"t": time.time()}
    first = Daemon(provider, path, lambda: now["t"]).start()
    launched = first.cloud.launch(2)
    first.cloud.list_instances()
    assert {provider.lease_of(i.instance_id) for i in launched} == {f"{HOLDER}@{int(now['t'])}"}
    first.close()
    lose(path, "truncate")

    second = Daemon(provider, path, lambda: now["t"]).start()  # same host, same state path: the same holder
    assert len(second.store.instances()) == 2
    now["t"] += LEASE_RENEW_S + 1
    second.cloud.list_instances()
    assert {provider.lease_of(i.instance_id) for i in launched} == {f"{HOLDER}@{int(now['t'])}"}
    second.close()


def test_another_daemons_fresh_lease_refuses_the_start_and_a_stale_one_is_taken_over(provider, tmp_path):
    now = {"t": time.time()}
    first = Daemon(provider, tmp_path / "a.sqlite", lambda: now["t"], holder="host-a-000000000001").start()
    launched = first.cloud.launch(2)
    first.cloud.list_instances()

    with pytest.raises(PoolInUseError, match=r"steered by another daemon: 2 live instance\(s\) carry the lease"):
        Daemon(provider, tmp_path / "b.sqlite", lambda: now["t"], holder="host-b-000000000002").start()
    assert len(provider.live()) == 2

    now["t"] += LEASE_TTL_S + 1  # the first daemon is gone: its lease goes stale
    second = Daemon(provider, tmp_path / "b.sqlite", lambda: now["t"], holder="host-b-000000000002").start()
    assert {r.instance_id for r in second.store.instances()} == {i.instance_id for i in launched}
    assert {provider.lease_of(i.instance_id) for i in launched} == {f"host-b-000000000002@{int(now['t'])}"}
    first.close()
    second.close()


def test_two_daemons_started_on_an_empty_pool_hold_their_launches(provider, tmp_path):
    now = {"t": time.time()}
    a = Daemon(provider, tmp_path / "a.sqlite", lambda: now["t"], holder="host-a-000000000001").start()
    b = Daemon(provider, tmp_path / "b.sqlite", lambda: now["t"], holder="host-b-000000000002").start()
    assert len(a.cloud.launch(1)) == 1
    a.cloud.list_instances()  # a's lease on its instance

    b.cloud.list_instances()
    assert b.cloud.launch(1) == []
    notes = notes_of(b.cloud)
    assert any("is steered by another daemon" in n and "launches nothing" in n for n in notes), notes
    assert any(n.startswith("no launch: pool") for n in notes), notes
    assert len(provider.live()) == 1
    (only,) = provider.live()
    assert provider.lease_of(only).startswith("host-a-000000000001@")  # b does not take a's instance over
    a.close()
    b.close()
