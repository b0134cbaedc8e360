"""An instance's life on a submit host: one writer (the lifecycle), planned ends kept across a restart,
and dry-run swapped in and out on reload."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from tests.service.test_submit_host import EPOCH, FakeDriver
from wire_daemon.core.config import SteeringConfig
from wire_daemon.core.instances import InstanceMoved, LifecycleState
from wire_daemon.core.journal import Journal
from wire_daemon.execute.dry_run import DryRunCloud
from wire_daemon.execute.guarded_cloud import SafetyConfig
from wire_daemon.persist.store import StateStore
from wire_daemon.runtime.runtimes import SubmitHostRuntime
from wire_daemon.runtime.settings import CloudSettings, CondorSettings, Settings, SiteSettings

UNIT = 3600.0


def _settings(root: Path, dry_run: bool = False, policy: str = "wire") -> Settings:
    root.mkdir(exist_ok=True)
    return Settings(
        site=SiteSettings(kind="condor", submit_root=str(root)),
        cloud=CloudSettings(kind="ec2"),
        condor=CondorSettings(control="off", settle_s=0.0),
        steering=SteeringConfig(min_instances=0, charging_unit_s=UNIT),
        safety=SafetyConfig(dry_run=dry_run),
        policy=policy,
    )


class Clock:
    def __init__(self, t: float) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


def _runtime(
    tmp_path: Path, driver: FakeDriver, clock: Clock, dry_run: bool = False, policy: str = "wire"
) -> SubmitHostRuntime:
    store = StateStore(tmp_path / "state.sqlite")
    settings = _settings(tmp_path / "submit", dry_run, policy)
    return SubmitHostRuntime(settings, store, Journal(), driver=driver, clock=clock)


def test_a_restart_between_the_release_and_its_time_terminates_at_that_time(tmp_path):
    driver, clock = FakeDriver(), Clock(EPOCH + UNIT - 100.0)
    (up,) = driver.launch(1)  # a previous life's instance, launched at EPOCH; no work: it goes when its unit ends
    first = _runtime(tmp_path, driver, clock)
    first.refresh()
    record = first.loop.iterate(clock.t)
    assert record.released == [up.instance_id]
    release_at = first.loop.pending_releases[up.instance_id]
    assert clock.t < release_at <= EPOCH + UNIT
    first.store.close()

    clock.t += 30.0  # the daemon is restarted before that time
    again = _runtime(tmp_path, driver, clock)
    assert again.loop.pending_releases == {up.instance_id: release_at}
    assert again.lifecycle.state_of(up.instance_id) == LifecycleState.DRAINING
    assert again.loop.next_release() == release_at
    again.loop.release_due(release_at - 1.0)
    assert up.instance_id in driver.live  # not earlier
    clock.t = release_at
    assert again.loop.release_due(release_at) == [up.instance_id]
    assert up.instance_id not in driver.live  # not never
    (ended,) = again.store.instances(live_only=False)
    assert (ended.state, ended.end_reason, ended.ended_at) == (LifecycleState.TERMINATED, "released", release_at)
    again.store.close()


def test_after_a_restart_the_default_policy_knows_what_it_released_and_does_not_release_it_again(tmp_path):
    driver, clock = FakeDriver(), Clock(EPOCH + UNIT - 100.0)
    (up,) = driver.launch(1)
    first = _runtime(tmp_path, driver, clock, policy="target-slowdown")
    first.refresh()
    assert first.loop.iterate(clock.t).released == [up.instance_id]
    release_at = first.loop.pending_releases[up.instance_id]
    first.store.close()

    clock.t += 30.0
    again = _runtime(tmp_path, driver, clock, policy="target-slowdown")
    again.refresh()
    record = again.loop.iterate(clock.t)
    assert record.released == []  # counted out of the pool already, not drained and timed a second time
    assert again.loop.pending_releases == {up.instance_id: release_at}
    again.store.close()


def test_the_guard_writes_an_instance_only_through_the_lifecycle(tmp_path):
    driver, clock = FakeDriver(), Clock(EPOCH)
    runtime = _runtime(tmp_path, driver, clock)
    seen: list[tuple[str, LifecycleState | None, LifecycleState, str]] = []

    class Moves:
        def notify(self, event: object) -> None:
            if isinstance(event, InstanceMoved):
                seen.append((event.instance_id, event.old, event.new, event.reason))

    runtime.journal.subscribe(Moves())
    (made,) = runtime.cloud.launch(1)
    runtime.loop.iterate(clock.t)  # joined (no join check with condor control off)
    runtime.loop.terminate([made.instance_id])
    i = made.instance_id
    assert seen == [
        (i, None, LifecycleState.BOOTING, ""),
        (i, LifecycleState.BOOTING, LifecycleState.JOINED, ""),
        (i, LifecycleState.JOINED, LifecycleState.TERMINATING, ""),
        (i, LifecycleState.TERMINATING, LifecycleState.TERMINATED, "released"),
    ]
    (record,) = runtime.store.instances(live_only=False)  # what the state file observed, move for move
    assert (record.state, record.end_reason) == (LifecycleState.TERMINATED, "released")
    runtime.store.close()


def test_dry_run_is_swapped_in_and_out_on_reload(tmp_path):
    driver, clock = FakeDriver(), Clock(EPOCH)
    runtime = _runtime(tmp_path, driver, clock)
    provider_guard = runtime.cloud
    (real,) = runtime.cloud.launch(1)
    runtime.loop.iterate(clock.t)
    settings = runtime.settings

    runtime.reconfigure(replace(settings, safety=SafetyConfig(dry_run=True)))
    assert isinstance(runtime.cloud.driver, DryRunCloud) and runtime.loop.cloud is runtime.cloud
    (phantom,) = runtime.cloud.launch(1)
    runtime.loop.iterate(clock.t)  # the dry run's lifecycle follows the phantom pool only
    assert phantom.instance_id.startswith("dry-run-") and driver.launches == 1
    assert runtime.lifecycle.state_of(phantom.instance_id) == LifecycleState.JOINED
    assert runtime.lifecycle.state_of(real.instance_id) is None
    # The state file keeps the real pool as it was, and no phantom.
    assert [(r.instance_id, r.state) for r in runtime.store.instances(live_only=False)] == [
        (real.instance_id, LifecycleState.JOINED)
    ]

    steering = replace(settings.steering, max_instances=3)
    runtime.reconfigure(replace(settings, steering=steering, safety=SafetyConfig(dry_run=False, max_instances=3)))
    assert runtime.cloud.driver is driver and runtime.loop.cloud is runtime.cloud
    assert runtime.cloud is not provider_guard and runtime.cloud.config.max_instances == 3
    assert runtime.lifecycle.state_of(real.instance_id) == LifecycleState.JOINED
    assert [i.instance_id for i in runtime.cloud.launch(1)] == ["i-2"] and driver.launches == 2
    runtime.store.close()


def test_a_dry_run_s_phantom_counts_as_joined_though_no_startd_of_it_ever_joins(tmp_path):
    """With HTCondor asked (condor control on), a phantom would stay booting for ever, and the policy, which
    plans with a booting instance as giving no slot yet (``loop/mape.py``), would not decide as on the pool."""
    driver, clock = FakeDriver(), Clock(EPOCH)
    runtime = _runtime(tmp_path, driver, clock)
    runtime.condor.has_joined = lambda instance_id: False  # type: ignore[method-assign]
    runtime.reconfigure(replace(runtime.settings, safety=SafetyConfig(dry_run=True)))
    (phantom,) = runtime.cloud.launch(1)
    runtime.loop.iterate(clock.t)
    assert runtime.lifecycle.state_of(phantom.instance_id) == LifecycleState.JOINED
    runtime.store.close()


def test_a_termination_held_back_by_a_running_job_happens_at_the_first_look_after_it(tmp_path):
    driver, clock = FakeDriver(), Clock(EPOCH)
    runtime = _runtime(tmp_path, driver, clock)
    (up,) = runtime.cloud.launch(1)
    busy = {"now": True}
    runtime.cloud.holds_claims = lambda i: busy["now"]  # a drained slot still runs its last job
    assert runtime.loop.terminate([up.instance_id]) == [] and up.instance_id in driver.live
    (record,) = runtime.store.instances()
    assert record.state == LifecycleState.TERMINATING  # the state file says what the lifecycle says
    runtime.cloud.list_instances()
    assert up.instance_id in driver.live
    busy["now"] = False  # the job ended
    runtime.cloud.list_instances()
    assert up.instance_id not in driver.live
    assert runtime.lifecycle.state_of(up.instance_id) == LifecycleState.TERMINATED
    runtime.store.close()
