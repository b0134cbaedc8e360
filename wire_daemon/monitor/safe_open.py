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
  caller asked for all of it). In time, nothing here can wait for another
  process; a read stuck in the kernel (a dead network file system) is the
  iteration watchdog's (``service/watchdog.py``).

Refusals are ``OSError`` subclasses, so every caller's existing "cannot read"
path reports them; the message says what the file is ("a FIFO").
"""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Iterator
from contextlib import contextmanager
from typing import BinaryIO

# What one file may hold before it is refused unread. Each is far above what
# Pegasus writes (a 1M-node .dag is 362 MiB; a kickstart record of a clustered
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


def read_regular(path: str | os.PathLike[str], limit: int) -> bytes:
    """The whole of a regular file of at most ``limit`` bytes (``TooLarge`` if it is bigger)."""
    with open_regular(path) as handle:
        size = os.fstat(handle.fileno()).st_size
        if size > limit:
            raise too_large(path, size, limit)
        data = handle.read(limit + 1)
    if len(data) > limit:  # grew while being read
        raise too_large(path, len(data), limit)
    return data


def too_large(path: str | os.PathLike[str], size: int, limit: int) -> TooLarge:
    return TooLarge(errno.EFBIG, f"{size:,} bytes, over the {limit:,}-byte bound: not read", os.fspath(path))


def describe(exc: OSError) -> str:
    """The reason part of an ``OSError`` (without the file name the warning names anyway)."""
    return str(exc.strerror or exc)
