"""Fakes the runtime tests share."""

from __future__ import annotations

from wire_daemon.core.instances import Instance


class NoCloud:
    slots_per_instance = 4

    def list_instances(self, include_unusable: bool = False) -> list[Instance]:
        return []

    def find_request(self, request_id: str) -> list[Instance]:
        return []

    def launch(self, count: int, request_id: str | None = None, user_data: str | None = None) -> list[Instance]:
        return []

    def terminate(self, instance_ids) -> list[str]:
        return []
