"""Issue 14: a worker whose daemon is gone still ends by itself, through the dead-man switch.

The switch is three links, and each is tested here against its real logic:

1. the startd exits after ``STARTD_NOCLAIM_SHUTDOWN`` (``idle_shutdown_s``) seconds without a claim
   (HTCondor's own knob: checked to be rendered with the configured value);
2. the master then exits: its ``DAEMON_SHUTDOWN`` expression, evaluated here by HTCondor's ClassAd
   library on the master's attributes, is true once its startd is gone;
3. as it exits the master runs ``DEFAULT_MASTER_SHUTDOWN_SCRIPT``, the user-data's power-off script,
   run here by ``sh`` against stub ``logger`` and ``poweroff`` commands.

The whole chain on a real HTCondor master and startd, with no daemon at all, is
``tests/realpool/test_workers.py::test_dead_man_switch_powers_off_an_unclaimed_worker``
(root only: it boots workers in a chroot).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from pathlib import Path

import classad2
import pytest
import yaml

from wire_daemon.execute.userdata import WorkerConfig, render_execute_config, render_user_data

SH = shutil.which("sh") or "/bin/sh"  # by path: the second run's PATH holds the stubs only
WORKER = WorkerConfig(
    cloud="ec2",
    pool="montage",
    condor_host="cm.example.org:9618",
    token_source="/wire/montage/condor-token",
    idle_shutdown_s=1200,
)


def _knobs(text: str) -> dict[str, str]:
    pairs = (line.partition("=") for line in text.splitlines() if "=" in line and not line.lstrip().startswith("#"))
    return {name.strip(): value.strip() for name, _, value in pairs}


def _written(user_data: str) -> dict[str, dict]:
    return {entry["path"]: entry for entry in yaml.safe_load(user_data)["write_files"]}


def test_the_idle_startd_exits_after_idle_shutdown_s():
    assert _knobs(render_execute_config(WORKER))["STARTD_NOCLAIM_SHUTDOWN"] == "1200"


@pytest.mark.parametrize(
    "startd_start, master_up_s, shuts_down",
    [
        (0, 400, True),  # the startd exited (no claim for idle_shutdown_s): the master goes too
        (None, 400, False),  # the attribute missing is not a startd gone
        ("alive", 400, False),  # a running startd keeps the master
        (0, 60, False),  # just booted: the startd may not be up yet
    ],
)
def test_the_master_shuts_down_once_its_startd_is_gone(startd_start, master_up_s, shuts_down):
    expression = _knobs(render_execute_config(WORKER))["MASTER.DAEMON_SHUTDOWN"]
    now = int(time.time())
    master = {"DaemonStartTime": now - master_up_s}
    if startd_start is not None:
        master["STARTD_StartTime"] = now - 30 if startd_start == "alive" else startd_start
    assert bool(classad2.ExprTree(expression).eval(classad2.ClassAd(master))) is shuts_down


@pytest.mark.slow
def test_the_master_runs_the_power_off_script_which_powers_off(tmp_path):
    knobs = _knobs(render_execute_config(WORKER))
    script_path = knobs["DEFAULT_MASTER_SHUTDOWN_SCRIPT"]
    entry = _written(render_user_data(WORKER))[script_path]  # the master's script is the one the user-data writes
    assert entry["owner"] == "root:root" and entry["permissions"] == "0700"
    script = entry["content"]
    assert "exec /sbin/poweroff" in script

    record = tmp_path / "powered-off"
    stubs = tmp_path / "bin"
    stubs.mkdir()
    _stub(stubs / "poweroff", f'echo "poweroff $*" >> {record}\n')
    _stub(stubs / "logger", f'echo "logger $*" >> {record}\n')
    # The one change: /sbin/poweroff is this machine's; the stub stands in for it (as the real-pool harness does).
    runnable = tmp_path / "wire-worker-poweroff"
    runnable.write_text(script.replace("/sbin/poweroff", str(stubs / "poweroff")))
    done = subprocess.run([SH, str(runnable)], env={"PATH": f"{stubs}:/usr/bin:/bin"}, timeout=30)
    assert done.returncode == 0
    assert record.read_text().splitlines() == ["logger -t wire-worker condor_master exited: powering off", "poweroff "]

    # Without logger (a minimal image) it still powers off.
    (stubs / "logger").unlink()
    record.unlink()
    done = subprocess.run([SH, str(runnable)], env={"PATH": str(stubs)}, timeout=30, capture_output=True)
    assert done.returncode == 0 and record.read_text() == "poweroff \n"


def _stub(path: Path, body: str) -> None:
    path.write_text("#!/bin/sh\n" + body)
    os.chmod(path, 0o755)
