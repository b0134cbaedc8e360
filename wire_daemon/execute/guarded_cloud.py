"""The Execute step's guard rails between the policy and a real cloud.

``GuardedCloud`` implements the loop's ``Cloud`` port on top of a driver and
the state file. Whatever the policy asks, it:

* never exceeds ``max_instances`` live instances, never launches more than
  ``max_launches_per_interval`` at once, and never starts more charging units
  per hour than ``budget_units_per_hour`` (when set; with instance types it is
  money: each unit started costs its type's price, an instance of unknown type
  the dearest listed price), nor lets the pool cost more money an hour than
  ``budget_per_hour`` (at each type's and market's price). Before each launch it
  counts what the cloud lists under the pool's tag (adopting instances a
  previous life launched), the instances the state file holds, and each open
  request it cannot settle (its reply was lost: the launch may have happened)
  as that many more; when the cloud cannot be listed, it launches nothing;
* backs off after instances die young or never join the pool, doubling the
  pause each time, so a broken image cannot become a redeploy loop (a spot
  instance that joined the pool and is gone without us is the market's
  reclaim: an interruption, published as ``InstanceReclaimed``, not a
  failure; one gone before it joined is judged as an on-demand one);
* records each launch request before the cloud call and closes it after, so
  a daemon killed in between adopts the instances on restart
  (``reconcile``) instead of launching duplicates;
* moves each instance's lifecycle (booting, terminating, terminated,
  vanished) before and after the cloud calls that change it, through the
  ``Lifecycle``, whose observers persist it in the state file; and re-issues a
  termination whose reply was lost while the instance is still listed;
* turns every cloud error into a typed notice for the decisions log; none escapes.

Dry-run is not a mode of the guard: it is the cloud under it
(``execute.dry_run``), with a scratch store.

The cloud is the source of truth: ``reconcile`` adopts our tagged instances
the state file does not know, forgets those the cloud no longer has, and
terminates ours that are stopped, failed, or never joined the pool. "Ours"
is the pool's tag: a state file lost, emptied or brought from another host
costs nothing but one line saying what was adopted.

One daemon per pool: over a driver that keeps leases (``LeasedCloud``) the
guard renews this daemon's lease on every live instance of the pool as it
lists them. At start, a live instance carrying another holder's fresh lease
refuses the start (``PoolInUseError``): another daemon steers this pool.
Found while running (two daemons started on an empty pool at once), it holds
every launch, with one notice, until that lease goes stale; neither daemon
takes over the other's instances while both renew.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Annotated, NamedTuple, Protocol, runtime_checkable

from wire_daemon.core.billing import Billing
from wire_daemon.core.errors import CloudError, WireError
from wire_daemon.core.instances import (
    LIVE_STATES,
    UNUSABLE_STATES,
    CloudState,
    Instance,
    Lifecycle,
    LifecycleState,
    can_move,
)
from wire_daemon.core.journal import InstanceReclaimed, Journal, Notice, back_off, cloud_error, limit_hit
from wire_daemon.core.pricing import Bill, Market, Offer, Span, bill, money
from wire_daemon.core.sections import AtLeastZero, Positive, section
from wire_daemon.execute.providers.base import LEASE_RENEW_S, LEASE_TTL_S, Lease, Ownership
from wire_daemon.persist.recorder import StoreRecorder
from wire_daemon.persist.store import InstanceRecord, LaunchRequest, StateStore
from wire_daemon.ports import Cloud

log = logging.getLogger(__name__)

# EC2 lists an instance some seconds after RunInstances returns (eventual consistency): an open
# request whose look-up finds nothing counts as launched until it is this old, then is rolled back.
REQUEST_VISIBLE_S = 300.0


@section("safety")
class SafetyConfig:
    max_instances: Annotated[int, AtLeastZero] = 12
    max_launches_per_interval: Annotated[int, AtLeastZero] = 4
    budget_units_per_hour: Annotated[float | None, AtLeastZero] = None  # charging units started per rolling hour
    # Money per hour, in steering.currency: the pool the cloud lists may cost at most this an hour at its
    # prices, and at most this may be charged in any rolling hour (see _money_left).
    budget_per_hour: Annotated[float | None, AtLeastZero] = None
    dry_run: bool = False
    join_timeout_s: Annotated[float, Positive] = 900.0  # an instance not in the pool by then is a failure
    died_young_s: Annotated[float, Positive] = 600.0  # an instance gone sooner than this (not by us) is a failure
    terminate_unjoined: bool = True
    backoff_initial_s: Annotated[float, Positive] = 300.0
    backoff_max_s: Annotated[float, Positive] = 3600.0


# A spot instance gone from these states joined the pool first: its image works, so the market took it.
_WORKED = frozenset({LifecycleState.JOINED, LifecycleState.DRAINING})


class PoolInUseError(WireError):
    """Another daemon holds a fresh lease on this pool: this one must not start steering it."""


@runtime_checkable
class LeasedCloud(Protocol):
    """A driver that reads and writes the pool's lease (``execute.providers.base``)."""

    ownership: Ownership
    leases: dict[str, Lease]

    def renew_lease(self, instance_ids: Sequence[str], now: float) -> None: ...


class PoolCount(NamedTuple):
    """What may be live before a launch: counted instances, and the spans of those only possibly launched."""

    live: int
    possible: list[tuple[float, float]]  # (requested at, now) per instance an unsettled request may hold
    counted: frozenset[str] = frozenset()  # the instances counted in ``live``: listed, or live in the state file


@dataclass
class ReconcileReport:
    adopted: list[str] = field(default_factory=list)
    forgotten: list[str] = field(default_factory=list)
    terminated: list[str] = field(default_factory=list)
    requests_finished: list[str] = field(default_factory=list)
    requests_rolled_back: list[str] = field(default_factory=list)


class GuardedCloud:
    """A ``Cloud`` over another one, with limits, back-off and crash-safe bookkeeping.

    It reads the state file and keeps the launch requests in it; every change
    of an instance's life goes through ``lifecycle`` (by default one of its
    own over ``store``, persisted there).
    """

    def __init__(
        self,
        driver: Cloud,
        store: StateStore,
        config: SafetyConfig,
        billing: Billing,
        clock: Callable[[], float],
        journal: Journal | None = None,
        joined: Callable[[str], bool] | None = None,
        holds_claims: Callable[[str], bool] | None = None,
        prices: Mapping[str, float] | None = None,
        lifecycle: Lifecycle | None = None,
        offers: Mapping[str, Offer] | None = None,
    ) -> None:
        self.driver = driver
        self.store = store
        self.config = config
        self.billing = billing
        self.clock = clock
        self.journal = journal or Journal()
        self.joined = joined  # does the pool see this instance's startd? (None: do not check)
        self.holds_claims = holds_claims  # re-checked right before a release (HTCondorControl.holds_claims)
        self._backoff_until = float("-inf")
        self._backoff_s = config.backoff_initial_s
        self.lifecycle = lifecycle or _persisted_lifecycle(store)
        # Price per charging unit of each instance type (steering.instance_types); empty: every unit costs 1.
        self.prices = dict(prices or {})
        self._type_of: dict[str, str] = {}  # instance -> its type, as launched or listed
        # The money side (core.pricing): each type's price per hour in each market, and each instance's market.
        self.offers = dict(offers or {})
        self._market_of: dict[str, Market] = {}
        self._zone_of: dict[str, str] = {}  # instance -> its zone, as launched or listed
        self._contested = ""  # why launches are held: another daemon's fresh lease on this pool ("" if none)
        self._unwatched = ""  # why the pool went unwatched: vanished spot workers are then no reclaims ("" if not)

    @property
    def slots_per_instance(self) -> int:
        return self.driver.slots_per_instance

    def excuse_vanished(self, why: str) -> None:
        """The pool goes unwatched (``why``): a spot worker found gone at the next listing is no reclaim.

        While HTCondor is away a worker's dead-man switch may power it off, and
        that looks to the cloud as a reclaim does: counting it would back spot
        launches off and raise the reclaim rate the placement learns. Nobody
        saw the notice either way, as after a restart of the daemon.
        """
        self._unwatched = why

    # -- the Cloud interface --------------------------------------------------------

    def list_instances(self, include_unusable: bool = False) -> list[Instance]:
        try:
            live = list(self.driver.list_instances(include_unusable))
        except CloudError as exc:
            self._publish(cloud_error("listing instances", exc.kind, exc))
            return [self._as_instance(r) for r in self.store.instances()]  # last known pool
        self._adopt(live)
        self._keep_lease(live)
        self._notice_deaths(live)
        self._retry_lost_terminations(live)
        return live

    def find_request(self, request_id: str) -> list[Instance]:
        return list(self.driver.find_request(request_id))

    def launch(
        self, count: int, request_id: str | None = None, *, instance_type: str = "", market: Market = Market.ON_DEMAND
    ) -> list[Instance]:
        allowed = self._allowed_launches(count, instance_type, market)
        if allowed <= 0:
            return []
        request_id = self.store.open_request(allowed, now=self.clock())
        try:
            launched = list(self._driver_launch(allowed, request_id, instance_type, market))
        except CloudError as exc:
            self._publish(cloud_error(f"launching {allowed}", exc.kind, exc))
            self._record(exc.partial or [], request_id)
            if not exc.retryable:
                self.store.close_request(request_id, "rolled_back" if not exc.partial else "done", now=self.clock())
            return list(exc.partial or [])
        self._record(launched, request_id)
        self.store.close_request(request_id, now=self.clock())
        return launched

    def _driver_launch(self, count: int, request_id: str, instance_type: str, market: Market) -> Sequence[Instance]:
        # The type and market only when chosen: a driver of one on-demand type is called as before.
        if market is not Market.ON_DEMAND:
            return self.driver.launch(count, request_id=request_id, instance_type=instance_type, market=market)
        if instance_type:
            return self.driver.launch(count, request_id=request_id, instance_type=instance_type)
        return self.driver.launch(count, request_id=request_id)

    def terminate(self, instance_ids: Sequence[str]) -> list[str]:
        instance_ids = self._unclaimed(instance_ids)
        if not instance_ids:
            return []
        for instance_id in instance_ids:  # persisted first: a lost reply is retried, not taken for a death
            self._move_if_allowed(instance_id, LifecycleState.TERMINATING)
        try:
            ended = list(self.driver.terminate(instance_ids))
        except CloudError as exc:
            self._publish(cloud_error(f"terminating {', '.join(instance_ids)}", exc.kind, exc))
            return []
        for instance_id in ended:
            self._move_if_allowed(instance_id, LifecycleState.TERMINATED, "released")
        return ended

    def _unclaimed(self, instance_ids: Sequence[str]) -> list[str]:
        """Drop the instances a drained startd still runs a job on: they end when the job does."""
        if self.holds_claims is None:
            return list(instance_ids)
        busy = [i for i in instance_ids if self.holds_claims(i)]
        if busy:
            self._note(f"not terminating {', '.join(busy)}: a slot is still claimed after the drain")
        return [i for i in instance_ids if i not in busy]

    # -- start-up -------------------------------------------------------------------

    def reconcile(self) -> ReconcileReport:
        """Make the state file agree with the cloud; finish or roll back open requests."""
        report = ReconcileReport()
        self._settle_requests(report)
        cloud = {i.instance_id: i for i in self.driver.list_instances(include_unusable=True)}
        self._keep_lease(list(cloud.values()), at_start=True)
        known = {r.instance_id: r for r in self.store.instances()}
        for instance_id, instance in cloud.items():
            if instance_id not in known:
                self._record([instance], instance.request_id or None)
                report.adopted.append(instance_id)
        for instance_id in known.keys() - cloud.keys():
            self._ended(known[instance_id], "gone from the cloud")
            report.forgotten.append(instance_id)
        doomed = [i.instance_id for i in cloud.values() if i.state in UNUSABLE_STATES]
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
            outcome = self._settle_found(request, found)
            if outcome == "done":
                report.requests_finished.append(request.request_id)
            elif outcome == "rolled_back":
                report.requests_rolled_back.append(request.request_id)

    def _settle_found(self, request: LaunchRequest, found: Sequence[Instance]) -> str:
        """Close a request on what the cloud holds for it: done, rolled back, or still open (too young to tell)."""
        now = self.clock()
        self._adopt(found)
        if found:
            self.store.close_request(request.request_id, now=now)
            return "done"
        if now - request.requested_at < REQUEST_VISIBLE_S:
            return "open"
        self.store.close_request(request.request_id, "rolled_back", now=now)
        return "rolled_back"

    # -- accounting ---------------------------------------------------------------------

    def cost_units(self, now: float) -> int:
        """Charging units started so far by every instance we launched."""
        return sum(self.billing.units(start, end) for _, start, end in self._spans(now))

    def bill(self, now: float) -> Bill:
        """Money spent and committed by every instance we launched, at its type's and market's price."""
        spans = [
            Span(self._price_per_hour(r.instance_id), r.launch_time, r.ended_at)
            for r in self.store.instances(live_only=False)
        ]
        return bill(spans, self.billing, now)

    def _price_per_hour(self, instance_id: str) -> float:
        """An instance's price per hour; a type or market not known (a previous life's): the dearest."""
        kind = self._type_of.get(instance_id, "")
        return self._offer_price(kind, self._market_of.get(instance_id, Market.ON_DEMAND))

    def _count_pool(self, now: float) -> PoolCount | None:
        """Every instance that may be live, from the cloud's own listing; None when the cloud cannot be listed.

        The state file alone misses instances a previous life launched and
        the launches whose reply was lost, so the listing is taken fresh.
        """
        try:
            listed = list(self.driver.list_instances())
        except CloudError as exc:
            self._publish(cloud_error("counting the pool before a launch", exc.kind, exc))
            return None
        self._adopt(listed)
        possible: list[tuple[float, float]] = []
        for request in self.store.open_requests():
            unseen = self._unsettled(request, listed)
            possible += [(request.requested_at, now)] * unseen
        counted = {i.instance_id for i in listed} | {r.instance_id for r in self.store.instances()}
        return PoolCount(len(counted) + len(possible), possible, frozenset(counted))

    def _unsettled(self, request: LaunchRequest, listed: Sequence[Instance]) -> int:
        """How many instances an open request may hold beyond those listed (0 once it is settled)."""
        seen = sum(1 for i in listed if i.request_id == request.request_id)
        if seen >= request.count:
            self.store.close_request(request.request_id, now=self.clock())
            return 0
        try:
            found = self.driver.find_request(request.request_id)
        except CloudError as exc:
            self._publish(cloud_error(f"looking up launch request {request.request_id}", exc.kind, exc))
            return request.count - seen
        outcome = self._settle_found(request, found)
        return request.count - seen if outcome == "open" else 0

    def _spans(self, now: float) -> list[tuple[str, float, float]]:
        """Every instance we launched, with the span it was paid for (until ``now`` if it still runs)."""
        records = self.store.instances(live_only=False)
        return [(r.instance_id, r.launch_time, r.ended_at if r.ended_at is not None else now) for r in records]

    # -- limits ------------------------------------------------------------------------

    def _allowed_launches(self, wanted: int, instance_type: str = "", market: Market = Market.ON_DEMAND) -> int:
        now = self.clock()
        if wanted <= 0:
            return 0
        if now < self._backoff_until:
            self._publish(back_off(self._backoff_until))
            return 0
        if self._contested:
            self._note(f"no launch: {self._contested}")
            return 0
        pool = self._count_pool(now)
        if pool is None:
            return 0  # what cannot be counted might be at the cap already
        limits = {
            "asked": wanted,
            "max_instances": self.config.max_instances - pool.live,
            "max_launches_per_interval": self.config.max_launches_per_interval,
            "budget_units_per_hour": self._budget_left(now, pool.possible, instance_type),
            "budget_per_hour": self._money_left(now, pool, instance_type, market),
        }
        allowed = max(0, min(limits.values()))
        if allowed < wanted:
            binding = min((v, k) for k, v in limits.items())[1]
            self._publish(limit_hit(binding, allowed, wanted))
        return allowed

    def _budget_left(self, now: float, possible: Sequence[tuple[float, float]] = (), instance_type: str = "") -> int:
        """Instances of ``instance_type`` that may still start a unit in the rolling hour; a launch starts one now.

        ``possible`` holds the spans of instances an unsettled request may have launched: paid as if it had.
        The budget is money: a unit costs its instance's type's price (1 without prices).
        """
        if self.config.budget_units_per_hour is None:
            return 1 << 30
        window = now - 3600.0
        spent = sum(
            self.billing.unit_starts_between(start, end, window, now) * self._price(instance_id)
            for instance_id, start, end in self._spans(now)
        )
        spent += sum(self.billing.unit_starts_between(s, e, window, now) * self._price(None) for s, e in possible)
        left = self.config.budget_units_per_hour - spent
        return max(0, int(left // self._price(instance_type or None) + 1e-9))

    def _money_left(self, now: float, pool: PoolCount, instance_type: str, market: Market) -> int:
        """Instances of ``instance_type`` on ``market`` that ``budget_per_hour`` still allows, in money.

        Two bounds, each at the prices of the types and markets (``offers``; unknown: the dearest):
        the pool counted before the launch (what the cloud lists, the state file's live instances,
        the unsettled requests) with the launches costs at most the budget an hour (a Spot Fleet's
        maximum total price), and the money charged in the rolling hour, the launches' first charges
        included, stays within it (instances released and replaced within the hour each paid).
        """
        budget = self.config.budget_per_hour
        if budget is None:
            return 1 << 30
        dearest = max((o.on_demand_per_hour for o in self.offers.values()), default=1.0)
        hourly = sum(self._price_per_hour(i) for i in pool.counted) + dearest * len(pool.possible)
        window = now - 3600.0
        charged = sum(
            _charged_between(self.billing, self._price_per_hour(i), s, e, window, now) for i, s, e in self._spans(now)
        )
        charged += sum(_charged_between(self.billing, dearest, s, e, window, now) for s, e in pool.possible)
        price = self._offer_price(instance_type, market)
        first = money(self.billing, price, now, now)
        fits = min((budget - hourly) / price, (budget - charged) / first) if price > 0 else float(1 << 30)
        return max(0, int(fits + 1e-9))

    def _offer_price(self, instance_type: str, market: Market) -> float:
        """A launch's price per hour: its type's in its market; a type not listed: the dearest."""
        offer = self.offers.get(instance_type)
        if offer is None:
            return max((o.on_demand_per_hour for o in self.offers.values()), default=1.0)
        return offer.price_per_hour(market) if offer.offers(market) else offer.on_demand_per_hour

    def _price(self, instance_or_type: str | None) -> float:
        """The price per unit of an instance (or, for a launch, of a type); unknown: the dearest listed."""
        if not self.prices:
            return 1.0
        name = self._type_of.get(instance_or_type or "", instance_or_type or "")
        return self.prices.get(name, max(self.prices.values()))

    # -- the pool's lease ------------------------------------------------------------------

    def _keep_lease(self, listed: Sequence[Instance], at_start: bool = False) -> None:
        """Renew our lease on the live instances listed; notice (or, at start, refuse) another daemon's."""
        driver = self.driver
        if not isinstance(driver, LeasedCloud):
            return
        now = self.clock()
        me = driver.ownership.lease_holder
        live = [i.instance_id for i in listed if i.state in LIVE_STATES]
        leases = {i: driver.leases.get(i) for i in live}
        foreign = [(i, lease) for i, lease in leases.items() if lease and lease.holder != me and lease.fresh(now)]
        was = self._contested
        self._contested = _contest_line(driver.ownership.pool, foreign, now) if foreign else ""
        if self._contested and at_start:
            raise PoolInUseError(f"{self._contested}; stop that daemon, or give this one another cloud.pool")
        if self._contested and not was:
            self._note(f"{self._contested}; this daemon launches nothing until then")
        taken = {i for i, _ in foreign}
        due = [
            i
            for i, lease in leases.items()
            if i not in taken and (lease is None or lease.holder != me or now - lease.renewed_at >= LEASE_RENEW_S)
        ]
        try:
            driver.renew_lease(due, now)
        except CloudError as exc:  # an unrenewed lease stays valid for the TTL: the next listing tries again
            self._publish(cloud_error("renewing the pool's lease", exc.kind, exc))

    # -- failures and back-off --------------------------------------------------------

    def _notice_deaths(self, live: list[Instance]) -> None:
        now = self.clock()
        present = {i.instance_id for i in live}
        unwatched, self._unwatched = self._unwatched, ""
        failures = []
        for record in self.store.instances():
            if record.instance_id in present:
                continue
            if record.state == LifecycleState.TERMINATING:  # our termination took effect, its reply was lost
                self._ended(record, "released")
                continue
            self._ended(record, "vanished")
            if self._market_of.get(record.instance_id) is Market.SPOT and record.state in _WORKED:
                if unwatched:
                    log.info("spot instance %s gone while %s: not counted as a reclaim", record.instance_id, unwatched)
                else:
                    self._reclaimed(record.instance_id, now)
                continue  # the market took back a worker that worked: an interruption, not a failure
            # One gone before it ever joined may be a broken image powering itself off: a failure, as on-demand.
            if now - record.launch_time < self.config.died_young_s:
                failures.append(f"instance {record.instance_id} died {now - record.launch_time:.0f} s after launch")
        unjoined = [i for i in live if self._never_joined(i)]
        failures += [
            f"instance {i.instance_id} did not join the pool within {self.config.join_timeout_s:.0f} s"
            for i in unjoined
        ]
        if failures:
            self._fail("; ".join(failures))  # one pause per observation, however many died
        if unjoined and self.config.terminate_unjoined:
            self.terminate([i.instance_id for i in unjoined])

    def _reclaimed(self, instance_id: str, now: float) -> None:
        kind, zone = self._type_of.get(instance_id, ""), self._zone_of.get(instance_id, "")
        log.info("spot instance %s (%s, %s) reclaimed by the cloud", instance_id, kind or "default type", zone or "?")
        self.journal.publish(InstanceReclaimed(now, instance_id, kind, zone))

    def _retry_lost_terminations(self, live: list[Instance]) -> None:
        """An instance we asked to terminate is still listed (the call failed): ask again."""
        present = {i.instance_id for i in live}
        again = [
            r.instance_id
            for r in self.store.instances()
            if r.state == LifecycleState.TERMINATING and r.instance_id in present
        ]
        if again:
            self.terminate(again)

    def _never_joined(self, instance: Instance) -> bool:
        if self.joined is None or instance.state not in LIVE_STATES:
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
            if i.instance_type:
                self._type_of[i.instance_id] = i.instance_type
            self._market_of[i.instance_id] = i.market
            if i.zone:
                self._zone_of[i.instance_id] = i.zone
            self.lifecycle.admit(i, request_id, time=self.clock())

    def _adopt(self, instances: Sequence[Instance]) -> None:
        """Record the instances the state file has never known (a previous life's, a lost reply's).

        One that already ended still paid its units: it is recorded as ended now, for the budget.
        """
        known = {r.instance_id for r in self.store.instances(live_only=False)}
        for instance in instances:
            if instance.instance_type:  # what the budget prices it at, also for those a previous life recorded
                self._type_of[instance.instance_id] = instance.instance_type
            self._market_of[instance.instance_id] = instance.market
            if instance.zone:
                self._zone_of[instance.instance_id] = instance.zone
            if instance.instance_id in known:
                continue
            self._record([instance], instance.request_id or None)
            if instance.state == CloudState.TERMINATED:
                self._move_if_allowed(instance.instance_id, LifecycleState.VANISHED, "vanished")

    def _ended(self, record: InstanceRecord, reason: str) -> None:
        state = LifecycleState.TERMINATED if reason == "released" else LifecycleState.VANISHED
        self._move_if_allowed(record.instance_id, state, reason)

    def _move_if_allowed(self, instance_id: str, new: LifecycleState, ended: str = "") -> None:
        """Move through the lifecycle; a move it does not allow (an end seen twice) leaves the instance as it is.

        ``ended`` (why it ended) marks an end the cloud confirmed: billing stops at this moment.
        """
        current = self.lifecycle.state_of(instance_id)
        if current is None or can_move(current, new):
            self.lifecycle.move(instance_id, new, reason=ended, time=self.clock())

    @staticmethod
    def _as_instance(record: InstanceRecord) -> Instance:
        return Instance(
            record.instance_id,
            record.launch_time,
            record.slots,
            CloudState.RUNNING,
            record.address,
            request_id=record.request_id or "",
        )

    def _note(self, line: str) -> None:
        self._publish(Notice(line))

    def _publish(self, notice: Notice) -> None:
        log.warning("%s", notice.line)
        self.journal.publish(notice)


def _charged_between(
    billing: Billing, price_per_hour: float, launch: float, end: float, after: float, until: float
) -> float:
    """The money an instance up from ``launch`` to ``end`` was charged in (after, until]: a charge falls when
    its unit starts (the first, with the minimum, at the launch)."""

    def charged_by(t: float) -> float:
        return 0.0 if t < launch else money(billing, price_per_hour, launch, min(t, end))

    return charged_by(until) - charged_by(after)


def _contest_line(pool: str, foreign: Sequence[tuple[str, Lease]], now: float) -> str:
    instance_id, lease = max(foreign, key=lambda f: f[1].renewed_at)
    return (
        f"pool {pool} is steered by another daemon: {len(foreign)} live instance(s) carry the lease of "
        f"{lease.holder}, renewed {max(0.0, now - lease.renewed_at):.0f} s ago (on {instance_id}); "
        f"a lease is stale {LEASE_TTL_S:.0f} s after its last renewal"
    )


def _report_lines(report: ReconcileReport) -> list[str]:
    parts = []
    if report.adopted:  # the one line that says the state file did not know them (new, emptied, another host's)
        parts.append(
            f"reconcile: adopted {len(report.adopted)} instance(s) the cloud lists under this pool's tag "
            f"and the state file did not know: {', '.join(report.adopted)}"
        )
    for name in ("forgotten", "terminated", "requests_finished", "requests_rolled_back"):
        values = getattr(report, name)
        if values:
            parts.append(f"reconcile: {name.replace('_', ' ')}: {', '.join(values)}")
    return parts


def _persisted_lifecycle(store: StateStore) -> Lifecycle:
    """A lifecycle of the instances the state file holds, each of its moves persisted there."""
    journal = Journal()
    journal.subscribe(StoreRecorder(store))
    return Lifecycle(((r.instance_id, r.state) for r in store.instances()), journal=journal)
