"""Fixtures shared by every test package: a moto EC2 server on loopback and a network in it.

Also the rule that puts whole kinds of tests in the slow tier (``-m slow``), so a new
test of those kinds lands there without a marker of its own: every test under
``SLOW_FOLDERS`` and every test that uses moto's server; and what a test worker
(``-n``) takes whole: a file, or the real pool's tests, which share one pool.
"""

from __future__ import annotations

import socket
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

WORKER_LINES = pytest.StashKey[list[str]]()

REGION = "us-east-1"
HERE = Path(__file__).resolve().parent
# End to end as a whole: the daemon against injected cloud faults, and a real HTCondor pool.
SLOW_FOLDERS = tuple(HERE / name for name in ("chaos", "realpool"))
REAL_POOL = HERE / "realpool"  # one pool for the package: one test worker runs all of it


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        path = item.path.resolve()
        if "moto_endpoint" in getattr(item, "fixturenames", ()) or any(path.is_relative_to(f) for f in SLOW_FOLDERS):
            item.add_marker(pytest.mark.slow)


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """pytest-xdist: hand each worker whole files (a file's module fixtures are set up once), and the real
    pool's package whole (one pool, its chroot built once). Told by the test's id, which needs no mark:
    xdist's own groups (``xdist_group``, ``--dist loadgroup``) are lost on pytest 9.2 (pytest-xdist #1386).
    Only for ``--dist loadfile`` (setup.cfg's): another mode asked for is xdist's own."""
    if config.getvalue("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadFileScheduling

    pool_tests = REAL_POOL.relative_to(config.rootpath).as_posix() + "/"

    class FilesAndThePool(LoadFileScheduling):
        def _split_scope(self, nodeid: str) -> str:
            path = nodeid.split("::", 1)[0]
            return pool_tests if path.startswith(pool_tests) else path

    return FilesAndThePool(config, log)


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node: Any, error: object) -> None:
    """pytest-xdist: a worker has ended. Keep the lines its tests asked to show at the end
    (tests/realpool/conftest.py)."""
    lines = getattr(node, "workeroutput", {}).get("summary_lines", [])
    node.config.stash.setdefault(WORKER_LINES, []).extend(lines)


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    for line in terminalreporter.config.stash.get(WORKER_LINES, []):
        terminalreporter.write_line(line)


@pytest.fixture(scope="session")
def moto_endpoint():
    """moto's EC2/IAM server over HTTP on 127.0.0.1, for the whole session."""
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    if not hasattr(server, "get_host_and_port"):  # older moto: pick a free port ourselves
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            port = probe.getsockname()[1]
        server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    try:
        host, port = server.get_host_and_port() if hasattr(server, "get_host_and_port") else ("127.0.0.1", port)
        yield f"http://{host}:{port}"
    finally:
        server.stop()


@pytest.fixture(scope="session")
def aws_region() -> str:
    return REGION


@pytest.fixture(scope="session")
def boto_client(moto_endpoint):
    """A factory of boto3 clients for the moto server, with dummy credentials only."""
    import boto3
    from botocore.config import Config

    cache: dict[str, object] = {}

    def make(service: str = "ec2", fresh: bool = False):
        # Building a client costs ~0.2 s (service model loading): share one unless asked.
        if fresh or service not in cache:
            cache[service] = new(service)
        return cache[service]

    def new(service: str):
        return boto3.session.Session(
            aws_access_key_id="testing",
            aws_secret_access_key="testing",
            region_name=REGION,
        ).client(
            service,
            endpoint_url=moto_endpoint,
            config=Config(retries={"mode": "standard", "total_max_attempts": 1}),
        )

    return make


@dataclass(frozen=True)
class Network:
    image_id: str
    subnet_id: str
    security_group_id: str
    key_name: str
    instance_profile: str


@pytest.fixture(scope="session")
def network(boto_client) -> Network:
    ec2 = boto_client("ec2")
    iam = boto_client("iam")
    image_id = ec2.describe_images(Owners=["amazon"])["Images"][0]["ImageId"]
    vpc = ec2.create_vpc(CidrBlock="10.20.0.0/16")["Vpc"]["VpcId"]
    # A fixed zone: moto picks one at random otherwise, and quotes spot prices in every zone but us-east-1e.
    subnet = ec2.create_subnet(VpcId=vpc, CidrBlock="10.20.1.0/24", AvailabilityZone="us-east-1a")["Subnet"]["SubnetId"]
    group = ec2.create_security_group(GroupName="wire-workers", Description="workers", VpcId=vpc)["GroupId"]
    ec2.create_key_pair(KeyName="wire-ops")
    iam.create_instance_profile(InstanceProfileName="wire-worker")
    return Network(image_id, subnet, group, "wire-ops", "wire-worker")
