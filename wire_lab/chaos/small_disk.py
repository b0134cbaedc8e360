"""A small file system to fill up: a tmpfs of a few hundred KiB, mounted for one test (needs root).

``SmallDisk.fill`` writes a filler file until the kernel refuses (ENOSPC),
so the next write of anyone on it fails as on a full disk; ``free`` removes
the filler. ``unmount`` (or leaving the ``with`` block) unmounts it.
"""

from __future__ import annotations

import errno
import os
import subprocess
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType

NOT_ROOT = "a full-disk test mounts a tmpfs: it needs root (run as root to enable it)"


def cannot_mount() -> str:
    """Why no tmpfs can be mounted here ("" if one can be): the tests skip (or, in CI, fail) with it."""
    if os.geteuid() != 0:
        return NOT_ROOT
    return ""


@dataclass
class SmallDisk:
    path: Path
    size_kib: int = 256
    mounted: bool = False

    def mount(self) -> SmallDisk:
        self.path.mkdir(parents=True, exist_ok=True)
        done = subprocess.run(
            ["mount", "-t", "tmpfs", "-o", f"size={self.size_kib}k", "tmpfs", str(self.path)],
            capture_output=True,
            text=True,
        )
        if done.returncode != 0:
            raise OSError(f"mount -t tmpfs on {self.path} failed: {done.stderr.strip()}")
        self.mounted = True
        return self

    def unmount(self) -> None:
        if self.mounted:
            subprocess.run(["umount", "-l", str(self.path)], capture_output=True)
            self.mounted = False

    def fill(self) -> int:
        """Fill what is left with a filler file; the bytes it holds."""
        written = 0
        chunk = b"\0" * 4096
        with open(self.path / "filler", "ab", buffering=0) as filler:
            while True:
                try:
                    written += filler.write(chunk) or 0
                except OSError as exc:
                    if exc.errno != errno.ENOSPC:
                        raise
                    break
        for small in (1024, 256, 16, 1):  # the last blocks, down to the byte
            try:
                with open(self.path / "filler", "ab", buffering=0) as filler:
                    while True:
                        written += filler.write(b"\0" * small) or 0
            except OSError as exc:
                if exc.errno != errno.ENOSPC:
                    raise
        return written

    def free(self) -> None:
        (self.path / "filler").unlink(missing_ok=True)

    def available(self) -> int:
        stat = os.statvfs(self.path)
        return stat.f_bavail * stat.f_frsize

    def __enter__(self) -> SmallDisk:
        return self.mount()

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self.unmount()
