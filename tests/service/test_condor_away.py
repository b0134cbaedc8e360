"""HTCondor going away is weather: the daemon says so once, holds the pool, asks again with back-off, comes back.

The daemon runs over the real submit-host runtime with a fake cloud and an
``HTCondorControl`` over fakes of the collector and the schedd that can be
switched off and on, as a ``condor_restart`` or a boot-order race does.
"""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from wire_daemon.core.config import SteeringConfig
from wire_daemon.core.errors import CondorUnreachable
from wire_daemon.core.instances import Instance, LifecycleState
from wire_daemon.core.pricing import Market
from wire_daemon.execute.condor_control import HTCondorControl
from wire_daemon.execute.guarded_cloud import SafetyConfig
from wire_daemon.execute.market_fallback import SpotFallback
from wire_daemon.runtime import runtimes
from wire_daemon.runtime.builders import build_condor_control
from wire_daemon.runtime.settings import CloudSettings, CondorSettings, LogSettings, Settings, SiteSettings
from wire_daemon.service import daemon as daemon_module
from wire_daemon.service import status as status_module
from wire_daemon.service.daemon import CONDOR_RETRY_FIRST_S, Daemon
from wire_daemon.service.status import read_status
from wire_daemon.service.status_text import render_status

EPOCH = 1_700_000_000.0
INTERVAL = 30.0


class Condor:
    """Whether the pool's daemons answer; the fakes below ask it."""

    def __init__(self, up: bool) -> None:
        self.up = up
        self.located = 0
        self.restarts = 0  # a restarted schedd listens at another address: older handles fail


class Collector:
    def __init__(self, condor: Condor) -> None:
        self.condor = condor

    def query(self, ad_type=None, constraint=None, projection=None):
        if not self.condor.up:
            raise RuntimeError("Failed to connect to collector\nsecond line")
        return [  # the two workers, idle; asked about another instance, nothing
            {"WireInstanceId": i, "WirePool": "wire-pool", "Name": f"slot1@{i}", "State": "Unclaimed"}
            for i in ("i-1", "i-2")
            if "WireInstanceId ==" not in (constraint or "") or f'"{i}"' in constraint
        ]


class Schedd:
    def __init__(self, condor: Condor, generation: int) -> None:
        self.condor = condor
        self.generation = generation

    def query(self, constraint=None, projection=None):
        if not self.condor.up or self.generation != self.condor.restarts:
            raise RuntimeError("Failed to connect to schedd")  # down, or restarted at another address
        return []

    def edit(self, *args, **kwargs):
        return self.query()

    def act(self, *args, **kwargs):
        return self.query()


def _control(condor: Condor) -> HTCondorControl:
    def locate() -> Schedd:
        if not condor.up:
            raise RuntimeError("Unable to locate local daemon")
        condor.located += 1
        return Schedd(condor, condor.restarts)

    return HTCondorControl(None, Collector(condor), lambda task: None, "wire-pool", locate_schedd=locate)


class Cloud:
    """Two workers up for an hour, longer than the join timeout: a pool that cannot be asked must not make
    them look like workers that never joined."""

    slots_per_instance = 4

    def __init__(self, market: Market = Market.ON_DEMAND) -> None:
        self.live = {
            f"i-{k}": Instance(f"i-{k}", EPOCH - 3600, 4, "running", f"10.0.0.{k}", market=market) for k in (1, 2)
        }
        self.launched = 0
        self.terminated: list[str] = []

    def list_instances(self, include_unusable: bool = False) -> list[Instance]:
        return list(self.live.values())

    def find_request(self, request_id: str) -> list[Instance]:
        return []

    def launch(self, count: int, request_id: str | None = None, **kwargs) -> list[Instance]:
        self.launched += count
        return []

    def terminate(self, instance_ids) -> list[str]:
        self.terminated.extend(instance_ids)
        for i in instance_ids:
            self.live.pop(i, None)
        return list(instance_ids)


class Clock:
    def __init__(self) -> None:
        self.t = EPOCH

    def __call__(self) -> float:
        return self.t

    def sleep(self, seconds: float) -> None:
        self.t += max(seconds, 0.0)


def _daemon(
    tmp_path: Path, monkeypatch, condor: Condor, cloud: Cloud, clock: Clock, keep: int = 0, market: str = "on-demand"
) -> Daemon:
    settings = Settings(
        site=SiteSettings(kind="condor", submit_root=str(tmp_path / "submit")),
        cloud=CloudSettings(kind="ec2"),
        condor=CondorSettings(control="htcondor", settle_s=0.0),
        steering=SteeringConfig(min_instances=keep, interval_s=INTERVAL, market=market),
        safety=SafetyConfig(),
        state_path=str(tmp_path / "state.sqlite"),
        log=LogSettings(decisions_path=str(tmp_path / "decisions.jsonl")),
    )
    (tmp_path / "submit").mkdir()
    control = _control(condor)
    monkeypatch.setattr(runtimes, "build_condor_control", lambda settings, job_id_of: control)

    def build(settings, store, journal, sleep):
        return runtimes.SubmitHostRuntime(settings, store, journal, clock.sleep, driver=cloud, clock=clock)

    monkeypatch.setattr(daemon_module, "build_runtime", build)
    return Daemon(settings, None, sleep=clock.sleep)


def _attempts(monkeypatch, daemon: Daemon, clock: Clock, condor: Condor, up_after: int) -> list[float]:
    """Record when the runtime asks Condor; Condor comes up at attempt ``up_after``."""
    times: list[float] = []
    real = daemon.runtime.refresh

    def refresh() -> None:
        times.append(clock.t)
        condor.up = condor.up or len(times) > up_after
        real()

    monkeypatch.setattr(daemon.runtime, "refresh", refresh)
    return times


def test_condor_down_at_start_is_waited_for_with_back_off_and_the_pool_is_held(tmp_path, monkeypatch, caplog):
    condor, cloud, clock = Condor(up=False), Cloud(), Clock()
    with caplog.at_level(logging.DEBUG):
        daemon = _daemon(tmp_path, monkeypatch, condor, cloud, clock)  # no traceback: nothing asked yet
        times = _attempts(monkeypatch, daemon, clock, condor, up_after=6)
        assert daemon.run(max_iterations=2) == 0
    gaps = [round(b - a, 3) for a, b in zip(times, times[1:], strict=False)][:6]
    # 5 s, then twice as long each time, never later than the next interval: 5, 10, 15 (the interval's), 30...
    assert gaps == [CONDOR_RETRY_FIRST_S, 2 * CONDOR_RETRY_FIRST_S, 15.0, INTERVAL, INTERVAL, INTERVAL]
    assert cloud.terminated == [] and cloud.launched == 0, "the pool changed while Condor was away"
    assert not daemon.watch.active, "Condor away is weather, not a fault: no safe state"
    lines = [r.getMessage() for r in caplog.records if r.levelno >= logging.INFO and "HTCondor" in r.getMessage()]
    assert len(lines) == 2, lines  # one line when it goes away, one when it answers again
    assert lines[0].startswith("HTCondor unreachable (the collector does not answer: Failed to connect to collector)")
    assert "\n" not in lines[0]
    assert lines[1].startswith("HTCondor answers again after")
    assert not [r for r in caplog.records if r.exc_info], "a traceback was logged"
    assert daemon.iterations == 2


def test_a_schedd_restart_mid_run_holds_the_pool_then_finds_the_schedd_again(tmp_path, monkeypatch, caplog):
    condor, cloud, clock = Condor(up=True), Cloud(), Clock()
    daemon = _daemon(tmp_path, monkeypatch, condor, cloud, clock, keep=2)  # the policy keeps both workers
    daemon._iterate(clock())
    assert daemon.condor_away is None and condor.located == 1 and cloud.terminated == []
    daemon.loop.pending_releases["i-1"] = clock() + 1.0  # a drained worker due for termination
    condor.up = False  # condor_restart: the schedd and the collector go away
    clock.sleep(INTERVAL)
    with caplog.at_level(logging.INFO):
        daemon._iterate(clock())
        assert daemon.condor_away is not None and daemon.loop.frozen
        assert "HTCondor unreachable" in daemon.runtime.control.safe
        monkeypatch.setattr(status_module, "_alive", lambda pid: True)  # the daemon runs (here: _iterate by hand)
        shown = render_status(read_status(daemon.settings.state_path))
        assert "HTCONDOR UNREACHABLE since" in shown and "the pool is held as it is" in shown, shown
        daemon._release_until(clock() + INTERVAL)
        assert cloud.terminated == [], "a timed release went ahead while Condor was away"
        condor.up, condor.restarts = True, 1  # back at a new address: the old handle fails, a new one is located
        daemon._iterate(clock())
        assert daemon.condor_away is not None and "schedd does not answer" in daemon.condor_away.reason
        daemon._iterate(clock())
    assert condor.located == 2
    assert daemon.condor_away is None and not daemon.loop.frozen and daemon.runtime.control.safe == ""
    assert "HTCONDOR" not in render_status(read_status(daemon.settings.state_path))
    assert cloud.terminated == ["i-1"]  # the release held back went ahead once Condor answered
    assert not [r for r in caplog.records if r.exc_info]


def test_a_spot_worker_gone_while_condor_was_away_is_not_counted_as_a_reclaim(tmp_path, monkeypatch, caplog):
    """Away longer than the workers' dead-man switch, HTCondor comes back to a spot worker powered off: the
    cloud shows it as it shows a reclaim, but nobody saw a notice. It is forgotten, not counted, and spot
    launches are not backed off."""
    condor, cloud, clock = Condor(up=True), Cloud(Market.SPOT), Clock()
    daemon = _daemon(tmp_path, monkeypatch, condor, cloud, clock, keep=2, market="auto")
    daemon._iterate(clock())
    assert daemon.runtime.lifecycle.state_of("i-1") is LifecycleState.JOINED
    condor.up = False
    clock.sleep(INTERVAL)
    daemon._iterate(clock())
    assert daemon.condor_away is not None
    clock.sleep(4000.0)
    del cloud.live["i-1"]  # its dead-man switch powered it off
    condor.up = True
    with caplog.at_level(logging.INFO):
        daemon._iterate(clock())
    assert daemon.condor_away is None
    lines = [r.getMessage() for r in caplog.records]
    assert any("i-1 gone while HTCondor was away" in line and "not counted as a reclaim" in line for line in lines)
    assert not any("reclaimed" in line for line in lines), lines
    assert daemon.runtime.lifecycle.state_of("i-1") is LifecycleState.VANISHED
    fallback = daemon.loop.cloud
    assert isinstance(fallback, SpotFallback) and fallback.interruptions == 0 and not fallback.backed_off("")


def test_a_pool_that_cannot_be_asked_never_makes_a_worker_unjoined_or_unclaimed(caplog):
    condor = Condor(up=False)
    control = _control(condor)
    with caplog.at_level(logging.INFO):
        assert control.has_joined("i-1") is True and control.has_joined("i-2") is True
    assert len(caplog.records) == 1, "one line per outage, not one per instance asked about"
    assert control.has_joined("i-1") is True
    assert control.holds_claims("i-1") is True
    assert control.worker_addresses() == {}
    assert control.queued_job_id("wf", "node") is None
    condor.up = True
    assert control.has_joined("i-1") is True and control.holds_claims("i-1") is False
    assert control.has_joined("i-9") is False


def test_the_probe_says_which_daemon_is_away_in_one_line():
    condor = Condor(up=True)
    control = _control(condor)
    control.probe()
    condor.up = False
    with pytest.raises(CondorUnreachable, match=r"^the collector does not answer: Failed to connect to collector$"):
        control.probe()


def test_building_the_control_asks_nothing_of_an_absent_pool():
    """With no schedd running, building the control must not fail ("Unable to locate local daemon")."""
    settings = Settings(
        site=SiteSettings(kind="condor", submit_root="."),
        cloud=CloudSettings(kind="ec2"),
        condor=CondorSettings(control="htcondor", collector="127.0.0.1:9"),  # discard: nothing listens
    )
    control = build_condor_control(settings, lambda task: None)
    with pytest.raises(CondorUnreachable) as raised:
        control.probe()
    assert "\n" not in str(raised.value)


def test_the_systemd_unit_says_what_the_daemon_does_when_condor_is_down():
    unit = (Path(__file__).resolve().parents[2] / "systemd" / "wire-daemon.service").read_text()
    comment = " ".join(line.lstrip("# ").strip() for line in unit.splitlines() if line.startswith("#"))
    assert f"asks again after {CONDOR_RETRY_FIRST_S:.0f} s" in comment
    assert "holds the pool as it is" in comment
