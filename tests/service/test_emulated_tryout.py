"""An honest try-out on the emulated site: commands move no virtual time, belong to their run, and each run
is marked in the decisions log, which ``decisions`` and ``report`` read one run at a time."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from wire_daemon.cli.main import main
from wire_daemon.core.journal import Journal
from wire_daemon.persist.store import StateStore
from wire_daemon.runtime.runtimes import EmulatedRuntime
from wire_daemon.runtime.settings import load_settings
from wire_daemon.service.daemon import Daemon

from .emulated_config import emulated_config


def _records(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_a_sleep_cut_short_moves_the_virtual_clock_only_as_far_as_the_wall_clock_went(tmp_path):
    settings = load_settings(emulated_config(tmp_path, speedup=60.0))
    cut = EmulatedRuntime(settings, Journal(), sleep=lambda seconds: True)  # woken at once by a command
    cut.sleep_until(180.0)
    assert cut.now() < 30.0  # a fraction of a wall second: seconds of virtual time, not the interval
    full = EmulatedRuntime(settings, Journal(), sleep=lambda seconds: None)
    full.sleep_until(180.0)
    assert full.now() == 180.0


def test_a_command_to_a_stopped_emulated_run_is_refused_and_not_carried_into_the_next(tmp_path, capsys):
    config = emulated_config(tmp_path)
    Daemon(load_settings(config), str(config)).run(max_iterations=1)
    assert main(["hold", "2", "--config", str(config)]) == 2
    assert "refused: the emulated run" in capsys.readouterr().err
    store = StateStore(tmp_path / "state.sqlite")  # a command that slipped in as the run stopped
    store.request_control("hold", 2, by="late")
    store.set_meta("control", json.dumps({"mode": "hold", "count": 2, "command": "hold"}))
    store.close()
    daemon = Daemon(load_settings(config), str(config))
    assert daemon.runtime.control.mode == "auto"  # the next run starts on its own
    daemon.run(max_iterations=1)
    store = StateStore(tmp_path / "state.sqlite")
    (late,) = [c for c in store.controls() if c.requested_by == "late"]
    store.close()
    assert (late.outcome or "").startswith("refused: given to an emulated run that had stopped")
    assert not [r for r in _records(tmp_path / "decisions.jsonl") if r.get("event") == "control"]


def test_pause_before_the_first_start_is_kept_for_the_first_run(tmp_path, capsys):
    config = emulated_config(tmp_path)
    assert main(["pause", "--config", str(config)]) == 0
    assert "the daemon has not started yet: its first run applies it" in capsys.readouterr().out
    Daemon(load_settings(config), str(config)).run(max_iterations=2)
    records = _records(tmp_path / "decisions.jsonl")
    assert [r["command"] for r in records if r.get("event") == "control"] == ["pause"]
    decisions = [r for r in records if r.get("event") is None]
    assert decisions and all(r["rule"].startswith("paused by the operator") for r in decisions)


def test_each_run_has_a_header_and_decisions_and_report_show_one_run(tmp_path, capsys):
    config = emulated_config(tmp_path)
    for _ in range(2):
        Daemon(load_settings(config), str(config)).run(max_iterations=2)
    headers = [r for r in _records(tmp_path / "decisions.jsonl") if r.get("event") == "run"]
    assert [h["run"] for h in headers] == ["1", "2"]
    assert headers[0]["policy"] == "target-slowdown" and headers[0]["config"] == str(config.resolve())
    assert headers[0]["site"].startswith("emulated site replaying montage") and headers[0]["dry_run"] is False
    capsys.readouterr()
    assert main(["decisions", "--config", str(config)]) == 0
    last = capsys.readouterr().out.splitlines()
    assert last[0].startswith("+0:00:00 (virtual)  run 2 started: emulated site") and len(last) == 4
    assert main(["decisions", "--config", str(config), "--run", "1"]) == 0
    assert capsys.readouterr().out.splitlines()[0].startswith("+0:00:00 (virtual)  run 1 started")
    assert main(["decisions", "--config", str(config), "--run", "all"]) == 0
    assert len(capsys.readouterr().out.splitlines()) == 8
    assert main(["decisions", "--config", str(config), "--run", "7"]) == 2
    assert "--run 7: no such run" in capsys.readouterr().err
    out = tmp_path / "report.png"
    assert main(["report", "--config", str(config), "--out", str(out)]) == 0
    assert "(2 decisions of run 2)" in capsys.readouterr().out


@pytest.mark.slow
def test_operator_commands_do_not_move_the_emulated_clock(tmp_path):
    config = emulated_config(tmp_path, speedup=20.0)  # 9 s of wall time per 180 s interval
    log = tmp_path / "decisions.jsonl"
    proc = subprocess.Popen(
        [sys.executable, "-m", "wire_daemon.cli.main", "run", "--config", str(config), "--max-iterations", "2"],
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 60
        while not (log.exists() and any(r.get("event") is None for r in _records(log))):
            assert time.monotonic() < deadline, "no first decision"
            time.sleep(0.1)
        for command in (["pause"], ["resume"], ["hold", "2"]):
            done = subprocess.run(
                [sys.executable, "-m", "wire_daemon.cli.main", *command, "--config", str(config)],
                capture_output=True,
                text=True,
                timeout=60,
            )
            assert done.returncode == 0, done.stderr
        assert proc.wait(timeout=60) == 0
    finally:
        proc.kill()
        proc.wait()
    controls = [r for r in _records(log) if r.get("event") == "control"]
    assert [r["command"] for r in controls] == ["pause", "resume", "hold"]
    # Without the fix each command ran the world to the next interval: +180 s each.
    assert all(r["time"] < 170.0 for r in controls), [r["time"] for r in controls]
