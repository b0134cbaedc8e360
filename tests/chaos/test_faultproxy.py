"""The fault proxy itself: each fault kind reaches the SDK as EC2 would send it, a lost reply took effect,
a repeated client token runs once, and a held launch is seen open."""

from __future__ import annotations

import threading
import time

import pytest
from botocore.exceptions import ClientError, ConnectionClosedError

from wire_lab.chaos.faultproxy import FaultPlan, FaultProxy


@pytest.fixture
def proxy(chaos_moto):
    started: list[FaultProxy] = []

    def make(**plan) -> FaultProxy:
        started.append(FaultProxy(chaos_moto.url, FaultPlan(**plan)).start())
        return started[-1]

    yield make
    for p in started:
        p.stop()


def _at(chaos_moto, url: str):
    import boto3
    from botocore.config import Config

    session = boto3.session.Session(
        aws_access_key_id="testing", aws_secret_access_key="testing", region_name="us-east-1"
    )
    return session.client("ec2", endpoint_url=url, config=Config(retries={"total_max_attempts": 1}, read_timeout=30))


def _run(ec2, chaos_moto, token: str = "", tag: str = ""):
    args = dict(ImageId=chaos_moto.image_id, MinCount=1, MaxCount=1, SubnetId=chaos_moto.subnet_id)
    if token:
        args["ClientToken"] = token
    if tag:
        args["TagSpecifications"] = [{"ResourceType": "instance", "Tags": [{"Key": "chaos-test", "Value": tag}]}]
    return ec2.run_instances(**args)


def _tagged(chaos_moto, tag: str) -> list[str]:
    reply = chaos_moto.client().describe_instances(Filters=[{"Name": "tag:chaos-test", "Values": [tag]}])
    return [i["InstanceId"] for r in reply["Reservations"] for i in r["Instances"]]


@pytest.mark.parametrize(
    ("kind", "status", "code"),
    [("throttle", 400, "RequestLimitExceeded"), ("unavailable", 503, "Unavailable"), ("error", 500, "InternalError")],
)
def test_each_fault_reaches_the_sdk_as_ec2_sends_it(proxy, chaos_moto, kind, status, code):
    p = proxy(rate=1.0, kinds=(kind,))
    with pytest.raises(ClientError) as caught:
        _at(chaos_moto, p.url).describe_instances()
    assert caught.value.response["Error"]["Code"] == code
    assert caught.value.response["ResponseMetadata"]["HTTPStatusCode"] == status
    assert p.stats.faults[("DescribeInstances", kind)] == 1


def test_a_lost_reply_took_effect(proxy, chaos_moto):
    p = proxy(rate=1.0, kinds=("lost",))
    with pytest.raises(ConnectionClosedError):
        _run(_at(chaos_moto, p.url), chaos_moto, tag="lost")
    assert len(_tagged(chaos_moto, "lost")) == 1  # the instance exists; its caller never heard


def test_a_repeated_client_token_runs_once(proxy, chaos_moto):
    p = proxy()
    ec2 = _at(chaos_moto, p.url)
    first = _run(ec2, chaos_moto, token="chaos-token-1", tag="token")
    again = _run(ec2, chaos_moto, token="chaos-token-1", tag="token")
    assert [i["InstanceId"] for i in again["Instances"]] == [i["InstanceId"] for i in first["Instances"]]
    assert len(_tagged(chaos_moto, "token")) == 1
    assert p.stats.token_replays == 1


@pytest.mark.parametrize("where", ["before", "after"])
def test_a_held_launch_is_open_until_answered(proxy, chaos_moto, where):
    p = proxy(hold_s=0.5, hold_after=where)
    since = time.time()
    done = threading.Event()

    def launch() -> None:
        _run(_at(chaos_moto, p.url), chaos_moto, tag=where)
        done.set()

    thread = threading.Thread(target=launch)
    thread.start()
    seen_open = False
    while not done.is_set():
        seen_open = seen_open or p.launch_open(since)
        time.sleep(0.01)
    thread.join()
    assert seen_open
    assert not p.launch_open(since)
    assert p.stats.launches_held == 1 and p.stats.launches_forwarded == 1
    assert len(_tagged(chaos_moto, where)) == 1


def test_the_fault_share_follows_the_rate(proxy, chaos_moto):
    p = proxy(rate=0.3, seed=3)
    fates = [p.draw("X") for _ in range(2000)]
    for start in range(0, 2000, 20):  # exactly the rate in every block of 20
        assert sum(f != "pass" for f in fates[start : start + 20]) == 6
    assert fates[:20] != fates[20:40]
    assert {f for f in fates if f != "pass"} == {"throttle", "unavailable", "error", "lost"}
