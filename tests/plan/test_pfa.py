"""The PFA baseline: throughput smoothing, the token estimate, budget, deallocation, replays."""

import math

import numpy as np
import pytest

from wire_daemon.cli.main import main
from wire_daemon.core.billing import Billing
from wire_daemon.core.config import EmulationConfig, ReplayConfig, SteeringConfig
from wire_daemon.core.errors import ConfigError
from wire_daemon.core.events import EventKind, TaskEvent
from wire_daemon.core.instances import Instance
from wire_daemon.core.run_state import RunState, TaskStatus
from wire_daemon.core.workflow import TaskSpec, build_workflow
from wire_daemon.emulated.traces import bundled_trace_path, load_trace
from wire_daemon.plan.pfa import (
    IdleTracker,
    PFAConfig,
    PFAPolicy,
    ThroughputFeedback,
    TokenApproximator,
    TokenEstimate,
    affordable_instances,
    choose_idle_releases,
    lookup_depth,
    slot_demand,
)
from wire_daemon.runtime.policies import POLICY_NAMES, PolicyInputs, compared_policies, make_policy
from wire_daemon.runtime.replay import compare, replay


@pytest.fixture(scope="module")
def montage():
    return load_trace(bundled_trace_path())


def small_dag():
    """a -> {b, c} -> d -> e, and f -> g -> h (submit host) -> i."""
    specs = [
        TaskSpec("a", "A"),
        TaskSpec("b", "B", ("a",)),
        TaskSpec("c", "B", ("a",)),
        TaskSpec("d", "D", ("b", "c")),
        TaskSpec("e", "E", ("d",)),
        TaskSpec("f", "F"),
        TaskSpec("g", "G", ("f",)),
        TaskSpec("h", "H", ("g",), on_pool=False),
        TaskSpec("i", "I", ("h",)),
    ]
    return build_workflow("small", "small.json", specs)


def done_mask(wf, names):
    done = np.zeros(wf.n_tasks, dtype=bool)
    for name in names:
        done[wf.index_of(name)] = True
    return done


# --- throughput feedback --------------------------------------------------------


def test_ewma_weights_the_past_by_alpha_and_skips_empty_intervals():
    feedback = ThroughputFeedback(PFAConfig(smoothing="ewma", ewma_alpha=0.5))
    assert feedback.per_slot is None
    feedback.observe(8, 4.0)  # 2 tasks per slot: the first observation seeds it
    assert feedback.per_slot == 2.0
    feedback.observe(4, 4.0)  # 0.5 * 2 + 0.5 * 1
    assert feedback.per_slot == 1.5
    feedback.observe(0, 4.0)  # nothing finished: skipped
    feedback.observe(3, 0.0)  # no slot: skipped
    assert feedback.per_slot == 1.5
    feedback.observe(12, 4.0)  # 0.5 * 1.5 + 0.5 * 3
    assert feedback.per_slot == 2.25


def test_ewma_alpha_zero_follows_the_last_interval():
    feedback = ThroughputFeedback(PFAConfig(smoothing="ewma", ewma_alpha=0.0))
    feedback.observe(8, 4.0)
    feedback.observe(2, 4.0)
    assert feedback.per_slot == 0.5


def test_moving_average_over_the_last_window_of_non_empty_intervals():
    feedback = ThroughputFeedback(PFAConfig(smoothing="ma", ma_window=2))
    feedback.observe(8, 4.0)  # 2
    feedback.observe(4, 4.0)  # 1 -> mean(2, 1)
    assert feedback.per_slot == 1.5
    feedback.observe(0, 4.0)  # skipped
    feedback.observe(6, 2.0)  # 3 -> mean(1, 3)
    assert feedback.per_slot == 2.0


# --- token estimate -------------------------------------------------------------


def test_tokens_walk_the_dag_one_wave_at_a_time():
    wf = small_dag()
    tba = TokenApproximator(wf)
    nothing = np.zeros(wf.n_tasks, dtype=bool)
    # waves: {a, f}, {b, c, g}, {d, h}, {e, i}; h runs on the submit host, so it is not counted
    assert tba.estimate(nothing, 10).waves == (2, 3, 1, 2)
    two = tba.estimate(nothing, 2)
    assert (two.waves, two.lop, two.tasks) == ((2, 3), 3, 5)
    # with a and f done, b, c and g are eligible now; d and h follow, then e and i
    assert tba.estimate(done_mask(wf, "af"), 10).waves == (3, 1, 2)
    # with every parent of d done, d is eligible even though it has not started
    assert tba.estimate(done_mask(wf, "abcfg"), 1).waves == (1,)
    assert tba.estimate(done_mask(wf, "abcdefghi"), 5).waves == ()


def test_lookup_depth_and_demand_from_the_throughput():
    estimate = TokenEstimate((2, 3, 1, 2))
    assert lookup_depth(None) == 1
    assert lookup_depth(0.3) == 1  # long tasks: one wave per interval at most
    assert lookup_depth(2.0) == 2
    assert lookup_depth(2.5) == 3
    assert slot_demand(TokenEstimate((2,)), None) == 2  # no throughput yet: the eligible tasks
    # 8 tasks at 4 per slot per interval: 2 slots clear them, fewer than the LoP of 3
    assert slot_demand(estimate, 4.0) == 2
    # 8 tasks at 1 per slot: 8 slots would clear them, but no wave is wider than 3
    assert slot_demand(estimate, 1.0) == 3


# --- budget ---------------------------------------------------------------------


def test_budget_per_interval_in_charging_units():
    assert affordable_instances(None, 180.0, Billing(3600.0)) is None
    assert affordable_instances(1.0, 180.0, Billing(3600.0)) == 20  # an instance costs 0.05 units per interval
    assert affordable_instances(0.25, 180.0, Billing(3600.0)) == 5
    assert affordable_instances(6.0, 180.0, Billing(60.0)) == 2  # u = 1 min: 3 units per instance per interval
    assert affordable_instances(5.9, 180.0, Billing(60.0)) == 1


def idle_state(wf, n_idle):
    state = RunState(wf)
    for task_id in wf.task_ids[:n_idle]:
        state.apply(TaskEvent(0.0, EventKind.SUBMITTED, task_id))
    return state


def bag_of_tasks(n):
    return build_workflow("bag", "bag.json", [TaskSpec(f"t{i}", "T") for i in range(n)])


def test_budget_caps_the_pool_below_the_demand():
    wf = bag_of_tasks(100)
    steering = SteeringConfig(charging_unit_s=3600.0, interval_s=180.0, slots_per_instance=4, max_instances=12)
    capped = PFAPolicy(wf, steering, PFAConfig(budget_units_per_interval=0.25))
    decision = capped.plan(0.0, idle_state(wf, 100), [Instance("i-1", 0.0, 4)], np.arange(100)).decision
    assert (decision.planned, decision.target, decision.launch) == (25, 5, 4)
    free = PFAPolicy(wf, steering, PFAConfig())
    decision = free.plan(0.0, idle_state(wf, 100), [Instance("i-1", 0.0, 4)], np.arange(100)).decision
    assert (decision.target, decision.launch) == (12, 11)  # no budget: max_instances


# --- deallocation ---------------------------------------------------------------


def test_releases_the_longest_idle_instances_whose_unit_ends_soon():
    now, u = 7000.0, 3600.0
    pool = [
        Instance("A", 0.0, 4),  # unit ends in 200 s: not near (threshold 180 s)
        Instance("B", 3500.0, 4),  # ends in 100 s
        Instance("C", 3550.0, 4),  # ends in 150 s
        Instance("D", 3590.0, 4),  # ends in 190 s: not near
        Instance("E", 3580.0, 4),  # ends in 180 s, busy (not in idle_since)
    ]
    idle_since = {"A": 100.0, "B": 6800.0, "C": 6500.0, "D": 0.0}
    assert choose_idle_releases(pool, idle_since, 1, now, Billing(u), 180.0) == ["C"]
    assert choose_idle_releases(pool, idle_since, 5, now, Billing(u), 180.0) == ["C", "B"]
    assert choose_idle_releases(pool, idle_since, 0, now, Billing(u), 180.0) == []
    assert choose_idle_releases(pool, idle_since, 5, now, Billing(u), 250.0) == ["D", "A", "C", "B"]
    # idle since the same look: the one whose unit ends first goes first
    assert choose_idle_releases(pool, {"B": 6800.0, "C": 6800.0}, 1, now, Billing(u), 180.0) == ["B"]


def test_idle_tracker_dates_idleness_from_the_last_task_seen():
    wf = bag_of_tasks(3)
    state = idle_state(wf, 3)
    state.apply(TaskEvent(10.0, EventKind.STARTED, "t0", host="i-1"))
    pool = [Instance("i-1", 0.0, 4), Instance("i-2", 0.0, 4), Instance("i-3", 0.0, 4, state="pending")]
    tracker = IdleTracker()
    assert tracker.update(180.0, state, pool) == {"i-2": 180.0}  # i-1 busy, i-3 booting
    state.apply(TaskEvent(250.0, EventKind.FINISHED, "t0", host="i-1", exit_code=0))
    assert tracker.update(360.0, state, pool) == {"i-1": 250.0, "i-2": 180.0}


def test_policy_releases_an_idle_instance_at_its_unit_end_and_keeps_the_minimal_pool():
    wf = bag_of_tasks(2)
    state = idle_state(wf, 2)
    for task_id, host in (("t0", "i-1"), ("t1", "i-2")):
        state.apply(TaskEvent(0.0, EventKind.STARTED, task_id, host=host))
        state.apply(TaskEvent(100.0, EventKind.FINISHED, task_id, host=host, exit_code=0))
    steering = SteeringConfig(charging_unit_s=600.0, interval_s=180.0, release_guard_s=10.0)
    policy = PFAPolicy(wf, steering, PFAConfig())
    pool = [Instance("i-1", 0.0, 4), Instance("i-2", 0.0, 4)]
    early = policy.plan(180.0, state, pool, np.array([], dtype=np.int64)).decision
    assert early.release == [] and early.target == 2  # idle, but 420 s of the paid unit are left
    late = policy.plan(540.0, state, pool, np.array([], dtype=np.int64)).decision
    assert late.release == ["i-1"] and late.target == 1  # min_instances = 1 stays
    assert late.release_at == {"i-1": 590.0}  # just before the unit ends
    again = policy.plan(590.0, state, pool, np.array([], dtype=np.int64)).decision
    assert again.release == []  # i-1 is already on its way out


def test_config_is_validated():
    with pytest.raises(ConfigError, match="pfa.smoothing"):
        PFAConfig(smoothing="median")
    with pytest.raises(ConfigError, match="pfa.ewma_alpha"):
        PFAConfig(ewma_alpha=1.0)
    with pytest.raises(ConfigError, match="pfa.ma_window"):
        ReplayConfig(policy_options={"pfa": PFAConfig(ma_window=0)})


# --- replays --------------------------------------------------------------------


def test_pfa_is_a_registered_policy(montage):
    assert "pfa" in POLICY_NAMES
    policy = make_policy("pfa", PolicyInputs(RunState(montage), SteeringConfig(), ReplayConfig().prediction))
    assert policy.name == "pfa"


def test_pfa_finishes_the_bundled_trace(montage):
    result = replay(montage, "pfa", ReplayConfig())
    assert result.records and result.makespan_s > 0
    assert result.records[-1].policy == "pfa"
    assert result.restarts == 0  # PFA only ever releases idle instances


def test_pfa_pays_less_than_full_site_on_a_scaled_trace(montage):
    config = ReplayConfig(steering=SteeringConfig(charging_unit_s=900.0), emulation=EmulationConfig(time_scale=20.0))
    results = compare(montage, config, ("full-site", "pfa"))
    assert results["pfa"].cost_units < results["full-site"].cost_units
    assert results["pfa"].relative_time >= 0.999
    assert math.isfinite(results["pfa"].utilization)


def test_cli_compare_runs_every_policy(capsys):
    assert main(["replay", "--compare", "--charging-unit", "15"]) == 0
    out = capsys.readouterr().out
    on_demand = compared_policies(SteeringConfig())  # the spot peers join only where spot is on the table
    rows = [line.split()[0] for line in out.splitlines() if line.split() and line.split()[0] in POLICY_NAMES]
    n = len(on_demand)
    assert rows[:n] == list(on_demand) and n == 7  # then the prediction-error lines
    assert main(["replay", "--policy", "pfa", "--verbose"]) == 0
    assert "LoP" in capsys.readouterr().out  # the decisions log says what PFA saw


def test_deterministic_per_seed(montage):
    config = ReplayConfig(emulation=EmulationConfig(time_scale=10.0, seed=2))
    one, two = replay(montage, "pfa", config), replay(montage, "pfa", config)
    assert (one.cost_units, one.makespan_s, [r.target for r in one.records]) == (
        two.cost_units,
        two.makespan_s,
        [r.target for r in two.records],
    )


def test_tasks_done_status_is_what_tokens_read(montage):
    state = RunState(montage)
    done = state.status == TaskStatus.DONE
    waves = TokenApproximator(montage).estimate(done, 100).waves
    assert sum(waves) == int(np.count_nonzero(montage.on_pool))  # every pool task is visited once
