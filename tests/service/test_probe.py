"""Issue 13, item 8: ``check-config --probe`` and the checks that need no call.

EC2 against moto's server (tests/conftest.py), and against a second moto
server started with IAM enforcement, where a user allowed only to list
instances is denied the rest. OpenStack against recorded-shape Keystone,
Nova, Glance and Neutron answers served by requests-mock, as
tests/execute/test_openstack.py does.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from wire_daemon.cli.main import main

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning", "ignore::PendingDeprecationWarning")
requests_mock = pytest.importorskip("requests_mock", reason="the [test] extra (requests-mock) is not installed")
pytest.importorskip("boto3", reason="the [ec2] extra is not installed")

AWS_ENV = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing"}


@pytest.fixture
def aws(monkeypatch, tmp_path):
    """Credentials from the environment only: no profile of the machine running the tests."""
    for name in ("AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_DEFAULT_REGION"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "no-aws-config"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "no-aws-credentials"))

    def use(key_id: str, secret: str) -> None:
        monkeypatch.setenv("AWS_ACCESS_KEY_ID", key_id)
        monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", secret)

    use(*AWS_ENV.values())
    return use


def _ec2_config(tmp_path: Path, endpoint: str, network, pool: str, image: str | None = None) -> Path:
    config = tmp_path / "config.yaml"
    config.write_text(
        f"""
site: {{kind: condor, submit_root: {tmp_path}}}
condor: {{control: "off"}}
cloud:
  kind: ec2
  pool: {pool}
  ec2: {{region: us-east-1, image_id: {image or network.image_id}, instance_type: c5.large,
         subnet_id: {network.subnet_id}, security_group_ids: [{network.security_group_id}],
         key_name: {network.key_name}, instance_profile: {network.instance_profile}, endpoint_url: "{endpoint}"}}
  worker: {{condor_host: cm.example.org, token_delivery: ssm, token_source: /wire/{pool}/condor-token}}
safety: {{dry_run: true}}
state_path: {tmp_path / "state.sqlite"}
log: {{decisions_path: {tmp_path / "decisions.jsonl"}}}
"""
    )
    return config


def _probe_lines(out: str) -> dict[str, str]:
    after = out.split("\nprobe: ", 1)[1]  # the effective settings come first
    lines = [line.strip() for line in after.splitlines() if line.startswith("  ")]
    return {line.split(" (", 1)[0]: line for line in lines}


def test_every_call_works_against_moto(tmp_path, capsys, aws, moto_endpoint, network, boto_client):
    pool = f"probe-{uuid.uuid4().hex[:6]}"
    boto_client("ssm").put_parameter(Name=f"/wire/{pool}/condor-token", Type="SecureString", Value="s3cr3t-token")
    config = _ec2_config(tmp_path, moto_endpoint, network, pool)
    assert main(["check-config", "--probe", str(config)]) == 0
    out = capsys.readouterr().out
    lines = _probe_lines(out)
    assert set(lines) == {
        "ec2 DescribeInstances",
        "ec2 DescribeRegions",
        "ec2 DescribeImages",
        "ec2 DescribeInstanceTypes",
        "ec2 DescribeSubnets",
        "ec2 DescribeSecurityGroups",
        "ec2 DescribeKeyPairs",
        "ec2 RunInstances",
        "ssm DescribeParameters",
    }
    assert all(": works" in line for line in lines.values()), out
    assert "dry run of one c5.large tagged for pool" in lines["ec2 RunInstances"]
    assert "allowed (nothing launched)" in lines["ec2 RunInstances"]
    assert (
        "found: SecureString" in lines["ssm DescribeParameters"]
        and "[needed by the workers" in lines["ssm DescribeParameters"]
    )
    assert "probe: every call works" in out and "s3cr3t-token" not in out
    reply = boto_client("ec2").describe_instances(Filters=[{"Name": "tag:wire:pool", "Values": [pool]}])
    assert reply["Reservations"] == [], "the probe launched nothing"


def test_what_does_not_exist_is_not_found(tmp_path, capsys, aws, moto_endpoint, network):
    config = _ec2_config(tmp_path, moto_endpoint, network, "probe-missing", image="ami-0000000000000dead")
    assert main(["check-config", "--probe", str(config)]) == 1
    out = capsys.readouterr().out
    lines = _probe_lines(out)
    assert "ec2 DescribeImages (image ami-0000000000000dead): not found" in lines["ec2 DescribeImages"]
    assert "not found: no SSM parameter named /wire/probe-missing/condor-token" in lines["ssm DescribeParameters"]
    assert "did not work" in out.splitlines()[-1]


@pytest.fixture(scope="module")
def enforcing_moto():
    """A moto server that enforces IAM, and the keys of a user allowed only ec2:DescribeInstances."""
    import boto3

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    code = (
        "import time\nfrom moto.server import ThreadedMotoServer\n"
        f"s = ThreadedMotoServer(ip_address='127.0.0.1', port={port}, verbose=False)\ns.start()\ntime.sleep(3600)\n"
    )
    # The first three requests (the setup below) are let through; IAM is enforced from then on.
    server = subprocess.Popen([sys.executable, "-c", code], env=os.environ | {"INITIAL_NO_AUTH_ACTION_COUNT": "3"})
    endpoint = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), 0.5).close()
                break
            except OSError:
                assert time.monotonic() < deadline, "moto did not start"
                time.sleep(0.1)
        iam = boto3.session.Session(**_keys(AWS_ENV), region_name="us-east-1").client("iam", endpoint_url=endpoint)
        iam.create_user(UserName="lister")
        policy = {
            "Version": "2012-10-17",
            "Statement": [{"Effect": "Allow", "Action": "ec2:DescribeInstances", "Resource": "*"}],
        }
        iam.put_user_policy(UserName="lister", PolicyName="list-only", PolicyDocument=json.dumps(policy))
        key = iam.create_access_key(UserName="lister")["AccessKey"]
        yield endpoint, key["AccessKeyId"], key["SecretAccessKey"]
    finally:
        server.kill()
        server.wait(timeout=30)


def _keys(env: dict[str, str]) -> dict[str, str]:
    return {"aws_access_key_id": env["AWS_ACCESS_KEY_ID"], "aws_secret_access_key": env["AWS_SECRET_ACCESS_KEY"]}


def test_what_the_credentials_may_not_do_is_denied(tmp_path, capsys, aws, enforcing_moto, network):
    endpoint, key_id, secret = enforcing_moto
    aws(key_id, secret)
    config = _ec2_config(tmp_path, endpoint, network, "probe-denied")
    assert main(["check-config", "--probe", str(config)]) == 1
    out = capsys.readouterr().out
    lines = _probe_lines(out)
    assert ": works" in lines["ec2 DescribeInstances"]
    for call in ("ec2 DescribeImages", "ec2 DescribeSubnets", "ec2 RunInstances", "ssm DescribeParameters"):
        assert ": denied" in lines[call], lines[call]
    assert "not authorized to perform: ec2:RunInstances" in lines["ec2 RunInstances"]
    assert "1 of them needed by the daemon itself" in out  # RunInstances; the describes are the probe's own
    assert secret not in out and key_id not in out


@pytest.mark.parametrize(
    "change, message",
    [
        ("region: us-east-1", "cloud.ec2.region 'us-east-9' is not an EC2 region botocore knows"),
        ('endpoint_url: "http://127.0.0.1:1"', "cloud.ec2.endpoint_url must be an http:// or https:// URL with a host"),
        ("region: us-east-1", "cloud.ec2.region is not an AWS region name like us-east-1 (got 'US East')"),
    ],
)
def test_a_bad_region_or_endpoint_fails_at_check_config_without_a_call(tmp_path, capsys, network, change, message):
    config = _ec2_config(tmp_path, "http://127.0.0.1:1", network, "p")
    text = config.read_text()
    bad = {
        "is not an EC2 region": text.replace("region: us-east-1", "region: us-east-9").replace(
            'endpoint_url: "http://127.0.0.1:1"', 'endpoint_url: ""'
        ),
        "must be an http": text.replace('"http://127.0.0.1:1"', '"ec2.internal"'),
        "is not an AWS region name": text.replace("region: us-east-1", "region: US East"),
    }
    config.write_text(next(v for k, v in bad.items() if k in message))
    assert main(["check-config", str(config)]) == 2
    assert message in capsys.readouterr().err


# -- OpenStack ----------------------------------------------------------------------------------

IMAGE_URL = "https://image.example.test"
NETWORK_URL = "https://network.example.test"


@pytest.fixture
def openstack_world(tmp_path, monkeypatch):
    pytest.importorskip("openstack", reason="the [openstack] extra is not installed")
    from tests.execute.test_openstack import IDENTITY, IMAGE_ID, NETWORK_ID, PASSWORD, FakeNova, load

    with requests_mock.Mocker() as mocker:
        FakeNova(mocker)
        token = load("keystone_v3_token.json")
        for kind, name, url in (("image", "glance", IMAGE_URL), ("network", "neutron", NETWORK_URL)):
            endpoint = {"id": f"{kind}-e", "interface": "public", "region": "RegionOne", "region_id": "RegionOne"}
            token["token"]["catalog"].append(
                {"type": kind, "name": name, "id": f"{kind}-id", "endpoints": [endpoint | {"url": url}]}
            )
        mocker.post(f"{IDENTITY}/auth/tokens", json=token, status_code=201, headers={"X-Subject-Token": "gAAAA-x"})
        version = {"id": "v2.16", "status": "CURRENT", "links": [{"rel": "self", "href": f"{IMAGE_URL}/v2/"}]}
        mocker.get(IMAGE_URL, json={"versions": [version]})
        mocker.get(
            f"{IMAGE_URL}/v2/images/{IMAGE_ID}", json={"id": IMAGE_ID, "name": "wire-worker", "status": "active"}
        )
        version = {"id": "v2.0", "status": "CURRENT", "links": [{"rel": "self", "href": f"{NETWORK_URL}/v2.0/"}]}
        mocker.get(NETWORK_URL, json={"versions": [version]})
        mocker.get(
            f"{NETWORK_URL}/v2.0/networks/{NETWORK_ID}",
            json={"network": {"id": NETWORK_ID, "name": "wire-net", "status": "ACTIVE"}},
        )
        clouds = tmp_path / "clouds.yaml"
        clouds.write_text(
            "clouds:\n  wire-test:\n    auth_type: v3password\n    auth:\n"
            f"      auth_url: {IDENTITY}\n      username: wire-daemon\n      password: {PASSWORD}\n"
            "      project_name: wire-workers\n      user_domain_name: Default\n      project_domain_name: Default\n"
            "    regions: [RegionOne]\n"
        )
        for name in ("OS_CLOUD", "OS_AUTH_URL", "OS_USERNAME", "OS_PASSWORD", "OS_PROJECT_NAME"):
            monkeypatch.delenv(name, raising=False)
        monkeypatch.setenv("OS_CLIENT_CONFIG_FILE", str(clouds))
        config = tmp_path / "os.yaml"
        config.write_text(
            f"""
site: {{kind: condor, submit_root: {tmp_path}}}
condor: {{control: "off"}}
cloud:
  kind: openstack
  openstack: {{cloud: wire-test, region_name: RegionOne, flavor: m1.large, image_id: {IMAGE_ID},
               network_id: {NETWORK_ID}}}
state_path: {tmp_path / "state.sqlite"}
log: {{decisions_path: {tmp_path / "decisions.jsonl"}}}
"""
        )
        yield config, mocker, PASSWORD


def test_openstack_probe_works_and_says_so(openstack_world, capsys):
    config, _, password = openstack_world
    assert main(["check-config", "--probe", str(config)]) == 0
    out = capsys.readouterr().out
    lines = _probe_lines(out)
    assert set(lines) == {
        "keystone catalog",
        "nova GET /servers/detail",
        "glance GET /v2/images/{id}",
        "nova GET /flavors",
        "neutron GET /v2.0/networks/{id}",
    }
    assert all(": works" in line for line in lines.values()), out
    assert "works: m1.large: 4 vCPU, 8192 MB" in lines["nova GET /flavors"] and password not in out


def test_openstack_probe_says_denied_and_not_found(openstack_world, capsys):
    from tests.execute.test_openstack import IMAGE_ID, NETWORK_ID

    config, mocker, _ = openstack_world
    mocker.get(f"{IMAGE_URL}/v2/images/{IMAGE_ID}", status_code=403, json={"message": "Policy doesn't allow this"})
    mocker.get(f"{NETWORK_URL}/v2.0/networks/{NETWORK_ID}", status_code=404, json={"NeutronError": {"message": "gone"}})
    config.write_text(config.read_text().replace("flavor: m1.large", "flavor: m9.missing"))
    assert main(["check-config", "--probe", str(config)]) == 1
    lines = _probe_lines(capsys.readouterr().out)
    assert ": denied" in lines["glance GET /v2/images/{id}"]
    assert ": not found" in lines["neutron GET /v2.0/networks/{id}"]
    assert "not found: no flavor named or with id 'm9.missing'" in lines["nova GET /flavors"]
    assert ": works" in lines["nova GET /servers/detail"]


def test_openstack_cloud_entry_and_region_are_checked_without_a_call(openstack_world, capsys):
    config, _, _ = openstack_world
    text = config.read_text()
    config.write_text(text.replace("cloud: wire-test", "cloud: wire-tset"))
    assert main(["check-config", str(config)]) == 2
    assert "cloud.openstack.cloud 'wire-tset' is not an entry of clouds.yaml" in capsys.readouterr().err
    config.write_text(text.replace("region_name: RegionOne", "region_name: RegionTwo"))
    assert main(["check-config", str(config)]) == 2
    assert "cloud.openstack.region_name 'RegionTwo' is not a region of cloud 'wire-test'" in capsys.readouterr().err
