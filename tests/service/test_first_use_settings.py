"""Issue 14: ``check-config`` catches the settings that would fail only at the first launch.

Without ``--probe``: the shapes EC2 and OpenStack give their ids (no call is
made: the endpoint below answers nothing). With ``--probe``: the instance
type, the region and the image's state and architecture against moto's EC2
server; the compute endpoint, the image's status, the key pair and the
security groups against recorded-shape OpenStack answers (test_probe.py).
"""

from __future__ import annotations

import pytest

from tests.service import test_probe
from tests.service.test_probe import IMAGE_URL, NETWORK_URL, _ec2_config, _probe_lines
from wire_daemon.cli.main import main

aws, openstack_world = test_probe.aws, test_probe.openstack_world  # its fixtures, used here too
pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning", "ignore::PendingDeprecationWarning")
pytest.importorskip("boto3", reason="the [ec2] extra is not installed")


@pytest.mark.parametrize(
    "old, new, message",
    [
        (
            "image_id: IMAGE",
            "image_id: ubuntu-22.04",
            "cloud.ec2.image_id must be an AMI id like ami-0123456789abcdef0",
        ),
        ("instance_type: c5.large", "instance_type: c5large", "cloud.ec2.instance_type must be an instance type"),
        ("subnet_id: SUBNET", "subnet_id: workers", "cloud.ec2.subnet_id must be a subnet id like subnet-"),
        ("security_group_ids: [GROUP]", "security_group_ids: [wire-workers]", "must be security group ids like sg-"),
    ],
)
def test_ec2_ids_of_the_wrong_shape_fail_without_a_call(tmp_path, capsys, network, old, new, message):
    config = _ec2_config(tmp_path, "http://127.0.0.1:1", network, "shapes")
    names = {"IMAGE": network.image_id, "SUBNET": network.subnet_id, "GROUP": network.security_group_id}
    for placeholder, value in names.items():
        old = old.replace(placeholder, value)
    text = config.read_text()
    assert old in text
    config.write_text(text.replace(old, new))
    assert main(["check-config", str(config)]) == 2
    assert message in capsys.readouterr().err


def test_an_image_named_by_an_ssm_parameter_is_accepted(tmp_path, capsys, network):
    config = _ec2_config(tmp_path, "http://127.0.0.1:1", network, "ssm-image")
    config.write_text(
        config.read_text().replace(network.image_id, "resolve:ssm:/aws/service/debian/release/12/latest/amd64")
    )
    assert main(["check-config", str(config)]) == 0, capsys.readouterr().err


def test_the_probe_checks_the_instance_type_and_the_region(tmp_path, capsys, aws, moto_endpoint, network):
    config = _ec2_config(tmp_path, moto_endpoint, network, "probe-type")
    config.write_text(config.read_text().replace("instance_type: c5.large", "instance_type: c5.huge"))
    assert main(["check-config", "--probe", str(config)]) == 1
    lines = _probe_lines(capsys.readouterr().out)
    assert "ec2 DescribeInstanceTypes (instance type c5.huge): not found" in lines["ec2 DescribeInstanceTypes"]
    assert f"ec2 DescribeRegions (region us-east-1): works: endpoint {moto_endpoint}" in lines["ec2 DescribeRegions"]


def test_the_probe_says_when_the_type_cannot_run_the_image(tmp_path, capsys, aws, moto_endpoint, network, boto_client):
    images = boto_client("ec2").describe_images(Owners=["amazon"])["Images"]
    arm = next(i["ImageId"] for i in images if i.get("Architecture") == "arm64")
    config = _ec2_config(tmp_path, moto_endpoint, network, "probe-arch", image=arm)
    assert main(["check-config", "--probe", str(config)]) == 1
    lines = _probe_lines(capsys.readouterr().out)
    assert "arm64" in lines["ec2 DescribeImages"] and ": works" in lines["ec2 DescribeImages"]
    assert "failed: it runs x86_64; the image is arm64" in lines["ec2 DescribeInstanceTypes"]


def test_an_opt_in_region_not_enabled_is_one_line():
    from wire_daemon.execute.providers.base import Unusable
    from wire_daemon.execute.providers.ec2 import Ec2Config, _region_summary

    config = Ec2Config(region="af-south-1", image_id="ami-0123456789abcdef0", instance_type="c5.large")
    reply = {"Regions": [{"RegionName": "af-south-1", "OptInStatus": "not-opted-in", "Endpoint": "ec2.x"}]}
    with pytest.raises(Unusable, match="af-south-1 is not enabled for this account"):
        _region_summary(reply, config)


# -- OpenStack ----------------------------------------------------------------------------------


@pytest.mark.parametrize("key, value", [("image_id", "debian-12"), ("network_id", "wire-net")])
def test_openstack_names_where_ids_belong_fail_without_a_call(openstack_world, capsys, key, value):
    from tests.execute.test_openstack import IMAGE_ID, NETWORK_ID

    config, mocker, _ = openstack_world
    current = {"image_id": IMAGE_ID, "network_id": NETWORK_ID}[key]
    config.write_text(config.read_text().replace(f"{key}: {current}", f"{key}: {value}"))
    before = mocker.call_count
    assert main(["check-config", str(config)]) == 2
    assert f"cloud.openstack.{key} must be an id like" in capsys.readouterr().err
    assert mocker.call_count == before


def test_openstack_probe_names_the_endpoint_and_checks_key_pair_and_groups(openstack_world, capsys):
    from tests.execute.test_openstack import COMPUTE, IMAGE_ID

    config, mocker, _ = openstack_world
    mocker.get(f"{IMAGE_URL}/v2/images/{IMAGE_ID}", json={"id": IMAGE_ID, "name": "wire-worker", "status": "queued"})
    mocker.get(
        f"{COMPUTE}/os-keypairs/wire-ops",
        status_code=404,
        json={"itemNotFound": {"code": 404, "message": "Keypair wire-ops not found for user x"}},
    )
    mocker.get(f"{COMPUTE}/os-keypairs", json={"keypairs": []})
    group = {"id": "5a1e0000-0000-4000-8000-00000000e001", "name": "wire-workers"}
    mocker.get(f"{NETWORK_URL}/v2.0/security-groups/wire-workers", status_code=404, json={"NeutronError": {}})
    mocker.get(f"{NETWORK_URL}/v2.0/security-groups?name=wire-workers", json={"security_groups": [group]})
    text = config.read_text().replace("network_id:", "key_name: wire-ops, security_groups: [wire-workers], network_id:")
    config.write_text(text)
    assert main(["check-config", "--probe", str(config)]) == 1
    lines = _probe_lines(capsys.readouterr().out)
    assert f"works: compute endpoint {COMPUTE} in RegionOne" in lines["keystone catalog"]
    assert "failed: wire-worker is queued, not active" in lines["glance GET /v2/images/{id}"]
    assert "not found: no key pair named 'wire-ops'" in lines["nova GET /os-keypairs/{name}"]
    assert "works: 1 found" in lines["neutron GET /v2.0/security-groups"]
