"""The decisions log: one JSON line per decision, in a file rotated by size.

An observer of the journal: it writes every ``DecisionRecord``, every change
the operator makes (``ControlChanged``: pause, resume, hold, drain-all,
terminate-all) and the final ``ShutdownRecord``, which every run ends with.
``wire-daemon decisions`` and ``report`` read it back. It is the record of
what the daemon decided: the state file keeps no copy (it would grow without
bound there, beside what a restart needs), and ``status`` shows the last
decision from its snapshot.

Each run starts with a header record (``"event": "run"``: its id, the site,
the policy, the config file, dry-run): ``runs`` splits a log into its runs,
and ``decisions`` and ``report`` show one (the last unless told which).

Each line carries ``clock`` (``wall`` on a real site, where ``time`` is Unix
seconds; ``virtual`` on the emulated site, where ``time`` is the replay's
virtual seconds) and ``wall``, the Unix time it was written.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from logging.handlers import RotatingFileHandler
from pathlib import Path
from typing import Any

from wire_daemon.core.errors import ConfigError
from wire_daemon.core.journal import ControlChanged, Notice
from wire_daemon.loop.mape import DecisionRecord


@dataclass(frozen=True)
class ShutdownRecord:
    """The run's last line: why it stopped, what happened after the last decision, where things stand.

    Timed releases and scale-to-zero after the last decision, the last notices,
    the task counts and the pool left up.
    """

    time: float
    terminated: list[str]
    cost_units: int
    notices: list[Notice] = field(default_factory=list)
    reason: str = "stopped"  # workflow finished | signal | max iterations | ...
    finished: bool = False  # the (emulated) workflow is done
    done: int | None = None
    running: int | None = None
    idle: int | None = None
    pool: int | None = None  # instances left up
    dry_run: bool = False  # the terminations are what a dry run would have made

    def to_json(self) -> dict[str, Any]:
        record: dict[str, Any] = {
            "time": self.time,
            "event": "shutdown",
            "reason": self.reason,
            "finished": self.finished,
            "terminated": self.terminated,
            "cost_units": self.cost_units,
            "notes": [n.line for n in self.notices],
            "rule": f"shutdown: {self.reason}",
        }
        for key in ("done", "running", "idle", "pool"):
            if getattr(self, key) is not None:
                record[key] = getattr(self, key)
        if self.dry_run:
            record["dry_run"] = True
        return record


class DecisionsLog:
    """JSON lines, rotated by size."""

    def __init__(
        self,
        path: Path,
        max_bytes: int,
        backups: int,
        virtual: bool = False,
        wall_clock: Callable[[], float] = time.time,
    ) -> None:
        self.clock = "virtual" if virtual else "wall"
        self.wall_clock = wall_clock
        self._logger = logging.getLogger(f"wire_daemon.decisions.{path}")
        self._logger.propagate = False
        self._logger.setLevel(logging.INFO)
        if not self._logger.handlers:
            self._logger.addHandler(_handler(path, max_bytes, backups))

    def notify(self, event: object) -> None:
        if isinstance(event, (DecisionRecord, ShutdownRecord, ControlChanged)):
            self.append(event.to_json())

    def append(self, entry: dict[str, Any]) -> None:
        entry = {**entry, "clock": self.clock, "wall": round(self.wall_clock(), 3)}
        self._logger.info(json.dumps(entry, sort_keys=True))

    def close(self) -> None:
        for handler in list(self._logger.handlers):
            handler.close()
            self._logger.removeHandler(handler)


@dataclass(frozen=True)
class Run:
    """One run's records, its header first (``header`` is None for records logged before runs had headers)."""

    run_id: str
    header: dict[str, Any] | None
    records: list[dict[str, Any]]


def runs(records: Iterable[dict[str, Any]]) -> list[Run]:
    """A log's records split at each run's header, oldest run first."""
    found: list[Run] = []
    for record in records:
        if record.get("event") == "run":
            found.append(Run(str(record.get("run", "?")), record, [record]))
        elif found:
            found[-1].records.append(record)
        else:  # before the first header: a log older than the headers
            found.append(Run("(before run headers)", None, [record]))
    return found


def select_run(records: Iterable[dict[str, Any]], run_id: str | None, source: str) -> Run | None:
    """The run ``run_id`` names ("all": every record), the last one when None; None for an empty log."""
    split = runs(records)
    if run_id == "all":
        return Run("all", None, [r for run in split for r in run.records])
    if not split:
        return None
    if run_id is None:
        return split[-1]
    for run in reversed(split):  # the latest of that id (a state file made anew numbers its runs from 1 again)
        if run.run_id == run_id:
            return run
    known = ", ".join(run.run_id for run in split if run.header is not None) or "none"
    raise ConfigError(f"--run {run_id}: no such run in {source} (its runs: {known}; or all)")


def _handler(path: Path, max_bytes: int, backups: int) -> RotatingFileHandler:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        handler = RotatingFileHandler(path, maxBytes=max_bytes, backupCount=backups, encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"log.decisions_path: cannot write {path} ({exc.strerror})") from None
    handler.setFormatter(logging.Formatter("%(message)s"))
    return handler
