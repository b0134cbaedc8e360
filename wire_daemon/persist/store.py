"""The daemon's memory across restarts: one SQLite file.

It holds the instances we launched, the launch requests in flight, the log
read positions and the operator's control requests (``wire-daemon pause``
and the like: written by the command, applied and marked by the daemon). The
cloud stays the source of truth for which instances exist; this file
remembers what the cloud cannot tell (why we launched, where we were
reading). What we decided is in the decisions log (``service/decisions_log.py``),
a file rotated by size: it is not copied here, where it would grow without bound.

Crash safety: a launch request is written *before* the cloud call and closed
after it, each in its own transaction, so a daemon killed in between finds the
open request on restart and can look for the instances tagged with its id
instead of launching again.

One writer that decides: the running daemon holds ``StateLock`` (an
exclusive ``flock`` on ``<state file>.lock``) for its whole life, so a second
daemon on the same file is refused. The operator's commands do not take it:
each of their writes is one transaction (``BEGIN IMMEDIATE``), which holds
SQLite's own write lock for that write only, so they write beside the running
daemon safely. Nothing here writes a temporary file: SQLite's write-ahead log
(``-wal``, ``-shm``) is part of the database, replayed or dropped by the next
connection after a kill -9, and removed by SQLite at the last clean close.

A full disk is weather. The running daemon opens the store with
``keep_writes``: a write the disk has no room for (SQLite's "database or
disk is full", or an I/O error growing a file) is kept in memory, with one
warning, instead of failing; every later write first tries the kept ones
again, oldest first, and the first that succeeds writes them all. Until then
every read sees them (they are replayed in a transaction rolled back after
the read), so nothing the daemon recorded, a launch request included, is
forgotten while it runs. The operator's commands do not keep writes: theirs
fail with a line, as a command that cannot record itself must.
"""

from __future__ import annotations

import errno
import fcntl
import json
import logging
import os
import re
import sqlite3
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from wire_daemon.core.errors import InputError
from wire_daemon.core.instances import LifecycleState

log = logging.getLogger(__name__)

# 2: instances.state holds the lifecycle state (core.instances); 3: the controls table;
# 4: instances.release_at, and no decisions table; 5: controls.argument
SCHEMA_VERSION = 5

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS instances (
    instance_id TEXT PRIMARY KEY,
    request_id TEXT,
    launch_time REAL NOT NULL,
    unit_start REAL NOT NULL,
    slots INTEGER NOT NULL,
    address TEXT NOT NULL DEFAULT '',
    state TEXT NOT NULL,              -- a LifecycleState value
    ended_at REAL,
    end_reason TEXT,
    release_at REAL                   -- drained: when it is to be terminated (its paid unit's end)
);
CREATE TABLE IF NOT EXISTS launch_requests (
    request_id TEXT PRIMARY KEY,
    count INTEGER NOT NULL,
    requested_at REAL NOT NULL,
    state TEXT NOT NULL,              -- open | done | rolled_back
    closed_at REAL
);
CREATE TABLE IF NOT EXISTS positions (key TEXT PRIMARY KEY, value TEXT NOT NULL, updated_at REAL NOT NULL);
CREATE TABLE IF NOT EXISTS controls (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    command TEXT NOT NULL,            -- pause | resume | hold | drain-all | terminate-all | deadline | budget
    count INTEGER,                    -- hold: the pool size to keep
    argument TEXT,                    -- deadline WHEN, budget AMOUNT (either may be 'clear')
    requested_at REAL NOT NULL,       -- wall clock
    requested_by TEXT NOT NULL DEFAULT '',
    applied_at REAL,                  -- wall clock, NULL until the daemon applies it
    outcome TEXT
);
"""


@dataclass(frozen=True)
class InstanceRecord:
    instance_id: str
    request_id: str | None
    launch_time: float
    unit_start: float
    slots: int
    address: str
    state: LifecycleState
    ended_at: float | None = None
    end_reason: str | None = None
    release_at: float | None = None  # drained: the planned end, kept across a restart


@dataclass(frozen=True)
class ControlRequest:
    """An operator's command to the daemon (``wire-daemon pause`` ...), as the state file keeps it."""

    seq: int
    command: str
    count: int | None
    requested_at: float
    requested_by: str
    applied_at: float | None = None
    outcome: str | None = None
    argument: str | None = None  # deadline WHEN, budget AMOUNT


CONTROL_COMMANDS = ("pause", "resume", "hold", "drain-all", "terminate-all", "deadline", "budget")


@dataclass(frozen=True)
class LaunchRequest:
    request_id: str
    count: int
    requested_at: float
    state: str


class StateDiskFull(InputError):
    """The state file's disk has no room to open, create or update the database (or its lock)."""


# SQLite's primary result codes for a write with no room: an I/O error growing a file, a full disk.
_SQLITE_IOERR, _SQLITE_FULL = 10, 13


def no_room(exc: BaseException) -> bool:
    """Did this fail for lack of room (a full disk or quota), not for a fault in the data?"""
    if isinstance(exc, sqlite3.OperationalError):
        code = getattr(exc, "sqlite_errorcode", None)
        if isinstance(code, int):
            return code & 0xFF in (_SQLITE_IOERR, _SQLITE_FULL)
        return "disk is full" in str(exc) or "disk I/O error" in str(exc)
    return isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT)


class StateLock:
    """The running daemon's exclusive hold on its state file, for its lifetime (see the module docstring).

    The kernel drops the lock when its holder dies, however it dies: a kill -9
    leaves no stale lock to clean. The lock file itself stays, with the last
    holder's pid: removing it at exit would race with a daemon taking it.
    """

    def __init__(self, state_path: str | Path) -> None:
        self.state_path = Path(state_path)
        self.path = self.state_path.with_name(self.state_path.name + ".lock")
        self._handle: Any = None

    def acquire(self) -> StateLock:
        """Take the lock or raise ``InputError`` naming the state file and the pid that holds it."""
        try:
            # Held open for the daemon's life (the lock lives on it). Append mode: opening never wipes the holder's pid.
            handle = open(self.path, "a+", encoding="utf-8")  # noqa: SIM115
        except OSError as exc:
            kind = StateDiskFull if no_room(exc) else InputError
            raise kind(str(self.path), f"cannot open the state file's lock ({exc.strerror})") from None
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            holder = self.holder()
            handle.close()
            who = f"pid {holder}" if holder else "another process"
            raise InputError(
                str(self.state_path),
                f"in use by another wire-daemon run ({who}, lock {self.path.name}); "
                "stop it first, or give this one another state_path",
            ) from None
        try:  # unbuffered: a write refused for want of room leaves nothing behind for close() to retry
            os.ftruncate(handle.fileno(), 0)
            os.write(handle.fileno(), f"{os.getpid()}\n".encode())
        except OSError as exc:  # the pid only names the holder to a refused second daemon: the lock holds without it
            if not no_room(exc):
                raise
        self._handle = handle
        return self

    def holder(self) -> int | None:
        """The pid written by the last daemon that took the lock (it may be gone)."""
        try:
            text = self.path.read_text(encoding="utf-8").strip()
        except (OSError, UnicodeDecodeError):
            return None
        return int(text) if text.isdigit() else None

    def release(self) -> None:
        if self._handle is not None:
            self._handle.close()  # closing the only descriptor drops the flock
            self._handle = None


class StateStore:
    """One SQLite file; every public write is its own committed transaction."""

    def __init__(self, path: str | Path, keep_writes: bool = False) -> None:
        """``keep_writes``: keep in memory the writes a full disk refuses (the module docstring); off: they raise."""
        self.path = Path(path)
        try:
            self._db = _Connection(sqlite3.connect(self.path, isolation_level=None, timeout=30.0), str(self.path))
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA synchronous=FULL")
            self._migrate()
        except sqlite3.DatabaseError as exc:
            if no_room(exc):
                raise StateDiskFull(str(self.path), f"no room on its disk to open the state database ({exc})") from None
            raise InputError(str(self.path), f"not a usable state database ({exc})") from exc
        if keep_writes:
            # The daemon writes every iteration: a write-ahead log checkpointed at 32 pages, not SQLite's 1000
            # (4 MiB), and cut back to 128 KiB after, keeps the room it needs on the disk small and steady.
            self._db.execute("PRAGMA wal_autocheckpoint=32")
            self._db.execute("PRAGMA journal_size_limit=131072")
            self._write_once()
        self._db.keep = keep_writes  # from here: the schema is on disk, only records can wait in memory

    def _write_once(self) -> None:
        """A store that keeps writes must have written once: a start with no room waits (``StateDiskFull``)."""
        try:
            self.set_meta("opened", json.dumps({"wall": time.time(), "pid": os.getpid()}))
        except sqlite3.OperationalError as exc:
            if not no_room(exc):
                raise
            self._db.close()
            raise StateDiskFull(str(self.path), f"no room on its disk to write the state database ({exc})") from None

    @property
    def kept_writes(self) -> int:
        """Writes kept in memory for want of room on the disk, not yet written."""
        return len(self._db.kept)

    def flush(self) -> bool:
        """Try the kept writes again now; True if none is left."""
        return self._db.flush()

    @property
    def rows_changed(self) -> int:
        """Rows this connection has written since it opened (how a benchmark or test sees a write)."""
        return self._db.db.total_changes

    def close(self) -> None:
        if self._db.kept and not self._db.flush():
            log.warning(
                "%s: %d write(s) kept in memory are lost at exit (no room on its disk); "
                "the next start finds the pool's instances in the cloud's listing",
                self.path,
                len(self._db.kept),
            )
        self._db.close()

    def _migrate(self) -> None:
        version = self._db.execute("PRAGMA user_version").fetchone()[0]
        if version > SCHEMA_VERSION:
            raise InputError(str(self.path), f"written by a newer wire-daemon (schema {version} > {SCHEMA_VERSION})")
        if version == SCHEMA_VERSION:
            return
        with self._transaction():  # executescript would commit on its own; keep it one transaction
            for statement in _SCHEMA.split(";"):
                if statement.strip():
                    self._db.execute(statement)
            if version == 1:
                self._db.execute(_V1_STATES)
            # Up to schema 3 every decision was copied here too; its pages go back to the file's free list.
            self._db.execute("DROP TABLE IF EXISTS decisions")
            columns = {row[1] for row in self._db.execute("PRAGMA table_info(instances)")}
            if "release_at" not in columns:  # a table older than schema 4: CREATE IF NOT EXISTS left it as it was
                self._db.execute("ALTER TABLE instances ADD COLUMN release_at REAL")
            if "argument" not in {row[1] for row in self._db.execute("PRAGMA table_info(controls)")}:
                self._db.execute("ALTER TABLE controls ADD COLUMN argument TEXT")  # older than schema 5
            self._db.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")

    def _transaction(self) -> _Tx:
        return _Tx(self._db)

    # -- identity ------------------------------------------------------------

    def daemon_id(self) -> str:
        """A stable id for this daemon, created once; instances are tagged with it."""
        row = self._db.execute("SELECT value FROM meta WHERE key = 'daemon_id'").fetchone()
        if row:
            return row[0]
        new = uuid.uuid4().hex[:12]
        with self._transaction():
            self._db.execute("INSERT OR IGNORE INTO meta VALUES ('daemon_id', ?)", (new,))
        return self._db.execute("SELECT value FROM meta WHERE key = 'daemon_id'").fetchone()[0]

    def set_meta(self, key: str, value: str) -> None:
        with self._transaction():
            self._db.execute("INSERT OR REPLACE INTO meta VALUES (?, ?)", (key, value))

    def get_meta(self, key: str) -> str | None:
        row = self._db.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
        return row[0] if row else None

    # -- launch requests -----------------------------------------------------

    def open_request(self, count: int, now: float | None = None) -> str:
        request_id = uuid.uuid4().hex[:16]
        with self._transaction():
            self._db.execute(
                "INSERT INTO launch_requests VALUES (?, ?, ?, 'open', NULL)", (request_id, count, _now(now))
            )
        return request_id

    def close_request(self, request_id: str, state: str = "done", now: float | None = None) -> None:
        if state not in ("done", "rolled_back"):
            raise ValueError(f"unknown request state {state!r}")
        with self._transaction():
            self._db.execute(
                "UPDATE launch_requests SET state = ?, closed_at = ? WHERE request_id = ?",
                (state, _now(now), request_id),
            )

    def open_requests(self) -> list[LaunchRequest]:
        rows = self._db.execute(
            "SELECT request_id, count, requested_at, state FROM launch_requests "
            "WHERE state = 'open' ORDER BY requested_at"
        )
        return [LaunchRequest(*row) for row in rows]

    # -- instances -----------------------------------------------------------

    def record_instance(self, record: InstanceRecord) -> None:
        with self._transaction():
            self._db.execute(
                "INSERT OR REPLACE INTO instances VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    record.instance_id,
                    record.request_id,
                    record.launch_time,
                    record.unit_start,
                    record.slots,
                    record.address,
                    LifecycleState(record.state).value,
                    record.ended_at,
                    record.end_reason,
                    record.release_at,
                ),
            )

    def mark_ended(
        self, instance_id: str, reason: str, now: float | None = None, state: LifecycleState = LifecycleState.TERMINATED
    ) -> None:
        """Billing stops here: ``ended_at`` is the end of its last paid unit's span."""
        with self._transaction():
            self._db.execute(
                "UPDATE instances SET state = ?, ended_at = ?, end_reason = ? WHERE instance_id = ?",
                (state.value, _now(now), reason, instance_id),
            )

    def set_lifecycle(self, instance_id: str, state: LifecycleState) -> None:
        with self._transaction():
            self._db.execute("UPDATE instances SET state = ? WHERE instance_id = ?", (state.value, instance_id))

    def set_release_at(self, instance_id: str, release_at: float) -> None:
        """When a drained instance is to be terminated: a restarted daemon keeps that plan."""
        with self._transaction():
            self._db.execute("UPDATE instances SET release_at = ? WHERE instance_id = ?", (release_at, instance_id))

    def instances(self, live_only: bool = True) -> list[InstanceRecord]:
        """Our instances; live ones are those not ended (a terminating one still counts until it is gone)."""
        query = "SELECT * FROM instances"
        if live_only:
            query += " WHERE ended_at IS NULL"
        rows = self._db.execute(query + " ORDER BY launch_time, instance_id")
        return [_instance_record(row) for row in rows]

    # -- read positions --------------------------------------------------------

    def save_position(self, key: str, value: dict[str, Any], now: float | None = None) -> None:
        with self._transaction():
            self._db.execute(
                "INSERT OR REPLACE INTO positions VALUES (?, ?, ?)", (key, json.dumps(value, sort_keys=True), _now(now))
            )

    def load_position(self, key: str) -> dict[str, Any] | None:
        row = self._db.execute("SELECT value FROM positions WHERE key = ?", (key,)).fetchone()
        return json.loads(row[0]) if row else None

    def forget_positions(self, prefix: str) -> None:
        with self._transaction():
            self._db.execute("DELETE FROM positions WHERE key LIKE ? ESCAPE '\\'", (_like_prefix(prefix),))

    # -- the operator's controls ---------------------------------------------------

    def request_control(
        self,
        command: str,
        count: int | None = None,
        by: str = "",
        now: float | None = None,
        argument: str | None = None,
    ) -> int:
        """Queue a command for the daemon; it applies the pending ones in order at its next look."""
        if command not in CONTROL_COMMANDS:
            raise ValueError(f"unknown control command {command!r}")
        with self._transaction():
            cursor = self._db.execute(
                "INSERT INTO controls (command, count, requested_at, requested_by, argument) VALUES (?, ?, ?, ?, ?)",
                (command, count, _now(now), by, argument),
            )
        return int(cursor.lastrowid or 0)

    def pending_controls(self) -> list[ControlRequest]:
        rows = self._db.execute(f"SELECT {_CONTROL_COLUMNS} FROM controls WHERE applied_at IS NULL ORDER BY seq")
        return [ControlRequest(*row) for row in rows]

    def has_pending_controls(self) -> bool:
        return self._db.execute("SELECT 1 FROM controls WHERE applied_at IS NULL LIMIT 1").fetchone() is not None

    def mark_control_applied(self, seq: int, outcome: str, now: float | None = None) -> None:
        with self._transaction():
            self._db.execute("UPDATE controls SET applied_at = ?, outcome = ? WHERE seq = ?", (_now(now), outcome, seq))

    def controls(self, last: int = 20) -> list[ControlRequest]:
        """The latest ``last`` control requests, oldest first, applied or not."""
        rows = self._db.execute(f"SELECT {_CONTROL_COLUMNS} FROM controls ORDER BY seq DESC LIMIT ?", (last,))
        return [ControlRequest(*row) for row in reversed(list(rows))]


_CONTROL_COLUMNS = "seq, command, count, requested_at, requested_by, applied_at, outcome, argument"


# Schema 1 kept the cloud's word (pending, running, ...) or 'terminated'.
_V1_STATES = """
UPDATE instances SET state = CASE
    WHEN state != 'terminated' THEN 'booting'
    WHEN end_reason IN ('vanished', 'gone from the cloud') THEN 'vanished'
    ELSE 'terminated' END
"""


class _Tx:
    """BEGIN IMMEDIATE ... COMMIT, rolled back on any exception (kept in memory for want of room, if allowed)."""

    def __init__(self, db: _Connection) -> None:
        self.db = db

    def __enter__(self) -> _Connection:
        self.db.begin()
        return self.db

    def __exit__(self, exc_type: object, exc: object, tb: object) -> None:
        self.db.end(failed=exc_type is not None)


Statement = tuple[str, tuple[Any, ...]]
KEPT_MAX = 5000  # transactions kept in memory; beyond, the oldest goes (the cloud's listing remains the record)
_REPLACE = re.compile(r"^\s*INSERT OR REPLACE INTO (\w+) ", re.IGNORECASE)


class _Rows:
    """A cursor's answers, read while the kept writes were replayed."""

    lastrowid: int | None = None

    def __init__(self, rows: list[Any]) -> None:
        self.rows = rows

    def fetchone(self) -> Any:
        return self.rows[0] if self.rows else None

    def fetchall(self) -> list[Any]:
        return list(self.rows)

    def __iter__(self) -> Iterator[Any]:
        return iter(self.rows)


class _Connection:
    """The store's SQLite connection, keeping the writes a full disk refuses when ``keep`` is on.

    Each write transaction's statements are recorded as it runs. If the disk has
    no room for it (at a statement or at COMMIT), it is rolled back and its
    statements kept; the next transaction first writes the kept ones, and while
    any is kept, a new one is only kept after them (order is what makes the
    replay right). A read while writes are kept replays them in a transaction
    it rolls back, so it sees what the daemon wrote.
    """

    def __init__(self, db: sqlite3.Connection, path: str) -> None:
        self.db = db
        self.path = path
        self.keep = False
        self.kept: list[list[Statement]] = []
        self._tx: list[Statement] | None = None  # the open write transaction's statements
        self._refused = False  # the open transaction will be kept, not committed

    def execute(self, sql: str, params: Any = ()) -> Any:
        if self._tx is not None:
            return self._in_transaction(sql, tuple(params))
        if self.kept and sql.lstrip()[:6].upper() == "SELECT":
            return self._read_through(sql, tuple(params))
        return self.db.execute(sql, params)

    def close(self) -> None:
        self.db.close()

    def begin(self) -> None:
        self._tx, self._refused = [], False
        if self.kept and not self.flush():
            self._refused = True  # the kept writes go first: this one waits behind them
            return
        try:
            self.db.execute("BEGIN IMMEDIATE")
        except BaseException:
            self._tx = None
            raise

    def end(self, failed: bool) -> None:
        statements, self._tx = self._tx or [], None
        if failed:
            self._rollback()
            return
        if not self._refused:
            try:
                self.db.execute("COMMIT")
                return
            except sqlite3.OperationalError as exc:
                self._rollback()
                if not (self.keep and no_room(exc)):
                    raise
                self._keep(statements, str(exc))
                return
        self._rollback()
        self._keep(statements, "")

    def flush(self) -> bool:
        """Write every kept transaction, oldest first, in one; True if none is left."""
        if not self.kept:
            return True
        try:
            self._write_kept()
        except sqlite3.OperationalError as exc:
            self._rollback()
            if no_room(exc):
                return False
            # Not for want of room: these writes will never go in. The cloud's listing remains the record.
            log.error("%s: %d kept write(s) dropped: they cannot be written (%s)", self.path, len(self.kept), exc)
            self.kept = []
            return True
        log.warning("%s: room on its disk again: %d kept write(s) written", self.path, len(self.kept))
        self.kept = []
        self._checkpoint()
        return True

    def _write_kept(self) -> None:
        self.db.execute("BEGIN IMMEDIATE")
        for statement in (st for tx in self.kept for st in tx):
            self.db.execute(*statement)
        self.db.execute("COMMIT")

    def _checkpoint(self) -> None:
        """Move the write-ahead log into the database and empty it: the disk that was full gets its room back."""
        try:
            self.db.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()
        except sqlite3.OperationalError as exc:  # busy, or no room to grow the database yet: the next one will do
            if not no_room(exc) and "locked" not in str(exc):
                raise

    def _in_transaction(self, sql: str, params: tuple[Any, ...]) -> Any:
        assert self._tx is not None
        self._tx.append((sql, params))
        if self._refused:
            return _Rows([])
        try:
            return self.db.execute(sql, params)
        except sqlite3.OperationalError as exc:
            if not (self.keep and no_room(exc)):
                raise
            self._refused = True
            return _Rows([])

    def _read_through(self, sql: str, params: tuple[Any, ...]) -> Any:
        try:
            self.db.execute("BEGIN")
            for statement in (st for tx in self.kept for st in tx):
                self.db.execute(*statement)
            return _Rows(self.db.execute(sql, params).fetchall())
        except sqlite3.OperationalError as exc:
            if not no_room(exc):
                raise
        finally:
            self._rollback()
        return self.db.execute(sql, params)  # even the replay found no room: what the disk holds

    def _keep(self, statements: list[Statement], why: str) -> None:
        if not statements:
            return
        if not self.kept:
            log.warning(
                "%s: no room on its disk (%s): the daemon's writes are kept in memory and written "
                "as soon as there is room; it goes on",
                self.path,
                why or "database or disk is full",
            )
        key = _replace_key(statements)
        if key is not None:  # a later whole-row replace of the same row makes the earlier one moot
            self.kept = [tx for tx in self.kept if _replace_key(tx) != key]
        self.kept.append(statements)
        if len(self.kept) > KEPT_MAX:
            del self.kept[0]

    def _rollback(self) -> None:
        if self.db.in_transaction:
            self.db.execute("ROLLBACK")


def _replace_key(statements: list[Statement]) -> tuple[str, Any] | None:
    """(table, key) of a transaction that is one whole-row ``INSERT OR REPLACE``; None for any other."""
    if len(statements) != 1:
        return None
    sql, params = statements[0]
    found = _REPLACE.match(sql)
    return (found.group(1).lower(), params[0]) if found and params else None


def _now(now: float | None) -> float:
    return time.time() if now is None else now


def _like_prefix(prefix: str) -> str:
    return prefix.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"


def _instance_record(row: tuple[Any, ...]) -> InstanceRecord:
    """One ``instances`` row, its columns in the schema's order."""
    instance_id, request_id, launch_time, unit_start, slots, address, state, ended_at, end_reason, release_at = row
    return InstanceRecord(
        instance_id,
        request_id,
        launch_time,
        unit_start,
        slots,
        address,
        LifecycleState(state),
        ended_at,
        end_reason,
        release_at,
    )
