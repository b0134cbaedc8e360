"""Issue 14, crash-loop detection: a daemon that keeps failing stops changing the pool, says so, and recovers."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import numpy as np
import pytest

from wire_daemon.cli.main import main
from wire_daemon.core.config import SteeringConfig
from wire_daemon.core.errors import ConfigError
from wire_daemon.core.instances import Instance, Lifecycle, LifecycleState
from wire_daemon.loop.schedule import release_until
from wire_daemon.ports.policy import PlanResult, SteeringDecision
from wire_daemon.runtime.control import ControlledPolicy, PoolControl
from wire_daemon.runtime.settings import load_settings
from wire_daemon.service.daemon import Daemon
from wire_daemon.service.status import read_status
from wire_daemon.service.status_text import render_status

from .emulated_config import emulated_config


def _config(tmp_path: Path, extra: str = "") -> Path:
    return emulated_config(tmp_path, extra=f"policy: wire\n{extra}")


class Stepper:
    """Drive a Daemon one interval at a time, as its run loop does, without sleeping."""

    def __init__(self, config: Path) -> None:
        self.config = config
        self.daemon = Daemon(load_settings(config), str(config), sleep=lambda s: None)
        self.t = 0.0

    def step(self) -> dict | None:
        d = self.daemon
        d.runtime.sleep_until(self.t)
        before = d.last_record
        d._iterate(d.runtime.now())
        self.t += d.settings.steering.interval_s
        d._release_until(self.t)
        return d.last_record if d.last_record is not before else None

    def live(self) -> set[str]:
        return {i.instance_id for i in self.daemon.runtime.instances()}


def _break_iterations(monkeypatch, daemon: Daemon, times: int) -> None:
    calls = {"n": 0}
    real = daemon.runtime.refresh

    def refresh() -> None:
        calls["n"] += 1
        if calls["n"] <= times:
            raise RuntimeError("the monitor broke\nsecond line")
        real()

    monkeypatch.setattr(daemon.runtime, "refresh", refresh)


def test_failing_iterations_enter_the_safe_state_and_successes_leave_it(tmp_path, monkeypatch, caplog):
    s = Stepper(_config(tmp_path))
    s.step()
    s.step()
    pool = s.live()
    assert pool
    victim = sorted(pool)[0]
    interval = s.daemon.settings.steering.interval_s
    s.daemon.loop.pending_releases[victim] = s.t + 3 * interval  # decided before the failures, due in the safe state

    _break_iterations(monkeypatch, s.daemon, 3)
    with caplog.at_level(logging.INFO):
        assert [s.step() for _ in range(3)] == [None, None, None]
        assert s.daemon.watch.active and s.daemon.runtime.control.safe
        warned = [r.getMessage() for r in caplog.records if r.getMessage().startswith("safe state:")]
        assert len(warned) == 1
        assert "3 iterations in a row failed (the last: RuntimeError)" in warned[0]

        safe = [s.step() for _ in range(2)]  # the loop watches and changes nothing
        assert all(r["launched"] == [] and r["released"] == [] and r["terminated"] == [] for r in safe)
        assert all(r["rule"].startswith("safe state, no change: 3 iterations in a row failed") for r in safe)
        assert s.live() == pool and victim in s.daemon.loop.pending_releases

        report = read_status(s.daemon.settings.state_path)
        assert report.safe_state and report.safe_state.active and report.safe_state.succeeded_in_a_row == 2
        text = render_status(report)
        assert "SAFE STATE since" in text and "no launch, no termination until 3 iteration(s)" in text

        s.step()  # the third success in a row: the policy decides again, the waiting release goes through
        assert not s.daemon.watch.active and not s.daemon.runtime.control.safe
        assert [r.getMessage() for r in caplog.records if r.getMessage().startswith("safe state ended")]
        s.step()
        assert victim not in s.live()
    safe = read_status(s.daemon.settings.state_path).safe_state
    assert safe is not None and not safe.active
    s.daemon._shutdown()


def test_a_crash_loop_across_restarts_starts_in_the_safe_state(tmp_path, capsys):
    config = _config(tmp_path)
    for _ in range(3):  # three runs that end without stopping: the process is gone, its lock with it
        crashed = Daemon(load_settings(config), str(config), sleep=lambda s: None)
        assert not crashed.watch.active
        crashed.lock.release()
        crashed.store.close()
    s = Stepper(config)
    assert s.daemon.watch.active and "a crash loop: 3 run(s) ended without stopping" in s.daemon.watch.state.reason
    record = s.step()
    assert record["launched"] == [] and record["rule"].startswith("safe state, no change: a crash loop")
    assert main(["status", "--config", str(config), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["safe_state"]["active"] is True
    s.step()
    s.step()
    assert not s.daemon.watch.active  # three iterations in a row succeeded
    s.daemon._shutdown()

    again = Daemon(load_settings(config), str(config), sleep=lambda s: None)
    assert again.watch.active  # the crashes are still within the window: a clean stop does not forgive them
    again._shutdown()


def test_clean_stops_never_count_and_zero_turns_the_check_off(tmp_path):
    config = _config(tmp_path)
    for _ in range(5):
        Daemon(load_settings(config), str(config), sleep=lambda s: None)._shutdown()
    daemon = Daemon(load_settings(config), str(config), sleep=lambda s: None)
    assert not daemon.watch.active
    daemon.lock.release()
    daemon.store.close()

    off = _config(tmp_path, "safe_state: {unclean_starts: 0}")
    for _ in range(4):
        crashed = Daemon(load_settings(off), str(off), sleep=lambda s: None)
        crashed.lock.release()
        crashed.store.close()
    last = Daemon(load_settings(off), str(off), sleep=lambda s: None)
    assert not last.watch.active
    last._shutdown()


@pytest.mark.parametrize(
    "body, message",
    [
        ("safe_state: {failed_iterations: -1}", "safe_state.failed_iterations must be >= 0"),
        ("safe_state: {recover_iterations: 0}", "safe_state.recover_iterations must be >= 1"),
        ("safe_state: {window_s: 0}", "safe_state.window_s must be > 0"),
        ("safe_state: {unclean_start: 2}", "unknown key safe_state.unclean_start"),
    ],
)
def test_bad_safe_state_settings_name_the_key(tmp_path, body, message):
    path = tmp_path / "c.yaml"
    path.write_text(body)
    with pytest.raises(ConfigError, match=message):
        load_settings(path)


class Wants:
    name = "fake"

    def __init__(self, decision: SteeringDecision) -> None:
        self.decision = decision

    def plan(self, now, state, instances, queue_order) -> PlanResult:
        return PlanResult(self.decision)

    def reconfigure(self, steering) -> None:
        pass


def test_the_safe_state_outranks_the_operator_and_keeps_a_pending_drain_all():
    control = PoolControl()
    control.apply("drain-all")
    control.safe = "a crash loop"
    pool = [Instance(f"i-{k}", 0.0, 4) for k in range(3)]
    lifecycle = Lifecycle((i.instance_id, LifecycleState.JOINED) for i in pool)
    policy = ControlledPolicy(
        Wants(SteeringDecision(5, 5, launch=2, rule="grow")), control, lifecycle, SteeringConfig()
    )
    decision = policy.plan(100.0, None, pool, np.empty(0, dtype=np.int64)).decision
    assert decision.launch == 0 and decision.release == [] and decision.target == 3
    assert decision.rule == "safe state, no change: a crash loop (the policy wanted 5: grow)"
    assert control.action == "drain-all"  # carried out when the safe state ends


def test_a_frozen_loop_neither_launches_nor_terminates(tmp_path):
    s = Stepper(_config(tmp_path))
    s.step()
    loop = s.daemon.loop
    victim = sorted(s.live())[0]
    loop.pending_releases[victim] = 0.0
    loop.frozen = True
    assert loop.next_release() is None and loop.release_due(1e9) == [] and loop._launch(1e9, 3) == []
    release_until(loop, s.daemon.runtime, 1e9)  # returns at once: nothing is due while frozen
    assert victim in s.live()
    s.daemon._shutdown()


class NotifySocket:
    """A stand-in for systemd's notify socket: what the daemon sends, one datagram per message."""

    def __init__(self, path: Path) -> None:
        import socket

        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.bind(str(path))
        self.sock.setblocking(False)

    def messages(self) -> list[str]:
        out = []
        while True:
            try:
                out.append(self.sock.recv(4096).decode())
            except BlockingIOError:
                return out


def test_systemd_is_told_the_safe_state_and_the_stop(tmp_path, monkeypatch):
    listener = NotifySocket(tmp_path / "notify")
    monkeypatch.setenv("NOTIFY_SOCKET", str(tmp_path / "notify"))
    config = _config(tmp_path)
    s = Stepper(config)
    assert listener.messages() == ["STATUS=running: the scaling policy decides"]
    _break_iterations(monkeypatch, s.daemon, 3)
    for _ in range(3):
        s.step()
    (entered,) = listener.messages()
    assert entered.startswith("STATUS=SAFE STATE: 3 iterations in a row failed") and "\n" not in entered
    for _ in range(3):
        s.step()
    assert listener.messages() == ["STATUS=running: the scaling policy decides"]
    s.daemon._shutdown()
    (stopping,) = listener.messages()
    assert stopping.startswith("STOPPING=1\nSTATUS=stopped: ")


def test_without_systemd_nothing_is_sent_and_a_dead_socket_is_no_error(tmp_path, monkeypatch):
    from wire_daemon.service.systemd_notify import notify

    monkeypatch.delenv("NOTIFY_SOCKET", raising=False)
    assert notify(STATUS="x") is False
    monkeypatch.setenv("NOTIFY_SOCKET", str(tmp_path / "nobody-listens"))
    assert notify(STATUS="x") is False
