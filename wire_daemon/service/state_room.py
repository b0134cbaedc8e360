"""The daemon's state file at start: a disk with no room is waited for, never a death.

A daemon that cannot write its state file must not steer the pool: it could
not record a launch. So a start on a full disk says so in one line and tries
again every ``START_RETRY_S`` until there is room (SIGTERM ends the wait as it
ends the daemon). Once running, the store keeps the writes a full disk refuses
in memory (``StateStore(keep_writes=True)``) and goes on.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from pathlib import Path

from wire_daemon.persist.store import StateDiskFull, StateLock, StateStore
from wire_daemon.service.wording import duration

log = logging.getLogger(__name__)

START_RETRY_S = 5.0


def open_state(
    path: str | Path, sleep: Callable[[float], None] = time.sleep, retry_s: float = START_RETRY_S
) -> tuple[StateLock, StateStore]:
    """The daemon's lock on ``path`` and its store, once the disk has room to write it."""
    waiting_since: float | None = None
    while True:
        try:
            opened = _open(path)
        except StateDiskFull as exc:
            if waiting_since is None:
                waiting_since = time.monotonic()
                log.warning("%s; waiting for room: trying again every %s", exc, duration(retry_s))
            sleep(retry_s)
            continue
        if waiting_since is not None:
            log.info("%s: room on its disk: starting after %s", path, duration(time.monotonic() - waiting_since))
        return opened


def _open(path: str | Path) -> tuple[StateLock, StateStore]:
    lock = StateLock(path).acquire()
    try:
        return lock, StateStore(path, keep_writes=True)
    except BaseException:
        lock.release()
        raise
