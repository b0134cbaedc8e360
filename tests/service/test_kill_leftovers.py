"""Issue 14: a kill -9 at any point leaves no temporary file and a whole state file; repeated kills are a crash loop.

Real kills (SIGKILL) of real processes: a writer paused inside a state-file
transaction, one paused inside a log rotation, and ``wire-daemon run`` killed
again and again while it decides.
"""

from __future__ import annotations

import json
import random
import re
import signal
import sqlite3
import subprocess
import sys
import time
from contextlib import closing
from pathlib import Path

import pytest

from wire_daemon.persist.store import StateStore
from wire_daemon.service.decisions_log import DecisionsLog

# The slow tier (-m slow): every test starts the CLI as a process and kills it.
pytestmark = pytest.mark.slow

CLI = [sys.executable, "-m", "wire_daemon.cli.main"]
# What a daemon's directory may hold: its files, SQLite's write-ahead log while a connection is (or was) open,
# the lock file and the rotated logs. Anything else (a *.tmp, a half-written copy) is a leftover.
EXPECTED = re.compile(r"config\.yaml|state\.sqlite(\.lock|-wal|-shm)?|decisions\.jsonl(\.\d+)?")


def _killed_inside(code: str) -> None:
    """Run ``code`` in a child; when it prints "inside", kill it with SIGKILL."""
    child = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout.readline().strip() == "inside"
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait(timeout=30)
    assert child.returncode == -signal.SIGKILL


def test_a_kill_inside_a_state_write_leaves_the_state_whole_and_nothing_behind(tmp_path):
    state = tmp_path / "state.sqlite"
    store = StateStore(state)
    store.set_meta("kept", "yes")
    store.close()
    _killed_inside(
        "import time; from wire_daemon.persist.store import StateStore; "
        f"store = StateStore({str(state)!r}); tx = store._transaction(); tx.__enter__(); "
        "store._db.execute(\"INSERT OR REPLACE INTO meta VALUES ('kept', 'half-written')\"); "
        "print('inside', flush=True); time.sleep(120)"
    )
    store = StateStore(state)
    assert store.get_meta("kept") == "yes"  # the open transaction is gone, the committed one is whole
    assert store._db.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    store.set_meta("after", "fine")
    store.close()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["state.sqlite"]  # SQLite's own files removed at close


def test_a_kill_inside_a_log_rotation_leaves_nothing_behind(tmp_path):
    log = tmp_path / "decisions.jsonl"
    _killed_inside(
        "import os, time; from pathlib import Path; from wire_daemon.service.decisions_log import DecisionsLog; "
        "real = os.rename\n"
        "def paused(src, dst):\n"
        "    real(src, dst)\n"
        "    if str(dst).endswith('.1'):\n"
        "        print('inside', flush=True); time.sleep(120)\n"
        "os.rename = paused\n"
        f"log = DecisionsLog(Path({str(log)!r}), 300, 2)\n"
        "for k in range(100):\n"
        "    log.append({'k': k, 'pad': 'x' * 50})\n"
    )
    names = sorted(p.name for p in tmp_path.iterdir())
    assert all(re.fullmatch(r"decisions\.jsonl(\.\d+)?", n) for n in names), names
    again = DecisionsLog(log, 300, 2)
    for k in range(20):
        again.append({"k": k, "pad": "x" * 50})
    again.close()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["decisions.jsonl", "decisions.jsonl.1", "decisions.jsonl.2"]


def test_kill_9_of_run_again_and_again_leaves_no_leftover_and_the_next_start_is_safe(tmp_path):
    config = tmp_path / "config.yaml"
    config.write_text(
        f"""
site: {{kind: emulated, speedup: 600}}
emulation: {{time_scale: 100}}
steering: {{charging_unit_s: 900}}
state_path: {tmp_path / "state.sqlite"}
log: {{decisions_path: {tmp_path / "decisions.jsonl"}, max_bytes: 3000, backups: 3}}
"""
    )
    chance = random.Random(14)
    records = _Records(tmp_path)
    for kill in range(4):
        seen = records()
        proc = subprocess.Popen([*CLI, "run", "--config", str(config)], stderr=subprocess.PIPE, text=True)
        wanted = seen + chance.randint(1, 4)
        deadline = time.monotonic() + 60
        while records() < wanted and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.02)
        assert proc.poll() is None, f"run {kill} ended before its kill: {proc.stderr.read()}"
        time.sleep(chance.uniform(0.0, 0.2))  # somewhere inside the next decision, write or rotation
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
        proc.stderr.close()
        _assert_no_leftover(tmp_path)

    last = subprocess.run(
        [*CLI, "run", "--config", str(config), "--max-iterations", "2"], capture_output=True, text=True, timeout=120
    )
    assert last.returncode == 0, last.stderr
    assert "safe state: a crash loop: 4 run(s) ended without stopping" in last.stderr
    names = sorted(p.name for p in tmp_path.iterdir())
    assert not [n for n in names if n.endswith(("-wal", "-shm"))], names  # a clean stop leaves SQLite's files too
    _assert_no_leftover(tmp_path)
    with closing(sqlite3.connect(tmp_path / "state.sqlite")) as db:
        assert db.execute("PRAGMA integrity_check").fetchone()[0] == "ok"


class _Records:
    """Records logged so far, counted across the rotated decisions log: polled often enough to see each file
    before it rotates away, each record known by its stamps. Reading only: the reader never writes."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.seen: set[tuple[object, ...]] = set()

    def __call__(self) -> int:
        for path in self.directory.glob("decisions.jsonl*"):
            try:
                lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
            except FileNotFoundError:  # rotated away between the listing and the read
                continue
            for line in lines:
                try:
                    record = json.loads(line)
                except json.JSONDecodeError:  # the line a kill cut
                    continue
                if isinstance(record, dict):
                    self.seen.add((record.get("wall"), record.get("time"), record.get("event")))
        return len(self.seen)


def _assert_no_leftover(directory: Path) -> None:
    names = sorted(p.name for p in directory.iterdir())
    assert all(EXPECTED.fullmatch(n) for n in names), names
