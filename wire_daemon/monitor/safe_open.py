"""Open only regular files, never block on one, and read a bounded number of bytes.

Anyone who can write to the submit root can put a FIFO, a device node or a
symlink to one where the monitor expects ``jobstate.log``, a ``.dag`` or a
kickstart record. A plain ``open()`` of a FIFO blocks until a writer appears
(forever), and a read of ``/dev/zero`` never ends. Every file the monitor and
``inspect`` read therefore goes through this module:

* the path is ``stat``-ed first and anything but a regular file is refused
  without being opened;
* it is opened with ``O_NONBLOCK`` (a FIFO swapped in after the ``stat`` opens
  at once instead of waiting for a writer) and ``fstat``-ed again: what was
  opened must be a regular file too;
* reads stop at a byte bound (``TooLarge`` when the file holds more and the
  caller asked for all of it) and at a time bound (a hung network file system).

Refusals are ``OSError`` subclasses, so every caller's existing "cannot read"
path reports them; the message says what the file is ("a FIFO").
"""

from __future__ import annotations

import errno
import os
import stat
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import BinaryIO

READ_CHUNK = 1 << 20
READ_TIMEOUT_S = 10.0  # one file's read; a local disk is orders of magnitude faster

# What one file may hold before it is refused unread. Each is far above what
# Pegasus writes (a 1M-node .dag is ~150 MB; a kickstart record of a clustered
# job of thousands of tasks a few MB) and far below what would exhaust memory
# once parsed (a parsed kickstart record takes ~8x its bytes).
DAG_LIMIT = 1 << 30
KICKSTART_LIMIT = 16 << 20
SUBMIT_FILE_LIMIT = 4 << 20
BRAINDUMP_LIMIT = 1 << 20
YAML_LIMIT = 64 << 20


class NotRegularFile(OSError):
    """The path names a FIFO, a device, a socket or a directory: not read."""


class TooLarge(OSError):
    """The file holds more bytes than the caller's bound."""


class ReadTooSlow(OSError):
    """Reading the file took longer than the time bound."""


def file_kind(mode: int) -> str:
    """``stat`` mode -> the words a warning uses for what the path is."""
    kinds = (
        (stat.S_ISFIFO, "a FIFO (named pipe)"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISSOCK, "a socket"),
        (stat.S_ISDIR, "a directory"),
        (stat.S_ISLNK, "a symbolic link"),
    )
    return next((words for test, words in kinds if test(mode)), "not a regular file")


def _refuse(path: str | os.PathLike[str], mode: int) -> NotRegularFile:
    return NotRegularFile(errno.EINVAL, f"{file_kind(mode)}, not a regular file: not read", os.fspath(path))


def is_regular(path: str | os.PathLike[str]) -> bool:
    """True when ``path`` (after symlinks) is a regular file; never opens it."""
    try:
        return stat.S_ISREG(os.stat(path).st_mode)
    except (OSError, ValueError):
        return False


@contextmanager
def open_regular(path: str | os.PathLike[str]) -> Iterator[BinaryIO]:
    """A binary handle on ``path``, which must be a regular file (``NotRegularFile`` otherwise).

    Symlinks are followed (submit dirs link files legitimately); the check on
    the opened descriptor is what counts, the one before only spares opening a
    device at all.
    """
    mode = os.stat(path).st_mode
    if not stat.S_ISREG(mode):
        raise _refuse(path, mode)
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise _refuse(path, mode)
        handle = os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise
    with handle:
        yield handle


def read_bounded(
    handle: BinaryIO, limit: int, source: str | os.PathLike[str] = "", timeout_s: float = READ_TIMEOUT_S
) -> bytes:
    """Up to ``limit`` bytes from the handle's position, in chunks, within ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    parts: list[bytes] = []
    left = limit
    while left > 0:
        part = handle.read(min(READ_CHUNK, left))
        if not part:
            break
        parts.append(part)
        left -= len(part)
        if time.monotonic() > deadline:
            raise ReadTooSlow(errno.ETIMEDOUT, f"reading took over {timeout_s:g} s: not read", os.fspath(source))
    return b"".join(parts)


def read_regular(path: str | os.PathLike[str], limit: int, timeout_s: float = READ_TIMEOUT_S) -> bytes:
    """The whole of a regular file of at most ``limit`` bytes (``TooLarge`` if it is bigger)."""
    with open_regular(path) as handle:
        size = os.fstat(handle.fileno()).st_size
        if size > limit:
            raise too_large(path, size, limit)
        data = read_bounded(handle, limit + 1, path, timeout_s)
    if len(data) > limit:  # grew while being read
        raise too_large(path, len(data), limit)
    return data


def too_large(path: str | os.PathLike[str], size: int, limit: int) -> TooLarge:
    return TooLarge(errno.EFBIG, f"{size:,} bytes, over the {limit:,}-byte bound: not read", os.fspath(path))


def describe(exc: OSError) -> str:
    """The reason part of an ``OSError`` (without the file name the warning names anyway)."""
    return str(exc.strerror or exc)
