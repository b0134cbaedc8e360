"""Issue 14, the state-file lock: one daemon per state file; the operator's commands still write beside it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from wire_daemon.core.errors import InputError
from wire_daemon.persist.store import StateLock, StateStore

from .emulated_config import emulated_config

# The slow tier (-m slow): every test starts the daemon as a process beside another holder of the state.
pytestmark = pytest.mark.slow

CLI = [sys.executable, "-m", "wire_daemon.cli.main"]


def _config(tmp_path: Path) -> Path:
    return emulated_config(tmp_path, speedup=90.0)


def _start(config: Path) -> subprocess.Popen:
    proc = subprocess.Popen([*CLI, "run", "--config", str(config)], stderr=subprocess.PIPE, text=True)
    log = config.with_name("decisions.jsonl")
    deadline = time.monotonic() + 60
    while not (log.exists() and log.read_text().strip()):
        assert proc.poll() is None, proc.stderr.read()
        assert time.monotonic() < deadline, "the daemon wrote no decision in 60 s"
        time.sleep(0.1)
    return proc


def _stop(proc: subprocess.Popen) -> str:
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=60) == 0
    return proc.stderr.read()


def test_a_second_run_on_the_same_state_is_refused_naming_the_file_and_the_holder(tmp_path):
    config = _config(tmp_path)
    first = _start(config)
    try:
        second = subprocess.run(
            [*CLI, "run", "--config", str(config), "--max-iterations", "1"], capture_output=True, text=True, timeout=120
        )
        assert second.returncode == 2, second.stderr
        (line,) = second.stderr.strip().splitlines()
        assert str(tmp_path / "state.sqlite") in line and f"pid {first.pid}" in line and "in use" in line
        assert first.poll() is None
    finally:
        err = _stop(first)
    assert "Traceback" not in err


def test_the_operators_commands_write_beside_the_running_daemon(tmp_path):
    config = _config(tmp_path)
    daemon = _start(config)
    try:
        for command in ("pause", "resume"):
            done = subprocess.run([*CLI, command, "--config", str(config)], capture_output=True, text=True, timeout=120)
            assert done.returncode == 0, done.stderr
            assert f"{command}: applied by the daemon (pid {daemon.pid})" in done.stdout
    finally:
        _stop(daemon)
    store = StateStore(tmp_path / "state.sqlite")
    assert [(c.command, c.outcome) for c in store.controls()] == [
        ("pause", "applied: paused by the operator: the pool is kept as it is"),
        ("resume", "applied: automatic: the scaling policy decides"),
    ]
    store.close()


def test_the_lock_goes_with_its_holder_however_it_ends(tmp_path):
    state = tmp_path / "state.sqlite"
    held = StateLock(state).acquire()
    with pytest.raises(InputError, match=f"in use by another wire-daemon run \\(pid {os.getpid()}"):
        StateLock(state).acquire()
    held.release()
    StateLock(state).acquire().release()

    # A holder killed with SIGKILL: the kernel drops its lock, nothing is left to clean.
    code = (
        "import sys, time; from wire_daemon.persist.store import StateLock; "
        f"lock = StateLock({str(state)!r}).acquire(); print('held', flush=True); time.sleep(120)"
    )
    child = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout.readline().strip() == "held"
        with pytest.raises(InputError, match=f"pid {child.pid}"):
            StateLock(state).acquire()
    finally:
        child.kill()
        child.wait(timeout=30)
    StateLock(state).acquire().release()
