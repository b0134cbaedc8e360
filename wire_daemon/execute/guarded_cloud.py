"""The Execute step's guard rails between the policy and a real cloud.

``GuardedCloud`` implements the loop's ``Cloud`` port on top of a driver and
the state file. Whatever the policy asks, it:

* never exceeds ``max_instances`` live instances, never launches more than
  ``max_launches_per_interval`` at once, and never starts more charging units
  per hour than ``budget_units_per_hour`` (when set);
* in dry-run mode makes no cloud call at all, not even a listing: it keeps
  a pool of phantom instances (``dry-run-0001``...) that it "launches" and
  "terminates", so the decisions log reads as the real run would, and notes
  every call it would have made;
* backs off after instances die young or never join the pool, doubling the
  pause each time, so a broken image cannot become a redeploy loop;
* records each launch request before the cloud call and closes it after, so
  a daemon killed in between adopts the instances on restart
  (``reconcile``) instead of launching duplicates;
* turns every cloud error into a note for the decisions log; none escapes.

The cloud is the source of truth: ``reconcile`` adopts our tagged instances
the state file does not know, forgets those the cloud no longer has, and
terminates ours that are stopped, failed, or never joined the pool.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass, field
from typing import Callable, Protocol, Sequence

from wire_daemon.core.errors import CloudError, ConfigError
from wire_daemon.core.instances import Instance
from wire_daemon.core.store import InstanceRecord, StateStore

log = logging.getLogger(__name__)


class Driver(Protocol):
    slots_per_instance: int

    def list_instances(self, include_unusable: bool = False) -> list[Instance]: ...

    def find_request(self, request_id: str) -> list[Instance]: ...

    def launch(self, count: int, request_id: str | None = None, user_data: str | None = None) -> list[Instance]: ...

    def terminate(self, instance_ids: Sequence[str]) -> list[str]: ...


@dataclass(frozen=True)
class SafetyConfig:
    max_instances: int = 12
    max_launches_per_interval: int = 4
    budget_units_per_hour: float | None = None  # charging units started per rolling hour
    charging_unit_s: float = 3600.0
    dry_run: bool = False
    join_timeout_s: float = 900.0  # an instance not in the pool by then is a failure
    died_young_s: float = 600.0  # an instance gone sooner than this (not by us) is a failure
    terminate_unjoined: bool = True
    backoff_initial_s: float = 300.0
    backoff_max_s: float = 3600.0

    def validate(self) -> "SafetyConfig":
        for key in ("max_instances", "max_launches_per_interval"):
            if getattr(self, key) < 0:
                raise ConfigError(f"safety.{key} must be >= 0 (got {getattr(self, key)!r})")
        if self.budget_units_per_hour is not None and self.budget_units_per_hour < 0:
            raise ConfigError(f"safety.budget_units_per_hour must be >= 0 (got {self.budget_units_per_hour!r})")
        for key in ("charging_unit_s", "join_timeout_s", "died_young_s", "backoff_initial_s", "backoff_max_s"):
            if not getattr(self, key) > 0:
                raise ConfigError(f"safety.{key} must be > 0 (got {getattr(self, key)!r})")
        return self


@dataclass
class ReconcileReport:
    adopted: list[str] = field(default_factory=list)
    forgotten: list[str] = field(default_factory=list)
    terminated: list[str] = field(default_factory=list)
    requests_finished: list[str] = field(default_factory=list)
    requests_rolled_back: list[str] = field(default_factory=list)


class GuardedCloud:
    """The ``Cloud`` port with limits, dry-run, back-off and crash-safe bookkeeping."""

    def __init__(
        self,
        driver: Driver,
        store: StateStore,
        config: SafetyConfig,
        clock: Callable[[], float],
        joined: Callable[[str], bool] | None = None,
        holds_claims: Callable[[str], bool] | None = None,
    ) -> None:
        self.driver = driver
        self.store = store
        self.config = config.validate()
        self.clock = clock
        self.joined = joined  # does the pool see this instance's startd? (None: do not check)
        self.holds_claims = holds_claims  # re-checked right before a release (HTCondorControl.holds_claims)
        self.notes: list[str] = []
        self._backoff_until = float("-inf")
        self._backoff_s = config.backoff_initial_s
        self._ended_by_us: set[str] = set()
        self._phantoms: dict[str, Instance] = {}  # dry-run: the pool we would have
        self._phantom_ends: dict[str, float] = {}

    # -- the Cloud port -----------------------------------------------------------

    def list_instances(self) -> list[Instance]:
        if self.config.dry_run:
            return [i for k, i in self._phantoms.items() if k not in self._phantom_ends]
        try:
            live = self.driver.list_instances()
        except CloudError as exc:
            self._note(f"cloud error ({exc.kind}) listing instances: {exc}")
            return [self._as_instance(r) for r in self.store.instances()]  # last known pool
        self._notice_deaths(live)
        return live

    def launch(self, count: int) -> list[Instance]:
        allowed = self._allowed_launches(count)
        if allowed <= 0:
            return []
        if self.config.dry_run:
            self._note(f"dry-run: would launch {allowed} instance(s)")
            return self._launch_phantoms(allowed)
        request_id = self.store.open_request(allowed, now=self.clock())
        try:
            launched = self.driver.launch(allowed, request_id=request_id)
        except CloudError as exc:
            self._note(f"cloud error ({exc.kind}) launching {allowed}: {exc}")
            self._record(exc.partial or [], request_id)
            if not exc.retryable:
                self.store.close_request(request_id, "rolled_back" if not exc.partial else "done", now=self.clock())
            return list(exc.partial or [])
        self._record(launched, request_id)
        self.store.close_request(request_id, now=self.clock())
        return launched

    def terminate(self, instance_ids: Sequence[str]) -> None:
        instance_ids = self._unclaimed(instance_ids)
        if not instance_ids:
            return
        if self.config.dry_run:
            self._note(f"dry-run: would terminate {', '.join(instance_ids)}")
            for instance_id in instance_ids:
                if instance_id in self._phantoms:
                    self._phantom_ends.setdefault(instance_id, self.clock())
            return
        try:
            ended = self.driver.terminate(instance_ids)
        except CloudError as exc:
            self._note(f"cloud error ({exc.kind}) terminating {', '.join(instance_ids)}: {exc}")
            return
        for instance_id in ended:
            self._ended_by_us.add(instance_id)
            self.store.mark_ended(instance_id, "released", now=self.clock())

    def _unclaimed(self, instance_ids: Sequence[str]) -> list[str]:
        """Drop the instances a drained startd still runs a job on: they end when the job does."""
        if self.holds_claims is None:
            return list(instance_ids)
        busy = [i for i in instance_ids if self.holds_claims(i)]
        if busy:
            self._note(f"not terminating {', '.join(busy)}: a slot is still claimed after the drain")
        return [i for i in instance_ids if i not in busy]

    def take_notes(self) -> list[str]:
        notes, self.notes = self.notes, []
        return notes

    # -- start-up -------------------------------------------------------------------

    def reconcile(self) -> ReconcileReport:
        """Make the state file agree with the cloud; finish or roll back open requests."""
        report = ReconcileReport()
        if self.config.dry_run:
            self._note("dry-run: reconcile skipped (it would list the cloud)")
            return report
        self._settle_requests(report)
        cloud = {i.instance_id: i for i in self.driver.list_instances(include_unusable=True)}
        known = {r.instance_id: r for r in self.store.instances()}
        for instance_id, instance in cloud.items():
            if instance_id not in known:
                self._record([instance], instance.request_id or None)
                report.adopted.append(instance_id)
        for instance_id in known.keys() - cloud.keys():
            self.store.mark_ended(instance_id, "gone from the cloud", now=self.clock())
            report.forgotten.append(instance_id)
        doomed = [i.instance_id for i in cloud.values() if i.state in ("stopped", "failed")]
        doomed += [i.instance_id for i in cloud.values() if self._never_joined(i)]
        if doomed:
            self.terminate(sorted(set(doomed)))
            report.terminated = sorted(set(doomed))
        for line in _report_lines(report):
            self._note(line)
        return report

    def _settle_requests(self, report: ReconcileReport) -> None:
        for request in self.store.open_requests():
            found = self.driver.find_request(request.request_id)
            self._record([i for i in found if i.state != "terminated"], request.request_id)
            if found:
                self.store.close_request(request.request_id, now=self.clock())
                report.requests_finished.append(request.request_id)
            else:
                self.store.close_request(request.request_id, "rolled_back", now=self.clock())
                report.requests_rolled_back.append(request.request_id)

    # -- limits ------------------------------------------------------------------------

    # -- accounting ---------------------------------------------------------------------

    def cost_units(self, now: float) -> int:
        """Charging units started so far by every instance we launched (phantoms in dry-run)."""
        unit = self.config.charging_unit_s
        spans = (
            [(i.launch_time, self._phantom_ends.get(k, now)) for k, i in self._phantoms.items()]
            if self.config.dry_run
            else [(r.launch_time, r.ended_at if r.ended_at is not None else now) for r in self.store.instances(live_only=False)]
        )
        return sum(max(1, math.ceil((end - start) / unit - 1e-9)) for start, end in spans)

    def _launch_phantoms(self, count: int) -> list[Instance]:
        slots = getattr(self.driver, "slots_per_instance", 1)
        made = []
        for _ in range(count):
            instance_id = f"dry-run-{len(self._phantoms) + 1:04d}"
            self._phantoms[instance_id] = Instance(instance_id, self.clock(), slots, "running")
            made.append(self._phantoms[instance_id])
        return made

    def _allowed_launches(self, wanted: int) -> int:
        now = self.clock()
        live = len(self.list_instances()) if self.config.dry_run else len(self.store.instances())
        limits = {
            "asked": wanted,
            "max_instances": self.config.max_instances - live,
            "max_launches_per_interval": self.config.max_launches_per_interval,
            "budget_units_per_hour": self._budget_left(now),
        }
        allowed = max(0, min(limits.values()))
        if now < self._backoff_until:
            self._note(f"back-off: no launch until t={self._backoff_until:.0f} (instances died young or never joined)")
            return 0
        if allowed < wanted:
            binding = min((v, k) for k, v in limits.items())[1]
            self._note(f"limit {binding}: launching {allowed} of {wanted}")
        return allowed

    def _budget_left(self, now: float) -> int:
        if self.config.budget_units_per_hour is None:
            return 1 << 30
        unit = self.config.charging_unit_s
        started = 0
        for record in self.store.instances(live_only=False):
            end = record.ended_at if record.ended_at is not None else now
            for k in range(max(1, math.ceil((end - record.launch_time) / unit))):
                if now - 3600.0 < record.launch_time + k * unit <= now:
                    started += 1
        units_per_new = 1  # a new instance starts one unit now
        return max(0, int((self.config.budget_units_per_hour - started) // units_per_new))

    # -- failures and back-off --------------------------------------------------------

    def _notice_deaths(self, live: list[Instance]) -> None:
        now = self.clock()
        present = {i.instance_id for i in live}
        failures = []
        for record in self.store.instances():
            if record.instance_id in present or record.instance_id in self._ended_by_us:
                continue
            self.store.mark_ended(record.instance_id, "vanished", now=now)
            if now - record.launch_time < self.config.died_young_s:
                failures.append(f"instance {record.instance_id} died {now - record.launch_time:.0f} s after launch")
        unjoined = [i for i in live if self._never_joined(i)]
        failures += [f"instance {i.instance_id} did not join the pool within {self.config.join_timeout_s:.0f} s" for i in unjoined]
        if failures:
            self._fail("; ".join(failures))  # one pause per observation, however many died
        if unjoined and self.config.terminate_unjoined:
            self.terminate([i.instance_id for i in unjoined])

    def _never_joined(self, instance: Instance) -> bool:
        if self.joined is None or instance.state not in ("pending", "running"):
            return False
        too_old = self.clock() - instance.launch_time > self.config.join_timeout_s
        return too_old and not self.joined(instance.instance_id)

    def _fail(self, why: str) -> None:
        now = self.clock()
        self._backoff_until = now + self._backoff_s
        self._note(f"{why}; launches paused for {self._backoff_s:.0f} s")
        self._backoff_s = min(self._backoff_s * 2, self.config.backoff_max_s)

    def joined_ok(self) -> None:
        """An instance joined: the image works, reset the back-off."""
        self._backoff_s = self.config.backoff_initial_s

    # -- bookkeeping --------------------------------------------------------------------

    def _record(self, instances: Sequence[Instance], request_id: str | None) -> None:
        for i in instances:
            self.store.record_instance(
                InstanceRecord(i.instance_id, request_id, i.launch_time, i.launch_time, i.slots, i.address, i.state)
            )

    @staticmethod
    def _as_instance(record: InstanceRecord) -> Instance:
        return Instance(record.instance_id, record.launch_time, record.slots, record.state, record.address, request_id=record.request_id or "")

    def _note(self, line: str) -> None:
        log.warning("%s", line)
        self.notes.append(line)


def _report_lines(report: ReconcileReport) -> list[str]:
    parts = []
    for name in ("adopted", "forgotten", "terminated", "requests_finished", "requests_rolled_back"):
        values = getattr(report, name)
        if values:
            parts.append(f"reconcile: {name.replace('_', ' ')}: {', '.join(values)}")
    return parts
