"""The chaos runs: kill -9 of ``wire-daemon run`` and cloud faults, against moto and a live submit host.

``KillRun`` kills the daemon over and over while the workload cycles the pool,
a share of the kills aimed at a moment when a ``RunInstances`` call is open
(the proxy holds those calls so the kill lands inside one), and restarts it
at once. ``FaultRun`` injects faults at a given rate for a given time, without
kills. Both end the same way: no new workflow, the daemon left to release the
pool, a SIGTERM, and an audit against the endpoint:

* leaked: an instance the endpoint still has live that the state file does
  not hold as live (after every restart too: each instance live in the
  endpoint when the daemon died is in the state file, or ended, once the
  restarted daemon has written a decision);
* duplicates: a request (one client token) that made more than one
  reservation, more instances than the request asked for, or an instance the
  decisions log launched twice;
* peak: the most live instances the endpoint listed at once (sampled every
  poll), against ``max_instances``.

The proxy answers a repeated ``RunInstances`` with the same client token with
the first reply, as EC2 does (moto does not), so a retry is not a duplicate.
"""

from __future__ import annotations

import random
import time
import uuid
from collections import Counter, defaultdict
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from wire_lab.chaos.daemon import DaemonProcess, DaemonSettings, count_lines, read_decisions, read_store
from wire_lab.chaos.faultproxy import FaultPlan, FaultProxy
from wire_lab.chaos.world import LIVE, CycledSubmitHost, Workload, describe_pool

REGION = "us-east-1"


# -- the endpoint ------------------------------------------------------------------------


@dataclass
class Moto:
    """moto's EC2 server on loopback, with a network for the workers."""

    url: str
    server: Any
    image_id: str = ""
    subnet_id: str = ""

    @classmethod
    def start(cls) -> Moto:
        from moto.server import ThreadedMotoServer

        server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
        server.start()
        host, port = server.get_host_and_port()
        return cls.attach(f"http://{host}:{port}", server)

    @classmethod
    def attach(cls, url: str, server: Any = None) -> Moto:
        """An endpoint already running (``server``: what ``stop`` stops, if ours)."""
        moto = cls(url, server)
        ec2 = moto.client()
        moto.image_id = ec2.describe_images(Owners=["amazon"])["Images"][0]["ImageId"]
        vpc = ec2.create_vpc(CidrBlock="10.30.0.0/16")["Vpc"]["VpcId"]
        moto.subnet_id = ec2.create_subnet(VpcId=vpc, CidrBlock="10.30.0.0/18")["Subnet"]["SubnetId"]
        return moto

    def client(self) -> Any:
        import boto3
        from botocore.config import Config

        session = boto3.session.Session(
            aws_access_key_id="testing", aws_secret_access_key="testing", region_name=REGION
        )
        return session.client("ec2", endpoint_url=self.url, config=Config(retries={"total_max_attempts": 1}))

    def stop(self) -> None:
        if self.server is not None:
            self.server.stop()


# -- one run's set-up -----------------------------------------------------------------------


@dataclass(frozen=True)
class RunShape:
    """The pool, the pace and the workload shared by every run."""

    max_instances: int = 4
    slots: int = 2
    max_launches_per_interval: int = 1
    interval_s: float = 1.0
    charging_unit_s: float = 6.0
    drain_timeout_s: float = 120.0
    workload: Workload = field(default_factory=Workload)


@dataclass
class Rig:
    """A proxy, a submit host and a daemon for one run, in ``work``."""

    work: Path
    moto: Moto
    shape: RunShape
    proxy: FaultProxy
    world: CycledSubmitHost
    daemon: DaemonProcess
    settings: DaemonSettings
    ec2: Any

    @classmethod
    def build(cls, work: Path, moto: Moto, shape: RunShape, plan: FaultPlan) -> Rig:
        work.mkdir(parents=True, exist_ok=True)
        pool = f"chaos-{uuid.uuid4().hex[:8]}"
        proxy = FaultProxy(moto.url, plan, idempotent=True).start()
        settings = DaemonSettings(
            submit_root=work / "submit",
            endpoint=proxy.url,
            pool=pool,
            image_id=moto.image_id,
            subnet_id=moto.subnet_id,
            state_path=work / "state.sqlite",
            decisions_path=work / "decisions.jsonl",
            slots=shape.slots,
            max_instances=shape.max_instances,
            max_launches_per_interval=shape.max_launches_per_interval,
            interval_s=shape.interval_s,
            charging_unit_s=shape.charging_unit_s,
        )
        config = work / "wire-daemon.yaml"
        config.write_text(settings.yaml())
        world = CycledSubmitHost(work / "submit", moto.client(), pool, shape.workload)
        daemon = DaemonProcess(config, work / "daemon.stderr")
        return cls(work, moto, shape, proxy, world, daemon, settings, moto.client())

    def start(self) -> None:
        self.world.start()
        self.daemon.start()

    def check_world(self) -> None:
        if self.world.error is not None:
            raise RuntimeError(f"the emulated submit host failed: {self.world.error!r}") from self.world.error

    def finish(self) -> float:
        """No new workflow; wait for the last to end and the pool to be released; stop the daemon."""
        started = time.time()
        self.world.more.clear()
        deadline = started + self.shape.drain_timeout_s
        while time.time() < deadline and not (self.world.idle and self.world.cloud.live_count == 0):
            self.check_world()
            self.daemon.check()
            time.sleep(0.2)
        self.daemon.terminate()
        time.sleep(2 * self.shape.workload.poll_s + 0.5)  # the mirror's last look
        self.close()
        return time.time() - started

    def close(self) -> None:
        """Stop whatever still runs (after ``finish``, or after a failure on the way)."""
        if self.daemon.alive:
            self.daemon.terminate()
        self.world.close()
        self.proxy.stop()


# -- the audit -----------------------------------------------------------------------------


@dataclass
class Audit:
    instances: int = 0
    requests: int = 0
    leaked: list[str] = field(default_factory=list)
    left_live: list[str] = field(default_factory=list)
    duplicate_requests: list[str] = field(default_factory=list)
    oversized_requests: list[str] = field(default_factory=list)
    launched_twice: list[str] = field(default_factory=list)
    unknown_after_restart: list[str] = field(default_factory=list)

    @property
    def duplicates(self) -> int:
        return len(self.duplicate_requests) + len(self.oversized_requests) + len(self.launched_twice)


def final_audit(rig: Rig, audit: Audit) -> Audit:
    raw = describe_pool(rig.ec2, rig.settings.pool)
    store = read_store(rig.settings.state_path)
    states = {i["InstanceId"]: i["State"]["Name"] for _, i in raw}
    audit.instances = len(states)
    audit.requests = len(store.requests)
    audit.left_live = sorted(i for i, s in states.items() if s in LIVE)
    audit.leaked = sorted(i for i in audit.left_live if i not in store.live())
    reservations: dict[str, set[str]] = defaultdict(set)
    members: Counter[str] = Counter()
    for reservation_id, instance in raw:
        tags = {t["Key"]: t["Value"] for t in instance.get("Tags", [])}
        request = tags.get("wire:request-id", "")
        reservations[request].add(reservation_id)
        members[request] += 1
    audit.duplicate_requests = sorted(r for r, ids in reservations.items() if len(ids) > 1)
    audit.oversized_requests = sorted(r for r, n in members.items() if r in store.requests and n > store.requests[r][0])
    launched = Counter(i for r in read_decisions(rig.settings.decisions_path) for i in r.get("launched", []))
    audit.launched_twice = sorted(i for i, n in launched.items() if n > 1)
    return audit


@dataclass
class PendingCheck:
    """The endpoint's live instances when the daemon died, to check once the restarted daemon has decided."""

    kill: int
    live: set[str]
    decisions_at_restart: int


def check_after_restart(rig: Rig, pending: list[PendingCheck], audit: Audit) -> list[PendingCheck]:
    """Check the pending snapshots the daemon has caught up with; return those it has not yet."""
    decided = count_lines(rig.settings.decisions_path)
    ready = [p for p in pending if decided > p.decisions_at_restart]
    if not ready:
        return pending
    store = read_store(rig.settings.state_path)
    states = {i["InstanceId"]: i["State"]["Name"] for _, i in describe_pool(rig.ec2, rig.settings.pool)}
    for check in ready:
        for instance_id in sorted(check.live):
            if instance_id not in store.instances and states.get(instance_id) in LIVE:
                audit.unknown_after_restart.append(f"{instance_id} (kill {check.kill})")
    return [p for p in pending if p not in ready]


# -- kill -9 ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class KillPlan:
    kills: int = 200
    launch_kills: int = 50  # at least this many with a RunInstances call open
    cycles: int = 20  # and the pool cycled at least this often
    launch_share: float = 0.4  # aim this share of the kills at an open launch
    hold_s: float = 1.5  # how long the proxy holds each RunInstances
    gap_s: tuple[float, float] = (1.0, 4.0)  # an unaimed kill: this long after the (re)start
    launch_wait_s: float = 8.0  # an aimed kill waits this long for a launch, then kills anyway
    max_minutes: float = 30.0
    seed: int = 14


@dataclass
class PoolRun:
    """What a kill run and a fault run both measure: the pool's cycles and peak, the daemon's exits, the audit."""

    max_instances: int = 0
    minutes: float = 0.0
    cycles: int = 0
    cycle_peaks: list[int] = field(default_factory=list)
    workflows_done: int = 0
    tasks_done: int = 0
    peak: int = 0
    samples: int = 0
    unexpected_exits: list[int] = field(default_factory=list)
    tracebacks: int = 0
    requests: int = 0  # the daemon's cloud requests, through the proxy
    faulted: int = 0
    proxy: dict[str, object] = field(default_factory=dict)
    audit: Audit = field(default_factory=Audit)

    def as_dict(self) -> dict[str, object]:
        out = asdict(self)
        out["leaked"] = len(self.audit.leaked)
        out["duplicates"] = self.audit.duplicates
        return out

    def _clean(self) -> bool:
        a = self.audit
        return not (a.leaked or a.duplicates) and self.peak <= self.max_instances


@dataclass
class KillResult(PoolRun):
    kills: int = 0
    kills_launch_open: int = 0
    kills_request_open_in_state: int = 0
    restarts: int = 0

    @property
    def ok(self) -> bool:
        return self._clean() and not self.audit.unknown_after_restart


def run_kills(work: Path, moto: Moto, shape: RunShape, plan: KillPlan) -> KillResult:
    rig = Rig.build(work, moto, shape, FaultPlan(hold_s=plan.hold_s, seed=plan.seed))
    rng = random.Random(plan.seed)
    result = KillResult(max_instances=shape.max_instances)
    pending: list[PendingCheck] = []
    started = time.time()
    rig.start()
    try:
        while not _kills_done(rig, plan, result) and time.time() - started < plan.max_minutes * 60:
            aimed = result.kills_launch_open < plan.launch_share * (result.kills + 1)
            open_now = _wait_for_kill(rig, plan, rng, aimed)
            rig.daemon.kill9()
            result.kills += 1
            result.kills_launch_open += open_now
            store = read_store(rig.settings.state_path)
            result.kills_request_open_in_state += store.open_requests() > 0
            live = {i["InstanceId"] for _, i in describe_pool(rig.ec2, rig.settings.pool) if i["State"]["Name"] in LIVE}
            pending.append(PendingCheck(result.kills, live, count_lines(rig.settings.decisions_path)))
            rig.daemon.start()
            result.restarts += 1
            pending = check_after_restart(rig, pending, result.audit)
            rig.check_world()
        result.minutes = (time.time() - started) / 60
        rig.finish()
        check_after_restart(rig, pending, result.audit)
    finally:
        rig.close()
    _fill(result, rig)
    return result


def _kills_done(rig: Rig, plan: KillPlan, result: KillResult) -> bool:
    cycled = rig.world.cloud.cycles >= plan.cycles
    return result.kills >= plan.kills and result.kills_launch_open >= plan.launch_kills and cycled


def _wait_for_kill(rig: Rig, plan: KillPlan, rng: random.Random, aimed: bool) -> bool:
    """Wait until the moment to kill; whether a RunInstances call of this daemon is open then."""
    since = rig.daemon.started_at
    if aimed:
        deadline = time.time() + plan.launch_wait_s
        while time.time() < deadline and not rig.proxy.launch_open(since):
            _tick(rig)
        if rig.proxy.launch_open(since):
            time.sleep(rng.uniform(0.0, plan.hold_s * 0.6))
    else:
        deadline = time.time() + rng.uniform(*plan.gap_s)
        while time.time() < deadline:
            _tick(rig)
    return rig.proxy.launch_open(since)


def _tick(rig: Rig) -> None:
    rig.check_world()
    rig.daemon.check()
    time.sleep(0.02)


def _fill(result: PoolRun, rig: Rig) -> None:
    final_audit(rig, result.audit)
    cloud = rig.world.cloud
    result.cycles, result.peak, result.samples = cloud.cycles, cloud.peak, cloud.samples
    result.cycle_peaks = list(cloud.cycle_peaks)
    result.workflows_done, result.tasks_done = rig.world.workflows_done, rig.world.tasks_done
    result.unexpected_exits = list(rig.daemon.unexpected_exits)
    result.tracebacks = rig.daemon.tracebacks()
    result.proxy = rig.proxy.stats.as_dict()
    result.requests, result.faulted = sum(rig.proxy.stats.requests.values()), rig.proxy.stats.total_faults()


# -- cloud faults ------------------------------------------------------------------------------


@dataclass
class FaultResult(PoolRun):
    rate: float = 0.0
    iterations: int = 0
    iterations_per_minute: float = 0.0
    drain_s: float = 0.0

    @property
    def ok(self) -> bool:
        return self._clean() and not self.unexpected_exits


def run_faults(work: Path, moto: Moto, shape: RunShape, rate: float, seconds: float, seed: int = 14) -> FaultResult:
    """The cycled workload for ``seconds`` with ``rate`` of the daemon's cloud requests failing."""
    rig = Rig.build(work, moto, shape, FaultPlan(rate=rate, seed=seed))
    result = FaultResult(rate=rate, max_instances=shape.max_instances)
    rig.start()
    try:
        started = time.time()
        first = 0
        while time.time() - started < seconds:
            _tick(rig)
            if not first and count_lines(rig.settings.decisions_path):
                first = count_lines(rig.settings.decisions_path)  # from the first decision: start-up apart
                started_deciding = time.time()
        if first:
            result.iterations = count_lines(rig.settings.decisions_path) - first
            result.minutes = (time.time() - started_deciding) / 60
            result.iterations_per_minute = result.iterations / result.minutes if result.minutes else 0.0
        result.drain_s = rig.finish()
    finally:
        rig.close()
    _fill(result, rig)
    return result
