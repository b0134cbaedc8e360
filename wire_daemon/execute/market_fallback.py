"""Spot launches that fall back to on-demand when the spot market fails us.

``SpotFallback`` wraps any ``Cloud`` (a provider behind its guard, or the
emulated site). A spot launch that the cloud refuses for capacity
(``InsufficientInstanceCapacity`` and its kin) is made on-demand instead, and
so are that type's spot launches for a back-off period after it, or after
``interruptions_to_back_off`` reclaims of the type within ``window_s``: a
type the market keeps taking back is not worth its discount (with
``bursts_count_once``, reclaims seen together count as one event; with
``back_off_on_reclaims`` off, only a capacity error backs off). What a peer
does (Karpenter falls back the same way); what it saves is measured in the
market study.

An interruption is a spot instance that left the cloud's listing without us
terminating it. It is recorded per type, published on the journal, and
counted for the back-off.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from typing_extensions import TypedDict

from wire_daemon.core.errors import CloudCapacityError
from wire_daemon.core.instances import Instance
from wire_daemon.core.journal import Journal, Notice
from wire_daemon.core.pricing import Market
from wire_daemon.ports import Cloud


@dataclass(frozen=True)
class FallbackRule:
    back_off_s: float = 900.0  # spot launches of a type stay on-demand this long
    interruptions_to_back_off: int = 2  # reclaims of one type within the window that start a back-off
    window_s: float = 3600.0
    # True: reclaims of a type seen in one listing count once toward the back-off. A storm (a zone short
    # of a type takes many instances at once) is one event of the market: a policy that chooses each
    # launch's market (plan/placement.py) weighs it so, and a back-off on the burst alone would send
    # its launches on-demand at the full price against reclaims that do not come.
    bursts_count_once: bool = False
    # False: reclaims are counted and published but never start a back-off; only a capacity error does. For a
    # policy that weighs reclaims itself (plan/placement.py learns the rate and sends the work a reclaim would
    # set back, reruns included, to on-demand): a back-off on top sent its short work on-demand as well.
    back_off_on_reclaims: bool = True


@dataclass(frozen=True)
class SpotInterrupted(Notice):
    """The cloud reclaimed one of our spot instances."""

    instance_id: str = ""
    instance_type: str = ""


@dataclass(frozen=True)
class SpotBackOff(Notice):
    """Spot launches of a type go on-demand until ``until``."""

    instance_type: str = ""
    until: float = 0.0


@dataclass
class FallbackLedger:
    """What the fallback has seen of the spot market. A daemon keeps one across its loops (a new DAG builds
    a new loop, not a new market): a back-off outlives the workflow that hit it, and an instance terminated
    under the last loop is still ours under the next."""

    interruptions: dict[str, list[float]] = field(default_factory=dict)  # type -> reclaim times
    backed_off_until: dict[str, float] = field(default_factory=dict)  # type -> end of its back-off
    spot: dict[str, str] = field(default_factory=dict)  # live spot instance -> its type
    ours_ended: set[str] = field(default_factory=set)  # spot instances we terminated
    events: dict[str, list[float]] = field(default_factory=dict)  # type -> times of the reclaim events counted
    unwatched: bool = False  # the pool went unwatched: instances gone at the next listing are no reclaims

    def to_json(self) -> SavedLedger:
        """What a restart keeps: the reclaims and back-offs, by wall-clock time. Not the spot instances
        watched: the next daemon lists them afresh, and one gone while nobody watched is no reclaim."""
        return {"interruptions": self.interruptions, "backed_off_until": self.backed_off_until, "events": self.events}

    @classmethod
    def from_json(cls, saved: SavedLedger, ours_ended: set[str]) -> FallbackLedger:
        """The ledger a restart keeps, as validated by ``runtime/assembly.py: MarketMemory.from_json``;
        ``ours_ended``: instances the last daemon was terminating."""
        return cls(
            interruptions=saved.get("interruptions", {}),
            backed_off_until=saved.get("backed_off_until", {}),
            events=saved.get("events", {}),
            ours_ended=set(ours_ended),
        )


class SavedLedger(TypedDict, total=False):
    """``FallbackLedger.to_json``, as the state file keeps it."""

    interruptions: dict[str, list[float]]
    backed_off_until: dict[str, float]
    events: dict[str, list[float]]


class SpotFallback:
    """A ``Cloud`` whose spot launches fall back to on-demand; it counts interruptions."""

    def __init__(
        self,
        cloud: Cloud,
        clock: Callable[[], float],
        journal: Journal,
        rule: FallbackRule,
        ledger: FallbackLedger | None = None,
    ) -> None:
        self.cloud = cloud
        self.clock = clock
        self.journal = journal
        self.rule = rule
        self.ledger = ledger if ledger is not None else FallbackLedger()

    @property
    def slots_per_instance(self) -> int:
        return self.cloud.slots_per_instance

    @property
    def interruptions(self) -> int:
        return sum(len(times) for times in self.ledger.interruptions.values())

    def list_instances(self, include_unusable: bool = False) -> Sequence[Instance]:
        listed = self.cloud.list_instances(include_unusable)
        self._notice_reclaims({i.instance_id for i in listed})
        self.ledger.spot.update({i.instance_id: i.instance_type for i in listed if i.market is Market.SPOT})
        return listed

    def find_request(self, request_id: str) -> Sequence[Instance]:
        return self.cloud.find_request(request_id)

    def excuse_vanished(self, why: str) -> None:
        """The pool goes unwatched: spot instances gone at the next listing are no reclaims (``GuardedCloud``)."""
        self.ledger.unwatched = True
        excuse = getattr(self.cloud, "excuse_vanished", None)
        if callable(excuse):
            excuse(why)

    def launch(
        self, count: int, request_id: str | None = None, *, instance_type: str = "", market: Market = Market.ON_DEMAND
    ) -> Sequence[Instance]:
        if market is not Market.SPOT:
            return self._launch(count, request_id, instance_type, Market.ON_DEMAND)
        if self.backed_off(instance_type):
            return self._launch(count, request_id, instance_type, Market.ON_DEMAND)
        try:
            return self._launch(count, request_id, instance_type, Market.SPOT)
        except CloudCapacityError as short:
            made = [i for i in short.partial if isinstance(i, Instance)]
            self._back_off(instance_type, f"spot capacity error: {short.detail}")
            rest = count - len(made)
            fallback_id = f"{request_id}-od" if request_id else None
            return [*made, *self._launch(rest, fallback_id, instance_type, Market.ON_DEMAND)] if rest > 0 else made

    def terminate(self, instance_ids: Sequence[str]) -> Sequence[str]:
        ended = self.cloud.terminate(instance_ids)
        self.ledger.ours_ended.update(i for i in ended if i in self.ledger.spot)
        return ended

    def backed_off(self, instance_type: str) -> bool:
        return self.ledger.backed_off_until.get(instance_type, float("-inf")) > self.clock()

    def back_offs(self) -> dict[str, float]:
        """The types whose spot launches go on-demand now -> until when."""
        now = self.clock()
        return {kind: until for kind, until in sorted(self.ledger.backed_off_until.items()) if until > now}

    def _launch(self, count: int, request_id: str | None, instance_type: str, market: Market) -> Sequence[Instance]:
        made = self.cloud.launch(count, request_id, instance_type=instance_type, market=market)
        self.ledger.spot.update({i.instance_id: i.instance_type for i in made if i.market is Market.SPOT})
        return made

    def _notice_reclaims(self, live: set[str]) -> None:
        now = self.clock()
        events: dict[str, int] = {}  # type -> reclaim events seen in this listing
        unwatched, self.ledger.unwatched = self.ledger.unwatched, False
        for instance_id in [i for i in self.ledger.spot if i not in live]:
            kind = self.ledger.spot.pop(instance_id)
            ours = instance_id in self.ledger.ours_ended
            self.ledger.ours_ended.discard(instance_id)
            if ours or unwatched:
                continue
            times = [t for t in self.ledger.interruptions.get(kind, []) if t > now - self.rule.window_s]
            times.append(now)
            self.ledger.interruptions[kind] = times
            self.journal.publish(
                SpotInterrupted(
                    f"spot interruption: {instance_id} ({kind or 'default type'}) reclaimed", instance_id, kind
                )
            )
            events[kind] = 1 if self.rule.bursts_count_once else events.get(kind, 0) + 1
            self.ledger.events[kind] = [t for t in self.ledger.events.get(kind, []) if t > now - self.rule.window_s]
        for kind, count in events.items():
            self.ledger.events[kind] += [now] * count
            if self.rule.back_off_on_reclaims and len(self.ledger.events[kind]) >= self.rule.interruptions_to_back_off:
                self._back_off(
                    kind, f"{len(self.ledger.events[kind])} reclaims within {self.rule.window_s / 60:.0f} min"
                )

    def _back_off(self, instance_type: str, why: str) -> None:
        until = self.clock() + self.rule.back_off_s
        self.ledger.backed_off_until[instance_type] = until
        name = instance_type or "default type"
        self.journal.publish(
            SpotBackOff(
                f"spot back-off: {name} launches on-demand for {self.rule.back_off_s / 60:.0f} min ({why})",
                instance_type,
                until,
            )
        )
