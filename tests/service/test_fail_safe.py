"""Issue 14, "fail safe, not fail stop": a reload that cannot read the new file keeps the running settings.

Whatever the exception (not only the project's own error type), the daemon logs
one line naming the file, keeps what it runs with, and its loop goes on.
"""

from __future__ import annotations

import json
import logging
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from wire_daemon.core.errors import ConfigError
from wire_daemon.runtime.settings import load_settings
from wire_daemon.service.daemon import Daemon

from .emulated_config import emulated_config as _config

# Each writes a new config that cannot be used, in a way outside ConfigError today.
BAD_FILES = {
    "latin-1 byte": b"steering: {interval_s: 60}  # caf\xe9\n",
    "impossible date": b"steering: {interval_s: 60}\nnote: 2024-13-45\n",
    "deep nesting": b"steering: " + b"[" * 5000 + b"]" * 5000 + b"\n",
    "over-long integer": b"steering: {interval_s: 1" + b"0" * 5000 + b"}\n",
    "integer too large for a float": b"steering: {interval_s: 1" + b"0" * 400 + b"}\n",
    "whole number too large for a float": b"safety: {max_instances: 1" + b"0" * 400 + b"}\n",
}


@pytest.mark.parametrize("body", list(BAD_FILES.values()), ids=list(BAD_FILES))
def test_load_settings_turns_any_bad_file_into_one_config_error(tmp_path, body):
    path = tmp_path / "c.yaml"
    path.write_bytes(body)
    with pytest.raises(ConfigError) as raised:
        load_settings(path)
    message = str(raised.value)
    assert message.startswith(str(path)) and "\n" not in message and len(message) < 300


@pytest.mark.parametrize("body", list(BAD_FILES.values()), ids=list(BAD_FILES))
def test_a_reload_of_a_bad_file_keeps_the_running_settings_and_logs_one_line(tmp_path, caplog, body):
    config = _config(tmp_path)
    daemon = Daemon(load_settings(config), str(config), sleep=lambda s: None)
    running = daemon.settings
    config.write_bytes(body)
    with caplog.at_level(logging.INFO):
        daemon.reload()
    assert daemon.settings is running
    errors = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(errors) == 1 and errors[0].exc_info is None
    line = errors[0].getMessage()
    assert "reload refused" in line and str(config) in line and "\n" not in line
    assert daemon.run(max_iterations=2) == 0 and daemon.iterations == 2  # the loop goes on


def test_a_reload_whose_reconfiguration_fails_keeps_the_running_settings(tmp_path, caplog, monkeypatch):
    config = _config(tmp_path)
    daemon = Daemon(load_settings(config), str(config), sleep=lambda s: None)
    running = daemon.settings
    config.write_text(config.read_text().replace("charging_unit_s: 900", "charging_unit_s: 600"))
    applied = []

    def reconfigure(settings):
        applied.append(settings.steering.charging_unit_s)
        if len(applied) == 1:
            raise RuntimeError("a builder broke")

    monkeypatch.setattr(daemon.runtime, "reconfigure", reconfigure)
    daemon.reload()
    assert daemon.settings is running
    assert applied == [600, 900]  # the new settings half-applied are replaced by the running ones
    (line,) = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert "reload refused" in line and str(config) in line and "RuntimeError" in line
    assert daemon.run(max_iterations=1) == 0


@pytest.mark.slow
def test_sighup_with_a_latin1_byte_leaves_the_daemon_running(tmp_path):
    config = _config(tmp_path, speedup=90.0)  # 2 s of wall time per 180 s interval
    proc = subprocess.Popen(
        [sys.executable, "-m", "wire_daemon.cli.main", "run", "--config", str(config)],
        stderr=subprocess.PIPE,
        text=True,
    )
    log = tmp_path / "decisions.jsonl"
    try:
        _wait_for_records(log, 1)
        config.write_bytes(config.read_bytes() + b"# caf\xe9\n")
        proc.send_signal(signal.SIGHUP)
        before = len(log.read_text().splitlines())
        _wait_for_records(log, before + 2)  # two more decisions after the reload
        assert proc.poll() is None
    finally:
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(timeout=60)
    err = proc.stderr.read()
    assert code == 0, err
    refused = [line for line in err.splitlines() if "reload refused" in line]
    assert len(refused) == 1 and str(config) in refused[0] and "Traceback" not in err
    assert json.loads(log.read_text().splitlines()[-1])["event"] == "shutdown"


def _wait_for_records(log: Path, count: int, timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if log.exists() and len(log.read_text().splitlines()) >= count:
            return
        time.sleep(0.1)
    raise AssertionError(f"fewer than {count} records in {log} after {timeout_s:.0f} s")
