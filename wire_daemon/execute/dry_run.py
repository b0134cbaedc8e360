"""Dry-run: a ``Cloud`` that stands in for a provider and makes no call to it.

``DryRunCloud`` wraps the provider it replaces and never calls it, not even
to list: it keeps a pool of phantom instances (``dry-run-0001``...) that it
"launches" and "terminates", and publishes a note for every call it would
have made, so the decisions log reads as the real run would. The guard above
it (``execute.guarded_cloud``) applies the same limits, back-off and
bookkeeping as on a real cloud, over the phantoms; the runtime gives that
guard a scratch state store, so no phantom ever reaches the state file. On a
reload that flips ``safety.dry_run`` the runtime swaps this wrapper in or out
(``unwrap`` gives the provider back).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

from wire_daemon.core.billing import Billing
from wire_daemon.core.instances import CloudState, Instance
from wire_daemon.core.journal import Journal, Notice
from wire_daemon.core.pricing import Market, Offer
from wire_daemon.execute.guarded_cloud import GuardedCloud, SafetyConfig
from wire_daemon.persist.store import StateStore
from wire_daemon.ports import Cloud


class DryRunCloud:
    """The phantom pool a dry run would have; the provider it wraps is never called."""

    def __init__(self, provider: Cloud, clock: Callable[[], float], journal: Journal) -> None:
        self.provider = provider
        self.clock = clock
        self.journal = journal
        self._phantoms: dict[str, Instance] = {}
        self._ended: set[str] = set()

    @property
    def slots_per_instance(self) -> int:
        return self.provider.slots_per_instance  # configuration, not a cloud call

    def list_instances(self, include_unusable: bool = False) -> list[Instance]:
        return [i for k, i in self._phantoms.items() if k not in self._ended]

    def find_request(self, request_id: str) -> list[Instance]:
        return []  # a phantom launch is never lost

    def launch(
        self, count: int, request_id: str | None = None, *, instance_type: str = "", market: Market = Market.ON_DEMAND
    ) -> list[Instance]:
        of_type = f" of type {instance_type}" if instance_type else ""
        on_spot = " on spot" if market is Market.SPOT else ""
        self._note(f"dry-run: would launch {count} instance(s){of_type}{on_spot}")
        made = []
        for _ in range(count):
            instance_id = f"dry-run-{len(self._phantoms) + 1:04d}"
            self._phantoms[instance_id] = Instance(
                instance_id,
                self.clock(),
                self.slots_per_instance,
                CloudState.RUNNING,
                instance_type=instance_type,
                market=market,
            )
            made.append(self._phantoms[instance_id])
        return made

    def terminate(self, instance_ids: Sequence[str]) -> list[str]:
        """Note the call; end the live phantoms among ``instance_ids`` (a phantom ends once)."""
        self._note(f"dry-run: would terminate {', '.join(instance_ids)}")
        ended = [i for i in instance_ids if i in self._phantoms and i not in self._ended]
        self._ended.update(ended)
        return ended

    def _note(self, line: str) -> None:
        self.journal.publish(Notice(line))


def dry_run_guard(
    provider: Cloud,
    config: SafetyConfig,
    billing: Billing,
    clock: Callable[[], float],
    journal: Journal,
    holds_claims: Callable[[str], bool] | None = None,
    prices: Mapping[str, float] | None = None,
    offers: Mapping[str, Offer] | None = None,
) -> GuardedCloud:
    """The guard over a phantom pool standing in for ``provider``, its books in a scratch store.

    The state file is never written and the start-up reconcile, which would
    list the real cloud, is not done. No join check: a phantom never joins.
    """
    journal.publish(Notice("dry-run: reconcile skipped (it would list the cloud)"))
    phantoms = DryRunCloud(provider, clock, journal)
    return GuardedCloud(
        phantoms,
        StateStore(":memory:"),
        config,
        billing,
        clock,
        journal=journal,
        holds_claims=holds_claims,
        prices=prices,
        offers=offers,
    )


def unwrap(cloud: Cloud) -> Cloud:
    """The provider under a dry-run wrapper, or ``cloud`` itself."""
    return cloud.provider if isinstance(cloud, DryRunCloud) else cloud
