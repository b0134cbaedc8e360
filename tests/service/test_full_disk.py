"""A full disk under the state file is weather: no death, one line, and nothing forgotten once there is room.

The state file lives on a 256 KiB tmpfs that the test fills up (root only:
without root each test skips with one line; with CI=true it fails instead).
"""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator

import pytest

from tests.execute.test_guarded_cloud import FakeDriver, make_guard
from wire_daemon.execute.guarded_cloud import SafetyConfig
from wire_daemon.persist.store import StateStore
from wire_daemon.runtime.settings import load_settings
from wire_daemon.service.daemon import Daemon
from wire_daemon.service.state_room import open_state
from wire_lab.chaos.small_disk import SmallDisk, cannot_mount

from .emulated_config import emulated_config

NO_ROOM = "no room on its disk ("


def cannot_run(message: str) -> None:
    """In CI a test that cannot run is a failure; on a developer's machine it skips with the reason."""
    if os.environ.get("CI", "").lower() not in ("", "0", "false", "no"):
        pytest.fail(message, pytrace=False)
    pytest.skip(message)


@pytest.fixture
def disk(tmp_path) -> Iterator[SmallDisk]:
    reason = cannot_mount()
    if reason:
        cannot_run(reason)
    try:
        small = SmallDisk(tmp_path / "state").mount()
    except OSError as exc:
        cannot_run(str(exc))
    try:
        yield small
    finally:
        small.unmount()


def _lines(caplog, text: str) -> list[str]:
    return [r.getMessage() for r in caplog.records if text in r.getMessage()]


def test_the_daemon_goes_on_with_a_full_disk_and_writes_everything_once_there_is_room(disk, tmp_path, caplog):
    config = emulated_config(tmp_path, extra="policy: wire")
    text = config.read_text().replace(str(tmp_path / "state.sqlite"), str(disk.path / "state.sqlite"))
    config.write_text(text)
    daemon = Daemon(load_settings(config), str(config), sleep=lambda s: None)
    t = 0.0

    def step() -> None:
        nonlocal t
        daemon.runtime.sleep_until(t)
        daemon._iterate(daemon.runtime.now())
        t += daemon.settings.steering.interval_s
        daemon._release_until(t)

    step()
    step()
    disk.fill()
    assert disk.available() == 0
    with caplog.at_level(logging.INFO):
        for _ in range(6):  # twice the failed iterations that would enter the safe state
            step()
        assert daemon.store.kept_writes > 0
        assert daemon.watch.state.failed_in_a_row == 0  # a write kept in memory fails nothing
        daemon.watch._enter("entered on a full disk")  # the safe state needs no write to be entered...
        shown = daemon.status_snapshot(daemon.runtime.now(), daemon.last_record).to_json()  # ...nor the status
        assert shown["safe_state"]["active"] and shown["safe_state"]["reason"] == "entered on a full disk"
        daemon._write_status(daemon.runtime.now(), daemon.last_record)
        assert len(_lines(caplog, NO_ROOM)) == 1
        shown_before_room = shown["time"]

        disk.free()
        step()
        assert daemon.store.kept_writes == 0
        assert len(_lines(caplog, "room on its disk again")) == 1
    assert "Traceback" not in caplog.text

    on_disk = StateStore(disk.path / "state.sqlite")  # another connection: only what is on the disk
    try:
        status = json.loads(on_disk.get_meta("status") or "{}")
        assert status["safe_state"]["active"]
        assert status["time"] > shown_before_room  # the snapshot of the step after room came back
        assert json.loads(on_disk.get_meta("safe_state") or "{}")["reason"] == "entered on a full disk"
    finally:
        on_disk.close()
    daemon._shutdown()


def test_a_launch_recorded_on_a_full_disk_is_known_at_once_and_written_once_there_is_room(disk):
    path = disk.path / "state.sqlite"
    store = StateStore(path, keep_writes=True)
    clock = {"t": 1000.0}
    driver = FakeDriver(lambda: clock["t"])
    cloud = make_guard(driver, store, SafetyConfig(max_instances=4, max_launches_per_interval=4), lambda: clock["t"])
    disk.fill()

    launched = {i.instance_id for i in cloud.launch(3)}
    assert len(launched) == 3 and store.kept_writes > 0
    assert {r.instance_id for r in store.instances()} == launched  # what the store holds in memory is read back
    assert store.open_requests() == []  # opened and closed, both in memory
    assert len(cloud.launch(4)) == 1  # the cap counts them
    assert {r.instance_id for r in store.instances()} == set(driver.live)

    disk.free()
    store.set_meta("heartbeat", "{}")  # the next write (the daemon's status, every iteration) writes them first
    assert store.kept_writes == 0
    on_disk = StateStore(path)
    try:
        assert {r.instance_id for r in on_disk.instances()} == set(driver.live)
        assert on_disk.open_requests() == []
    finally:
        on_disk.close()
        store.close()


@pytest.mark.parametrize("existing", [False, True], ids=["no state file", "a state file"])
def test_a_start_on_a_full_disk_says_so_in_one_line_and_waits(disk, existing, caplog):
    path = disk.path / "state.sqlite"
    if existing:
        StateStore(path).close()
    disk.fill()
    tries = []

    def sleep(seconds: float) -> None:
        tries.append(seconds)
        if len(tries) == 3:
            disk.free()

    with caplog.at_level(logging.INFO):
        lock, store = open_state(path, sleep=sleep, retry_s=5.0)
    try:
        assert tries == [5.0, 5.0, 5.0]
        (line,) = _lines(caplog, "waiting for room")
        assert str(path) in line and "no room on its disk" in line and "trying again every 5 s" in line
        assert len(_lines(caplog, "room on its disk: starting after")) == 1
        store.set_meta("written", "yes")
        assert store.kept_writes == 0
    finally:
        store.close()
        lock.release()


@pytest.mark.slow
def test_wire_daemon_run_on_a_full_disk_waits_then_starts(disk, tmp_path):
    config = emulated_config(tmp_path, speedup=60.0, extra="policy: wire")
    config.write_text(config.read_text().replace(str(tmp_path / "state.sqlite"), str(disk.path / "state.sqlite")))
    disk.fill()
    err = tmp_path / "stderr"
    with open(err, "wb") as sink:
        proc = subprocess.Popen(
            [sys.executable, "-m", "wire_daemon.cli.main", "run", "--config", str(config)], stderr=sink
        )
    try:
        time.sleep(4.0)
        assert proc.poll() is None, err.read_text()
        lines = err.read_text().splitlines()
        assert len(lines) == 1 and "waiting for room" in lines[0], lines
        disk.free()
        deadline = time.monotonic() + 20
        while "started (pid" not in err.read_text() and time.monotonic() < deadline:
            time.sleep(0.2)
        assert "started (pid" in err.read_text()
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=60)
    assert "Traceback" not in err.read_text()


def test_a_command_on_a_full_disk_says_it_was_not_recorded(disk, tmp_path, capsys):
    from wire_daemon.cli.main import main

    config = emulated_config(tmp_path)
    config.write_text(config.read_text().replace(str(tmp_path / "state.sqlite"), str(disk.path / "state.sqlite")))
    StateStore(disk.path / "state.sqlite").close()
    disk.fill()

    assert main(["pause", "--config", str(config)]) != 0
    (line,) = capsys.readouterr().err.strip().splitlines()
    # Without the daemon (no -shm file to share) even the opening has no room; with it, the write has none.
    assert "no room on" in line and "disk" in line and str(disk.path) in line

    disk.free()
    running = StateStore(disk.path / "state.sqlite", keep_writes=True)  # as the running daemon holds it
    try:
        disk.fill()
        assert main(["pause", "--config", str(config)]) != 0
        (line,) = capsys.readouterr().err.strip().splitlines()
        assert "pause not recorded: no room on the state file's disk" in line
        assert running.pending_controls() == []
    finally:
        running.close()
