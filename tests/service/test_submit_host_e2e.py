"""``wire-daemon run`` on a submit host, end to end, in accelerated time.

The daemon runs as a real process with ``site.kind: condor`` and an EC2 cloud.
Around it:

* a live-writing emulated submit host (the monitor's emulator) writes a real
  Pegasus submit dir under the submit root as the workflow runs;
* moto's EC2 server is the cloud; the emulated pool mirrors it: an instance
  the daemon launches in moto joins the emulated pool after the boot lag (with
  moto's private address, which the event logs then name), and one it
  terminates in moto leaves it, killing its running jobs.

Time is accelerated by shrinking the workflow (tasks at half their traced
length), the interval (2 s) and the charging unit (15 s), not by faking the
clock: the daemon runs on the wall clock as in production. No schedd exists
here, so ``condor.control`` is off (the boost and drains are logged).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field, replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from wire_daemon.core.config import EmulationConfig
from wire_daemon.core.events import EventKind
from wire_daemon.emulated.traces import bundled_trace_path, load_trace
from wire_daemon.execute.providers.base import TAG_POOL
from wire_lab.live_writer import LiveEmulation, WriterOptions, build_live

# The slow tier (-m slow): every test runs the daemon as a process on a live-written submit host.
pytestmark = pytest.mark.slow

ENV = os.environ | {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_DEFAULT_REGION": "us-east-1",
}
SLOTS = 2
MAX_INSTANCES = 4
WORLD = EmulationConfig(
    boot_lag_s=2.0, negotiation_interval_s=0.5, submit_delay_s=0.1, time_scale=0.5, initial_instances=0
)


# -- the world around the daemon --------------------------------------------------------


@dataclass
class MirroredWorld:
    """The emulated submit host and pool, following the cloud endpoint's instances."""

    live: LiveEmulation
    ec2: object
    pool: str
    epoch: float  # wall time of virtual time 0 (the writer's epoch)
    seen: dict[str, str] = field(default_factory=dict)  # every instance in the endpoint -> last state
    peak_live: int = 0
    error: BaseException | None = None
    stop: threading.Event = field(default_factory=threading.Event)

    def run(self) -> None:
        closed = False
        try:
            while not self.stop.is_set():  # mirroring goes on after the workflow: the pool is released then
                self._mirror()
                if not closed:
                    self.live.advance_to(time.time() - self.epoch)
                if self.live.finished and not closed:
                    self.live.writer.close(self.live.site.last_finish)  # DAGMan finished
                    closed = True
                time.sleep(0.05)
        except BaseException as exc:  # surfaced by the test
            self.error = exc

    def _mirror(self) -> None:
        if self.ec2 is None:
            return
        reply = self.ec2.describe_instances(Filters=[{"Name": f"tag:{TAG_POOL}", "Values": [self.pool]}])
        instances = [i for r in reply["Reservations"] for i in r["Instances"]]
        alive = {i.instance_id for i in self.live.site.list_instances()}
        for raw in instances:
            instance_id, state = raw["InstanceId"], raw["State"]["Name"]
            if state in ("pending", "running") and instance_id not in self.seen:
                self._catch_up()
                self.live.writer.hosts.pin(instance_id, raw["PrivateIpAddress"])
                self.live.site.adopt(instance_id)
            elif state in ("shutting-down", "terminated") and instance_id in alive:
                self._catch_up()
                self.live.site.terminate([instance_id])
            self.seen[instance_id] = state
        self.peak_live = max(self.peak_live, sum(s in ("pending", "running") for s in self.seen.values()))

    def _catch_up(self) -> None:
        """Bring the world to now before a pool change, so the change happens now."""
        if not self.live.finished:
            self.live.advance_to(time.time() - self.epoch)

    def done_by(self, virtual_t: float) -> int:
        return sum(1 for e in self.live.emitted if e.kind == EventKind.FINISHED and e.time <= virtual_t)


def start_world(
    root: Path, ec2: object, pool: str, initial_instances: int = 0
) -> tuple[MirroredWorld, threading.Thread]:
    epoch = time.time()
    config = replace(WORLD, initial_instances=initial_instances)
    live = build_live(
        load_trace(bundled_trace_path()),
        root / "montage-run0001",
        config,
        SLOTS,
        15.0,
        WriterOptions(epoch=epoch, subsecond_times=True, label="montage"),
    )
    world = MirroredWorld(live, ec2, pool, epoch)
    thread = threading.Thread(target=world.run, daemon=True)
    thread.start()
    return world, thread


# -- the daemon ---------------------------------------------------------------------------


def write_config(tmp: Path, endpoint: str, network, pool: str, dry_run: bool = False) -> Path:
    path = tmp / "wire-daemon.yaml"
    path.write_text(
        f"""
site: {{kind: condor, submit_root: {tmp / "submit"}}}
condor: {{control: "off", settle_s: 0.5}}
cloud:
  kind: ec2
  pool: {pool}
  ec2: {{region: us-east-1, image_id: {network.image_id}, instance_type: c5.large,
         subnet_id: {network.subnet_id}, endpoint_url: "{endpoint}"}}
steering: {{interval_s: 2, charging_unit_s: 15, slots_per_instance: {SLOTS}, max_instances: {MAX_INSTANCES},
           min_instances: 0, release_guard_s: 0.5}}
safety: {{max_instances: {MAX_INSTANCES}, dry_run: {str(dry_run).lower()}}}
state_path: {tmp / "state.sqlite"}
log: {{decisions_path: {tmp / "decisions.jsonl"}}}
"""
    )
    return path


def start_daemon(config: Path) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "wire_daemon.cli.main", "run", "--config", str(config)],
        env=ENV,
        stderr=subprocess.PIPE,
        text=True,
    )


def stop_daemon(proc: subprocess.Popen) -> str:
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err
    return err


def status(config: Path) -> dict:
    done = subprocess.run(
        [sys.executable, "-m", "wire_daemon.cli.main", "status", "--config", str(config), "--json"],
        capture_output=True,
        text=True,
        env=ENV,
        check=True,
    )
    return json.loads(done.stdout)


def records(tmp: Path) -> list[dict]:
    return [json.loads(line) for line in (tmp / "decisions.jsonl").read_text().splitlines()]


def _notes_with(tmp: Path, prefix: str) -> bool:
    try:
        return any(n.startswith(prefix) for r in records(tmp) for n in r.get("notes", []))
    except (FileNotFoundError, json.JSONDecodeError):  # not written yet, or a line half-written
        return False


def wait_for(condition, timeout: float, what: str, world: MirroredWorld | None = None) -> None:
    deadline = time.time() + timeout
    while not condition():
        if world is not None and world.error is not None:
            raise world.error
        assert time.time() < deadline, f"timed out waiting for {what}"
        time.sleep(0.2)


def check_status(config: Path, world: MirroredWorld, tasks: int) -> dict:
    """``status --json`` agrees with the world at the moment of its snapshot."""
    report = status(config)
    assert report["daemon"] == "running"
    t = report["time"] - world.epoch
    done = sum(s["done"] for s in report["stages"])
    assert sum(s["tasks"] for s in report["stages"]) == tasks
    assert world.done_by(t - 1.5) <= done <= world.done_by(t + 1.5), (t, done)
    assert {i["instance_id"] for i in report["pool"]} <= set(world.seen)
    for instance in report["pool"]:
        assert 0 <= instance["busy_slots"] <= instance["slots"] == SLOTS
        assert 0 <= instance["next_charge_in_s"] <= 15
    assert report["cost_units"] >= len(report["pool"])
    return report


# -- the tests ------------------------------------------------------------------------------


@pytest.fixture
def pool_name(request) -> str:
    return f"e2e-{abs(hash(request.node.name)) % 10**8}"


def test_run_on_a_submit_host_with_moto(tmp_path, moto_endpoint, network, boto_client, pool_name):
    (tmp_path / "submit").mkdir()
    ec2 = boto_client("ec2", fresh=True)
    config = write_config(tmp_path, moto_endpoint, network, pool_name)
    world, thread = start_world(tmp_path / "submit", ec2, pool_name)
    tasks = world.live.site.wf.n_tasks
    daemon = start_daemon(config)
    try:
        # Checkpoint 1: the pool has grown and the status follows the run.
        wait_for(
            lambda: len(world.seen) >= 2 and world.done_by(time.time() - world.epoch) >= 10,
            300,
            "the pool to grow",
            world,
        )
        check_status(config, world, tasks)

        # SIGTERM mid-run: the iteration ends, the state persists, the instances stay up.
        live_before = {i for i, s in world.seen.items() if s in ("pending", "running")}
        stop_daemon(daemon)
        assert status(config)["daemon"] == "down"
        time.sleep(1.0)
        assert {i for i, s in world.seen.items() if s in ("pending", "running")} == live_before

        # Restart: it re-reads the submit dir, knows its instances, and launches no duplicate.
        daemon = start_daemon(config)
        wait_for(lambda: len(records(tmp_path)) > 0 and status(config).get("daemon") == "running", 120, "the restart")
        wait_for(lambda: world.done_by(time.time() - world.epoch) >= tasks // 2, 300, "half the workflow", world)
        check_status(config, world, tasks)

        wait_for(lambda: world.live.finished, 600, "the workflow to finish", world)
        wait_for(
            lambda: all(s in ("shutting-down", "terminated") for s in world.seen.values()),
            300,
            "the pool to be released once the workflow is done",
            world,
        )
        time.sleep(3)  # one more iteration: its record lists the last terminations
        final = status(config)
        assert final["stages"] == [] and final["pool"] == []  # the finished workflow is forgotten
    finally:
        world.stop.set()
        thread.join(timeout=10)
        if daemon.poll() is None:
            stop_daemon(daemon)
    assert world.error is None

    log = records(tmp_path)
    launched = [i for r in log for i in r.get("launched", [])]
    terminated = [i for r in log for i in r.get("terminated", [])]
    assert len(launched) == len(set(launched)), "an instance was launched twice"
    assert set(launched) == set(world.seen), "moto's instances are exactly the ones the log launched"
    assert sorted(terminated) == sorted(world.seen), "each one terminated once, as the log says"
    assert world.peak_live <= MAX_INSTANCES
    assert world.live.site.n_done == tasks
    assert final["cost_units"] >= len(launched)


class RecordingEndpoint(BaseHTTPRequestHandler):
    """An HTTP endpoint that records every request and answers none of them usefully."""

    requests: list[str] = []

    def do_POST(self) -> None:  # noqa: N802 (the stdlib's name)
        self.requests.append(self.path)
        self.send_response(500)
        self.end_headers()

    do_GET = do_POST

    def log_message(self, *args: object) -> None:
        pass


def test_dry_run_makes_no_cloud_call_and_logs_what_it_would_do(tmp_path, network, pool_name):
    server = ThreadingHTTPServer(("127.0.0.1", 0), RecordingEndpoint)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    endpoint = f"http://127.0.0.1:{server.server_address[1]}"
    (tmp_path / "submit").mkdir()
    config = write_config(tmp_path, endpoint, network, pool_name, dry_run=True)
    # The daemon launches nothing, so the workflow runs on a static pool the daemon does not own.
    world, thread = start_world(tmp_path / "submit", None, pool_name, initial_instances=MAX_INSTANCES)
    daemon = start_daemon(config)
    try:
        wait_for(lambda: world.live.finished, 600, "the workflow to finish", world)
        # The release comes some intervals after the end; a loaded machine stretches them.
        wait_for(lambda: _notes_with(tmp_path, "dry-run: would terminate"), 120, "a would-terminate note", world)
    finally:
        world.stop.set()
        thread.join(timeout=10)
        stop_daemon(daemon)
        server.shutdown()
    assert world.error is None
    assert RecordingEndpoint.requests == [], "dry-run called the cloud"

    log = records(tmp_path)
    notes = [n for r in log for n in r.get("notes", [])]
    launched = [i for r in log for i in r.get("launched", [])]
    assert any(n.startswith("dry-run: would launch") for n in notes)
    assert launched and all(i.startswith("dry-run-") for i in launched)
    assert any(n.startswith("dry-run: would terminate") for n in notes)
    assert not any(n.startswith("cloud error") for n in notes)
    assert any("condor control off: would boost JobPrio" in n for n in notes)
