"""Billed per second, a pool idle after its workflow ended costs money until it is let go.

The daemon runs over the real submit-host runtime, a live-written Pegasus
submit dir and a fake cloud; DAGMan writes its exit while the daemon sleeps
between two decisions.
"""

from __future__ import annotations

from pathlib import Path

from tests.service.test_submit_host import EPOCH, FakeDriver, _live
from wire_daemon.core.config import SteeringConfig
from wire_daemon.emulated.traces import bundled_trace_path
from wire_daemon.execute.guarded_cloud import SafetyConfig
from wire_daemon.runtime import runtimes
from wire_daemon.runtime.settings import CloudSettings, CondorSettings, LogSettings, Settings, SiteSettings
from wire_daemon.service import daemon as daemon_module
from wire_daemon.service.daemon import Daemon

INTERVAL = 180.0


class Clock:
    def __init__(self, t: float) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


def test_the_pool_is_let_go_when_dagman_finishes_not_at_the_next_decision(tmp_path: Path, monkeypatch) -> None:
    live = _live(tmp_path / "submit", "run1", bundled_trace_path(), "montage")
    live.advance_to(20.0)
    clock, driver = Clock(EPOCH + 20.0), FakeDriver()
    settings = Settings(
        site=SiteSettings(kind="condor", submit_root=str(tmp_path / "submit")),
        cloud=CloudSettings(kind="ec2"),
        condor=CondorSettings(control="off", settle_s=0.0),
        steering=SteeringConfig(interval_s=INTERVAL, billing_model="second", min_instances=0),
        safety=SafetyConfig(),
        state_path=str(tmp_path / "state.sqlite"),
        log=LogSettings(decisions_path=str(tmp_path / "decisions.jsonl")),
    )
    ended_at: list[float] = []

    def sleep(seconds: float) -> None:
        clock.t += seconds
        if not ended_at:  # the workflow's last task ends during the first sleep
            live.run()
            ended_at.append(clock.t)

    terminated: dict[str, float] = {}
    terminate = driver.terminate

    def timed_terminate(instance_ids):
        terminated.update({i: clock.t for i in instance_ids})
        return terminate(instance_ids)

    monkeypatch.setattr(driver, "terminate", timed_terminate)

    def build(settings, store, journal, _sleep):
        return runtimes.SubmitHostRuntime(settings, store, journal, sleep, driver=driver, clock=clock)

    monkeypatch.setattr(daemon_module, "build_runtime", build)
    daemon = Daemon(settings, None, sleep=sleep)
    decided: list[float] = []
    iterate = daemon._iterate
    monkeypatch.setattr(daemon, "_iterate", lambda now: (decided.append(now), iterate(now)))
    sleeps, sleep_until = [0], daemon.runtime.sleep_until

    def counted_sleep_until(when: float) -> bool:
        sleeps[0] += 1
        assert sleeps[0] < 1000, "the daemon spins on a decision it does not make"
        return sleep_until(when)

    monkeypatch.setattr(daemon.runtime, "sleep_until", counted_sleep_until)
    assert daemon.run(max_iterations=2) == 0

    assert driver.launches > 0, "the first decision grew a pool for the queued tasks"
    assert decided[0] == EPOCH + 20.0
    assert decided[1] <= ended_at[0] + runtimes.END_GLANCE_S < EPOCH + 20.0 + INTERVAL
    assert set(terminated) == {f"i-{k}" for k in range(1, driver.launches + 1)}
    assert max(terminated.values()) < EPOCH + 20.0 + INTERVAL, "the idle pool waited for the next decision"
