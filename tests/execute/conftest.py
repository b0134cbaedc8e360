"""Fixtures for the cloud driver tests: ownership per test, fake sleeps (moto: tests/conftest.py)."""

from __future__ import annotations

import uuid

import pytest

from wire_daemon.execute.providers.base import Ownership
from wire_daemon.execute.providers.retry import Retrier, RetryPolicy


@pytest.fixture
def ownership() -> Ownership:
    """A fresh pool per test: tests share one moto server, and ownership keeps them apart."""
    return Ownership(pool=f"pool-{uuid.uuid4().hex[:8]}", daemon_id="daemon-a")


class FakeTime:
    """A clock that only moves when the code under test sleeps."""

    def __init__(self) -> None:
        self.now = 0.0
        self.sleeps: list[float] = []

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds

    def clock(self) -> float:
        return self.now


@pytest.fixture
def fake_time() -> FakeTime:
    return FakeTime()


@pytest.fixture
def retrier(fake_time):
    def make(**policy) -> Retrier:
        return Retrier(RetryPolicy(**policy), sleep=fake_time.sleep, clock=fake_time.clock)

    return make


@pytest.fixture
def moto_ec2_config(moto_endpoint, network, monkeypatch):
    """An EC2 section pointed at moto's server, with the test credentials moto takes."""
    from wire_daemon.execute.providers.ec2 import Ec2Config

    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    return Ec2Config(
        region="us-east-1",
        image_id=network.image_id,
        instance_type="c5.large",
        subnet_id=network.subnet_id,
        endpoint_url=moto_endpoint,
    )
