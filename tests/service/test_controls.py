"""Issue 13, item 9: the operator's controls (pause, resume, hold N, drain-all, terminate-all).

The commands write a request into the state file; the daemon applies it at
its next look, the ``ControlledPolicy`` around the scaling policy carries it
out, and the decisions log records each change of mode.
"""

from __future__ import annotations

import io
import json
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from wire_daemon.cli.main import main
from wire_daemon.core.config import SteeringConfig
from wire_daemon.core.instances import Instance, Lifecycle, LifecycleState
from wire_daemon.loop.schedule import release_until
from wire_daemon.persist.store import SCHEMA_VERSION, StateStore
from wire_daemon.ports.policy import PlanResult, SteeringDecision
from wire_daemon.runtime.control import ControlledPolicy, PoolControl
from wire_daemon.runtime.settings import load_settings
from wire_daemon.service.daemon import Daemon
from wire_daemon.service.status import StatusReport


def _config(tmp_path: Path, speedup: float = 1e6) -> Path:
    path = tmp_path / "config.yaml"
    path.write_text(
        f"""
policy: wire
site: {{kind: emulated, speedup: {speedup}}}
emulation: {{time_scale: 20}}
steering: {{charging_unit_s: 900}}
state_path: {tmp_path / "state.sqlite"}
log: {{decisions_path: {tmp_path / "decisions.jsonl"}}}
"""
    )
    return path


def _real_site_config(tmp_path: Path) -> Path:
    """A submit host's config on the same state file: its commands wait for the daemon's next start."""
    (tmp_path / "submit").mkdir(exist_ok=True)
    path = tmp_path / "real.yaml"
    path.write_text(
        f"""
site: {{kind: condor, submit_root: {tmp_path / "submit"}}}
cloud: {{kind: ec2}}
state_path: {tmp_path / "state.sqlite"}
log: {{decisions_path: {tmp_path / "decisions.jsonl"}}}
"""
    )
    return path


class Stepper:
    """Drive a Daemon one interval at a time, as its run loop does, without sleeping."""

    def __init__(self, tmp_path: Path) -> None:
        self.config = _config(tmp_path)
        self.daemon = Daemon(load_settings(self.config), str(self.config), sleep=lambda s: None)
        self.log = tmp_path / "decisions.jsonl"
        self.t = 0.0

    def step(self) -> dict:
        d = self.daemon
        d.runtime.sleep_until(self.t)
        d._apply_controls()
        d._iterate(d.runtime.now())
        self.t += d.settings.steering.interval_s
        release_until(d.loop, d.runtime, self.t)
        return d.last_record

    def ask(self, command: str, count: int | None = None) -> None:
        self.daemon.store.request_control(command, count, by="tester")

    def records(self) -> list[dict]:
        return [json.loads(line) for line in self.log.read_text().splitlines()]

    def live(self) -> list[str]:
        return [i.instance_id for i in self.daemon.runtime.instances()]


def test_pause_hold_resume_drain_and_terminate_through_the_state_file(tmp_path):
    s = Stepper(tmp_path)
    s.step()
    s.step()
    pool = len(s.live())

    s.ask("pause")
    paused = [s.step() for _ in range(3)]
    assert all(r["launched"] == [] and r["released"] == [] for r in paused)
    assert all(r["rule"].startswith("paused by the operator: no change (the policy wanted") for r in paused)
    assert len(s.live()) == pool
    assert s.daemon.status_snapshot(s.t, paused[-1]).control.mode == "paused"

    s.ask("hold", 3)
    held = s.step()
    assert held["target"] == 3 and len(held["launched"]) == 3 - pool
    assert held["rule"].startswith("held at 3 by the operator")
    s.step()
    assert len(s.live()) == 3

    s.ask("resume")
    assert not s.step()["rule"].startswith(("held", "paused"))

    s.ask("drain-all")
    before = s.live()
    drained = s.step()
    assert drained["target"] == 0 and sorted(drained["released"]) == sorted(before)
    lifecycle = s.daemon.loop.lifecycle
    # Each is drained now and terminated just before its paid unit ends (one may end right now).
    assert all(lifecycle.state_of(i) == LifecycleState.DRAINING for i in s.live())
    assert set(s.daemon.loop.pending_releases) == set(s.live())
    after = s.step()
    assert after["launched"] == [] and after["rule"].startswith("held at 0")

    s.ask("hold", 2)
    s.step()
    s.step()
    assert len(s.live()) == 2
    s.ask("terminate-all")
    ended = s.step()
    assert sorted(ended["terminated"]) == sorted(ended["released"]) and len(ended["released"]) == 2
    assert s.live() == []

    controls = [(r["command"], r["mode"], r["count"]) for r in s.records() if r.get("event") == "control"]
    assert controls == [
        ("pause", "paused", None),
        ("hold", "hold", 3),
        ("resume", "auto", None),
        ("drain-all", "hold", 0),
        ("hold", "hold", 2),
        ("terminate-all", "hold", 0),
    ]
    assert all(r["requested_by"] == "tester" for r in s.records() if r.get("event") == "control")
    assert s.daemon.store.pending_controls() == []
    s.daemon._shutdown()


def test_the_mode_survives_a_restart(tmp_path):
    s = Stepper(tmp_path)
    s.step()
    s.ask("hold", 2)
    s.step()
    s.daemon._shutdown()
    again = Daemon(load_settings(s.config), str(s.config), sleep=lambda x: None)
    assert (again.runtime.control.mode, again.runtime.control.count) == ("hold", 2)
    again._shutdown()


def test_a_bad_request_is_refused_and_marked(tmp_path):
    s = Stepper(tmp_path)
    s.daemon.store.request_control("hold", -1)
    s.step()
    (request,) = s.daemon.store.controls()
    assert request.outcome.startswith("refused: hold needs a pool size >= 0")
    assert s.daemon.runtime.control.mode == "auto"
    s.daemon._shutdown()


# -- the policy decorator alone ------------------------------------------------------------


class Wants:
    name = "fake"

    def __init__(self, decision: SteeringDecision) -> None:
        self.decision = decision

    def plan(self, now, state, instances, queue_order) -> PlanResult:
        return PlanResult(self.decision)

    def reconfigure(self, steering) -> None:
        pass


def _pool(n: int, launched: float = 0.0) -> list[Instance]:
    return [Instance(f"i-{k}", launched + k * 600.0, 4) for k in range(n)]


def test_hold_releases_the_instances_whose_unit_ends_first_at_their_unit_end():
    steering = SteeringConfig(charging_unit_s=3600.0, release_guard_s=10.0)
    control = PoolControl()
    control.apply("hold", 1)
    lifecycle = Lifecycle((i.instance_id, LifecycleState.JOINED) for i in _pool(3))
    policy = ControlledPolicy(Wants(SteeringDecision(5, 5, launch=2, rule="grow")), control, lifecycle, steering)
    decision = policy.plan(3000.0, None, _pool(3), np.empty(0, dtype=np.int64)).decision
    # i-0 pays its next unit at 3600 (600 s away), i-1 at 4200, i-2 at 4800: i-0 and i-1 go.
    assert decision.launch == 0 and decision.target == 1 and decision.release == ["i-0", "i-1"]
    assert decision.release_at == {"i-0": 3590.0, "i-1": 4190.0}
    assert "the policy wanted 5" in decision.rule and policy.name == "fake"


def test_draining_instances_do_not_count_toward_a_hold():
    control = PoolControl()
    control.apply("hold", 2)
    lifecycle = Lifecycle([("i-0", LifecycleState.DRAINING), ("i-1", LifecycleState.JOINED)])
    policy = ControlledPolicy(Wants(SteeringDecision(1, 1)), control, lifecycle, SteeringConfig())
    decision = policy.plan(0.0, None, _pool(2), np.empty(0, dtype=np.int64)).decision
    assert decision.launch == 1 and decision.release == []


@pytest.mark.parametrize("command, count", [("pause", None), ("hold", 2), ("drain-all", None)])
def test_paused_or_held_a_drained_instance_s_kill_is_still_put_off_not_under_drain_all(command, count):
    control = PoolControl()
    control.apply(command, count)
    lifecycle = Lifecycle([("i-0", LifecycleState.DRAINING), ("i-1", LifecycleState.JOINED)])
    wanted = SteeringDecision(1, 1, postpone={"i-0": 7190.0}, rule="hold; 1 draining kept")
    policy = ControlledPolicy(Wants(wanted), control, lifecycle, SteeringConfig())
    decision = policy.plan(3500.0, None, _pool(2), np.empty(0, dtype=np.int64)).decision
    assert decision.postpone == ({} if command == "drain-all" else {"i-0": 7190.0})


def test_auto_passes_the_plan_through_untouched():
    wanted = SteeringDecision(4, 4, launch=1, rule="grow")
    policy = ControlledPolicy(Wants(wanted), PoolControl(), Lifecycle(), SteeringConfig())
    assert policy.plan(0.0, None, _pool(3), np.empty(0, dtype=np.int64)).decision is wanted


def test_unknown_mode_in_the_state_file_falls_back_to_auto():
    assert PoolControl.from_json({"mode": "turbo", "count": -3}).mode == "auto"
    with pytest.raises(ValueError, match="unknown control command"):
        PoolControl().apply("explode")


# -- the state file ------------------------------------------------------------------------


def test_a_schema_2_state_file_gains_the_controls_table(tmp_path):
    path = tmp_path / "old.sqlite"
    db = sqlite3.connect(path)
    db.execute("CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)")
    db.execute("INSERT INTO meta VALUES ('daemon_id', 'abc')")
    db.execute("PRAGMA user_version = 2")
    db.commit()
    db.close()
    store = StateStore(path)
    assert store.daemon_id() == "abc"
    seq = store.request_control("pause", by="me", now=5.0)
    (pending,) = store.pending_controls()
    assert (pending.seq, pending.command, pending.requested_by, pending.requested_at) == (seq, "pause", "me", 5.0)
    store.mark_control_applied(seq, "applied", now=6.0)
    assert store.pending_controls() == [] and store.controls()[0].applied_at == 6.0
    assert store._db.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION == 5
    store.close()


# -- the commands --------------------------------------------------------------------------


def _ran_once(tmp_path: Path) -> Path:
    config = _config(tmp_path)
    Daemon(load_settings(config), str(config)).run(max_iterations=1)
    return config


def test_commands_with_the_daemon_down_are_recorded_for_its_next_start(tmp_path, capsys):
    _ran_once(tmp_path)
    config = _real_site_config(tmp_path)
    assert main(["pause", "--config", str(config)]) == 0
    assert "pause: recorded in" in capsys.readouterr().out
    assert main(["hold", "3", "--config", str(config)]) == 0
    capsys.readouterr()
    store = StateStore(tmp_path / "state.sqlite")
    assert [(c.command, c.count) for c in store.pending_controls()] == [("pause", None), ("hold", 3)]
    store.close()
    status = json.loads((main(["status", "--config", str(config), "--json"]), capsys.readouterr().out)[1])
    assert [c["command"] for c in status["pending_controls"]] == ["pause", "hold"]


def test_commands_before_the_first_start_leave_the_daemon_never_ran_and_are_listed(tmp_path, capsys):
    config = _real_site_config(tmp_path)  # the commands make the state file; no run has written to it
    assert main(["budget", "20", "--config", str(config)]) == 0
    assert main(["pause", "--config", str(config)]) == 0
    capsys.readouterr()
    assert main(["status", "--config", str(config)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "daemon: never ran" and out[-1] == "no decision yet"
    assert [line.split(" (asked")[0] for line in out[1:-1]] == ["  pending: budget 20", "  pending: pause"]
    _ran_once(tmp_path)  # a run, then down: no longer "never ran"
    assert main(["status", "--config", str(config)]) == 0
    assert capsys.readouterr().out.startswith("daemon: down")


def test_hold_beyond_the_limits_is_refused(tmp_path, capsys):
    config = _config(tmp_path)
    _ran_once(tmp_path)
    assert main(["hold", "13", "--config", str(config)]) == 2
    assert "hold 13: N must be between 0 and 12" in capsys.readouterr().err


def test_terminate_all_asks_first(tmp_path, capsys, monkeypatch):
    _ran_once(tmp_path)
    config = _real_site_config(tmp_path)
    monkeypatch.setattr(sys, "stdin", io.StringIO("no\n"))
    assert main(["terminate-all", "--config", str(config)]) == 1
    err = capsys.readouterr().err
    assert "Type 'yes' to go on" in err and "not confirmed; nothing done" in err
    monkeypatch.setattr(sys, "stdin", io.StringIO("yes\n"))
    assert main(["terminate-all", "--config", str(config)]) == 0
    assert main(["terminate-all", "--config", str(config), "--yes"]) == 0
    store = StateStore(tmp_path / "state.sqlite")
    assert [c.command for c in store.pending_controls()] == ["terminate-all", "terminate-all"]
    store.close()


@pytest.mark.slow
def test_the_running_daemon_applies_a_command_within_seconds(tmp_path):
    config = _config(tmp_path, speedup=30.0)  # 6 s of wall time per interval: the command comes between two
    proc = subprocess.Popen(
        [sys.executable, "-m", "wire_daemon.cli.main", "run", "--config", str(config)],
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        log = tmp_path / "decisions.jsonl"
        deadline = time.monotonic() + 60
        while (not log.exists() or not log.read_text().strip()) and time.monotonic() < deadline:
            time.sleep(0.1)
        asked = time.monotonic()
        done = subprocess.run(
            [sys.executable, "-m", "wire_daemon.cli.main", "pause", "--config", str(config)],
            capture_output=True,
            text=True,
        )
        assert done.returncode == 0, done.stderr
        assert "pause: applied by the daemon" in done.stdout and "paused by the operator" in done.stdout
        assert time.monotonic() - asked < 5
    finally:
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=60)
    assert "operator: scaling paused: the pool is kept as it is" in err
    records = [json.loads(line) for line in log.read_text().splitlines()]
    assert any(r.get("event") == "control" and r["command"] == "pause" for r in records)


# -- a control given is a control done ------------------------------------------------------


def test_terminate_all_then_pause_in_one_batch_terminates_everything_then_holds_paused(tmp_path):
    s = Stepper(tmp_path)
    s.ask("hold", 3)
    s.step()
    s.step()
    assert len(s.live()) == 3

    s.ask("terminate-all")
    s.ask("pause")  # the same batch: applied at the same look
    ended = s.step()
    assert len(ended["released"]) == 3 and sorted(ended["terminated"]) == sorted(ended["released"])
    assert ended["rule"].startswith("terminate-all by the operator: every instance terminated now; then paused")
    assert s.live() == []
    assert s.daemon.runtime.control.mode == "paused"
    later = s.step()
    assert later["launched"] == [] and later["rule"].startswith("paused by the operator")

    terminate, pause = s.daemon.store.controls()[-2:]
    assert terminate.outcome == (
        f"done: 3 instance(s) terminated now: {', '.join(sorted(ended['released']))}; then paused at what is left"
    )
    first = "the terminate-all given before it is carried out first"
    assert pause.outcome == f"applied: {first}; then paused at what is left"
    s.daemon._shutdown()


@pytest.mark.parametrize(
    ("commands", "mode", "count", "action"),
    [
        ([("terminate-all", None), ("pause", None)], "paused", 0, "terminate-all"),
        ([("terminate-all", None), ("hold", 2)], "hold", 2, "terminate-all"),
        ([("terminate-all", None), ("resume", None)], "auto", 0, "terminate-all"),
        ([("drain-all", None), ("terminate-all", None)], "hold", 0, "terminate-all"),
        ([("terminate-all", None), ("drain-all", None)], "hold", 0, "terminate-all"),
        ([("drain-all", None), ("pause", None)], "paused", 0, "drain-all"),
        ([("pause", None), ("resume", None)], "auto", 0, ""),
    ],
)
def test_a_later_command_sets_the_mode_after_an_action_never_cancels_it(commands, mode, count, action):
    control = PoolControl()
    for command, n in commands:
        control.apply(command, n)
    assert (control.mode, control.count, control.action) == (mode, count, action)


def test_an_action_is_carried_out_whatever_mode_follows_it():
    steering = SteeringConfig(charging_unit_s=3600.0, release_guard_s=10.0)
    control = PoolControl()
    control.apply("terminate-all")
    control.apply("resume")
    policy = ControlledPolicy(Wants(SteeringDecision(5, 5, launch=2, rule="grow")), control, Lifecycle(), steering)
    decision = policy.plan(100.0, None, _pool(3), np.array([])).decision
    assert sorted(decision.release) == ["i-0", "i-1", "i-2"]
    assert decision.release_at == dict.fromkeys(decision.release, 100.0)
    assert decision.rule == "terminate-all by the operator: every instance terminated now; then the policy decides"
    assert control.action == "" and control.mode == "auto"
    assert policy.plan(200.0, None, _pool(0), np.array([])).decision.rule == "grow"


def test_the_command_says_what_was_done(tmp_path, capsys, monkeypatch):
    import threading

    from wire_daemon.cli import service_commands

    s = Stepper(tmp_path)
    s.ask("hold", 2)
    s.step()
    s.step()
    running = StatusReport(daemon="running", state_path=str(tmp_path / "state.sqlite"), pid=4242)
    monkeypatch.setattr(service_commands, "read_status", lambda path: running)
    s.ask("terminate-all")  # given just before: the command's pause joins it in one batch
    codes: list[int] = []
    cli = threading.Thread(target=lambda: codes.append(main(["pause", "--config", str(s.config)])))
    cli.start()
    deadline = time.monotonic() + 10
    while len(s.daemon.store.pending_controls()) < 2 and time.monotonic() < deadline:
        time.sleep(0.05)
    s.step()
    cli.join(timeout=15)
    assert codes == [0]
    out = capsys.readouterr().out.strip()
    assert out.startswith("pause: applied by the daemon (pid 4242) at ")
    assert out.endswith(": the terminate-all given before it is carried out first; then paused at what is left")
    assert s.live() == []
    s.daemon._shutdown()


def test_terminate_all_says_which_instances_it_terminated(tmp_path, capsys, monkeypatch):
    import threading

    from wire_daemon.cli import service_commands

    s = Stepper(tmp_path)
    s.ask("hold", 2)
    s.step()
    s.step()
    pool = sorted(s.live())
    running = StatusReport(daemon="running", state_path=str(tmp_path / "state.sqlite"), pid=4242)
    monkeypatch.setattr(service_commands, "read_status", lambda path: running)
    codes: list[int] = []
    cli = threading.Thread(target=lambda: codes.append(main(["terminate-all", "--yes", "--config", str(s.config)])))
    cli.start()
    deadline = time.monotonic() + 10
    while not s.daemon.store.pending_controls() and time.monotonic() < deadline:
        time.sleep(0.05)
    s.step()
    cli.join(timeout=15)
    assert codes == [0]
    out = capsys.readouterr().out.strip()
    assert out.startswith("terminate-all: done by the daemon (pid 4242) at ")
    assert out.endswith(f": 2 instance(s) terminated now: {', '.join(pool)}; pool held at 0")
    assert s.live() == []
    s.daemon._shutdown()


def test_an_action_given_before_a_restart_is_reported_done_after_it(tmp_path):
    s = Stepper(tmp_path)
    s.ask("hold", 2)
    s.step()
    s.step()
    s.ask("terminate-all")
    s.daemon._apply_controls()  # applied, then the daemon stops before the decision that carries it out
    assert s.daemon.store.controls()[-1].outcome.startswith("pending: terminate-all at the next decision")
    s.daemon._shutdown()

    again = Daemon(load_settings(s.config), str(s.config), sleep=lambda x: None)
    again.runtime.sleep_until(s.t)
    again._iterate(again.runtime.now())
    assert again.store.controls()[-1].outcome.startswith("done: ")
    again._shutdown()
