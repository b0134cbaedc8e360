"""The submit-host runtime calls its condor control one way, whether control is on or off."""

from __future__ import annotations

from tests.runtime.fakes import NoCloud
from wire_daemon.core.config import SteeringConfig
from wire_daemon.core.journal import Journal, NoticeBox
from wire_daemon.execute.condor_control import HTCondorControl
from wire_daemon.execute.guarded_cloud import SafetyConfig
from wire_daemon.persist.store import StateStore
from wire_daemon.runtime import runtimes
from wire_daemon.runtime.settings import CloudSettings, CondorSettings, Settings, SiteSettings

EPOCH = 1_700_000_000.0


class EmptySchedd:
    def query(self, constraint=None, projection=None):
        return []


class OneWorker:
    """A collector that knows one of our workers, behind an address the cloud does not report."""

    def query(self, ad_type=None, constraint=None, projection=None):
        return [{"WireInstanceId": "i-7", "WirePool": "wire-pool", "MyAddress": "<192.168.5.9:9618?addrs=...>"}]


def _runtime(tmp_path, control: str) -> runtimes.SubmitHostRuntime:
    settings = Settings(
        site=SiteSettings(kind="condor", submit_root=str(tmp_path / "submit")),
        cloud=CloudSettings(kind="ec2"),
        condor=CondorSettings(control=control, settle_s=0.0),
        steering=SteeringConfig(min_instances=0),
        safety=SafetyConfig(),
    )
    store = StateStore(tmp_path / "state.sqlite")
    journal = Journal()
    journal.subscribe(NoticeBox())
    return runtimes.SubmitHostRuntime(settings, store, journal, driver=NoCloud(), clock=lambda: EPOCH)


def test_with_control_on_the_pool_is_asked_for_joins_claims_and_startd_addresses(tmp_path, monkeypatch):
    real = HTCondorControl(EmptySchedd(), OneWorker(), lambda task: None, "wire-pool")
    monkeypatch.setattr(runtimes, "build_condor_control", lambda settings, job_id_of: real)
    runtime = _runtime(tmp_path, "htcondor")
    assert runtime.condor is real
    assert runtime.cloud.joined == real.has_joined and runtime.cloud.holds_claims == real.holds_claims
    assert runtime.loop.joined == real.has_joined
    runtime.refresh()
    assert runtime.hosts.resolve("192.168.5.9") == "i-7"  # from the startd's own ad
    runtime.flush_notes()  # the real control has nothing to add to the journal
    assert runtime._job_id_of("montage-0/mProject_ID01") is None  # no such workflow followed


def test_with_control_off_the_same_calls_change_nothing(tmp_path):
    runtime = _runtime(tmp_path, "off")
    runtime.refresh()
    assert runtime.hosts.resolve("192.168.5.9") is None
    assert runtime.loop.joined is not None and runtime.loop.joined("i-7")  # running counts as joined
    assert runtime._job_id_of("montage-0/mProject_ID01") is None
