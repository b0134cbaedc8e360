"""DAG-aware market placement: spot where rework is cheap, on-demand for long critical work."""

import math
from dataclasses import replace

import numpy as np
import pytest

from wire_daemon.core.config import SteeringConfig
from wire_daemon.core.instances import Instance
from wire_daemon.core.pricing import Market
from wire_daemon.core.run_state import RunState, TaskStatus
from wire_daemon.core.workflow import TaskSpec, build_workflow
from wire_daemon.plan.placement import (
    PRIOR_SPOT_HOURS,
    MarketPlacement,
    ReclaimRate,
    critical_paths,
    rework_factor,
    spot_worth,
)
from wire_daemon.ports.policy import PlanResult, SteeringDecision
from wire_daemon.ports.prediction import Prediction

HOUR = 3600.0


def test_rework_factor_is_the_restart_from_zero_expected_time():
    assert rework_factor(600.0, 0.0) == 1.0
    rate = 0.2 / HOUR
    assert rework_factor(HOUR, rate) == pytest.approx(math.expm1(0.2) / 0.2)
    assert rework_factor(10 * HOUR, rate) > 2.5 * rework_factor(HOUR, rate)


def test_short_work_goes_to_spot_and_long_critical_work_to_on_demand():
    rate = 0.2 / HOUR
    weight = lambda d: 12 * (d / 2 + 180.0) / d  # noqa: E731
    assert spot_worth(60.0, rate, 0.35, critical=True, late_weight=weight(60.0))
    assert spot_worth(HOUR, rate, 0.35, critical=False, late_weight=weight(HOUR))
    assert not spot_worth(HOUR, rate, 0.35, critical=True, late_weight=weight(HOUR))
    assert not spot_worth(
        20 * HOUR, rate, 0.35, critical=False, late_weight=weight(20 * HOUR)
    )  # rework eats the discount


def _chain_and_fan():
    """A long two-task chain beside a wide stage of short tasks that feeds nothing."""
    specs = [TaskSpec("L1", "long", runtime_s=HOUR), TaskSpec("L2", "long2", ("L1",), runtime_s=HOUR)]
    specs += [TaskSpec(f"S{i}", "short", runtime_s=30.0) for i in range(8)]
    return build_workflow("w", "test", specs)


def _remaining(wf):
    return np.array([HOUR if name.startswith("long") else 30.0 for name in wf.transformation])


def _queue(wf):
    """L1 first, then the short tasks."""
    return np.array([wf.index_of("L1")] + [wf.index_of(f"S{i}") for i in range(8)])


def test_critical_paths_follow_the_stage_chain():
    wf = _chain_and_fan()
    paths = critical_paths(wf, _remaining(wf), np.ones(wf.n_tasks, dtype=bool))
    at = wf.index_of
    assert paths[at("L1")] == pytest.approx(2 * HOUR)  # L1, then L2's stage after it
    assert paths[at("L2")] == pytest.approx(HOUR) and paths[at("S0")] == pytest.approx(30.0)


class _Launches:
    name = "fake"

    def __init__(self, launch: int) -> None:
        self.launch = launch

    def reconfigure(self, steering):
        pass

    def plan(self, now, state, instances, queue_order):
        wf = state.workflow
        remaining = _remaining(wf)
        prediction = Prediction(remaining, remaining, remaining, np.ones(wf.n_tasks, dtype=np.int8))
        return PlanResult(SteeringDecision(self.launch, self.launch, launch=self.launch), prediction=prediction)


STEERING = SteeringConfig(slots_per_instance=1, max_instances=12, market="auto", spot_interruptions_per_hour=0.2)


def test_placement_puts_the_critical_long_task_on_demand_and_the_short_ones_on_spot():
    wf = _chain_and_fan()
    state = RunState(wf)
    queue = _queue(wf)
    policy = MarketPlacement(_Launches(3), STEERING)
    decision = policy.plan(0.0, state, [], queue).decision
    assert decision.launch == 3 and decision.spot_launches == 2  # L1's instance on-demand, two short ones on spot


def test_market_spot_buys_every_launch_on_spot_and_a_quiet_market_everything():
    wf = _chain_and_fan()
    queue = _queue(wf)
    spot = MarketPlacement(_Launches(3), replace(STEERING, market="spot"))
    assert spot.plan(0.0, RunState(wf), [], queue).decision.spot_launches == 3
    quiet = MarketPlacement(_Launches(3), replace(STEERING, spot_interruptions_per_hour=0.0))
    assert quiet.plan(0.0, RunState(wf), [], queue).decision.spot_launches == 3


def test_free_slots_take_the_queue_head_first():
    wf = _chain_and_fan()
    queue = _queue(wf)
    up = [Instance("i-1", 0.0, 1)]  # L1 goes to the free slot: the launches carry short tasks only
    decision = MarketPlacement(_Launches(2), STEERING).plan(0.0, RunState(wf), up, queue).decision
    assert decision.spot_launches == 2


def test_the_reclaim_rate_is_learned_from_spot_instances_that_vanish_unreleased():
    rate = ReclaimRate(prior_per_hour=0.05)
    assert rate.per_second == pytest.approx(0.05 / HOUR)
    spot = [Instance(f"i-{n}", 0.0, 4, market=Market.SPOT) for n in range(4)]
    rate.observe(0.0, spot)
    rate.released(["i-0"])
    rate.observe(HOUR, spot[2:])  # i-0 released by us, i-1 reclaimed
    assert rate.reclaims == 1 and rate.spot_seconds == pytest.approx(4 * HOUR)
    assert rate.per_second == pytest.approx((0.05 * PRIOR_SPOT_HOURS + 1) / ((PRIOR_SPOT_HOURS + 4) * HOUR))


def test_a_reloaded_prior_rate_applies_and_what_was_seen_stays_counted():
    policy = MarketPlacement(_Launches(0), replace(STEERING, spot_interruptions_per_hour=0.05))
    spot = [Instance(f"i-{n}", 0.0, 4, market=Market.SPOT) for n in range(2)]
    policy.rate.observe(0.0, spot)
    policy.rate.observe(HOUR, spot[1:])  # one reclaim over two spot instance-hours
    policy.reconfigure(replace(STEERING, spot_interruptions_per_hour=0.5))
    assert policy.rate.reclaims == 1
    assert policy.rate.per_second == pytest.approx((0.5 * PRIOR_SPOT_HOURS + 1) / ((PRIOR_SPOT_HOURS + 2) * HOUR))


def test_reclaims_seen_together_count_as_one_event():
    rate = ReclaimRate(prior_per_hour=0.05)
    spot = [Instance(f"i-{n}", 0.0, 4, market=Market.SPOT) for n in range(6)]
    rate.observe(0.0, spot)
    rate.observe(HOUR, spot[3:])  # a storm: three gone at once
    assert rate.reclaims == 1
    rate.observe(2 * HOUR, spot[4:])  # then one more, later
    assert rate.reclaims == 2


def test_placement_ranks_each_queued_task_s_market():
    wf = _chain_and_fan()
    result = MarketPlacement(_Launches(0), STEERING).plan(0.0, RunState(wf), [], _queue(wf))
    markets = {wf.task_ids[t]: m for t, m in result.job_markets.items()}
    assert markets["L1"] is Market.ON_DEMAND and {markets[f"S{i}"] for i in range(8)} == {Market.SPOT}


def _idle(wf, names):
    state = RunState(wf)
    for name in names:
        state.status[wf.index_of(name)] = TaskStatus.IDLE
    return state


def test_a_retried_long_task_ranks_on_demand_where_its_first_attempt_ranked_spot():
    wf = _chain_and_fan()
    queue = np.array([wf.index_of("L2")])  # an hour long, off the critical path: spot at first
    state = _idle(wf, ["L2"])
    first = MarketPlacement(_Launches(0), STEERING).plan(0.0, state, [Instance("i-1", 0.0, 1)], queue)
    assert first.job_markets == {wf.index_of("L2"): Market.SPOT}
    state.lost_s[wf.index_of("L2")] = 1200.0  # a reclaim threw 20 minutes away
    again = MarketPlacement(_Launches(0), STEERING).plan(0.0, state, [Instance("i-1", 0.0, 1)], queue)
    assert again.job_markets == {wf.index_of("L2"): Market.ON_DEMAND}


def test_the_shield_launches_on_demand_for_work_ranking_it_first_with_no_such_slot():
    wf = _chain_and_fan()
    state = _idle(wf, ["L1", *(f"S{i}" for i in range(8))])
    spot_pool = [Instance(f"i-{n}", 0.0, 1, market=Market.SPOT) for n in range(3)]
    decision = MarketPlacement(_Launches(0), STEERING).plan(0.0, state, spot_pool, _queue(wf)).decision
    assert decision.launch == 1 and decision.spot_launches == 0  # one on-demand instance for L1


def test_the_shield_stays_put_with_a_free_on_demand_slot_or_a_full_pool():
    wf = _chain_and_fan()
    state = _idle(wf, ["L1", *(f"S{i}" for i in range(8))])
    with_od = [Instance("i-0", 0.0, 1), Instance("i-1", 0.0, 1, market=Market.SPOT)]
    assert MarketPlacement(_Launches(0), STEERING).plan(0.0, state, with_od, _queue(wf)).decision.launch == 0
    full = [Instance(f"i-{n}", 0.0, 1, market=Market.SPOT) for n in range(STEERING.max_instances)]
    assert MarketPlacement(_Launches(0), STEERING).plan(0.0, state, full, _queue(wf)).decision.launch == 0


def test_work_ranking_on_demand_requires_it_only_as_far_as_on_demand_slots_come():
    wf = _chain_and_fan()
    state = _idle(wf, ["L1", *(f"S{i}" for i in range(8))])
    spot_pool = [Instance(f"i-{n}", 0.0, 1, market=Market.SPOT) for n in range(3)]
    shielded = MarketPlacement(_Launches(0), STEERING).plan(0.0, state, spot_pool, _queue(wf))
    assert shielded.job_required == {wf.index_of("L1")}  # the shield's on-demand instance is coming for it
    full = [Instance(f"i-{n}", 0.0, 1, market=Market.SPOT) for n in range(STEERING.max_instances)]
    crowded = MarketPlacement(_Launches(0), STEERING).plan(0.0, state, full, _queue(wf))
    assert crowded.job_markets[wf.index_of("L1")] is Market.ON_DEMAND
    assert crowded.job_required == set()  # no on-demand slot can come: a rank only, it must not wait forever


def _running_on_spot(wf, started):
    state = RunState(wf)
    for n, (name, since) in enumerate(started.items()):
        task = wf.index_of(name)
        state.status[task] = TaskStatus.RUNNING
        state.host[task] = f"i-{n}"
        state.start_time[task] = since
    return state, [Instance(f"i-{n}", 0.0, 1, market=Market.SPOT) for n in range(len(started))]


def test_a_long_task_running_on_spot_has_its_rerun_wait_for_on_demand_a_short_one_not():
    wf = _chain_and_fan()
    state, pool = _running_on_spot(wf, {"L1": 0.0, "S0": HOUR - 10.0})  # an hour in, and 10 s in
    result = MarketPlacement(_Launches(0), STEERING).plan(HOUR, state, pool, np.array([], dtype=np.int64))
    assert result.job_markets == {wf.index_of("L1"): Market.ON_DEMAND}
    assert result.job_required == {wf.index_of("L1")}


def test_a_retried_task_is_judged_at_least_as_long_as_the_attempt_it_lost():
    wf = _chain_and_fan()
    queue = np.array([wf.index_of("S0")])  # predicted 30 s: spot, even retried
    state = _idle(wf, ["S0"])
    state.lost_s[wf.index_of("S0")] = 60.0
    pool = [Instance("i-1", 0.0, 1)]
    assert MarketPlacement(_Launches(0), STEERING).plan(0.0, state, pool, queue).job_markets == {
        wf.index_of("S0"): Market.SPOT
    }
    state.lost_s[wf.index_of("S0")] = 3 * HOUR  # the reclaim cut three hours short: the prediction was wrong
    assert MarketPlacement(_Launches(0), STEERING).plan(0.0, state, pool, queue).job_markets == {
        wf.index_of("S0"): Market.ON_DEMAND
    }


def test_judged_together_or_one_by_one_work_gets_the_same_market():
    from wire_daemon.plan.placement import spot_worth, spot_worth_each

    d = np.array([1.0, 60.0, 600.0, 3600.0, 36000.0, 360000.0])
    for rate in (0.0, 0.05 / 3600, 0.2 / 3600, 5.0 / 3600):
        for critical in (False, True):
            flags = np.full(d.size, critical)
            late = 12 * (d / 2 + 180.0) / d
            each = spot_worth_each(d, rate, 0.35, flags, late)
            assert each.tolist() == [spot_worth(x, rate, 0.35, critical, w) for x, w in zip(d, late)]
