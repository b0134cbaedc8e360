"""An in-memory cloud driver for the guards' tests: launches on the market asked, in one zone, ends on terminate,
and lets a test reclaim instances as a cloud reclaims spot capacity."""

from __future__ import annotations

from collections.abc import Callable

from wire_daemon.core.instances import Instance
from wire_daemon.core.pricing import Market


class MemoryCloud:
    slots_per_instance = 4

    def __init__(self, clock: Callable[[], float], state: str = "running", zone: str = "") -> None:
        self.clock = clock
        self.state = state  # what a new instance's cloud state reads
        self.zone = zone
        self.live: dict[str, Instance] = {}
        self.n = 0

    def list_instances(self, include_unusable: bool = False) -> list[Instance]:
        return list(self.live.values())

    def find_request(self, request_id: str) -> list[Instance]:
        return [i for i in self.live.values() if i.request_id == request_id]

    def launch(
        self, count: int, request_id: str | None = None, instance_type: str = "", market: Market = Market.ON_DEMAND
    ) -> list[Instance]:
        made = []
        for _ in range(count):
            self.n += 1
            i = Instance(
                f"i-{self.n}", self.clock(), 4, self.state, "", instance_type, request_id or "", market, self.zone
            )
            self.live[i.instance_id] = i
            made.append(i)
        return made

    def terminate(self, ids: list[str]) -> list[str]:
        for i in ids:
            self.live.pop(i, None)
        return list(ids)

    def reclaim(self, count: int) -> None:
        """The cloud takes back the ``count`` oldest instances, without being asked."""
        for instance_id in list(self.live)[:count]:
            del self.live[instance_id]
