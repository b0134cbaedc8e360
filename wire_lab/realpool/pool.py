"""A real HTCondor central manager + schedd (no startd of its own) on 127.0.0.1, inside the cached chroot.

Workers (``worker.py``) join it the way cloud workers join a wire-daemon pool:
with the pool's IDTOKEN. The test process talks to it from outside the chroot
through the htcondor2 bindings, with a generated client config (CONDOR_CONFIG)
and a token directory; ``PersonalPool.start`` points the bindings at it and
``stop`` puts the previous config back. The bindings' config is per process, so
one process drives one pool at a time.

Layout of the work directory (bind-mounted at the same path in the chroot,
because DAGMan checks the paths it is given and refuses node logs under /tmp):

    <workdir>/cm/            LOCAL_DIR of the central manager: condor_config, log, spool, lock, run, passwords.d;
                             site.conf, the site's own settings a test sets while the pool runs (set_site_config)
    <workdir>/worker-admin/  the workers' administration signing key (never in the central manager's passwords.d)
    <workdir>/client/<who>/  condor_config + tokens.d of a client identity (user, daemon)
    <workdir>/workers/<id>/  one worker's root (worker.py)
    <workdir>/users/<name>/  directories owned by the pool user, for jobs and DAGs
"""

from __future__ import annotations

import base64
import contextlib
import os
import re
import shutil
import signal
import subprocess
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Self

from wire_lab.realpool.chroot import ensure_chroot
from wire_lab.realpool.chrootenv import UnixUser, chroot_account, ensure_user, prepare_runtime
from wire_lab.realpool.daemon_files import (
    SUBMIT_HOST_CONF,
    condor_config_file,
    worker_admin_identity,
    worker_admin_key_name,
)
from wire_lab.realpool.errors import RealPoolError
from wire_lab.realpool.proc import (
    TAG_VAR,
    Bind,
    ChrootCommand,
    free_port,
    host_env,
    kill_everything,
    last_line,
    pid_alive,
    wait_for,
)

POOL_KEY = "POOL"  # the signing key's name: IDTOKENS' default key id
SITE_CONF = "site.conf"  # the central manager's last config file, written while it runs


@dataclass(frozen=True)
class PoolOptions:
    user: str = "wirepool"  # the unprivileged user that owns the jobs (root's jobs are refused)
    domain: str = "realpool.test"  # UID_DOMAIN and TRUST_DOMAIN: the domain of every identity in the pool
    lease_s: int = 20  # JOB_DEFAULT_LEASE_DURATION: how long a job of a vanished worker stays "running"
    classad_lifetime_s: int = 60  # CLASSAD_LIFETIME: how long the collector keeps the ads of a killed worker
    interval_s: int = 2  # negotiator, update and polling intervals: short, for tests
    start_timeout_s: float = 60.0
    token_lifetime_s: int = 7 * 24 * 3600
    submit_host_conf: bool = True  # include the project's condor_config/submit-host.conf, as an operator installs it
    extra_config: tuple[str, ...] = ()  # more central-manager config lines, last


@dataclass
class ClientIdentity:
    """A client of the pool: a config file for CONDOR_CONFIG and a token directory holding its IDTOKEN."""

    name: str
    config: Path
    token_dir: Path

    def env(self) -> dict[str, str]:
        return {"CONDOR_CONFIG": str(self.config)}


@dataclass
class PersonalPool:
    """The central manager and schedd of one test pool; ``start()`` it (or use ``with``), ``stop()`` it."""

    workdir: Path
    chroot: Path | None = None
    options: PoolOptions = field(default_factory=PoolOptions)

    def __post_init__(self) -> None:
        self.workdir = Path(self.workdir).resolve()
        self.port = 0
        self.user: UnixUser | None = None
        self.clients: dict[str, ClientIdentity] = {}
        self.pool_token = ""  # what workers present: identity condor@<domain>, advertise + read only
        self.worker_admin_key_b64 = ""  # the workers' administration key file, base64: what the user-data delivers
        self._master: subprocess.Popen[bytes] | None = None
        self._tag = f"pool-{os.getpid()}-{id(self):x}"
        self._previous_config: str | None = None
        self._bindings_active = False
        self.started_in_s = 0.0

    # -- lifecycle -----------------------------------------------------------

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> Self:
        started = time.monotonic()
        check_workdir(self.workdir)
        self.chroot = self.chroot or ensure_chroot()
        prepare_runtime(self.chroot)
        self.user = ensure_user(self.chroot, self.options.user)
        try:
            self._write_pool()
            self._start_master()
            self.use_bindings("user")
            self._wait_ready()
        except BaseException:
            self.stop()
            raise
        self.started_in_s = time.monotonic() - started
        return self

    def stop(self) -> None:
        """condor_off, then SIGKILL of whatever is left of the master's tree; the bind mounts die with it."""
        master, self._master = self._master, None
        if master is not None:
            if master.poll() is None:
                self._condor_off()
                _wait_exit(master, 15.0)
            kill_everything(master.pid, self._tag)  # leftovers: shadows, DAGMan, a hung daemon
            _wait_exit(master, 5.0)
        self._restore_bindings()

    # -- what clients use ------------------------------------------------------

    @property
    def collector_address(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def cm_dir(self) -> Path:
        return self.workdir / "cm"

    @property
    def cm_config(self) -> Path:
        return self.cm_dir / "condor_config"

    @property
    def worker_admin_dir(self) -> Path:
        """Where the workers' administration key is kept: beside the central manager, never in its passwords.d."""
        return self.workdir / "worker-admin"

    @property
    def worker_admin_identity(self) -> str:
        return worker_admin_identity(self.options.domain)

    def client_env(self, identity: str = "user") -> dict[str, str]:
        """The environment a client process needs (CONDOR_CONFIG; the config names the token directory)."""
        return self.clients[identity].env()

    def token_dir(self, identity: str = "user") -> Path:
        """The SEC_TOKEN_DIRECTORY of a client identity (``user``: the pool user; ``daemon``: the autoscaler)."""
        return self.clients[identity].token_dir

    def use_bindings(self, identity: str = "user") -> None:
        """Point this process's htcondor2 bindings at the pool, as ``identity``."""
        import htcondor2

        if not self._bindings_active:
            self._previous_config = os.environ.get("CONDOR_CONFIG")
        os.environ["CONDOR_CONFIG"] = str(self.clients[identity].config)
        htcondor2.reload_config()
        self._bindings_active = True

    def collector(self) -> Any:
        import htcondor2

        return htcondor2.Collector(self.collector_address)

    def schedd(self) -> Any:
        import htcondor2

        ad = self.collector().locate(htcondor2.DaemonType.Schedd)
        return htcondor2.Schedd(ad)

    def user_dir(self, name: str) -> Path:
        """A directory under the work dir owned by the pool user, for job files, DAGs and logs."""
        assert self.user is not None
        path = self.workdir / "users" / name
        path.mkdir(parents=True, exist_ok=True)
        for part in (self.workdir / "users", path):
            os.chown(part, self.user.uid, self.user.gid)
        return path

    def submit_dag(self, dag_path: Path, *args: str, timeout: float = 60.0) -> int:
        """``condor_submit_dag`` as the pool user inside the chroot; the DAGMan job's cluster id."""
        dag_path = Path(dag_path).resolve()
        out = self.run_as_user(
            ["condor_submit_dag", "-batch-name", dag_path.stem, *args, dag_path.name],
            cwd=dag_path.parent,
            timeout=timeout,
        )
        match = re.search(r"submitted to cluster (\d+)", out)
        if not match:
            raise RealPoolError(f"condor_submit_dag {dag_path}: no cluster id in its output: {last_line(out)}")
        return int(match.group(1))

    def run_as_user(self, command: list[str], *, cwd: Path | None = None, timeout: float = 60.0) -> str:
        """A command inside the chroot as the pool user, with the central manager's config (FS auth)."""
        assert self.user is not None
        argv = ["sh", "-c", 'cd "$1" && shift && exec "$@"', "sh", str(cwd or self.workdir), *command]
        return self._chroot().run(
            argv, f"{command[0]} as {self.user.name}", user=(self.user.uid, self.user.gid), timeout=timeout
        )

    def run_as_root(self, command: list[str], timeout: float = 60.0) -> str:
        return self._chroot().run(command, command[0], timeout=timeout)

    def create_token(self, identity: str, authz: tuple[str, ...] = (), key: str = POOL_KEY) -> str:
        """An IDTOKEN signed with the pool key, or with ``key`` from the workers' key directory (offline:
        condor_token_create reads the key file; its issuer is the pool's TRUST_DOMAIN)."""
        argv = [
            "condor_token_create",
            "-identity",
            identity,
            "-key",
            key,
            "-lifetime",
            str(self.options.token_lifetime_s),
        ]
        for level in authz:
            argv += ["-authz", level]
        env = {} if key == POOL_KEY else {"_CONDOR_SEC_PASSWORD_DIRECTORY": str(self.worker_admin_dir)}
        return self._chroot(env).run(argv, argv[0], timeout=60.0).strip()

    def set_site_config(self, lines: Sequence[str], check: str = "", timeout: float = 30.0) -> None:
        """Replace the site's own settings (``cm/site.conf``; no lines: none) and ``condor_reconfig`` the pool.

        ``check``: a knob whose value the running schedd must report before this returns (the reconfig is
        asynchronous); its value is read from ``lines``, or must be undefined when it is not set there.
        """
        path = self.cm_dir / SITE_CONF
        if lines:
            path.write_text("# wire_lab.realpool: the site's settings (generated)\n" + "\n".join(lines) + "\n")
        else:
            path.unlink(missing_ok=True)
        self.run_as_root(["condor_reconfig"])
        if check:
            wanted = _config_value(lines, check)
            what = f"pool: the schedd's {check} after reconfig"
            wait_for(lambda: self._schedd_config(check) == wanted, what, timeout)

    def _schedd_config(self, knob: str) -> str | None:
        try:
            return self.run_as_root(["condor_config_val", "-schedd", knob], timeout=15.0).strip()
        except RealPoolError:
            return None  # undefined (or the schedd is still reconfiguring)

    # -- setting up --------------------------------------------------------------

    def _chroot(self, extra_env: Mapping[str, str] | None = None) -> ChrootCommand:
        assert self.chroot is not None
        env = {"CONDOR_CONFIG": str(self.cm_config), TAG_VAR: self._tag, **(extra_env or {})}
        return ChrootCommand(self.chroot, (Bind(self.workdir),), env)

    def _write_pool(self) -> None:
        assert self.chroot is not None
        condor = chroot_account(self.chroot, "condor")
        for sub in ("log", "spool", "lock", "run", "execute"):
            _mkdir(self.cm_dir / sub, condor.uid, condor.gid, 0o755)
        _mkdir(self.cm_dir / "passwords.d", 0, 0, 0o700)
        _mkdir(self.cm_dir / "tokens.d", 0, 0, 0o700)
        self.port = free_port()
        if self.options.submit_host_conf:
            # Copied into the work dir: the chroot sees the work dir, not the repository.
            shutil.copyfile(condor_config_file(SUBMIT_HOST_CONF), self.cm_dir / SUBMIT_HOST_CONF)
        self.cm_config.write_text(cm_config_text(self))
        self._make_signing_key()
        for old in (self.cm_dir / "tokens.d").iterdir():
            old.unlink()
        # The daemons' own token: lets them authenticate to each other with IDTOKENS as well as FS.
        _write_secret(self.cm_dir / "tokens.d" / "condor", self.create_token(f"condor@{self.options.domain}"))
        self.pool_token = self.create_token(
            f"condor@{self.options.domain}", ("READ", "ADVERTISE_STARTD", "ADVERTISE_MASTER")
        )
        assert self.user is not None
        self._add_client("user", {"pool": self.create_token(f"{self.user.name}@{self.options.domain}")})
        # The autoscaler's tokens, as docs/cloud.md tells the operator to make them. For the central manager:
        # condor is a queue super user (WRITE: JobPrio of anybody's jobs), no ADMINISTRATOR, no ADVERTISE_*.
        # For the workers: the daemon's identity there, signed with the workers' key, to drain them.
        self._make_worker_admin_key()
        self._add_client(
            "daemon",
            {
                "pool": self.create_token(f"condor@{self.options.domain}", ("READ", "WRITE")),
                "wire-workers": self.create_token(
                    self.worker_admin_identity, ("ADMINISTRATOR",), key=worker_admin_key_name()
                ),
            },
        )

    def _make_signing_key(self) -> None:
        key = self.cm_dir / "passwords.d" / POOL_KEY
        if key.exists():
            key.unlink()
        secret = os.urandom(32).hex()
        self.run_as_root(["condor_store_cred", "add", "-c", "-p", secret, "-f", str(key)])
        key.chmod(0o600)

    def _make_worker_admin_key(self) -> None:
        """The workers' own signing key: random bytes, as the operator makes it (docs/cloud.md)."""
        _mkdir(self.worker_admin_dir, 0, 0, 0o700)
        key = self.worker_admin_dir / worker_admin_key_name()
        fd = os.open(key, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "wb") as handle:
            handle.write(os.urandom(64))
        self.worker_admin_key_b64 = base64.b64encode(key.read_bytes()).decode()

    def add_client(self, name: str, tokens: Mapping[str, str]) -> ClientIdentity:
        """A client identity holding ``tokens`` (file name -> IDTOKEN), e.g. a token tests made themselves."""
        self._add_client(name, tokens)
        return self.clients[name]

    def _add_client(self, name: str, tokens_by_file: Mapping[str, str]) -> None:
        base = self.workdir / "client" / name
        tokens = base / "tokens.d"
        _mkdir(tokens, 0, 0, 0o700)
        for old in tokens.iterdir():
            old.unlink()
        for file_name, token in tokens_by_file.items():
            _write_secret(tokens / file_name, token)  # 0600: a world-readable token is silently ignored
        (base / "log").mkdir(exist_ok=True)
        config = base / "condor_config"
        config.write_text(client_config_text(self, tokens, base / "log"))
        self.clients[name] = ClientIdentity(name, config, tokens)

    def _start_master(self) -> None:
        log = (self.cm_dir / "log" / "master.stdout").open("ab")
        argv = self._chroot().argv(["condor_master", "-f"])
        # start_new_session: the master and its daemons form their own process group, apart from pytest's.
        self._master = subprocess.Popen(
            argv, stdout=log, stderr=subprocess.STDOUT, env=host_env(), start_new_session=True
        )
        log.close()

    def _wait_ready(self) -> None:
        import htcondor2

        deadline = self.options.start_timeout_s

        def collector_answers() -> bool:
            self._check_master()
            types = {
                ad.get("MyType")
                for ad in self.collector().query(
                    htcondor2.AdType.Any,
                    constraint='MyType == "Scheduler" || MyType == "Negotiator"',
                    projection=["MyType"],
                )
            }
            return {"Scheduler", "Negotiator"} <= types

        wait_for(collector_answers, f"pool {self.collector_address}: collector with schedd and negotiator", deadline)
        wait_for(
            lambda: self.schedd().query(constraint="false", projection=["ClusterId"]) is not None,
            f"pool {self.collector_address}: schedd query",
            deadline,
        )

    def _check_master(self) -> None:
        if self._master is not None and self._master.poll() is not None:
            raise RealPoolError(
                f"pool: condor_master exited with {self._master.returncode}; see {self.cm_dir / 'log' / 'MasterLog'}"
            )

    def _condor_off(self) -> None:
        with contextlib.suppress(RealPoolError):  # a master that no longer answers: the kill in stop() does it
            self.run_as_root(["condor_off", "-master", "-fast"], timeout=15.0)

    def _restore_bindings(self) -> None:
        if not self._bindings_active:
            return
        import htcondor2

        if self._previous_config is None:
            os.environ.pop("CONDOR_CONFIG", None)
        else:
            os.environ["CONDOR_CONFIG"] = self._previous_config
        htcondor2.reload_config()
        self._bindings_active = False


def check_workdir(path: Path) -> None:
    # DAGMan (DAGMAN_USE_STRICT) refuses a node log under /tmp, and the bind mount would hide the chroot's /tmp.
    if str(path) == "/tmp" or str(path).startswith("/tmp/"):
        raise RealPoolError(
            f"pool work dir {path}: must not be under /tmp (DAGMan refuses node logs there); "
            "use /var/tmp or a directory in the repository"
        )
    if str(path) in ("/", "/proc", "/dev"):
        raise RealPoolError(f"pool work dir {path}: not a work directory")
    path.mkdir(parents=True, exist_ok=True)


def cm_config_text(pool: PersonalPool) -> str:
    o = pool.options
    cm = pool.cm_dir
    lines = [
        "# wire_lab.realpool central manager + schedd (generated). Debian's package config first:",
        "include : /etc/condor/condor_config",
        "use ROLE : CentralManager",
        "use ROLE : Submit",
        "# No startd: workers bring the slots.",
        "DAEMON_LIST = MASTER COLLECTOR NEGOTIATOR SCHEDD",
        f"LOCAL_DIR = {cm}",
        "LOG = $(LOCAL_DIR)/log",
        "SPOOL = $(LOCAL_DIR)/spool",
        "LOCK = $(LOCAL_DIR)/lock",
        "RUN = $(LOCAL_DIR)/run",
        "EXECUTE = $(LOCAL_DIR)/execute",
        "# Loopback only (127.0.0.1; each worker has an address of its own), a free collector port, no shared port",
        "# daemon (each pool and worker has its own ports).",
        "CONDOR_HOST = 127.0.0.1",
        f"COLLECTOR_HOST = 127.0.0.1:{pool.port}",
        "NETWORK_INTERFACE = 127.0.0.1",
        "BIND_ALL_INTERFACES = False",
        "USE_SHARED_PORT = False",
        "ENABLE_IPV6 = False",
        "# Workers' addresses (127.0.0.N) are local too: without this, a daemon takes a worker's for its family.",
        "SEC_USE_FAMILY_SESSION = False",
        f"UID_DOMAIN = {o.domain}",
        f"TRUST_DOMAIN = {o.domain}",
        "# IDTOKENS for remote clients and workers; FS for tools run in the chroot (FS fails across 25.x/23.9).",
        f"SEC_PASSWORD_DIRECTORY = {cm}/passwords.d",
        f"SEC_TOKEN_POOL_SIGNING_KEY_FILE = {cm}/passwords.d/{POOL_KEY}",
        f"SEC_TOKEN_SYSTEM_DIRECTORY = {cm}/tokens.d",
        f"SEC_TOKEN_DIRECTORY = {cm}/tokens.d",
        "SEC_DEFAULT_AUTHENTICATION = REQUIRED",
        "SEC_DEFAULT_AUTHENTICATION_METHODS = IDTOKENS, FS",
        "SEC_CLIENT_AUTHENTICATION_METHODS = IDTOKENS, FS",
        "SEC_READ_AUTHENTICATION_METHODS = IDTOKENS, FS",
        "ALLOW_READ = *",
        f"ALLOW_WRITE = *@{o.domain}",
        f"ALLOW_DAEMON = condor@{o.domain} root@{o.domain}",
        f"ALLOW_NEGOTIATOR = condor@{o.domain}",
        f"ALLOW_ADMINISTRATOR = condor@{o.domain} root@{o.domain}",
        f"ALLOW_ADVERTISE_STARTD = condor@{o.domain}",
        f"ALLOW_ADVERTISE_MASTER = condor@{o.domain}",
        "QUEUE_SUPER_USERS = root, condor",
        *_submit_host_lines(pool),
        "# Tests: fast cycles and a short job lease (submit-host.conf says 20 s negotiation, 360 s lease).",
        f"UPDATE_INTERVAL = {o.interval_s}",
        f"SCHEDD_INTERVAL = {o.interval_s}",
        f"NEGOTIATOR_INTERVAL = {o.interval_s}",
        f"NEGOTIATOR_CYCLE_DELAY = {o.interval_s}",
        f"NEGOTIATOR_MIN_INTERVAL = {o.interval_s}",
        f"POLLING_INTERVAL = {o.interval_s}",
        f"MASTER_UPDATE_INTERVAL = {o.interval_s}",
        f"SHADOW_QUEUE_UPDATE_INTERVAL = {o.interval_s}",
        "DAGMAN_USER_LOG_SCAN_INTERVAL = 1",
        f"JOB_DEFAULT_LEASE_DURATION = {o.lease_s}",
        f"CLASSAD_LIFETIME = {o.classad_lifetime_s}",
        "MAIL = /bin/true",
        "SENDMAIL = /bin/true",
        *o.extra_config,
        "# What a test sets while the pool runs, as a site's admin adds a file and reconfigures (set_site_config).",
        f"include ifexist : {cm / SITE_CONF}",
    ]
    return "\n".join(lines) + "\n"


def _submit_host_lines(pool: PersonalPool) -> list[str]:
    if not pool.options.submit_host_conf:
        return []
    return [
        "# The project's own submit-host settings, installed the way its header says.",
        f"include : {pool.cm_dir / SUBMIT_HOST_CONF}",
    ]


def client_config_text(pool: PersonalPool, token_dir: Path, log_dir: Path) -> str:
    o = pool.options
    lines = [
        "# wire_lab.realpool client (generated): the htcondor2 bindings outside the chroot use it via CONDOR_CONFIG.",
        "CONDOR_HOST = 127.0.0.1",
        f"COLLECTOR_HOST = 127.0.0.1:{pool.port}",
        "NETWORK_INTERFACE = 127.0.0.1",
        "BIND_ALL_INTERFACES = False",
        "USE_SHARED_PORT = False",
        "ENABLE_IPV6 = False",
        f"UID_DOMAIN = {o.domain}",
        f"TRUST_DOMAIN = {o.domain}",
        f"LOG = {log_dir}",
        f"SEC_TOKEN_DIRECTORY = {token_dir}",
        "SEC_CLIENT_AUTHENTICATION = REQUIRED",
        "SEC_CLIENT_AUTHENTICATION_METHODS = IDTOKENS",
        "SEC_DEFAULT_AUTHENTICATION_METHODS = IDTOKENS",
        f"JOB_DEFAULT_LEASE_DURATION = {o.lease_s}",
    ]
    return "\n".join(lines) + "\n"


def _config_value(lines: Sequence[str], knob: str) -> str | None:
    """The value the last ``KNOB = value`` line of ``lines`` gives; None when none does."""
    found = None
    for line in lines:
        name, sep, value = line.partition("=")
        if sep and name.strip().upper() == knob.upper():
            found = value.strip()
    return found


def _mkdir(path: Path, uid: int, gid: int, mode: int) -> None:
    path.mkdir(parents=True, exist_ok=True)
    os.chown(path, uid, gid)
    path.chmod(mode)


def _write_secret(path: Path, text: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as handle:
        handle.write(text.strip() + "\n")
    path.chmod(0o600)


def _wait_exit(process: subprocess.Popen[bytes], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while process.poll() is None and time.monotonic() < deadline:
        time.sleep(0.1)
    if process.poll() is None and pid_alive(process.pid):
        os.killpg(process.pid, signal.SIGKILL) if _is_group_leader(process.pid) else process.kill()
        process.wait(5.0)


def _is_group_leader(pid: int) -> bool:
    try:
        return os.getpgid(pid) == pid
    except ProcessLookupError:
        return False
