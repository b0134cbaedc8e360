"""The real-pool harness: a real HTCondor pool in a Debian chroot, workers booted from rendered user-data.

Needs root (debootstrap, chroot, mount namespaces). Without root every test
here is skipped with one line saying so; with CI set (CI=true) nothing here
ever skips: no root, or a setup that fails, fails the tests. Knobs (environment):

* WIRE_REALPOOL_CACHE: where the chroot is cached (default /var/cache/wire-daemon/realpool);
* WIRE_REALPOOL_MIRROR: the Debian mirror for debootstrap (default: the host's own, from its apt sources);
* WIRE_REALPOOL_SUITE: the Debian suite of the chroot, so the HTCondor series of the pool (default trixie,
  HTCondor 23.x; sid has 25.x). The bindings in the venv must be of a supported series (README, "Install");
  ``benchmarks/realpool_series.py`` runs the daemon's test once per series, each with its own bindings;
* WIRE_REALPOOL_WORKDIR: parent of the pool work dirs (default /var/tmp/wire-realpool; never under /tmp);
* WIRE_REALPOOL_KEEP=1: keep the work dir (logs of every daemon) after the run.

Run them (as root, from the repository): ``.venv/bin/python -m pytest tests/realpool``.
"""

from __future__ import annotations

import importlib.metadata
import logging
import os
import shutil
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from wire_lab.realpool.chroot import ensure_chroot, stamp_info
from wire_lab.realpool.errors import RealPoolError
from wire_lab.realpool.hypervisor import Hypervisor, ec2_client, pool_booter
from wire_lab.realpool.metadata import MetadataService
from wire_lab.realpool.pool import PersonalPool
from wire_lab.realpool.worker import WorkerOptions

REGION = "us-east-1"
BOOT_LAG_S = 3.0  # short, for tests; the hypervisor's default is 20 s
NOT_ROOT = "realpool tests need root to build the chroot and run HTCondor (run as root to enable them)"
TIMINGS: dict[str, float] = {}
VERSIONS: dict[str, str] = {}  # the pool's suite and HTCondor, and the bindings that talk to it


def cannot_run(message: str) -> None:
    """In CI a harness that cannot run is a failure; on a developer's machine it skips with the reason."""
    if os.environ.get("CI", "").lower() not in ("", "0", "false", "no"):
        pytest.fail(message, pytrace=False)
    pytest.skip(message)


@pytest.fixture(scope="package")
def realpool_chroot() -> Path:
    if os.geteuid() != 0:
        cannot_run(NOT_ROOT)
    started = time.monotonic()
    try:
        root = ensure_chroot()
    except RealPoolError as exc:
        cannot_run(f"realpool setup failed: {exc}")
    TIMINGS["chroot_ready_s"] = time.monotonic() - started
    VERSIONS.update(_versions(root))
    return root


def _versions(root: Path) -> dict[str, str]:
    # The bindings' version from their metadata: importing htcondor2 here would read its config before the pool's.
    stamp = stamp_info(root)
    server = stamp.get("condor_version", "").split()
    return {
        "suite": stamp.get("suite", "?"),
        "server": server[1] if len(server) > 1 else "?",
        "bindings": importlib.metadata.version("htcondor"),
    }


@pytest.fixture(scope="package")
def pool_workdir() -> Iterator[Path]:
    parent = Path(os.environ.get("WIRE_REALPOOL_WORKDIR", "/var/tmp/wire-realpool"))
    workdir = parent / f"run-{time.strftime('%Y%m%d-%H%M%S')}-{uuid.uuid4().hex[:6]}"
    yield workdir
    if not os.environ.get("WIRE_REALPOOL_KEEP"):
        shutil.rmtree(workdir, ignore_errors=True)


@pytest.fixture(scope="package")
def pool(realpool_chroot: Path, pool_workdir: Path) -> Iterator[PersonalPool]:
    personal = PersonalPool(pool_workdir, realpool_chroot)
    try:
        personal.start()
    except RealPoolError as exc:
        cannot_run(f"realpool setup failed: {exc}")
    TIMINGS["pool_start_s"] = personal.started_in_s
    try:
        yield personal
    finally:
        personal.stop()


@pytest.fixture(scope="package")
def moto_ec2() -> Iterator[str]:
    """moto's EC2 server on 127.0.0.1 (a free port), for the hypervisor and the tests."""
    from moto.server import ThreadedMotoServer

    logging.getLogger("werkzeug").setLevel(logging.WARNING)  # one access-log line per hypervisor poll otherwise
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    try:
        host, port = server.get_host_and_port()
        yield f"http://{host}:{port}"
    finally:
        server.stop()


@pytest.fixture(scope="package")
def ec2(moto_ec2: str):
    return ec2_client(moto_ec2, REGION)


@pytest.fixture(scope="package")
def image_id(ec2) -> str:
    return ec2.describe_images(Owners=["amazon"])["Images"][0]["ImageId"]


@pytest.fixture(scope="package")
def metadata(moto_ec2: str) -> Iterator[MetadataService]:
    """The instance metadata service every worker asks (its id, its market, a spot interruption notice)."""
    with MetadataService(moto_ec2, REGION) as service:
        yield service


@pytest.fixture(scope="package")
def hypervisor(pool: PersonalPool, moto_ec2: str, metadata: MetadataService) -> Iterator[Hypervisor]:
    booter = pool_booter(pool, WorkerOptions(metadata_url=metadata.url))
    with Hypervisor(moto_ec2, booter, boot_lag_s=BOOT_LAG_S, poll_s=0.5, region=REGION) as hv:
        yield hv


@pytest.fixture
def launch(ec2, image_id: str) -> Iterator[Callable[..., list[str]]]:
    """Launch instances with a user-data, the way the daemon's EC2 driver does; terminate them after the test."""
    launched: list[str] = []

    def run(user_data: str, count: int = 1) -> list[str]:
        reply = ec2.run_instances(
            ImageId=image_id,
            InstanceType="t3.micro",
            MinCount=count,
            MaxCount=count,
            UserData=user_data,
            InstanceInitiatedShutdownBehavior="terminate",
        )
        ids = [i["InstanceId"] for i in reply["Instances"]]
        launched.extend(ids)
        return ids

    yield run
    if launched:
        ec2.terminate_instances(InstanceIds=launched)


@pytest.fixture
def wire_pool_name() -> str:
    """A wire pool name per test: its jobs require it, so no test's job lands on another test's worker."""
    return f"rp-{uuid.uuid4().hex[:8]}"


def summary_lines() -> list[str]:
    """What the run's log should say of the pool: its versions and how long its setup took."""
    lines = []
    if VERSIONS:
        lines.append("realpool versions: " + ", ".join(f"{k}={v}" for k, v in VERSIONS.items()))
    if TIMINGS:
        lines.append("realpool timings: " + ", ".join(f"{k}={v:.1f}" for k, v in TIMINGS.items()))
    return lines


def pytest_sessionfinish(session: pytest.Session) -> None:
    # On a test worker (-n), hand the lines to the controlling process, which prints them
    # (tests/conftest.py, "summary_lines"); in one process they are printed below.
    relay = getattr(session.config, "workeroutput", None)
    if relay is not None:
        relay.setdefault("summary_lines", []).extend(summary_lines())


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    for line in summary_lines():
        terminalreporter.write_line(line)
