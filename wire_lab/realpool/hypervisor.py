"""A test "hypervisor": turns moto's EC2 instances into real HTCondor workers, and back.

It polls moto's EC2 server about once a second, the way a cloud's control plane
would act on its API's state:

* an instance that is ``running`` gets a worker booted from *its own*
  user-data (DescribeInstanceAttribute userData), one boot lag after its
  launch time, as a VM becomes usable a while after RunInstances;
* an instance that became ``shutting-down``, ``terminated``, ``stopping`` or
  ``stopped`` has its worker killed (SIGKILL of all its processes: running
  jobs are lost, as when a VM vanishes);
* a worker that powered itself off (the dead-man switch) gets its instance
  terminated in moto, as EC2 does with InstanceInitiatedShutdownBehavior
  terminate.

Every boot, kill and power-off goes into ``timeline`` for the tests.
"""

from __future__ import annotations

import base64
import logging
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Self

from wire_lab.realpool.errors import RealPoolError
from wire_lab.realpool.worker import Worker

log = logging.getLogger(__name__)

GONE_STATES = frozenset({"shutting-down", "terminated", "stopping", "stopped"})
END_KINDS = frozenset({"kill", "poweroff", "exit", "boot-failed", "unbooted"})  # the events that end an instance


@dataclass(frozen=True)
class Event:
    at: float  # wall-clock time
    kind: str  # boot | boot-failed | kill | poweroff | exit | unbooted | error
    instance_id: str
    detail: str = ""


BootFn = Callable[[str, str], Worker]  # (instance id, user-data) -> a booted worker


@dataclass
class Hypervisor:
    endpoint_url: str
    boot: BootFn
    boot_lag_s: float = 20.0
    poll_s: float = 1.0
    region: str = "us-east-1"
    filters: list[dict[str, Any]] = field(default_factory=list)  # DescribeInstances filters, e.g. a pool tag
    workers: dict[str, Worker] = field(default_factory=dict)
    timeline: list[Event] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)
        self._done: set[str] = set()  # instances booted once (or gone): never booted again
        self._seen: dict[str, str] = {}  # instance -> its worker's state at this thread's last look
        self._client: Any = None

    # -- lifecycle ---------------------------------------------------------------

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> Self:
        self._client = ec2_client(self.endpoint_url, self.region)
        self._thread = threading.Thread(target=self._run, name="realpool-hypervisor", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop polling and kill every worker still up."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(30.0)
        for worker in list(self.workers.values()):
            worker.stop()

    # -- for tests -------------------------------------------------------------------

    def events(self, kind: str | None = None, instance_id: str | None = None) -> list[Event]:
        with self._lock:
            return [
                e
                for e in self.timeline
                if (kind is None or e.kind == kind) and (instance_id is None or e.instance_id == instance_id)
            ]

    def ends_once_seen(self, instance_ids: Iterable[str], timeout: float) -> dict[str, float]:
        """When each instance ended, waiting up to ``timeout`` for this thread to notice the ones that are
        gone in the cloud but not yet here: killing a worker takes seconds, and the cloud says "terminated"
        at once. Instances still unseen at the deadline are left out."""
        wanted = set(instance_ids)
        deadline = time.monotonic() + timeout
        with self._changed:
            while True:
                ended = {e.instance_id: e.at for e in self.timeline if e.kind in END_KINDS and e.instance_id in wanted}
                left = deadline - time.monotonic()
                if len(ended) == len(wanted) or left <= 0:
                    return ended
                self._changed.wait(min(left, 0.5))

    def wait_event(self, kind: str, instance_id: str, timeout: float) -> Event:
        deadline = time.monotonic() + timeout
        with self._changed:
            while True:
                found = [e for e in self.timeline if e.kind == kind and e.instance_id == instance_id]
                if found:
                    return found[0]
                left = deadline - time.monotonic()
                if left <= 0:
                    seen = [f"{e.kind}:{e.instance_id}" for e in self.timeline[-5:]]
                    raise RealPoolError(
                        f"hypervisor: no {kind} event for {instance_id} in {timeout:.0f} s "
                        f"(last events: {', '.join(seen) or 'none'})"
                    )
                self._changed.wait(min(left, 0.5))

    # -- the loop ----------------------------------------------------------------------

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self._step()
            except Exception as exc:  # noqa: BLE001 - keep polling; the timeline shows it
                log.warning("hypervisor step failed: %s", exc)
                self._record("error", "", str(exc).splitlines()[0] if str(exc) else type(exc).__name__)
            self._stop.wait(self.poll_s)

    def _step(self) -> None:
        now = time.time()
        for instance in self._instances():
            iid, state = instance["InstanceId"], instance["State"]["Name"]
            worker = self.workers.get(iid)
            if state in GONE_STATES:
                if worker is not None and worker.poll() == "running":
                    worker.kill()
                    self._record("kill", iid, state)
                elif worker is None and iid not in self._done:
                    # Ended inside its boot lag (the daemon let a request go): it ends with no worker.
                    self._record("unbooted", iid, state)
                self._done.add(iid)
            elif (
                state == "running"
                and worker is None
                and iid not in self._done
                and now >= _launched_at(instance) + self.boot_lag_s
            ):
                self._boot(iid)
        self._watch_workers()

    def _instances(self) -> list[dict[str, Any]]:
        found: list[dict[str, Any]] = []
        args: dict[str, Any] = {"Filters": self.filters} if self.filters else {}
        while True:
            reply = self._client.describe_instances(**args)
            found.extend(i for r in reply.get("Reservations", []) for i in r.get("Instances", []))
            if not reply.get("NextToken"):
                return found
            args["NextToken"] = reply["NextToken"]

    def _boot(self, iid: str) -> None:
        self._done.add(iid)  # one boot per instance, failed or not
        try:
            worker = self.boot(iid, self._user_data(iid))
        except Exception as exc:  # noqa: BLE001 - any broken boot is the instance's failure, not the loop's
            # The boot script powers a broken worker off (after a grace period on a VM; at once here).
            self._client.terminate_instances(InstanceIds=[iid])
            self._record("boot-failed", iid, str(exc))
            return
        self.workers[iid] = worker
        self._record("boot", iid, f"master pid {worker.master_pid}")

    def _user_data(self, iid: str) -> str:
        reply = self._client.describe_instance_attribute(InstanceId=iid, Attribute="userData")
        value = reply.get("UserData", {}).get("Value", "")
        if not value:
            raise RealPoolError(f"instance {iid}: has no user-data")
        return base64.b64decode(value).decode()

    def _watch_workers(self) -> None:
        # Compare with what this thread saw last, not with worker.state before poll(): a test may poll too.
        for iid, worker in list(self.workers.items()):
            before = self._seen.get(iid, "running")
            after = self._seen[iid] = worker.poll()
            if before == "running" and after == "powered-off":
                self._client.terminate_instances(InstanceIds=[iid])  # first: the event says it is done
                self._record("poweroff", iid, "dead-man switch: the master ran the shutdown script")
            elif before == "running" and after == "exited":
                self._record("exit", iid, "condor_master ended without powering off")

    def _record(self, kind: str, iid: str, detail: str) -> None:
        with self._changed:
            self.timeline.append(Event(time.time(), kind, iid, detail))
            self._changed.notify_all()


def ec2_client(endpoint_url: str, region: str = "us-east-1") -> Any:
    """A boto3 EC2 client for a test endpoint (moto), with dummy credentials only."""
    import boto3
    from botocore.config import Config

    return boto3.session.Session(
        aws_access_key_id="testing", aws_secret_access_key="testing", region_name=region
    ).client("ec2", endpoint_url=endpoint_url, config=Config(retries={"mode": "standard", "total_max_attempts": 2}))


def _launched_at(instance: dict[str, Any]) -> float:
    launched = instance.get("LaunchTime")
    return launched.timestamp() if isinstance(launched, datetime) else 0.0


def pool_booter(pool: Any, options: Any = None) -> BootFn:
    """Boot workers for a ``PersonalPool``: its chroot and work dir; its pool token and the workers'
    administration key for ``file`` delivery; each worker at its own loopback address."""
    from wire_lab.realpool.worker import WorkerOptions

    def boot(instance_id: str, user_data: str) -> Worker:
        return Worker(
            instance_id,
            user_data,
            pool.chroot,
            pool.workdir,
            file_token=pool.pool_token,
            file_admin_key=pool.worker_admin_key_b64,
            options=options or WorkerOptions(),
        ).boot()

    return boot
