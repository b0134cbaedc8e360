"""Algorithms 2 and 3 on hand-computed pools."""

import pytest

from wire_daemon.core.config import SteeringConfig
from wire_daemon.plan.steering import InstanceView, choose_releases, resize_pool, steer


def test_full_instance_unit_counts_one_instance():
    # l=2, u=60: [30,30] -> T=30, both removed; [30,30] -> T=60 >= u -> p=1.
    assert resize_pool([30, 30, 30, 30], 60, 2) == 1


def test_partial_fill_keeps_remainders_and_minimal_pool():
    # [50,20] -> tmin 20, T=20, slots [30]; [30,100] -> tmin 30, T=50, slots [70];
    # queue empty with p = 0 -> line 28 adds one.
    assert resize_pool([50, 20, 100], 60, 2) == 1


def test_every_unit_of_work_adds_an_instance():
    # l=1, u=100: 100 -> p=1; 100 -> p=2; 30 -> T=30, removed. Leftover slot empty.
    assert resize_pool([100, 100, 30], 100, 1) == 2


def test_line_28_leftover_above_fifth_of_unit_adds_instance():
    # l=2, u=100: [100,100] -> p=1; [30] never fills the slots; 30 > 0.2u -> p=2.
    assert resize_pool([100, 100, 30], 100, 2) == 2
    # 15 <= 0.2u: no extra instance.
    assert resize_pool([100, 100, 15], 100, 2) == 1
    # the threshold is configurable
    assert resize_pool([100, 100, 15], 100, 2, leftover_fraction=0.1) == 2


def test_empty_load_keeps_one_instance():
    assert resize_pool([], 60, 4) == 1


def test_equal_minimum_tasks_all_leave_the_slots():
    # l=3, u=100: [10,10,50] -> tmin 10, T=10, slots [40]; [40,10,10] -> tmin 10, T=20,
    # slots [30]; queue empty; 30 > 20 -> p = 0 + 1 (line 28 once).
    assert resize_pool([10, 10, 50, 10, 10], 100, 3) == 1


def test_packing_stops_at_max_instances():
    assert resize_pool([1000.0] * 100, 100, 1, max_instances=5) == 5


def _views():
    return [
        InstanceView("a", time_to_next_charge_s=100, restart_cost_s=0),
        InstanceView("b", time_to_next_charge_s=10, restart_cost_s=5),
        InstanceView("c", time_to_next_charge_s=50, restart_cost_s=30),
        InstanceView("d", time_to_next_charge_s=20, restart_cost_s=0),
    ]


def test_release_only_expiring_and_cheap_instances_cheapest_first():
    # u=100 -> restart limit 20; t=60: a's unit does not end, c costs 30 to restart.
    assert choose_releases(_views(), target=2, interval_s=60, charging_unit_s=100) == ["d", "b"]
    assert choose_releases(_views(), target=3, interval_s=60, charging_unit_s=100) == ["d"]
    assert choose_releases(_views(), target=0, interval_s=60, charging_unit_s=100) == ["d", "b"]


def test_release_threshold_is_configurable():
    released = choose_releases(_views(), target=0, interval_s=60, charging_unit_s=100, restart_cost_fraction=0.3)
    assert released == ["d", "b", "c"]


def test_steer_grows_to_plan():
    config = SteeringConfig(
        charging_unit_s=100, interval_s=60, slots_per_instance=1, max_instances=10, boot_aware_launch=False
    )
    decision = steer([100, 100, 100], [InstanceView("a", 100, 0)], config)
    assert (decision.planned, decision.target, decision.launch, decision.release) == (3, 3, 2, [])


def test_boot_aware_launch_needs_load_for_the_unit_plus_the_lag():
    config = SteeringConfig(charging_unit_s=100, interval_s=60, slots_per_instance=1, max_instances=10)
    # Each 100 s task fills a unit, but not unit + lag (160 s): pairs do (200 s).
    decision = steer([100, 100, 100], [InstanceView("a", 100, 0)], config)
    assert (decision.planned, decision.target, decision.launch) == (3, 1, 0)
    assert decision.rule.startswith("hold: new instances would not earn back their boot")
    decision = steer([100] * 6, [InstanceView("a", 100, 0)], config)
    assert (decision.planned, decision.target, decision.launch) == (6, 3, 2)


def test_young_instances_are_not_released():
    views = [InstanceView("new", 10, 0, age_s=100), InstanceView("old", 10, 0, age_s=1000)]
    assert choose_releases(views, 0, interval_s=60, charging_unit_s=100, min_age_s=120) == ["old"]


def test_steer_clamps_to_max_and_min():
    config = SteeringConfig(charging_unit_s=100, interval_s=60, slots_per_instance=1, max_instances=2, min_instances=1)
    assert steer([100] * 9, [], config).target == 2
    config = SteeringConfig(charging_unit_s=100, interval_s=60, slots_per_instance=1, max_instances=4, min_instances=3)
    assert steer([], [], config).launch == 3


def test_steer_shrinks_only_what_it_may():
    config = SteeringConfig(charging_unit_s=100, interval_s=60, slots_per_instance=1, max_instances=10)
    decision = steer([], _views(), config)  # plan: 1 instance
    assert decision.release == ["d", "b"]
    assert decision.target == 2  # a and c stay: not expiring / too costly to restart
    assert decision.planned == 1


@pytest.mark.parametrize("load", [[0.0] * 8, [0.0, 0.0, 0.0]])
def test_zero_time_tasks_cost_nothing(load):
    assert resize_pool(load, 60, 2) == 1


def test_no_work_left_lets_the_pool_go_to_min_instances():
    config = SteeringConfig(charging_unit_s=3600.0, interval_s=180.0, min_instances=0, min_instance_age_intervals=0)
    ending = [InstanceView("a", 100.0, 0.0), InstanceView("b", 3000.0, 0.0)]
    kept = steer([], ending, config)  # line 28: an empty load still plans one instance
    assert kept.planned == 1 and kept.release == ["a"]
    done = steer([], ending, config, work_left=False)
    assert done.planned == 0 and done.target == 1 and done.release == ["a"]  # "b" goes when its unit ends
    assert steer([], ending, SteeringConfig(min_instances=2), work_left=False).release == []


def _resize_pool_as_written(upcoming, u, slots, leftover_fraction=0.2, max_instances=None, carry_overshoot=False):
    """Algorithm 3 line by line (unsorted slots, min() every step): the reference for the fast loop."""
    p, used, loads, queue, pending = 0, 0.0, [], iter(upcoming), len(upcoming)
    while pending > 0:
        while len(loads) < slots and pending > 0:
            loads.append(float(next(queue)))
            pending -= 1
        if len(loads) == slots:
            shortest = min(loads)
            used += shortest
            if used >= u:
                p += 1
                if max_instances is not None and p >= max_instances:
                    return p
                if not carry_overshoot:
                    used, loads = 0.0, []
                    continue
                used -= u
            loads = [t - shortest for t in loads if t != shortest]
    if p == 0 or max(loads, default=0.0) > leftover_fraction * u:
        p += 1
    return p


def test_sorted_slot_packing_matches_the_algorithm_as_written():
    import random

    rng = random.Random(3)
    for _ in range(3000):
        n = rng.randint(0, 60)
        draw = rng.choice(
            [
                lambda: float(rng.choice([0, 10, 20, 180])),
                lambda: round(rng.uniform(0, 100), 3),
                lambda: rng.expovariate(0.02),
            ]
        )
        load = [draw() for _ in range(n)]
        args = (
            rng.choice([60, 300, 3600, 123.4]),
            rng.choice([1, 2, 3, 4, 8]),
            rng.choice([0.0, 0.2, 0.5]),
            rng.choice([None, 0, 1, 3, 12]),
            rng.random() < 0.3,
        )
        assert resize_pool(load, *args) == _resize_pool_as_written(load, *args)
