"""The Prometheus endpoint: served on 127.0.0.1, an observer of the decisions and notices the journal carries."""

from __future__ import annotations

import inspect
import socket
import urllib.request
from dataclasses import replace

import pytest
from prometheus_client.parser import text_string_to_metric_families

from wire_daemon.core.journal import (
    InstanceReleased,
    InstancesLaunched,
    Notice,
    ReleasePostponed,
    back_off,
    cloud_error,
    limit_hit,
)
from wire_daemon.loop.mape import DecisionRecord
from wire_daemon.service.metrics import KNOWN_LIMITS, Metrics, cloud_error_kinds

RECORD = DecisionRecord(
    time=540.0,
    policy="wire",
    done=5,
    running=17,
    idle=3,
    pool=5,
    target=4,
    planned=1,
    launched=["i-1", "i-2"],
    released=["i-00005"],
    rule="shrink",
    upcoming_tasks=12,
    upcoming_load_s=2072.5,
    prediction_policies={1: 37, 3: 44},
    boosted=0,
    decision_s=0.0042,
    cost_units=23,
    cost_money=4.6,
)
# What the loop and the guard publish around one decision, as typed events.
EVENTS = [
    InstancesLaunched(530.0, ("i-1", "i-2")),
    InstanceReleased(535.0, "i-00005", 3590.0),
    ReleasePostponed(3500.0, "i-00005", 7190.0),
    cloud_error("launching 2", "capacity", "ec2 launch: capacity (InsufficientInstanceCapacity): no room"),
    cloud_error("listing instances", "throttled", "ec2 list: throttled: slow down"),
    cloud_error("launching 1", "capacity", "ec2 launch: capacity: no room"),
    cloud_error("launching 1", "bogus", "unknown kind"),
    limit_hit("max_instances", 2, 4),
    back_off(900.0),
    Notice("dry-run: would launch 2 instance(s)"),
    RECORD,
]


@pytest.fixture
def served():
    metrics = Metrics()
    port = metrics.serve("127.0.0.1", 0)
    try:
        yield metrics, port
    finally:
        metrics.stop()


def _scrape(port: int) -> dict[tuple[str, tuple], float]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as answer:
        assert answer.status == 200
        text = answer.read().decode()
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


@pytest.mark.slow
def test_endpoint_reports_an_observed_record(served) -> None:
    metrics, port = served
    assert port > 0
    before = _scrape(port)
    assert before[("wire_cloud_errors_total", (("kind", "quota"),))] == 0  # series exist before any error
    for event in EVENTS:
        metrics.notify(event)
    values = _scrape(port)
    expected = {
        "wire_pool_instances": 5,
        "wire_target_instances": 4,
        "wire_busy_slots": 17,
        "wire_idle_tasks": 3,
        "wire_upcoming_load_tasks": 12,
        "wire_upcoming_load_seconds": 2072.5,
        "wire_cost_units": 23,
        "wire_cost_money": 4.6,
        "wire_last_decision_time_seconds": 540,
        "wire_decisions_total": 1,
        "wire_instances_launched_total": 2,
        "wire_instances_released_total": 1,
        "wire_releases_postponed_total": 1,
        "wire_decision_seconds_count": 1,
    }
    for name, value in expected.items():
        assert values[(name, ())] == pytest.approx(value), name
    assert values[("wire_decision_seconds_sum", ())] == pytest.approx(0.0042)
    assert values[("wire_decision_seconds_bucket", (("le", "0.005"),))] == 1
    assert values[("wire_decision_seconds_bucket", (("le", "0.0025"),))] == 0
    errors = {dict(k[1])["kind"]: v for k, v in values.items() if k[0] == "wire_cloud_errors_total"}
    assert errors == {kind: 0 for kind in cloud_error_kinds()} | {"capacity": 2, "throttled": 1, "unknown": 1}
    limits = {dict(k[1])["limit"]: v for k, v in values.items() if k[0] == "wire_limits_hit_total"}
    assert limits == {limit: 0 for limit in KNOWN_LIMITS} | {"max_instances": 1, "back_off": 1}


@pytest.mark.slow
def test_a_later_record_replaces_the_gauges(served) -> None:
    metrics, port = served
    metrics.notify(RECORD)
    metrics.notify(replace(RECORD, time=720.0, pool=6, running=20, cost_units=None, decision_s=0.2))
    values = _scrape(port)
    assert values[("wire_pool_instances", ())] == 6
    assert values[("wire_busy_slots", ())] == 20
    assert values[("wire_cost_units", ())] == 23  # a record without a bill keeps the last one
    assert values[("wire_decisions_total", ())] == 2
    assert values[("wire_decision_seconds_count", ())] == 2


def test_default_address_is_loopback() -> None:
    assert inspect.signature(Metrics.serve).parameters["address"].default == "127.0.0.1"


@pytest.mark.slow
def test_stop_frees_the_port_and_serve_twice_is_refused() -> None:
    metrics = Metrics()
    port = metrics.serve("127.0.0.1", 0)
    with pytest.raises(RuntimeError, match="already serving"):
        metrics.serve("127.0.0.1", 0)
    metrics.stop()
    metrics.stop()  # idempotent
    with socket.socket() as probe:  # the port is free again
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        probe.bind(("127.0.0.1", port))
    with Metrics() as again:
        assert again.serve("127.0.0.1", port) == port
