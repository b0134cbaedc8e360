"""The workflow's budget as target-slowdown counts it (plan/budget.py): the bill, and the cut a decision takes."""

from __future__ import annotations

import pytest

from wire_daemon.core.config import SteeringConfig
from wire_daemon.core.instances import CloudState, Instance
from wire_daemon.plan.budget import WorkflowBill, cut_to_budget, unit_money
from wire_daemon.ports.policy import SteeringDecision

HOURLY = SteeringConfig()  # one on-demand instance-hour costs 1, every started hour paid in full
PER_SECOND = SteeringConfig(billing_model="second")
CLOSED = CloudState.TERMINATED


def _up(name: str, launched: float, state: CloudState = CloudState.RUNNING) -> Instance:
    return Instance(name, launched, 4, state)


def test_the_bill_counts_what_the_cloud_lists_and_ends_an_instance_when_it_was_to_be_terminated():
    bill = WorkflowBill()
    bill.track(PER_SECOND, [_up("a", 0.0), _up("b", 100.0, CloudState.PENDING), _up("c", 0.0, CLOSED)], {}, 1000.0)
    assert bill.at(PER_SECOND, 1000.0).total == pytest.approx((1000.0 + 900.0) / 3600.0)  # "c" was never up
    bill.track(PER_SECOND, [_up("a", 0.0)], {"b": 1500.0}, 2000.0)  # "b" released at 1,500 s, gone by 2,000 s
    assert bill.at(PER_SECOND, 2000.0).total == pytest.approx((2000.0 + 1400.0) / 3600.0)


def test_an_instance_gone_without_a_release_is_paid_until_the_first_decision_that_missed_it():
    bill = WorkflowBill()
    bill.track(PER_SECOND, [_up("a", 0.0)], {}, 500.0)
    bill.track(PER_SECOND, [], {}, 800.0)
    assert bill.at(PER_SECOND, 5000.0).total == pytest.approx(800.0 / 3600.0)


def test_launches_are_cut_first_then_the_renewals_that_come_first():
    pool = [_up("a", 0.0), _up("b", 50.0), _up("c", 3000.0)]  # at 3,500 s "a" and "b" renew before 3,680 s
    decision = SteeringDecision(target=5, planned=5, launch=2)
    assert cut_to_budget(HOURLY, 3500.0, decision, pool, money_left=1.0)
    assert decision.launch == 0  # a launch pays an hour: 1 left, 2 needed to renew "a" and "b"
    assert decision.release == ["a"]  # its hour ends first; "b" is renewed with the money left
    assert decision.release_at["a"] == pytest.approx(3600.0 - HOURLY.release_guard_s)
    assert decision.target == 2


def test_the_minimal_pool_is_kept_whatever_the_budget():
    decision = SteeringDecision(target=1, planned=1)
    assert not cut_to_budget(HOURLY, 3500.0, decision, [_up("a", 0.0)], money_left=0.0)
    assert decision.release == [] and decision.target == 1


def test_money_enough_cuts_nothing():
    decision = SteeringDecision(target=3, planned=3, launch=1)
    assert not cut_to_budget(HOURLY, 3500.0, decision, [_up("a", 0.0), _up("b", 200.0)], money_left=3.0)
    assert (decision.launch, decision.release, decision.target) == (1, [], 3)


def test_a_model_unit_costs_a_unit_of_the_on_demand_price():
    assert unit_money(HOURLY) == pytest.approx(1.0)
    assert unit_money(SteeringConfig(charging_unit_s=60.0)) == pytest.approx(1.0 / 60.0)
