"""What every cloud provider shares: the driver interface, its declaration (``Provider``) and the probe's helpers.

Ownership lives in the cloud: every instance we launch carries tags (EC2) or
metadata (OpenStack) naming the pool, so a restarted daemon asks the cloud
which instances are its own instead of trusting local state, and never
touches anybody else's. The pool's tag alone decides: a daemon whose state
file was lost, emptied or brought from another host (and so has a new daemon
id) lists, adopts and counts every live instance of its pool. The daemon id
tag only says which daemon launched an instance.

Two daemons must not steer one pool: each keeps a lease on the pool's live
instances (``wire:lease`` = ``<holder>@<epoch seconds>``), renewed while it
runs. The holder names the host and the state file, not the file's content,
so the same daemon restarted with a lost file holds its own lease; a lease
of another holder renewed within ``LEASE_TTL_S`` means another daemon is
alive on this pool (see ``execute.guarded_cloud``).

Launches are idempotent per request id. The caller picks the id (and can
record it before the call); the driver tags every instance with it and, before
every attempt, first looks for instances already carrying it. A reply lost to
a timeout, a retry, or a daemon restarted mid-launch that repeats the request
thus returns the instances that exist instead of launching more. The cloud's
own guard (EC2 ClientToken, OpenStack server names) is only a second line:
moto's EC2 does not honour ClientToken, and Nova does not enforce unique names.

The lookup works for as long as the cloud still reports the instances (EC2
keeps terminated ones visible for about an hour; Nova forgets deleted
servers at once), so whoever records requests should mark one done once its
instances are recorded, and not repeat it after that.
"""

from __future__ import annotations

import logging
import re
import uuid
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from wire_daemon.core.config import SLOTS_PER_INSTANCE
from wire_daemon.core.errors import CloudConfigError, CloudError, ConfigError
from wire_daemon.core.extras import require
from wire_daemon.core.instances import LIVE_STATES, UNUSABLE_STATES, CloudState, Instance
from wire_daemon.core.pricing import Market, SpotPriceReader
from wire_daemon.core.secrets import shown
from wire_daemon.execute.providers.retry import Retrier

log = logging.getLogger(__name__)

# Tag / metadata keys. IAM policies in docs/cloud.md refer to them by name.
TAG_POOL = "wire:pool"
TAG_DAEMON = "wire:daemon-id"
TAG_REQUEST = "wire:request-id"
TAG_SLOTS = "wire:slots"
TAG_INDEX = "wire:index"  # position of an instance within its request (OpenStack creates one by one)
TAG_LEASE = "wire:lease"  # <holder>@<epoch seconds>: which daemon steers the pool, and when it said so last

# A lease not renewed for this long is stale: its daemon is gone (or cut off from the cloud that long).
LEASE_TTL_S = 900.0
# A running daemon renews its lease on an instance once it is this old: a few renewals per TTL.
LEASE_RENEW_S = 240.0

_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]{0,62}$")


def check_name(key: str, value: str) -> str:
    """Pool names, daemon ids and request ids go into tags, server names and shell scripts."""
    if not isinstance(value, str) or not _NAME.match(value):
        raise ConfigError(
            f"{key} must be 1-63 letters, digits, '-' or '_', starting with a letter or digit (got {shown(value)})"
        )
    return value


def new_request_id() -> str:
    return uuid.uuid4().hex[:16]


@dataclass(frozen=True)
class Lease:
    """A daemon's claim on its pool, as one instance carries it."""

    holder: str
    renewed_at: float  # wall clock, epoch seconds

    def text(self) -> str:
        return f"{self.holder}@{int(self.renewed_at)}"

    @classmethod
    def parse(cls, text: str) -> Lease | None:
        """The lease a tag holds; None for no tag or one that is not a lease (it then protects nothing)."""
        holder, _, when = text.rpartition("@")
        if not holder or not when.isdigit():
            return None
        return cls(holder, float(when))

    def fresh(self, now: float) -> bool:
        """Renewed within the TTL (a time ahead of our clock counts as fresh: clocks differ)."""
        return now - self.renewed_at < LEASE_TTL_S


@dataclass(frozen=True)
class Ownership:
    """Which instances are ours: those tagged with this pool name (``daemon_id`` names who launched them).

    ``holder``: this daemon's name in the pool's lease (the host and state file); "" means the daemon id.
    """

    pool: str
    daemon_id: str
    holder: str = ""

    def __post_init__(self) -> None:
        check_name("cloud.pool", self.pool)
        check_name("cloud.daemon_id", self.daemon_id)
        if self.holder:
            check_name("lease holder", self.holder)

    @property
    def lease_holder(self) -> str:
        return self.holder or self.daemon_id

    def tags(self, request_id: str, slots: int) -> dict[str, str]:
        return {
            TAG_POOL: self.pool,
            TAG_DAEMON: self.daemon_id,
            TAG_REQUEST: request_id,
            TAG_SLOTS: str(slots),
        }

    def owns(self, tags: dict[str, str]) -> bool:
        return tags.get(TAG_POOL) == self.pool


def slots_from(tags: dict[str, str], default: int) -> int:
    """Slots recorded at launch win over today's config (it may have changed since)."""
    try:
        slots = int(tags.get(TAG_SLOTS, ""))
    except ValueError:
        return default
    return slots if slots > 0 else default


@dataclass(frozen=True)
class LaunchOrder:
    """One launch request as a driver makes it."""

    count: int
    request_id: str
    user_data: str
    instance_type: str = ""  # "": the configured one
    market: Market = Market.ON_DEMAND


class CloudDriver(ABC):
    """List, launch and terminate our worker instances on one cloud.

    Implements ``wire_daemon.ports.Cloud`` for an SDK-backed provider. Every public method either
    succeeds or raises a ``CloudError`` (after bounded retries for throttled
    and transient failures); none raises an SDK exception.
    """

    provider = "cloud"
    # The markets this cloud sells through the driver; a launch on another is refused before any call.
    markets: frozenset[Market] = frozenset({Market.ON_DEMAND})

    def __init__(
        self,
        ownership: Ownership,
        user_data: str,
        retrier: Retrier | None,
        slots_per_instance: int = SLOTS_PER_INSTANCE,
    ) -> None:
        self.ownership = ownership
        if slots_per_instance < 1:
            raise ConfigError(f"steering.slots_per_instance must be >= 1 (got {slots_per_instance!r})")
        self.slots_per_instance = slots_per_instance
        self.user_data = user_data
        # Several instance types (steering.instance_types): each one's slots and its workers' user-data.
        self.type_slots: dict[str, int] = {}
        self.type_user_data: dict[str, str] = {}
        self.retrier = retrier or Retrier()
        # The lease each instance carried when last listed (instances without one are absent).
        self.leases: dict[str, Lease] = {}

    # -- the interface -------------------------------------------------------

    def spot_price_source(self) -> tuple[SpotPriceReader, float] | None:
        """How this pool's spot prices are read from the cloud, and every how many seconds; None: from the
        config (every cloud but one that quotes them, and that one unless its section asks)."""
        return None

    def list_instances(self, include_unusable: bool = False) -> list[Instance]:
        """Our pending and running instances; with ``include_unusable`` also stopped and failed ones
        (still ours, possibly still billed: reconcile should terminate them)."""
        states = LIVE_STATES | (UNUSABLE_STATES if include_unusable else frozenset())
        found = self.retrier.call("list", lambda: self._list_owned(states, None))
        return sorted(found, key=lambda i: (i.launch_time, i.instance_id))

    def find_request(self, request_id: str) -> list[Instance]:
        """Every instance the cloud still reports for this request, in any state."""
        check_name("request id", request_id)
        return self.retrier.call("find request", lambda: self._find_request(request_id))

    def launch(
        self,
        count: int,
        request_id: str | None = None,
        user_data: str | None = None,
        instance_type: str = "",
        market: Market = Market.ON_DEMAND,
    ) -> list[Instance]:
        """Launch ``count`` instances, or return those an earlier call with the same request id launched.

        ``instance_type``: the EC2 instance type or OpenStack flavor of this launch; "": the configured one.
        """
        if market not in self.markets:
            raise CloudConfigError(
                self.provider, "launch", f"the {self.provider} driver does not buy {market} capacity"
            )
        if count < 0:
            raise ConfigError(f"launch count must be >= 0 (got {count!r})")
        if count == 0:
            return []
        rid = check_name("request id", request_id or new_request_id())
        data = self.type_user_data.get(instance_type, self.user_data) if user_data is None else user_data

        def attempt() -> list[Instance]:
            existing = self._find_request(rid)
            return self._launch_missing(LaunchOrder(count, rid, data, instance_type, market), existing)

        launched = self.retrier.call("launch", attempt)
        log.info(
            "%s: request %s of pool %s: %s",
            self.provider,
            rid,
            self.ownership.pool,
            ", ".join(f"{i.instance_id} ({i.state})" for i in launched),
        )
        return launched

    def terminate(self, instance_ids: Sequence[str]) -> list[str]:
        """Terminate those of ``instance_ids`` that are ours and still exist; return them.

        Ids that are not live instances of this pool (gone already,
        or somebody else's) are left alone, so a stale or wrong id can never
        cost another user an instance.
        """
        wanted = list(dict.fromkeys(instance_ids))
        if not wanted:
            return []
        states = LIVE_STATES | UNUSABLE_STATES
        owned = {i.instance_id for i in self.retrier.call("terminate", lambda: self._list_owned(states, wanted))}
        ours = [i for i in wanted if i in owned]
        skipped = [i for i in wanted if i not in owned]
        if skipped:
            log.warning(
                "%s: not terminating %s: not a live instance of pool %s",
                self.provider,
                ", ".join(skipped),
                self.ownership.pool,
            )
        if ours:
            self.retrier.call("terminate", lambda: self._terminate(ours))
            log.info("%s: terminating %s", self.provider, ", ".join(ours))
        return ours

    def renew_lease(self, instance_ids: Sequence[str], now: float) -> None:
        """Write this daemon's lease, renewed at ``now``, on these instances (all known to be of our pool)."""
        wanted = list(dict.fromkeys(instance_ids))
        if not wanted:
            return
        lease = Lease(self.ownership.lease_holder, now)
        self.retrier.call("lease", lambda: self._tag(wanted, {TAG_LEASE: lease.text()}))
        self.leases.update(dict.fromkeys(wanted, lease))

    def _saw_lease(self, instance_id: str, tags: dict[str, str]) -> None:
        lease = Lease.parse(tags.get(TAG_LEASE, ""))
        if lease is None:
            self.leases.pop(instance_id, None)
        else:
            self.leases[instance_id] = lease

    # -- what each cloud implements -----------------------------------------

    @abstractmethod
    def _list_owned(self, states: frozenset[CloudState], ids: Sequence[str] | None) -> list[Instance]:
        """One try: our instances in ``states`` (restricted to ``ids`` if given). Raises CloudError."""

    @abstractmethod
    def _find_request(self, request_id: str) -> list[Instance]:
        """One try: our instances tagged with ``request_id``, any state. Raises CloudError."""

    @abstractmethod
    def _launch_missing(self, order: LaunchOrder, existing: list[Instance]) -> list[Instance]:
        """One try: make the order's request hold its instances, given those that exist."""

    @abstractmethod
    def _terminate(self, instance_ids: list[str]) -> None:
        """One try: terminate these instances (all known to be ours). Raises CloudError."""

    @abstractmethod
    def _tag(self, instance_ids: list[str], tags: dict[str, str]) -> None:
        """One try: set these tags (EC2) or metadata keys (OpenStack) on these instances. Raises CloudError."""

    @abstractmethod
    def _map_error(self, exc: Exception, operation: str) -> CloudError:
        """The CloudError an SDK failure of ``operation`` is (kind, code, one clean line)."""

    # -- helpers --------------------------------------------------------------

    @contextmanager
    def _errors(self, operation: str) -> Iterator[None]:
        """Around one SDK call: every failure leaves as a CloudError."""
        try:
            yield
        except CloudError:
            raise
        except Exception as exc:  # noqa: BLE001 - every SDK failure becomes a CloudError
            raise self._map_error(exc, operation) from exc

    def slots_for(self, instance_type: str) -> int:
        """The slots an instance of this type has; the configured count for "" or an unlisted type."""
        return self.type_slots.get(instance_type, self.slots_per_instance)

    def _check_user_data(self, user_data: str, limit: int) -> bytes:
        raw = user_data.encode()
        if len(raw) > limit:
            raise CloudConfigError(self.provider, "launch", f"user-data is {len(raw)} bytes; the limit is {limit}")
        return raw


# -- the cloud probe (``wire-daemon check-config --probe``) ----------------------------

WORKS, DENIED, NOT_FOUND, PROBE_FAILED = "works", "denied", "not found", "failed"


@dataclass(frozen=True)
class ProbeCheck:
    """One read-only call made with the configured credentials, and what the cloud said."""

    call: str  # "ec2 DescribeImages"
    subject: str  # what it asked about: "image ami-0123..."
    outcome: str  # works | denied | not found | failed
    detail: str = ""
    needed_by: str = "the daemon"  # who needs the permission: the daemon, the workers, or only this probe

    @property
    def ok(self) -> bool:
        return self.outcome == WORKS

    def line(self) -> str:
        detail = f": {self.detail}" if self.detail else ""
        return f"{self.call} ({self.subject}): {self.outcome}{detail}"


@dataclass(frozen=True)
class TokenReference:
    """Where the workers' pool token is kept (``cloud.worker``): probed for its metadata, never read."""

    delivery: str  # ssm | secretsmanager | barbican | file | inline
    source: str
    region: str = ""


class NotFound(Exception):
    """What the probe asked about does not exist (for these credentials)."""


class Unusable(Exception):
    """It exists, and a launch with it would fail all the same."""


def check(
    call: str,
    subject: str,
    fn: Callable[[], Any],
    summary: Callable[[Any], str],
    outcome: Callable[[Exception], tuple[str, str]],
    needed_by: str = "the daemon",
) -> ProbeCheck:
    """One probe call as one ``ProbeCheck``: ``summary`` words its reply, ``outcome`` the SDK's error."""
    try:
        return ProbeCheck(call, subject, WORKS, summary(fn()), needed_by)
    except NotFound as exc:
        return ProbeCheck(call, subject, NOT_FOUND, str(exc), needed_by)
    except Unusable as exc:
        return ProbeCheck(call, subject, PROBE_FAILED, str(exc), needed_by)
    except Exception as exc:  # noqa: BLE001 - every answer becomes one line
        found, detail = outcome(exc)
        return ProbeCheck(call, subject, found, detail, needed_by)


def mapped_outcome(error: CloudError) -> tuple[str, str]:
    """A probe's outcome from the provider's own mapping of an SDK error."""
    if error.kind == "auth":
        return DENIED, error.detail
    if error.kind == "not_found":
        return NOT_FOUND, error.detail
    prefix = "unreachable: " if error.kind == "transient" else ""
    return PROBE_FAILED, prefix + error.detail


# -- what a provider declares in its own module ----------------------------------------------


@dataclass(frozen=True)
class Provider:
    """One cloud, as the rest of the daemon knows it: its module declares this, and one registry line adds it.

    The SDK is an optional extra: the module imports it only when it talks to the cloud, so the
    config section can be checked without it, and a missing extra is one clear line.
    """

    name: str  # cloud.kind, and the name of its config section cloud.<name>
    config: type  # the config section, a pydantic section that validates itself
    driver: Callable[..., CloudDriver]  # (config, ownership, user_data, retrier=..., slots_per_instance=...)
    probe: Callable[..., list[ProbeCheck]]  # (config, ownership, token): read-only calls, one check each
    extra: str  # the pip extra that installs its SDK
    sdk: str  # the SDK's top-level module
    deliveries: tuple[str, ...]  # where its workers may fetch the pool token; the first is the default
    loggers: tuple[str, ...] = ()  # its libraries' loggers: quieted to warnings in the daemon's log
    # Worker (cloud.worker) defaults that only this cloud has, e.g. where its images keep credentials.
    worker_defaults: Mapping[str, str] = field(default_factory=dict)
    # The currency its prices are quoted in when its config section reads them from the cloud (None: the
    # prices come from the config): steering.currency must then name it.
    quoted_currency: Callable[[Mapping[str, Any]], str | None] = field(default=lambda section: None)

    @property
    def default_delivery(self) -> str:
        return self.deliveries[0]

    def driver_class(self) -> Callable[..., CloudDriver]:
        self.require_sdk()
        return self.driver

    def probe_function(self) -> Callable[..., list[ProbeCheck]]:
        self.require_sdk()
        return self.probe

    def require_sdk(self) -> None:
        require(self.sdk, self.extra, f"cloud.kind {self.name}")
