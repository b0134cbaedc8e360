"""Issue 13, items 1 and 2: the daemon's log says what it does, and times read on the wall clock."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

import pytest

from wire_daemon.cli.main import main
from wire_daemon.core.errors import ConfigError
from wire_daemon.service.report import _Axis
from wire_daemon.service.wording import decision_line, parse_since

from .emulated_config import emulated_config as _config

NOW = datetime(2025, 11, 5, 12, 0, 0, tzinfo=UTC).timestamp()


def _run(config: Path, *extra: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "wire_daemon.cli.main", "run", "--config", str(config), *extra],
        capture_output=True,
        text=True,
        timeout=120,
    )


# -- item 1: the daemon is no longer silent ----------------------------------------------------


@pytest.mark.slow
def test_run_logs_its_start_each_decision_and_its_stop_at_info_by_default(tmp_path):
    done = _run(_config(tmp_path), "--max-iterations", "3")
    assert done.returncode == 0, done.stderr
    lines = done.stderr.splitlines()
    assert lines, "an emulated run must not be silent"
    stamp = r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ INFO "
    assert all(re.match(stamp, line) for line in lines if " INFO " in line)
    assert "wire-daemon 0.1.0 started (pid" in lines[0] and "emulated site replaying montage" in lines[0]
    assert "times below are virtual offsets" in lines[0] and "dry-run off" in lines[0]
    decisions = [line for line in lines if re.search(r" INFO at \+\d:\d\d:\d\d pool ", line)]
    assert len(decisions) == 3
    assert "at +0:03:00 pool " in decisions[1]
    assert all(len(line) <= 190 for line in decisions)  # one short line: the time stamps and ~140 of words
    assert "INFO stopped: 3 iteration(s) done (--max-iterations), after 3 decision(s)" in lines[-1]


@pytest.mark.slow
def test_log_level_warning_keeps_only_problems(tmp_path):
    done = _run(_config(tmp_path), "--max-iterations", "2", "--log-level", "warning")
    assert done.returncode == 0 and " INFO " not in done.stderr


@pytest.mark.slow
def test_reload_sigterm_and_metrics_address_are_logged(tmp_path):
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    config = _config(tmp_path, speedup=60.0, extra=f"metrics: {{enabled: true, port: {port}}}")
    proc = subprocess.Popen(
        [sys.executable, "-m", "wire_daemon.cli.main", "run", "--config", str(config)],
        stderr=subprocess.PIPE,
        text=True,
    )
    log = tmp_path / "decisions.jsonl"
    deadline = time.monotonic() + 60
    while (not log.exists() or not log.read_text().strip()) and time.monotonic() < deadline:
        time.sleep(0.1)
    config.write_text(config.read_text().replace("charging_unit_s: 900", "charging_unit_s: 600"))
    proc.send_signal(signal.SIGHUP)
    time.sleep(3)  # SIGHUP wakes the sleeping daemon, which reloads at once
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    assert f"INFO metrics at http://127.0.0.1:{port}/metrics" in err
    assert f"INFO reloaded {config}: interval 180 s, max 12 instances, dry-run off" in err
    assert "INFO stopped: SIGTERM received, after" in err and "instances left up: i-00001" in err
    last = json.loads(log.read_text().splitlines()[-1])
    assert last["event"] == "shutdown" and last["reason"] == "SIGTERM received" and last["pool"] >= 1


# -- item 2: wall-clock times where an operator reads them -------------------------------------


def test_since_accepts_iso_times_durations_ago_and_loop_seconds():
    assert parse_since("2025-11-05T11:50", now=lambda: NOW).wall_s == NOW - 600
    assert parse_since("2025-11-05T12:50+01:00", now=lambda: NOW).wall_s == NOW - 600
    assert parse_since("2025-11-05T11:50:00Z", now=lambda: NOW).wall_s == NOW - 600
    assert parse_since("10m ago", now=lambda: NOW).wall_s == NOW - 600
    assert parse_since("10m", now=lambda: NOW).wall_s == NOW - 600
    assert parse_since("2h", now=lambda: NOW).wall_s == NOW - 7200
    assert parse_since("1d", now=lambda: NOW).wall_s == NOW - 86400
    assert parse_since("360").loop_s == 360.0
    with pytest.raises(ConfigError, match="--since 'yesterday-ish': give an ISO time"):
        parse_since("yesterday-ish")


def test_decisions_on_a_real_site_read_in_utc_and_since_filters_by_wall_clock(tmp_path, capsys):
    config = _config(tmp_path)
    now = time.time()
    records = [
        {"time": now - 3600, "clock": "wall", "wall": now - 3600, "policy": "wire", "pool": 1, "target": 1},
        {"time": now - 240, "clock": "wall", "wall": now - 240, "policy": "wire", "pool": 1, "target": 2,
         "launched": ["i-9"], "rule": "grow: load fills instances for a unit", "cost_units": 3},
    ]  # fmt: skip
    (tmp_path / "decisions.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    assert main(["decisions", "--config", str(config), "--since", "5m"]) == 0
    (line,) = capsys.readouterr().out.splitlines()
    expected = datetime.fromtimestamp(now - 240, UTC).strftime("%Y-%m-%d %H:%M:%SZ")
    assert line.startswith(f"{expected}  pool 1 -> 2, launching 1 (i-9): grow: load fills instances for a unit")
    assert line.endswith("; cost 3 unit(s)")
    iso = datetime.fromtimestamp(now - 7200, UTC).strftime("%Y-%m-%dT%H:%M:%S")
    assert main(["decisions", "--config", str(config), "--since", iso]) == 0
    assert len(capsys.readouterr().out.splitlines()) == 2
    assert main(["decisions", "--config", str(config), "--since", "soon"]) == 2


def test_times_on_the_emulated_site_are_virtual_offsets_and_say_so():
    line = decision_line({"time": 3723.0, "clock": "virtual", "pool": 2, "target": 2, "rule": "hold"})
    assert line.startswith("+1:02:03 (virtual)  pool stays at 2")
    old = decision_line({"time": 360.0, "pool": 1, "target": 1})  # a log written before the clock key existed
    assert old.startswith("+0:06:00 (virtual)")


def test_status_shows_wall_clock_times(tmp_path, capsys):
    config = _config(tmp_path)
    assert main(["run", "--config", str(config), "--max-iterations", "2"]) == 0
    capsys.readouterr()
    assert main(["status", "--config", str(config)]) == 0
    out = capsys.readouterr().out
    today = time.strftime("%Y-%m-%d", time.gmtime())
    assert f"last heartbeat {today} " in out and "s ago)" in out
    assert "loop clock +0:03:00 (virtual): the emulated site's virtual time" in out
    assert "last decision (+0:03:00 (virtual)): pool " in out
    assert "  details: policy target-slowdown; tasks " in out  # the figures the one line leaves out


def test_the_report_axis_is_utc_for_a_real_site_and_virtual_time_otherwise():
    import numpy as np

    real = _Axis(np.array([NOW, NOW + 600.0]), virtual=False)
    assert real.label == "time (UTC; first decision 2025-11-05 12:00:00)"
    replay = _Axis(np.array([0.0, 1800.0]), virtual=True)
    assert replay.label.startswith("virtual time since the run started (min") and "not the wall clock" in replay.label
    assert list(replay(np.array([0.0, 1800.0]))) == [0.0, 30.0]


def test_a_daemon_report_is_drawn_on_a_utc_axis(tmp_path, capsys):
    pytest.importorskip("matplotlib", reason="the [plots] extra is not installed")
    now = time.time()
    log = tmp_path / "d.jsonl"
    rows = [
        {"time": now + 180 * k, "clock": "wall", "pool": k, "target": k + 1, "running": k, "idle": 1, "cost_units": k}
        for k in range(5)
    ]
    rows.insert(2, {"time": now + 200, "event": "control", "command": "pause", "mode": "paused", "rule": "operator"})
    log.write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert main(["report", str(log), "--out", str(tmp_path / "r.png")]) == 0
    assert "(5 decisions)" in capsys.readouterr().out
    assert (tmp_path / "r.png").read_bytes()[:4] == b"\x89PNG"
