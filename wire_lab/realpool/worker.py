"""Boot an HTCondor execute node from wire-daemon's own rendered user-data, the way a cloud VM boots it.

A VM runs cloud-init, which writes the user-data's ``write_files``, then runs
its ``runcmd`` (wire-worker-boot: fetch the pool token, record the instance id,
block the metadata service for jobs, ``systemctl restart condor``). Here every
worker is a directory (its *root*) in the pool's work directory, and the
chroot's HTCondor is its image. What is replaced, exactly:

* **paths**: every absolute path the user-data writes or names under
  ``/etc/condor``, ``/etc/wire-worker``, ``/var/lib/cloud``, ``/usr/local/sbin``
  and ``/sbin/poweroff`` (and every ``write_files`` path) is moved under the
  worker's root, in the written files and in ``runcmd``. The files are written
  with the owner and mode the user-data gives.
* **cloud-init's instance data**: the harness writes the instance id to
  ``/var/lib/cloud/data/instance-id`` (remapped), as cloud-init does on a VM.
  The metadata service (169.254.169.254) does not exist here: ``curl`` is a
  stub that fails, so the boot script falls back to that file, exactly as it
  does on a VM whose metadata service does not answer.
* **token delivery**: ``file`` reads a token the harness put at the
  user-data's ``token_source`` path (remapped), as an image or a config drive
  would, and the workers' administration key (base64) at its
  ``admin_key_source``; ``inline`` works unchanged (cloud-init writes them). ``ssm``,
  ``secretsmanager`` and ``barbican`` need the cloud's secret stores: the
  ``aws`` stub refuses, and the boot fails the way it would on a VM.
* **runcmd**: run by ``/bin/sh`` on the host, as cloud-init's runcmd script,
  with stubs first on PATH: ``systemctl`` (records the call; ``restart
  condor`` makes the harness start this worker's condor_master), ``iptables``
  (records the metadata-service rule instead of applying it: no metadata
  service, and no netfilter in the sandbox), ``logger`` (to the worker's boot
  log), ``shutdown`` (a failed boot: recorded, the worker is marked failed),
  ``curl`` (fails: no metadata service; see below), ``aws`` (refuses) and
  ``pkill`` (signals this worker's condor_master only, never another's: all
  of them run on one host) and ``systemd-run`` (fails: the boot then starts
  the spot watch with nohup, as it does without systemd).
* **the metadata service**: with ``WorkerOptions.metadata_url`` set, the
  ``curl`` stub is a small HTTP client that sends what the boot files ask of
  ``http://169.254.169.254`` to ``<metadata_url>/<instance id>`` instead, so
  one server the test runs answers every worker as EC2's would answer it
  (its instance id, its market, a spot interruption notice). Processes the
  boot starts in the background (the spot watch) carry the worker's tag, so
  they end with it.
* **systemd's condor.service**: ``condor_master -f`` in the chroot, in a
  private mount namespace, with CONDOR_CONFIG at the worker's remapped
  ``/etc/condor/condor_config``: Debian's package config, then the machine
  layer below, then the package's and the user-data's ``config.d``.
* **the machine** (what a separate VM has by nature): its own LOCAL_DIR, LOG,
  SPOOL, EXECUTE, LOCK and RUN under its root, its own MASTER_NAME and
  STARTD_NAME (several workers share one host name), its own address
  (127.0.0.2, 127.0.0.3, ...: all of 127.0.0.0/8 is local on Linux; its
  daemons listen there only, and the job event logs and startd ads name it),
  no shared port daemon, short update intervals, and the two sandbox fixes
  (no mount or PID namespaces for jobs).
* **power off**: ``/sbin/poweroff`` (remapped) is a stub that records the
  time in ``<root>/var/lib/wire-harness/poweroff``. The dead-man switch runs
  it as the master's shutdown script, so the master process ends with it: the
  worker is then "powered off" and the hypervisor terminates its instance.
"""

from __future__ import annotations

import base64
import itertools
import os
import re
import shlex
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Self

import yaml

from wire_lab.realpool.chrootenv import chroot_account
from wire_lab.realpool.daemon_files import render_user_data
from wire_lab.realpool.errors import RealPoolError
from wire_lab.realpool.proc import TAG_VAR, Bind, ChrootCommand, host_env, kill_everything, last_line, wait_for

REMAPPED = ("/etc/condor", "/etc/wire-worker", "/var/lib/cloud", "/usr/local/sbin", "/sbin/poweroff")
HARNESS = "var/lib/wire-harness"  # under the worker root: what the stubs record
STUB_NAMES = ("systemctl", "iptables", "logger", "shutdown", "curl", "aws", "pkill", "systemd-run")
METADATA_HOST = "http://169.254.169.254"

__all__ = ["Worker", "WorkerOptions", "next_loopback_address", "render_user_data"]

_LOOPBACK_HOSTS = itertools.count()  # process-wide: no two workers of a pool share an address


def next_loopback_address() -> str:
    """A loopback address no other worker of this process has: 127.0.0.2, 127.0.0.3, ... (127.0.0.1: the pool)."""
    high, low = divmod(next(_LOOPBACK_HOSTS), 254)
    if high > 255:
        raise RealPoolError("worker addresses: 127.0.0.0/16 is used up")
    return f"127.0.{high}.{low + 2}"


@dataclass(frozen=True)
class WorkerOptions:
    interval_s: int = 2  # startd and master update intervals, for tests
    boot_timeout_s: float = 60.0
    extra_config: tuple[str, ...] = ()  # more machine-layer config (before the user-data's config.d)
    metadata_url: str = ""  # a metadata service the test serves (module docstring); "": none, curl fails


@dataclass
class Worker:
    """One execute node: ``boot()`` it from user-data, then ``kill()`` it (a vanished VM) or let it power off."""

    instance_id: str
    user_data: str
    chroot: Path
    workdir: Path  # bind-mounted at the same path in the chroot (the pool's work dir)
    file_token: str = ""  # placed at the user-data's token_source when it says token_delivery: file
    file_admin_key: str = ""  # the workers' administration key (base64), placed at its admin_key_source likewise
    options: WorkerOptions = field(default_factory=WorkerOptions)
    address: str = ""  # its loopback address; empty: the next free one (next_loopback_address)

    def __post_init__(self) -> None:
        if not re.fullmatch(r"[A-Za-z0-9-]+", self.instance_id):
            raise RealPoolError(f"worker {self.instance_id!r}: an instance id is letters, digits and '-'")
        self.address = self.address or next_loopback_address()
        if not re.fullmatch(r"127(\.\d{1,3}){3}", self.address):
            raise RealPoolError(f"worker {self.instance_id}: address {self.address!r} is not on loopback (127.0.0.0/8)")
        self.home = Path(self.workdir).resolve() / "workers" / self.instance_id
        self.root = self.home / "root"
        self._master: subprocess.Popen[bytes] | None = None
        self._tag = f"worker-{self.instance_id}-{os.getpid()}"
        self.state = "new"  # new | booting | running | failed | killed | powered-off | exited | stopped
        self.booted_at = 0.0

    # -- boot -----------------------------------------------------------------

    def boot(self) -> Self:
        """cloud-init's work: write_files, then runcmd; the master starts when runcmd asks systemd for condor."""
        self.state = "booting"
        data = parse_cloud_config(self.user_data, self.instance_id)
        self._fresh_root()
        prefixes = _prefixes(data)
        for entry in data.get("write_files") or []:
            self._write_file(entry, prefixes)
        self._provide_instance_data(data)
        self._write_machine_config()
        self._install_stubs()
        self._run_runcmd(data.get("runcmd") or [], prefixes)
        if "restart condor" not in self._recorded("systemctl"):
            self.state = "failed"
            raise RealPoolError(f"worker {self.instance_id}: its runcmd never started condor (no systemctl restart)")
        self._start_master()
        self.state = "running"
        self.booted_at = time.time()
        return self

    def _fresh_root(self) -> None:
        if self.home.exists():
            raise RealPoolError(f"worker {self.instance_id}: {self.home} exists; a worker boots once")
        (self.root / HARNESS).mkdir(parents=True)

    def _write_file(self, entry: dict[str, Any], prefixes: tuple[str, ...]) -> None:
        path = self.remap_path(str(entry["path"]))
        content = _decode(entry, self.instance_id)
        if not isinstance(content, bytes):
            content = remap(content, self.root, prefixes).encode()
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "ab" if entry.get("append") else "wb") as handle:
            handle.write(content)
        path.chmod(int(str(entry.get("permissions", "0644")), 8))
        uid, gid = self._owner(str(entry.get("owner", "root:root")))
        os.chown(path, uid, gid)

    def _owner(self, owner: str) -> tuple[int, int]:
        user, _, group = owner.partition(":")
        uid = 0 if user == "root" else chroot_account(self.chroot, user).uid
        gid = 0 if (group or user) == "root" else chroot_account(self.chroot, group or user).gid
        return uid, gid

    def _provide_instance_data(self, data: dict[str, Any]) -> None:
        # What cloud-init (instance id) and the image or config drive (a token file) give a VM.
        iid = self.remap_path("/var/lib/cloud/data/instance-id")
        iid.parent.mkdir(parents=True, exist_ok=True)
        iid.write_text(self.instance_id + "\n")
        settings = boot_settings(data)
        if settings.get("TOKEN_DELIVERY") != "file":
            return
        for what, source, secret in (
            ("a token file", settings.get("TOKEN_SOURCE", ""), self.file_token),
            ("an administration key file", settings.get("ADMIN_KEY_SOURCE", ""), self.file_admin_key),
        ):
            if not source:
                continue
            if not secret:
                raise RealPoolError(f"worker {self.instance_id}: user-data wants {what} but none was given")
            path = self.remap_path(source)
            path.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            with os.fdopen(fd, "w") as handle:
                handle.write(secret.strip() + "\n")

    def _write_machine_config(self) -> None:
        condor = chroot_account(self.chroot, "condor")
        var = self.root / "var"
        for sub in (
            "run/condor",
            "log/condor",
            "lock/condor",
            "spool/condor",
            "lib/condor/execute",
            "lib/condor/cred_dir",
        ):
            (var / sub).mkdir(parents=True, exist_ok=True)
            os.chown(var / sub, condor.uid, condor.gid)
        etc = self.root / "etc/condor"
        (etc / "config.d").mkdir(parents=True, exist_ok=True)
        (etc / "condor_config").write_text(machine_config(self, var, etc))

    def _install_stubs(self) -> None:
        bin_dir = self.home / "stubs"
        bin_dir.mkdir(exist_ok=True)
        record = self.root / HARNESS
        for name in STUB_NAMES:
            _write_script(bin_dir / name, _stub(name, record))
        if self.options.metadata_url:
            target = f"{self.options.metadata_url.rstrip('/')}/{self.instance_id}"
            _write_script(bin_dir / "curl", _metadata_curl(record, target))
        # Not on PATH: the user-data's poweroff script names it by its (remapped) absolute path.
        self.remap_path("/sbin/poweroff").parent.mkdir(parents=True, exist_ok=True)
        _write_script(
            self.remap_path("/sbin/poweroff"),
            f"#!/bin/sh\n# wire_lab.realpool: the VM powers off -> this worker stops.\n"
            f"date +%s.%N > {shlex.quote(str(record / 'poweroff'))}\nexit 0\n",
        )

    def _run_runcmd(self, runcmd: list[Any], prefixes: tuple[str, ...]) -> None:
        # cloud-init turns runcmd into one shell script (lists are quoted words, strings are shell lines).
        lines = ["#!/bin/sh"]
        for item in runcmd:
            line = shlex.join(str(word) for word in item) if isinstance(item, list) else str(item)
            lines.append(remap(line, self.root, prefixes))
        script = self.remap_path("/var/lib/cloud/instance/scripts/runcmd")
        script.parent.mkdir(parents=True, exist_ok=True)
        _write_script(script, "\n".join(lines) + "\n")
        path = f"{self.home / 'stubs'}:{host_env()['PATH']}"
        env = host_env() | {"PATH": path, "HOME": "/root", TAG_VAR: self._tag}  # the tag: background jobs end too
        log = self.root / "var/log/cloud-init-output.log"
        log.parent.mkdir(parents=True, exist_ok=True)
        with log.open("ab") as out:
            try:
                done = subprocess.run(
                    ["/bin/sh", str(script)],
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    env=env,
                    cwd=self.root,
                    timeout=self.options.boot_timeout_s,
                    check=False,
                )
            except subprocess.TimeoutExpired:
                self.state = "failed"
                raise RealPoolError(
                    f"worker {self.instance_id}: runcmd did not finish in {self.options.boot_timeout_s:.0f} s"
                ) from None
        if done.returncode != 0:
            self.state = "failed"
            raise RealPoolError(
                f"worker {self.instance_id}: runcmd failed (exit {done.returncode}): "
                f"{last_line(log.read_text(errors='replace'))}"
            )

    def _start_master(self) -> None:
        chroot = ChrootCommand(
            self.chroot,
            (Bind(self.workdir),),
            {"CONDOR_CONFIG": str(self.root / "etc/condor/condor_config"), TAG_VAR: self._tag},
        )
        out = (self.root / "var/log/condor/master.stdout").open("ab")
        self._master = subprocess.Popen(
            chroot.argv(["condor_master", "-f"]),
            stdout=out,
            stderr=subprocess.STDOUT,
            env=host_env(),
            start_new_session=True,
        )
        out.close()
        # The pkill stub's target: the sh that unshare runs execs chroot, env and the master, so the pid is its.
        (self.root / HARNESS / "master.pid").write_text(f"{self._master.pid}\n")

    # -- life ------------------------------------------------------------------

    @property
    def master_pid(self) -> int | None:
        return self._master.pid if self._master is not None else None

    def poll(self) -> str:
        """The worker's state now; notices a master that ended by itself (powered off, or crashed)."""
        if self.state == "running" and self._master is not None and self._master.poll() is not None:
            self.state = "powered-off" if self.powered_off_at() else "exited"
            kill_everything(self._master.pid, self._tag)  # a VM that is off runs nothing
        return self.state

    def powered_off_at(self) -> float | None:
        try:
            return float((self.root / HARNESS / "poweroff").read_text().strip())
        except (OSError, ValueError):
            return None

    def kill(self) -> None:
        """The VM vanishes: SIGKILL the master and every process of this worker; running jobs are lost."""
        if self._master is None:
            return
        kill_everything(self._master.pid, self._tag)
        self._master.wait(10.0)
        if self.state in ("running", "booting"):
            self.state = "killed"

    def stop(self) -> None:
        """End of a test: like kill, but leaves the state of a worker that already ended alone."""
        self.poll()
        self.kill()
        if self.state == "running":
            self.state = "stopped"

    def wait_joined(self, collector: Any, timeout: float = 30.0) -> list[Any]:
        """The worker's slot ads, once its startd advertised them to the pool's collector."""
        import htcondor2

        constraint = f'WireInstanceId == "{self.instance_id}"'

        def slots() -> list[Any]:
            if self.poll() != "running":
                raise RealPoolError(f"worker {self.instance_id}: {self.state} before joining; see {self.log_dir}")
            return list(
                collector.query(
                    htcondor2.AdType.Startd,
                    constraint=constraint,
                    projection=["Name", "State", "WireInstanceId", "WirePool"],
                )
            )

        return wait_for(slots, f"worker {self.instance_id}: slots in the collector", timeout)

    @property
    def log_dir(self) -> Path:
        return self.root / "var/log/condor"

    def remap_path(self, path: str) -> Path:
        if not path.startswith("/"):
            raise RealPoolError(f"worker {self.instance_id}: user-data path {path!r} is not absolute")
        return self.root / path.lstrip("/")

    def _recorded(self, stub: str) -> str:
        try:
            return (self.root / HARNESS / f"{stub}.log").read_text()
        except OSError:
            return ""


def parse_cloud_config(text: str, where: str) -> dict[str, Any]:
    if not text.startswith("#cloud-config"):
        raise RealPoolError(f"worker {where}: user-data is not #cloud-config")
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError:
        raise RealPoolError(f"worker {where}: user-data is not valid YAML") from None
    if not isinstance(data, dict):
        raise RealPoolError(f"worker {where}: user-data is not a YAML mapping")
    return data


def boot_settings(data: dict[str, Any]) -> dict[str, str]:
    """The ``NAME='value'`` settings at the top of the boot script in write_files (TOKEN_DELIVERY, ...)."""
    found: dict[str, str] = {}
    for entry in data.get("write_files") or []:
        content = entry.get("content")
        if isinstance(content, str):
            found.update(re.findall(r"^([A-Z_]+)='([^']*)'$", content, flags=re.MULTILINE))
    return found


def remap(text: str, root: Path, prefixes: tuple[str, ...]) -> str:
    """Move absolute paths under ``prefixes`` below ``root`` (whole path components only)."""
    alternatives = "|".join(re.escape(p.rstrip("/")) for p in sorted(prefixes, key=len, reverse=True))
    # Not inside another word or path; but a shell default (``${VAR:-/etc/...}``) is a path of its own.
    start = r"(?:(?<=:-)|(?<![\w.~/-]))"
    pattern = re.compile(rf"{start}(?:{alternatives})(?=[/\s'\"`;:)|&>}}]|$)", flags=re.MULTILINE)
    return pattern.sub(lambda m: str(root) + m.group(0), text)


def _prefixes(data: dict[str, Any]) -> tuple[str, ...]:
    """What to move under the worker root: the usual places, every written file, the token and key files."""
    written = [str(e["path"]) for e in data.get("write_files") or [] if isinstance(e, dict) and "path" in e]
    settings = boot_settings(data)
    files = [settings.get("TOKEN_SOURCE", ""), settings.get("ADMIN_KEY_SOURCE", "")]
    files = files if settings.get("TOKEN_DELIVERY") == "file" else []
    return tuple(dict.fromkeys([*REMAPPED, *written, *(f for f in files if f.startswith("/"))]))


def _decode(entry: dict[str, Any], where: str) -> str | bytes:
    content = entry.get("content", "")
    encoding = str(entry.get("encoding", "")).lower()
    if encoding in ("", "text/plain"):
        return str(content)
    if encoding in ("b64", "base64"):
        return base64.b64decode(content)
    raise RealPoolError(f"worker {where}: write_files encoding {encoding!r} is not supported by the harness")


def machine_config(worker: Worker, var: Path, etc: Path) -> str:
    o = worker.options
    lines = [
        "# wire_lab.realpool worker (generated). The image: Debian's package config, as on the VM.",
        "include : /etc/condor/condor_config",
        "# The machine: what a separate VM has by nature (its own disks, name and network).",
        f"LOCAL_DIR = {var}",
        "RUN = $(LOCAL_DIR)/run/condor",
        "LOG = $(LOCAL_DIR)/log/condor",
        "LOCK = $(LOCAL_DIR)/lock/condor",
        "SPOOL = $(LOCAL_DIR)/spool/condor",
        "EXECUTE = $(LOCAL_DIR)/lib/condor/execute",
        "CRED_STORE_DIR = $(LOCAL_DIR)/lib/condor/cred_dir",
        f"ETC = {etc}",
        f"MASTER_NAME = {worker.instance_id}",
        f"STARTD_NAME = {worker.instance_id}",
        "# Its own address, on loopback only: the job event logs and the startd ads tell the workers apart by it.",
        f"NETWORK_INTERFACE = {worker.address}",
        "BIND_ALL_INTERFACES = False",
        "USE_SHARED_PORT = False",
        "ENABLE_IPV6 = False",
        "# The sandbox: the starter cannot unshare mount or PID namespaces here (errno 22).",
        "MOUNT_UNDER_SCRATCH =",
        "USE_PID_NAMESPACES = False",
        "# One host, many machines: the addresses of other workers and of the central manager are local too,",
        "# and a daemon takes any daemon at a local address for one of its family (a session it never made).",
        "SEC_USE_FAMILY_SESSION = False",
        "# Tests: short cycles.",
        f"UPDATE_INTERVAL = {o.interval_s}",
        f"MASTER_UPDATE_INTERVAL = {o.interval_s}",
        f"STARTER_UPDATE_INTERVAL = {o.interval_s}",
        f"STARTER_INITIAL_UPDATE_INTERVAL = {o.interval_s}",
        f"POLLING_INTERVAL = {o.interval_s}",
        *o.extra_config,
        "# Then the package's config.d and the one cloud-init wrote (the user-data's), in that order.",
        f"LOCAL_CONFIG_DIR = /usr/share/condor/config.d,/etc/condor/config.d,{etc}/config.d",
        f"LOCAL_CONFIG_FILE = {etc}/condor_config.local",
        "REQUIRE_LOCAL_CONFIG_FILE = False",
    ]
    return "\n".join(lines) + "\n"


def _stub(name: str, record: Path) -> str:
    log = shlex.quote(str(record / f"{name}.log"))
    head = f'#!/bin/sh\n# wire_lab.realpool stub for {name}: see wire_lab/realpool/worker.py.\necho "$*" >> {log}\n'
    pid = shlex.quote(str(record / "master.pid"))
    bodies = {
        "curl": 'echo "curl: no metadata service in the harness" >&2\nexit 7\n',
        "aws": 'echo "aws: no cloud secret store in the harness (use token_delivery file or inline)" >&2\nexit 255\n',
        # No systemd here (the host's must never get the worker's units): the boot falls back to nohup.
        "systemd-run": 'echo "systemd-run: no systemd in the harness" >&2\nexit 1\n',
        # pkill [-SIG] -x condor_master: this worker's master only (the spot watch's "no new job" and "leave").
        "pkill": f'sig=TERM\ncase "$1" in -*) sig="${{1#-}}" ;; esac\n'
        f'[ -s {pid} ] || exit 1\nexec kill -s "$sig" "$(cat {pid})"\n',
    }
    return head + bodies.get(name, "exit 0\n")


def _metadata_curl(record: Path, target: str) -> str:
    """A curl for the boot files' metadata calls (-f -s -S -m -X -H, one URL), sent to ``target``."""
    log = str(record / "curl.log")
    return f"""#!{sys.executable}
# wire_lab.realpool: curl to the test's metadata service, see wire_lab/realpool/worker.py.
import sys, urllib.error, urllib.request

args, method, headers, timeout, url = sys.argv[1:], None, {{}}, 10.0, ""
with open({log!r}, "a") as log:
    log.write(" ".join(args) + "\\n")
while args:
    arg = args.pop(0)
    if arg == "-X":
        method = args.pop(0)
    elif arg == "-H":
        name, _, value = args.pop(0).partition(":")
        headers[name.strip()] = value.strip()
    elif arg == "-m":
        timeout = float(args.pop(0))
    elif not arg.startswith("-"):
        url = arg
if not url.startswith({METADATA_HOST!r}):
    sys.exit(6)  # only the metadata service is served here
request = urllib.request.Request({target!r} + url[len({METADATA_HOST!r}):], method=method, headers=headers)
try:
    with urllib.request.urlopen(request, timeout=timeout) as reply:
        sys.stdout.write(reply.read().decode())
except urllib.error.HTTPError:
    sys.exit(22)  # curl -f: an HTTP error
except OSError:
    sys.exit(7)
"""


def _write_script(path: Path, text: str) -> None:
    path.write_text(text)
    path.chmod(0o755)
