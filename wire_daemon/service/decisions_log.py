"""The decisions log: one JSON line per decision, in a rotated file and in the state file.

An observer of the journal: it writes every ``DecisionRecord`` and the final
``ShutdownRecord``. ``wire-daemon decisions`` and ``report`` read it back.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field
from logging.handlers import RotatingFileHandler
from pathlib import Path
from typing import Any

from wire_daemon.core.errors import ConfigError
from wire_daemon.core.journal import Notice
from wire_daemon.core.store import StateStore
from wire_daemon.loop.mape import DecisionRecord


@dataclass(frozen=True)
class ShutdownRecord:
    """What happened after the last decision: timed releases, scale-to-zero, last notices."""

    time: float
    terminated: list[str]
    cost_units: int
    notices: list[Notice] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {
            "time": self.time,
            "event": "shutdown",
            "terminated": self.terminated,
            "cost_units": self.cost_units,
            "notes": [n.line for n in self.notices],
            "rule": "shutdown",
        }


class DecisionsLog:
    """JSON lines, rotated by size, mirrored into the state file."""

    def __init__(self, path: Path, max_bytes: int, backups: int, store: StateStore | None = None) -> None:
        self.store = store
        self._logger = logging.getLogger(f"wire_daemon.decisions.{path}")
        self._logger.propagate = False
        self._logger.setLevel(logging.INFO)
        if not self._logger.handlers:
            self._logger.addHandler(_handler(path, max_bytes, backups))

    def notify(self, event: object) -> None:
        if isinstance(event, (DecisionRecord, ShutdownRecord)):
            self.append(event.time, event.to_json())

    def append(self, when: float, entry: dict[str, Any]) -> None:
        self._logger.info(json.dumps(entry, sort_keys=True))
        if self.store is not None:
            self.store.append_decision(when, entry)

    def close(self) -> None:
        for handler in list(self._logger.handlers):
            handler.close()
            self._logger.removeHandler(handler)


def _handler(path: Path, max_bytes: int, backups: int) -> RotatingFileHandler:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        handler = RotatingFileHandler(path, maxBytes=max_bytes, backupCount=backups, encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"log.decisions_path: cannot write {path} ({exc.strerror})") from None
    handler.setFormatter(logging.Formatter("%(message)s"))
    return handler
