"""Read only what was appended to a growing file since the last read.

Every incremental reader (job event log, jobstate.log) keeps a ``ReadPosition``:
the byte offset of the first byte it has not consumed yet, plus what it needs
to notice that the file it had been reading is gone:

* ``inode`` -- a different inode at the same path means the file was replaced
  (log rotation, a re-planned workflow): read the new file from the start;
* ``size`` -- the size seen at the last read; a file now shorter than the
  offset was truncated: read it again from the start;
* ``tail_crc`` -- CRC-32 of the (up to) 64 bytes just before the offset; if
  they changed, the file was rewritten in place: read it again from the start.

Each of these restarts logs one warning. The caller decides how many of the
bytes it was given form complete records (``commit(consumed)``); a half-written
last record stays unread until a later call. The position is a small dataclass
with ``to_dict``/``from_dict`` so the daemon can persist it (SQLite, JSON) and
a restarted reader resumes without re-reading or double counting.
"""

from __future__ import annotations

import os
import zlib
from dataclasses import asdict, dataclass, replace
from typing import Any

from wire_daemon.monitor.problems import Problems

TAIL_BYTES = 64
DEFAULT_MAX_READ = 64 << 20  # bytes handed out per call; the rest waits for the next call


@dataclass(frozen=True)
class ReadPosition:
    offset: int = 0  # first byte not consumed yet
    line: int = 0  # newlines before ``offset`` (to name lines in warnings)
    inode: int = 0  # 0: not known yet
    size: int = 0  # file size at the last read
    tail_crc: int = 0  # CRC-32 of the bytes [offset - 64, offset)

    def to_dict(self) -> dict[str, int]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ReadPosition:
        values = {}
        for name in cls.__dataclass_fields__:
            value = data.get(name, 0)
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise ValueError(f"read position field {name!r} must be a non-negative integer, not {value!r}")
            values[name] = value
        return cls(**values)


@dataclass(frozen=True)
class Chunk:
    """Bytes appended since the position, as handed to the caller."""

    data: bytes
    start: ReadPosition  # the position ``data`` starts at
    mtime: float  # the file's modification time at this read
    _prefix: bytes  # the bytes just before ``start.offset`` (for the next tail CRC)
    _size: int
    _inode: int


class AppendedReader:
    """Hands out the bytes appended to ``path`` since ``position``."""

    def __init__(
        self,
        path: str | os.PathLike[str],
        position: ReadPosition | None = None,
        problems: Problems | None = None,
        max_read: int = DEFAULT_MAX_READ,
    ) -> None:
        self.path = os.fspath(path)
        self.position = position or ReadPosition()
        self.problems = problems or Problems()
        self._max_read = max_read
        self._missing_reported = False

    def read(self) -> Chunk | None:
        """New bytes (possibly empty), or ``None`` when the file cannot be read now."""
        try:
            with open(self.path, "rb") as f:
                st = os.fstat(f.fileno())
                self._missing_reported = False
                return self._read_open(f, st)
        except FileNotFoundError:
            if not self._missing_reported:
                self.problems.warn(self.path, "not found (yet); waiting for it")
                self._missing_reported = True
            return None
        except OSError as exc:
            self.problems.warn(self.path, f"cannot be read ({exc.strerror or exc}); will retry")
            return None

    def commit(self, chunk: Chunk, consumed: int) -> ReadPosition:
        """Advance past the first ``consumed`` bytes of ``chunk``."""
        consumed = max(0, min(consumed, len(chunk.data)))
        start = chunk.start
        tail = (chunk._prefix + chunk.data[max(0, consumed - TAIL_BYTES) : consumed])[-TAIL_BYTES:]  # no copy
        self.position = ReadPosition(
            offset=start.offset + consumed,
            line=start.line + chunk.data.count(b"\n", 0, consumed),
            inode=chunk._inode,
            size=chunk._size,
            tail_crc=zlib.crc32(tail) if start.offset + consumed else 0,
        )
        return self.position

    # -- internals ------------------------------------------------------------

    def _read_open(self, f: Any, st: os.stat_result) -> Chunk:
        start = self._checked_start(f, st)
        keep = min(TAIL_BYTES, start.offset)
        f.seek(start.offset - keep)
        prefix = f.read(keep)
        data = f.read(self._max_read)
        return Chunk(data, start, st.st_mtime, prefix, max(st.st_size, start.offset + len(data)), st.st_ino)

    def _checked_start(self, f: Any, st: os.stat_result) -> ReadPosition:
        pos = self.position
        why = self._restart_reason(f, st, pos)
        if why:
            self.problems.warn(self.path, f"{why}; reading it again from the start", pos.line + 1)
            pos = ReadPosition()
            self.position = pos
        return replace(pos, inode=st.st_ino)

    @staticmethod
    def _restart_reason(f: Any, st: os.stat_result, pos: ReadPosition) -> str | None:
        if pos.offset == 0:
            return None
        if pos.inode and st.st_ino and st.st_ino != pos.inode:
            return "was replaced (inode changed: rotated or re-created)"
        if st.st_size < pos.offset:
            return f"was truncated ({st.st_size} bytes, had read {pos.offset})"
        keep = min(TAIL_BYTES, pos.offset)
        f.seek(pos.offset - keep)
        if zlib.crc32(f.read(keep)) != pos.tail_crc:
            return "was rewritten before the read position"
        return None
