"""What every pool and worker needs inside the shared chroot: runtime directories, a host name, a user.

These touch the cached chroot itself (not a per-pool directory), so each step is
idempotent and safe to repeat from two sessions at once.
"""

from __future__ import annotations

import grp
import os
import pwd
import socket
from dataclasses import dataclass
from pathlib import Path

from wire_lab.realpool.errors import RealPoolError
from wire_lab.realpool.proc import ChrootCommand, run


@dataclass(frozen=True)
class UnixUser:
    name: str
    uid: int
    gid: int


def prepare_runtime(root: Path) -> None:
    """/run/condor and /run/lock/condor owned by condor (the package's RUN and LOCK), and our host name in /etc/hosts.

    Pools and workers use their own RUN and LOCK directories, but the package's
    tools (condor_config_val, condor_token_create) read the package config,
    and condor_master refuses to start when the package's directories are missing.
    """
    condor = chroot_account(root, "condor")
    for sub in ("run/condor", "run/lock/condor"):
        path = root / sub
        path.mkdir(parents=True, exist_ok=True)
        os.chown(path, condor.uid, condor.gid)
    _ensure_hosts(root)


def _ensure_hosts(root: Path) -> None:
    # Condor resolves its own host name at start; the chroot's /etc/hosts is empty after debootstrap.
    hosts = root / "etc/hosts"
    text = hosts.read_text() if hosts.exists() else ""
    name = socket.gethostname()
    names = {word for line in text.splitlines() if not line.lstrip().startswith("#") for word in line.split()[1:]}
    missing = [n for n in ("localhost", name) if n not in names]
    if missing:
        hosts.write_text(text + ("" if text.endswith("\n") or not text else "\n") + f"127.0.0.1 {' '.join(missing)}\n")


def chroot_account(root: Path, name: str) -> UnixUser:
    """A user of the chroot's /etc/passwd (not the host's)."""
    for line in (root / "etc/passwd").read_text().splitlines():
        fields = line.split(":")
        if len(fields) >= 4 and fields[0] == name:
            return UnixUser(name, int(fields[2]), int(fields[3]))
    raise RealPoolError(f"chroot {root}: no user {name!r} in /etc/passwd")


def ensure_user(root: Path, name: str) -> UnixUser:
    """An unprivileged user with the same uid and gid on the host and in the chroot (jobs of root are refused).

    The same ids on both sides let the test process (on the host) create files
    that the user's jobs and DAGMan (in the chroot) own.
    """
    user = _host_user(name)
    try:
        inside = chroot_account(root, name)
    except RealPoolError:
        _add_chroot_user(root, user)
        return user
    if (inside.uid, inside.gid) != (user.uid, user.gid):
        raise RealPoolError(
            f"user {name}: uid/gid {user.uid}/{user.gid} on the host but {inside.uid}/{inside.gid} "
            f"in the chroot {root}; remove it from one side or pick another name"
        )
    return user


def _host_user(name: str) -> UnixUser:
    try:
        entry = pwd.getpwnam(name)
    except KeyError:
        try:
            grp.getgrnam(name)
        except KeyError:
            run(["groupadd", "--system", name], f"groupadd {name} on the host")
        run(
            [
                "useradd",
                "--system",
                "--gid",
                name,
                "--no-create-home",
                "--home-dir",
                "/nonexistent",
                "--shell",
                "/usr/sbin/nologin",
                name,
            ],
            f"useradd {name} on the host",
        )
        entry = pwd.getpwnam(name)
    if entry.pw_uid == 0:
        raise RealPoolError(f"user {name}: has uid 0; the pool needs an unprivileged user")
    return UnixUser(name, entry.pw_uid, entry.pw_gid)


def _add_chroot_user(root: Path, user: UnixUser) -> None:
    for line in (root / "etc/passwd").read_text().splitlines():
        fields = line.split(":")
        if len(fields) >= 3 and fields[2] == str(user.uid):
            raise RealPoolError(f"user {user.name}: uid {user.uid} is taken by {fields[0]!r} in the chroot {root}")
    chroot = ChrootCommand(root)
    group_taken = any(line.split(":")[2:3] == [str(user.gid)] for line in (root / "etc/group").read_text().splitlines())
    if not group_taken:
        chroot.run(["groupadd", "-g", str(user.gid), user.name], f"groupadd {user.name} in the chroot")
    chroot.run(
        [
            "useradd",
            "-u",
            str(user.uid),
            "-g",
            str(user.gid),
            "-M",
            "-d",
            "/nonexistent",
            "-s",
            "/usr/sbin/nologin",
            user.name,
        ],
        f"useradd {user.name} in the chroot",
    )
