"""One real run: a trace's workflow under DAGMan on the real pool, steered by ``wire-daemon run``.

The pieces are the real ones an operator has: a central manager and schedd
(``PersonalPool``), the daemon as a process with a YAML config, the EC2
driver against moto's server, workers booted from the daemon's own user-data
by the test hypervisor, and a Pegasus-layout submit dir run by
``condor_submit_dag``. ``DaemonRun`` writes the config, starts and stops the
daemon, and reads back what happened: the decisions log, moto's instances,
the hypervisor's timeline, and the job event log.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from wire_lab.realpool.errors import RealPoolError
from wire_lab.realpool.hypervisor import GONE_STATES, Hypervisor
from wire_lab.realpool.pool import PersonalPool
from wire_lab.realpool.submitdir import SubmitDirOptions, WrittenSubmitDir, write_submit_dir

REGION = "us-east-1"
END_SEEN_TIMEOUT_S = 60.0  # a worker's kill waits up to 10 s for its master; a loaded machine adds more
TOKEN_PATH = "/etc/wire-worker/pool-token"  # where the harness places the token a file-delivery worker reads
ADMIN_KEY_PATH = "/etc/wire-worker/admin-key"  # and the workers' administration key (the daemon's drains)


@dataclass(frozen=True)
class RunSettings:
    """The short settings of a real run: minutes, not hours."""

    time_scale: float = 1.0
    charging_unit_s: float = 120.0
    interval_s: float = 30.0
    max_instances: int = 6
    slots: int = 4
    policy: str = "wire"
    pool_name: str = "wire-pool"
    idle_shutdown_s: int = 600  # the workers' dead-man switch; longer than any gap in a test run
    # More of the daemon's config, merged last into what write_config makes (mappings key by key), e.g.
    # {"memory": {...}} or {"cloud": {"worker": {"slot_mode": "partitionable"}}}.
    config: Mapping[str, Any] = field(default_factory=dict)


@dataclass
class DaemonRun:
    """The daemon steering one workflow on ``pool``; instances come from moto at ``ec2_endpoint``."""

    pool: PersonalPool
    ec2_endpoint: str
    image_id: str
    workdir: Path
    settings: RunSettings = field(default_factory=RunSettings)
    process: subprocess.Popen[bytes] | None = None

    @property
    def config_path(self) -> Path:
        return self.workdir / "daemon" / "config.yaml"

    @property
    def decisions_path(self) -> Path:
        return self.workdir / "daemon" / "decisions.jsonl"

    @property
    def state_path(self) -> Path:
        return self.workdir / "daemon" / "state.sqlite"

    @property
    def submit_root(self) -> Path:
        return self.pool.user_dir("submit")

    # -- the workflow --------------------------------------------------------------

    def write_workflow(
        self, trace: Path, label: str = "run0001", options: SubmitDirOptions | None = None
    ) -> WrittenSubmitDir:
        """The trace as a Pegasus-layout submit dir under the submit root (``options``: the pool and label are ours)."""
        out = self.submit_root / label
        options = replace(options or SubmitDirOptions(), pool=self.settings.pool_name, label=label)
        written = write_submit_dir(trace, out, time_scale=self.settings.time_scale, options=options)
        _chown_tree(out, self.pool)
        return written

    # -- the daemon ----------------------------------------------------------------

    def write_config(self) -> Path:
        s = self.settings
        self.config_path.parent.mkdir(parents=True, exist_ok=True)
        config = {
            "policy": s.policy,
            "site": {"kind": "condor", "submit_root": str(self.submit_root)},
            "condor": {"control": "htcondor", "collector": self.pool.collector_address, "settle_s": 2},
            "cloud": {
                "kind": "ec2",
                "pool": s.pool_name,
                "ec2": {
                    "region": REGION,
                    "image_id": self.image_id,
                    "instance_type": "t3.micro",
                    "endpoint_url": self.ec2_endpoint,
                },
                "worker": {
                    "condor_host": self.pool.collector_address,
                    "token_delivery": "file",
                    "token_source": TOKEN_PATH,
                    "admin_key_source": ADMIN_KEY_PATH,
                    "trust_domain": self.pool.options.domain,
                    "idle_shutdown_s": s.idle_shutdown_s,
                    "block_metadata_for_jobs": False,
                },
            },
            "steering": {
                "charging_unit_s": s.charging_unit_s,
                "interval_s": s.interval_s,
                "slots_per_instance": s.slots,
                "max_instances": s.max_instances,
                "min_instances": 0,
            },
            "safety": {"max_instances": s.max_instances, "max_launches_per_interval": s.max_instances},
            "state_path": str(self.state_path),
            "log": {"decisions_path": str(self.decisions_path)},
        }
        config = _merged(config, s.config)
        self.config_path.write_text(json.dumps(config, indent=1) + "\n")  # JSON is YAML
        return self.config_path

    def start(self) -> None:
        if self.process is not None and self.process.poll() is None:
            raise RealPoolError("the daemon is already running")
        env = os.environ | self.pool.client_env("daemon") | _aws_env()
        log = (self.workdir / "daemon" / "daemon.log").open("ab")
        self.process = subprocess.Popen(
            [sys.executable, "-m", "wire_daemon.cli.main", "run", "--config", str(self.config_path)],
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )

    def stop(self, timeout: float = 60.0) -> int:
        """SIGTERM, as systemd stops it: the iteration finishes and the instances stay up."""
        process, self.process = self.process, None
        if process is None:
            return 0
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
            try:
                return process.wait(timeout)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(10)
                raise RealPoolError(f"the daemon did not stop within {timeout:.0f} s of SIGTERM") from None
        return process.returncode

    def decisions(self) -> list[dict[str, Any]]:
        if not self.decisions_path.exists():
            return []
        records = (json.loads(line) for line in self.decisions_path.read_text().splitlines() if line.strip())
        return [r for r in records if r.get("event") != "run"]  # each start's header is no decision


@dataclass(frozen=True)
class CloudHistory:
    """Every instance moto knows, with the times the hypervisor saw it boot and end."""

    launched: dict[str, float]  # instance -> launch time (epoch s)
    ended: dict[str, float]  # instance -> when it was gone (epoch s)
    live: list[str]
    peak: int


def cloud_history(ec2: Any, hypervisor: Hypervisor, pool_name: str | None = None) -> CloudHistory:
    """Every instance of the pool (tag ``wire:pool``; all of moto's without a name), and when each ended."""
    filters = [{"Name": "tag:wire:pool", "Values": [pool_name]}] if pool_name else []
    reservations = ec2.describe_instances(Filters=filters)["Reservations"]
    instances = [i for r in reservations for i in r["Instances"]]
    launched = {i["InstanceId"]: i["LaunchTime"].timestamp() for i in instances}
    live = [i["InstanceId"] for i in instances if i["State"]["Name"] in ("pending", "running")]
    gone = [i["InstanceId"] for i in instances if i["State"]["Name"] in GONE_STATES]
    ended = hypervisor.ends_once_seen(gone, timeout=END_SEEN_TIMEOUT_S)
    return CloudHistory(launched, ended, live, _peak(launched, ended))


def _peak(launched: dict[str, float], ended: dict[str, float]) -> int:
    """Most instances alive at once: a sweep over launch (+1) and end (-1) times."""
    changes = sorted([(t, 1) for t in launched.values()] + [(t, -1) for t in ended.values()])
    alive = peak = 0
    for _, step in changes:
        alive += step
        peak = max(peak, alive)
    return peak


def wait_for_dag(dag: Path, timeout_s: float, poll_s: float = 2.0) -> int:
    """DAGMan's exit status, from its ``.dagman.out``, once it has finished."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        status = dag_exit_status(dag)
        if status is not None:
            return status
        time.sleep(poll_s)
    raise RealPoolError(f"{dag.name}: DAGMan did not finish within {timeout_s:.0f} s")


def dag_exit_status(dag: Path) -> int | None:
    """DAGMan's exit status from its ``.dagman.out``; None while it has not finished. DAGMan stopped with its
    schedd (status 3) is started again by the schedd: not finished either."""
    out = dag.with_name(dag.name + ".dagman.out")
    if out.exists():
        for line in reversed(out.read_text(errors="replace").splitlines()[-40:]):
            if "STARTING UP" in line:
                return None
            if "EXITING WITH STATUS" in line:
                status = int(line.rsplit(None, 1)[-1])
                return None if status == 3 else status
    return None


def _merged(base: Mapping[str, Any], more: Mapping[str, Any]) -> dict[str, Any]:
    """``base`` with ``more`` laid over it: mappings merged key by key, anything else replaced."""
    out = dict(base)
    for key, value in more.items():
        old = out.get(key)
        out[key] = _merged(old, value) if isinstance(old, Mapping) and isinstance(value, Mapping) else value
    return out


def _aws_env() -> dict[str, str]:
    return {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing", "AWS_DEFAULT_REGION": REGION}


def _chown_tree(root: Path, pool: PersonalPool) -> None:
    """DAGMan runs as the pool user and writes its logs beside the .dag."""
    assert pool.user is not None
    for path in [root, *root.rglob("*")]:
        os.chown(path, pool.user.uid, pool.user.gid)
