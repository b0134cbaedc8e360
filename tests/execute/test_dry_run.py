"""Dry-run as a cloud: phantoms instead of calls, over a provider that is never called."""

from __future__ import annotations

from tests.execute.test_guarded_cloud import FakeDriver
from wire_daemon.core.instances import CloudState
from wire_daemon.core.journal import Journal, NoticeBox
from wire_daemon.execute.dry_run import DryRunCloud, unwrap


def _phantoms(clock: dict[str, float]) -> tuple[DryRunCloud, FakeDriver, NoticeBox]:
    journal, box = Journal(), NoticeBox()
    journal.subscribe(box)
    provider = FakeDriver(lambda: clock["t"])
    return DryRunCloud(provider, lambda: clock["t"], journal), provider, box


def test_phantoms_launch_list_and_end_once_without_a_call():
    clock = {"t": 5.0}
    cloud, provider, box = _phantoms(clock)
    made = cloud.launch(2, "req", instance_type="c.large")
    assert [(i.instance_id, i.launch_time, i.state, i.instance_type) for i in made] == [
        ("dry-run-0001", 5.0, CloudState.RUNNING, "c.large"),
        ("dry-run-0002", 5.0, CloudState.RUNNING, "c.large"),
    ]
    assert cloud.slots_per_instance == provider.slots_per_instance
    assert cloud.terminate(["dry-run-0001", "i-real"]) == ["dry-run-0001"]
    assert cloud.terminate(["dry-run-0001"]) == []  # a phantom ends once: its paid span does not grow
    assert [i.instance_id for i in cloud.list_instances(include_unusable=True)] == ["dry-run-0002"]
    assert cloud.find_request("req") == []
    assert provider.calls == []
    assert [n.line for n in box.take()] == [
        "dry-run: would launch 2 instance(s) of type c.large",
        "dry-run: would terminate dry-run-0001, i-real",
        "dry-run: would terminate dry-run-0001",
    ]


def test_unwrap_gives_the_provider_back():
    cloud, provider, _ = _phantoms({"t": 0.0})
    assert unwrap(cloud) is provider and unwrap(provider) is provider
