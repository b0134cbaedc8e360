"""Running commands on the host and inside the chroot, and small polling helpers.

Every command inside the chroot runs in a private mount namespace of its own
(``unshare --mount --propagation private``) in which the chroot gets ``/proc``,
``/dev`` and the bind mounts it needs. The mounts live exactly as long as the
process tree that uses them: a crashed test leaves no mount behind on the host,
and two pools (or workers) sharing one chroot never see each other's mounts.
"""

from __future__ import annotations

import contextlib
import os
import shlex
import socket
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

from wire_lab.realpool.errors import RealPoolError

T = TypeVar("T")

# The environment of every chroot command: nothing leaks in from the test process
# (no CONDOR_CONFIG of the client side, no proxies, no credentials).
CHROOT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


def run(argv: Sequence[str], what: str, *, env: Mapping[str, str] | None = None, timeout: float = 600.0) -> str:
    """Run a command to completion; its stdout, or a RealPoolError naming ``what`` and the last line of stderr."""
    try:
        done = subprocess.run(
            list(argv),
            capture_output=True,
            text=True,
            env=dict(env) if env is not None else None,
            timeout=timeout,
            check=False,
        )
    except FileNotFoundError:
        raise RealPoolError(f"{what}: {argv[0]} is not installed") from None
    except subprocess.TimeoutExpired:
        raise RealPoolError(f"{what}: {shlex.join(argv[:3])}... did not finish in {timeout:.0f} s") from None
    if done.returncode != 0:
        raise RealPoolError(f"{what}: exit {done.returncode}: {last_line(done.stderr or done.stdout)}")
    return done.stdout


def last_line(text: str) -> str:
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    return lines[-1] if lines else "(no output)"


@dataclass(frozen=True)
class Bind:
    """``source`` on the host appears at ``target`` inside the chroot (the same path unless told)."""

    source: Path
    target: Path | None = None

    def inside(self) -> Path:
        return self.target or self.source


@dataclass(frozen=True)
class ChrootCommand:
    """Builds the argv that runs a command inside ``root`` in a private mount namespace."""

    root: Path
    binds: tuple[Bind, ...] = ()
    env: Mapping[str, str] = field(default_factory=dict)

    def argv(self, command: Sequence[str], *, user: tuple[int, int] | None = None) -> list[str]:
        """``unshare`` + a tiny sh that mounts, then ``exec chroot [--userspec] env -i ... command``."""
        mounts = [f"mount -t proc proc {q(self.root / 'proc')}", f"mount --rbind /dev {q(self.root / 'dev')}"]
        for bind in self.binds:
            target = self.root / str(bind.inside()).lstrip("/")
            mounts.append(f"mkdir -p {q(target)} && mount --bind {q(bind.source)} {q(target)}")
        chroot = ["chroot"]
        if user is not None:
            chroot.append(f"--userspec={user[0]}:{user[1]}")
        env = {"PATH": CHROOT_PATH, "LANG": "C.UTF-8", **self.env}
        inner = [*chroot, str(self.root), "/usr/bin/env", "-i", *(f"{k}={v}" for k, v in env.items()), *command]
        script = " && ".join(mounts) + " && exec " + shlex.join(inner)
        return ["unshare", "--mount", "--propagation", "private", "--", "/bin/sh", "-c", script]

    def run(
        self, command: Sequence[str], what: str, *, user: tuple[int, int] | None = None, timeout: float = 120.0
    ) -> str:
        return run(self.argv(command, user=user), what, env=host_env(), timeout=timeout)


def host_env() -> dict[str, str]:
    """A minimal environment for host-side helpers (unshare, sh, mount, chroot)."""
    return {"PATH": CHROOT_PATH, "LANG": "C.UTF-8"}


def q(path: Path | str) -> str:
    return shlex.quote(str(path))


def free_port() -> int:
    """A TCP port free on 127.0.0.1 right now (the kernel's choice; a tiny race is accepted)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def wait_for(check: Callable[[], T | None], what: str, timeout: float, interval: float = 0.2) -> T:
    """Poll ``check`` until it returns something truthy; RealPoolError after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    last_error = ""
    while True:
        try:
            value = check()
            if value:
                return value
        except Exception as exc:  # noqa: BLE001 - a daemon that is not up yet answers with anything
            last_error = f" (last error: {str(exc).splitlines()[0] if str(exc) else type(exc).__name__})"
        if time.monotonic() >= deadline:
            raise RealPoolError(f"{what}: not ready after {timeout:.0f} s{last_error}")
        time.sleep(interval)


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return not _is_zombie(pid)


def _is_zombie(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[-1].split()[0] == "Z"


def descendants(pid: int) -> list[int]:
    """Every living descendant of ``pid`` (from /proc), children before grandchildren."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            ppid = int((entry / "stat").read_text().rsplit(")", 1)[-1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        children.setdefault(ppid, []).append(int(entry.name))
    found: list[int] = []
    queue = [pid]
    while queue:
        for child in children.get(queue.pop(0), []):
            found.append(child)
            queue.append(child)
    return found


TAG_VAR = "WIRE_REALPOOL_TAG"  # set in the environment of every master we start; its daemons inherit it


def tagged(tag: str) -> list[int]:
    """PIDs whose environment holds ``WIRE_REALPOOL_TAG=<tag>`` (daemons orphaned by a dead parent included)."""
    needle = f"{TAG_VAR}={tag}".encode()
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and int(entry.name) != os.getpid():
            try:
                if needle in (entry / "environ").read_bytes().split(b"\0"):
                    found.append(int(entry.name))
            except OSError:
                continue
    return found


def kill_everything(pid: int, tag: str) -> list[int]:
    """SIGKILL a master, everything below it and everything carrying its tag, freezing first so nothing respawns."""
    victims = [pid, *descendants(pid), *tagged(tag)]
    for victim in victims:  # SIGSTOP first: a master that sees a child die restarts it
        _signal(victim, 19)
    victims = list(dict.fromkeys([*victims, *descendants(pid), *tagged(tag)]))
    for victim in victims:
        _signal(victim, 9)
    return victims


def _signal(pid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):  # already gone
        os.kill(pid, sig)
