"""``wire-daemon run`` as a child process the chaos harness kills, restarts and reads.

The daemon runs in its own process group (``start_new_session``), so a kill
reaches it and whatever it started, and nothing else. Its stderr goes to one
file across restarts; ``tracebacks`` counts the Python tracebacks in it.
"""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ENV = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_DEFAULT_REGION": "us-east-1",
}


@dataclass(frozen=True)
class DaemonSettings:
    """The knobs of the config the harness writes (the rest is fixed: a condor site on EC2)."""

    submit_root: Path
    endpoint: str
    pool: str
    image_id: str
    subnet_id: str
    state_path: Path
    decisions_path: Path
    slots: int = 2
    max_instances: int = 4
    max_launches_per_interval: int = 1
    interval_s: float = 1.0
    charging_unit_s: float = 6.0

    def yaml(self) -> str:
        return f"""
site: {{kind: condor, submit_root: "{self.submit_root}"}}
condor: {{control: "off", settle_s: 0.5}}
cloud:
  kind: ec2
  pool: {self.pool}
  ec2: {{region: us-east-1, image_id: {self.image_id}, instance_type: c5.large,
         subnet_id: {self.subnet_id}, endpoint_url: "{self.endpoint}"}}
steering: {{interval_s: {self.interval_s}, charging_unit_s: {self.charging_unit_s}, slots_per_instance: {self.slots},
           max_instances: {self.max_instances}, min_instances: 0, release_guard_s: 0.5}}
safety: {{max_instances: {self.max_instances}, max_launches_per_interval: {self.max_launches_per_interval},
         dry_run: false}}
state_path: "{self.state_path}"
log: {{decisions_path: "{self.decisions_path}"}}
"""


@dataclass
class DaemonProcess:
    """One daemon config; start, SIGKILL, SIGTERM, as often as asked."""

    config: Path
    stderr_path: Path
    pids: list[int] = field(default_factory=list)  # every process started, for the record
    unexpected_exits: list[int] = field(default_factory=list)  # exit codes of deaths we did not cause
    started_at: float = 0.0
    _proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        with open(self.stderr_path, "ab") as err:
            self._proc = subprocess.Popen(
                [sys.executable, "-m", "wire_daemon.cli.main", "run", "--config", str(self.config)],
                env=os.environ | ENV,
                stdout=subprocess.DEVNULL,
                stderr=err,
                start_new_session=True,
            )
        self.pids.append(self._proc.pid)
        self.started_at = time.time()

    @property
    def alive(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def check(self) -> None:
        """Restart a daemon that died on its own (and count it)."""
        if self._proc is not None and self._proc.poll() is not None:
            self.unexpected_exits.append(self._proc.returncode)
            self.start()

    def kill9(self) -> None:
        proc = self._require()
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()

    def terminate(self, timeout: float = 60.0) -> int:
        proc = self._require()
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        return proc.returncode

    def tracebacks(self) -> int:
        if not self.stderr_path.exists():
            return 0
        return self.stderr_path.read_text(errors="replace").count("Traceback (most recent call last)")

    def _require(self) -> subprocess.Popen[bytes]:
        if self._proc is None:
            raise RuntimeError("the daemon was never started")
        return self._proc


@dataclass(frozen=True)
class StoreView:
    """What the daemon's state file says: its instances (any state) and its launch requests."""

    instances: dict[str, tuple[str, float | None]]  # instance -> (lifecycle state, ended_at)
    requests: dict[str, tuple[int, str]]  # request -> (count, open | done | rolled_back)

    def live(self) -> set[str]:
        return {i for i, (_, ended) in self.instances.items() if ended is None}

    def open_requests(self) -> int:
        return sum(state == "open" for _, state in self.requests.values())


def read_store(path: Path) -> StoreView:
    """The state file, read only; an empty view if it does not exist yet."""
    if not path.exists():
        return StoreView({}, {})
    db = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=10)
    try:
        instances = {r[0]: (r[1], r[2]) for r in db.execute("SELECT instance_id, state, ended_at FROM instances")}
        requests = {r[0]: (r[1], r[2]) for r in db.execute("SELECT request_id, count, state FROM launch_requests")}
    except sqlite3.OperationalError:  # not created yet (the daemon died before its schema)
        return StoreView({}, {})
    finally:
        db.close()
    return StoreView(instances, requests)


def read_decisions(path: Path) -> list[dict[str, Any]]:
    """Every complete line of the decisions log (a kill can cut the last one)."""
    if not path.exists():
        return []
    out = []
    for line in path.read_text(errors="replace").splitlines():
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if isinstance(record, dict) and record.get("event") != "run":  # each start's header is no decision
            out.append(record)
    return out


def count_lines(path: Path) -> int:
    """Complete lines of the decisions log, less the header each start writes (it decides nothing)."""
    if not path.exists():
        return 0
    data = path.read_bytes()
    return data.count(b"\n") - data.count(b'"event": "run"')
