"""A cached Debian chroot holding HTCondor, for the real-pool harness.

Why a chroot: the harness host is Debian 12, which packages no HTCondor, and
its glibc is too old for trixie's binaries. ``debootstrap`` a minimal Debian
suite, then ``apt-get install condor`` inside it (about 3 minutes and 560 MB,
once per suite). The suite picks the HTCondor series the pool runs: trixie
packages 23.x (the default), sid 25.x. Each suite has its own directory in the
cache, so both stay built side by side.

The chroot is built in ``<dir>.partial`` and renamed when complete; a stamp
file written last says it is complete. A directory without the stamp is a
broken build and is rebuilt. A lock file keeps two builders (two test
sessions) from colliding: the second waits, then finds the stamp.
"""

from __future__ import annotations

import fcntl
import json
import os
import re
import shutil
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from wire_lab.realpool.errors import RealPoolError
from wire_lab.realpool.proc import ChrootCommand, host_env, run

DEFAULT_CACHE_DIR = Path("/var/cache/wire-daemon/realpool")  # override: WIRE_REALPOOL_CACHE
DEFAULT_SUITE = "trixie"  # override: WIRE_REALPOOL_SUITE
DEFAULT_MIRROR = "http://deb.debian.org/debian"
STAMP = ".wire-realpool-complete"
_SUITE_NAME = re.compile(r"[a-z][a-z0-9-]*")
APT_SOURCES = Path("/etc/apt")


@dataclass(frozen=True)
class ChrootSpec:
    """What to build and where. ``mirror`` empty: the host's own Debian mirror (from its apt sources)."""

    cache_dir: Path = DEFAULT_CACHE_DIR
    suite: str = DEFAULT_SUITE
    packages: tuple[str, ...] = ("condor",)
    mirror: str = ""

    @property
    def root(self) -> Path:
        return self.cache_dir / f"{self.suite}-condor"

    @classmethod
    def from_env(cls) -> ChrootSpec:
        cache = os.environ.get("WIRE_REALPOOL_CACHE", "")
        mirror = os.environ.get("WIRE_REALPOOL_MIRROR", "")
        suite = os.environ.get("WIRE_REALPOOL_SUITE", "") or DEFAULT_SUITE
        if not _SUITE_NAME.fullmatch(suite):  # it becomes a directory name and a debootstrap argument
            raise RealPoolError(f"WIRE_REALPOOL_SUITE={suite!r}: not a Debian suite name (e.g. trixie, sid)")
        return cls(cache_dir=Path(cache) if cache else DEFAULT_CACHE_DIR, suite=suite, mirror=mirror)


def ensure_chroot(spec: ChrootSpec | None = None) -> Path:
    """The path of a complete chroot of the spec's suite with HTCondor, building it first if needed."""
    spec = spec or ChrootSpec.from_env()
    if is_complete(spec.root):
        return spec.root
    if os.geteuid() != 0:
        raise RealPoolError(f"chroot {spec.root}: building it needs root")
    spec.cache_dir.mkdir(parents=True, exist_ok=True)
    with _locked(spec.cache_dir / ".build.lock"):
        if is_complete(spec.root):  # another builder finished while we waited
            return spec.root
        _build(spec)
    return spec.root


def is_complete(root: Path) -> bool:
    return (root / STAMP).is_file() and (root / "usr/sbin/condor_master").is_file()


def stamp_info(root: Path) -> dict[str, str]:
    try:
        return json.loads((root / STAMP).read_text())
    except (OSError, ValueError):
        return {}


def bindings_requirement(condor_version: str) -> str:
    """The pip requirement for bindings of the series of this HTCondor (``condor_version``'s first line).

    The README's install recipe's rule: a long-term release (``X.0.z``) takes
    ``htcondor==X.0.*``; a feature release (``X.y``, y > 0) takes the newest
    feature bindings of its major version, ``htcondor>=X.1,<X+1``, since PyPI
    has wheels of only some feature releases.
    """
    match = re.search(r"(\d+)\.(\d+)\.\d+", condor_version)
    if match is None:
        raise RealPoolError(f"no HTCondor version in {condor_version!r}")
    major, minor = int(match.group(1)), int(match.group(2))
    if minor == 0:
        return f"htcondor=={major}.0.*"
    return f"htcondor>={major}.1,<{major + 1}"


@contextmanager
def _locked(path: Path) -> Iterator[None]:
    with open(path, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)  # blocks while another builder holds it; released on close or death
        yield


def _build(spec: ChrootSpec) -> None:
    started = time.monotonic()
    partial = spec.root.with_name(spec.root.name + ".partial")
    for stale in (spec.root, partial):
        remove_tree(stale)
    mirror = spec.mirror or host_mirror()
    _ensure_debootstrap()
    argv = ["debootstrap", "--variant=minbase", spec.suite, str(partial), mirror]
    run(argv, f"debootstrap {spec.suite} from {mirror}", env=_apt_env(), timeout=1800)
    _install_packages(partial, spec.packages)
    version = ChrootCommand(partial).run(["condor_version"], "condor_version in the new chroot").splitlines()[0]
    (partial / STAMP).write_text(
        json.dumps(
            {
                "suite": spec.suite,
                "mirror": mirror,
                "packages": " ".join(spec.packages),
                "condor_version": version,
                "built_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                "build_s": f"{time.monotonic() - started:.0f}",
            },
            indent=1,
        )
        + "\n"
    )
    partial.rename(spec.root)


def _install_packages(root: Path, packages: tuple[str, ...]) -> None:
    # No init system runs in the chroot: tell maintainer scripts not to start services.
    policy = root / "usr/sbin/policy-rc.d"
    policy.write_text("#!/bin/sh\nexit 101\n")
    policy.chmod(0o755)
    proxy = _apt_proxy()
    if proxy:
        (root / "etc/apt/apt.conf.d/01wire-proxy").write_text(f'Acquire::http::Proxy "{proxy}";\n')
    chroot = ChrootCommand(root, env={"DEBIAN_FRONTEND": "noninteractive"})
    install = ["apt-get", "install", "-y", "-q", "--no-install-recommends", *packages]
    try:
        chroot.run(install, f"apt-get install {' '.join(packages)} in the chroot", timeout=1800)
    except RealPoolError:
        chroot.run(["apt-get", "update", "-q"], "apt-get update in the chroot", timeout=600)
        chroot.run(install, f"apt-get install {' '.join(packages)} in the chroot", timeout=1800)
    chroot.run(["apt-get", "clean"], "apt-get clean in the chroot")


def _ensure_debootstrap() -> None:
    if shutil.which("debootstrap"):
        return
    install = ["apt-get", "install", "-y", "-q", "--no-install-recommends", "debootstrap"]
    try:
        run(install, "apt-get install debootstrap on the host", env=_apt_env())
    except RealPoolError:
        run(["apt-get", "update", "-q"], "apt-get update on the host", env=_apt_env())
        run(install, "apt-get install debootstrap on the host", env=_apt_env())


def _apt_env() -> dict[str, str]:
    env = host_env() | {"DEBIAN_FRONTEND": "noninteractive"}
    proxy = _apt_proxy()
    if proxy:  # debootstrap fetches with wget, which reads http_proxy, not apt's config
        env["http_proxy"] = proxy
    return env


def _apt_proxy() -> str:
    try:
        out = subprocess.run(
            ["apt-config", "shell", "P", "Acquire::http::Proxy"],
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        ).stdout
    except (OSError, subprocess.TimeoutExpired):
        return ""
    match = re.search(r"P='([^']*)'", out)
    return match.group(1) if match else ""


def host_mirror(apt_dir: Path = APT_SOURCES) -> str:
    """The host's Debian archive URI from its apt sources (one-line or deb822), else deb.debian.org."""
    for uri, suites in _apt_entries(apt_dir):
        # The main archive, not debian-security or a third-party repository.
        if uri.rstrip("/").endswith("/debian") and any(not s.endswith("-security") for s in suites):
            return uri.rstrip("/")
    return DEFAULT_MIRROR


def _apt_entries(apt_dir: Path) -> Iterator[tuple[str, list[str]]]:
    files = [apt_dir / "sources.list", *sorted((apt_dir / "sources.list.d").glob("*.list"))]
    for path in files:
        for line in _read_lines(path):
            parts = re.sub(r"\[[^]]*\]", " ", line).split()  # drop [signed-by=...] options
            if len(parts) >= 3 and parts[0] == "deb":
                yield parts[1], [parts[2]]
    for path in sorted((apt_dir / "sources.list.d").glob("*.sources")):
        yield from _deb822_entries(_read_lines(path))


def _deb822_entries(lines: list[str]) -> Iterator[tuple[str, list[str]]]:
    stanza: dict[str, str] = {}
    for line in [*lines, ""]:
        if not line:
            if "deb" in stanza.get("types", "").split() and stanza.get("enabled", "yes") != "no":
                for uri in stanza.get("uris", "").split():
                    yield uri, stanza.get("suites", "").split()
            stanza = {}
        elif ":" in line and not line[0].isspace():
            key, value = line.split(":", 1)
            stanza[key.strip().lower()] = value.strip()


def _read_lines(path: Path) -> list[str]:
    try:
        text = path.read_text()
    except OSError:
        return []
    # Blank lines separate deb822 stanzas; comments vanish.
    return [line.split("#", 1)[0].rstrip() for line in text.splitlines() if not line.lstrip().startswith("#")]


def remove_tree(path: Path) -> None:
    """Delete a (broken) chroot, refusing when something is mounted inside it: rm would follow a bind mount."""
    if not path.exists():
        return
    mounted = mounts_under(path)
    if mounted:
        raise RealPoolError(f"chroot {path}: still has mounts ({mounted[0]}); unmount them before it can be rebuilt")
    shutil.rmtree(path)


def mounts_under(path: Path) -> list[str]:
    prefix = str(path.resolve()).rstrip("/") + "/"
    found = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        point = line.split()[4].replace("\\040", " ")
        if point.startswith(prefix) or point == prefix.rstrip("/"):
            found.append(point)
    return found
