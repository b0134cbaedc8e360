"""Condor control off is a null object: the runtime and the guard call it as the real one, and nothing changes."""

from __future__ import annotations

from wire_daemon.core.billing import Billing
from wire_daemon.core.instances import Instance, Lifecycle, LifecycleState
from wire_daemon.execute.condor_control import HTCondorControl, LoggedCondorControl
from wire_daemon.execute.guarded_cloud import GuardedCloud, SafetyConfig
from wire_daemon.persist.store import StateStore
from wire_daemon.ports.condor import SubmitHostCondor


class QueryingSchedd:
    def __init__(self, ads):
        self.ads = ads

    def query(self, constraint=None, projection=None):
        return self.ads


class NoCollector:
    def query(self, ad_type=None, constraint=None, projection=None):
        return []


def test_with_no_pool_to_ask_it_answers_as_if_there_were_no_check():
    off: SubmitHostCondor = LoggedCondorControl()
    assert off.has_joined("i-1") is True  # a running instance counts as joined
    assert off.holds_claims("i-1") is False
    assert off.worker_addresses() == {}
    assert off.queued_job_id("6d2b1c3e-0000-4000-8000-000000000001", "mProject_ID0000001") is None
    assert off.sync() == 0
    assert off.request_memory_mib("a") is None
    assert off.take_notes() == []  # asking questions leaves nothing to say


def test_what_it_would_do_is_noted_once():
    off = LoggedCondorControl()
    off.set_job_priority("a", 10)
    off.retire_instance("i-1")
    assert off.take_notes() == ["condor control off: would set JobPrio 10 on a", "condor control off: would drain i-1"]
    assert off.take_notes() == []


def test_the_real_control_has_nothing_left_to_say_and_asks_its_schedd_for_a_node_s_job():
    real: SubmitHostCondor = HTCondorControl(
        QueryingSchedd([{"ClusterId": 41, "ProcId": 0}, {"ClusterId": 57, "ProcId": 0}]),
        NoCollector(),
        lambda task: None,
        "pool-a",
    )
    assert real.take_notes() == []
    assert real.queued_job_id("u-1", "mProject_ID0000001") == "57.0"  # the DAGMan retry's job


class OneCloud:
    slots_per_instance = 4

    def __init__(self, instance: Instance) -> None:
        self.live = {instance.instance_id: instance}

    def list_instances(self, include_unusable: bool = False) -> list[Instance]:
        return list(self.live.values())

    def find_request(self, request_id: str) -> list[Instance]:
        return []

    def launch(self, count: int, request_id: str | None = None, user_data: str | None = None) -> list[Instance]:
        return []

    def terminate(self, instance_ids) -> list[str]:
        gone = [i for i in instance_ids if self.live.pop(i, None) is not None]
        return gone


def test_the_guard_and_the_lifecycle_act_with_it_as_with_no_condor_check(tmp_path):
    """An old running instance is joined, kept by reconcile, and terminated when released: nothing waits on claims."""
    now = 1_700_000_000.0
    old = Instance("i-1", now - 3600.0, 4, "running", "10.0.0.1")
    off = LoggedCondorControl()
    store = StateStore(tmp_path / "state.sqlite")
    cloud = OneCloud(old)
    guard = GuardedCloud(
        cloud, store, SafetyConfig(), Billing(3600.0), lambda: now, joined=off.has_joined, holds_claims=off.holds_claims
    )
    report = guard.reconcile()
    assert report.adopted == ["i-1"] and report.terminated == []  # never-joined would have terminated it
    lifecycle = Lifecycle()
    lifecycle.sync(guard.list_instances(), off.has_joined)
    assert lifecycle.state_of("i-1") is LifecycleState.JOINED
    assert guard.terminate(["i-1"]) == ["i-1"]  # no claim holds it back
    store.close()
