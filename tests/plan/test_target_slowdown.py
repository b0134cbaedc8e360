"""Issue 12: the makespan model, the dispatch learner, distribution-aware predictions, the knob, a replay."""

from __future__ import annotations

import json
import math
import re
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from wire_daemon.analyze.dispatch import DispatchLearner
from wire_daemon.analyze.distribution import DistributionPredictor, Spread
from wire_daemon.cli.main import main
from wire_daemon.core.config import EmulationConfig, PredictionConfig, ReplayConfig, SteeringConfig
from wire_daemon.core.events import EventKind, TaskEvent
from wire_daemon.core.instances import CloudState, Instance
from wire_daemon.core.run_state import RunState
from wire_daemon.core.workflow import TaskSpec, build_workflow
from wire_daemon.emulated.traces import load_trace
from wire_daemon.plan import slowdown
from wire_daemon.plan.choices import Aim, Choice, best_for_target, within
from wire_daemon.plan.makespan import LevelModel, PoolMember, Slots, plan_instances, top_down_levels
from wire_daemon.plan.slowdown import SlowdownPolicy, quantile_levels
from wire_daemon.ports.prediction import (
    POLICY_PRIOR_TRANSFORMATION,
    POLICY_PRIOR_WORKFLOW,
    POLICY_STAGE_MEDIAN,
    DispatchEstimate,
    Prediction,
)
from wire_daemon.runtime.policies import DEFAULT_POLICY, POLICY_NAMES
from wire_daemon.runtime.replay import replay
from wire_daemon.runtime.settings import Settings

DATA = Path(__file__).resolve().parents[1] / "data"


def _events(*items: tuple) -> list[TaskEvent]:
    out = []
    for item in items:
        time, kind, task = item[:3]
        extra = dict(item[3]) if len(item) > 3 else {}
        out.append(TaskEvent(float(time), kind, task, **extra))
    return out


def _no_dispatch(n_stages: int, latency: float = 0.0) -> DispatchEstimate:
    return DispatchEstimate(np.zeros(n_stages), 0.0, latency, 0.0, observations=1, gap_observations=1)


# -- the level-based model -----------------------------------------------------------------------

# The worked example of the makespan-model paper (its Fig. 1): eight tasks, runtimes below; with
# top-down levels the estimate is 13 + 14.5 + 12 + 10 + 11 = 60.5 on 2 slots and 59 on 4.
PAPER_RUNTIMES = {"t0": 13, "t1": 9, "t2": 13, "t3": 7, "t4": 9, "t5": 12, "t6": 10, "t7": 11}
PAPER_PARENTS = {"t1": ("t0",), "t2": ("t0",), "t3": ("t0",), "t4": ("t1", "t2"), "t5": ("t3",)}
PAPER_PARENTS |= {"t6": ("t4",), "t7": ("t5", "t6")}


def _paper_dag():
    specs = [TaskSpec(t, t, PAPER_PARENTS.get(t, ()), runtime_s=float(r)) for t, r in PAPER_RUNTIMES.items()]
    return build_workflow("paper", "fig1", specs)


def _truth_prediction(wf, values: np.ndarray) -> Prediction:
    v = values.astype(float)
    return Prediction(v.copy(), v.copy(), v.copy(), np.full(wf.n_tasks, 3, dtype=np.int8), v.copy(), v.copy())


def test_top_down_levels_follow_the_longest_path_from_an_entry():
    wf = _paper_dag()
    levels = dict(zip(wf.task_ids, top_down_levels(wf).tolist()))
    assert levels == {"t0": 0, "t1": 1, "t2": 1, "t3": 1, "t4": 2, "t5": 2, "t6": 3, "t7": 4}


@pytest.mark.parametrize("slots, expected", [(2, 60.5), (4, 59.0)])
def test_the_level_model_reproduces_the_papers_worked_example(slots, expected):
    wf = _paper_dag()
    state = RunState(wf)
    model = LevelModel(wf)
    prediction = _truth_prediction(wf, wf.runtime_s)
    dispatch = _no_dispatch(len(wf.stages))
    levels = model.remaining(state, prediction, dispatch)
    schedule = model.schedule(levels, 0.0, [Slots(0.0, slots)], 1, latency_s=0.0)
    assert schedule.end == pytest.approx(expected)
    assert model.full_pool(state, prediction, dispatch, slots, now=0.0) == pytest.approx(expected)


def test_a_level_waits_for_slots_that_are_still_booting():
    wf = build_workflow("w", "t", [TaskSpec(f"a{i}", "a", runtime_s=100.0) for i in range(8)])
    state = RunState(wf)
    model = LevelModel(wf)
    levels = model.remaining(state, _truth_prediction(wf, wf.runtime_s), _no_dispatch(1))
    # 800 s of work, 2 slots now and 6 more from t = 100: 200 s done by then, the rest at 8 slots.
    schedule = model.schedule(levels, 0.0, [Slots(0.0, 2), Slots(100.0, 6)], 2, latency_s=0.0)
    assert schedule.end == pytest.approx(100.0 + 600.0 / 8)
    assert schedule.instances_used.tolist() == [4]


def test_asked_for_whole_tasks_only_the_frontier_runs_in_rounds():
    # 28 tasks queued now, 28 more of the next level not submitted yet; 12 slots.
    specs = [TaskSpec(f"a{i}", "a", runtime_s=100.0) for i in range(28)]
    specs += [TaskSpec(f"b{i}", "b", (f"a{i}",), runtime_s=100.0) for i in range(28)]
    wf = build_workflow("w", "t", specs)
    state = RunState(wf)
    state.apply_all(_events(*[(0.0, EventKind.SUBMITTED, f"a{i}") for i in range(28)]))
    model = LevelModel(wf)
    levels = model.remaining(state, _truth_prediction(wf, wf.runtime_s), _no_dispatch(2))
    fluid = model.schedule(levels, 0.0, [Slots(0.0, 12)], 4, latency_s=0.0)
    whole = model.schedule(levels, 0.0, [Slots(0.0, 12)], 4, latency_s=0.0, whole_frontier=True)
    assert fluid.end == pytest.approx(2 * 2800.0 / 12)
    assert whole.end == pytest.approx(300.0 + 2800.0 / 12)  # three rounds of the queued tasks, then fluid
    # The rounds are counted on the most slots the profile reaches: 28 slots from t = 50 is one round.
    grown = model.schedule(levels, 0.0, [Slots(0.0, 12), Slots(50.0, 16)], 4, 0.0, whole_frontier=True)
    assert grown.end == model.schedule(levels, 0.0, [Slots(0.0, 12), Slots(50.0, 16)], 4, 0.0).end


def test_each_unsubmitted_level_pays_the_level_latency_and_dispatch_gaps_count_as_work():
    wf = build_workflow("w", "t", [TaskSpec("a", "a"), TaskSpec("b", "b", ("a",)), TaskSpec("c", "c", ("b",))])
    state = RunState(wf)
    model = LevelModel(wf)
    zero = _truth_prediction(wf, np.zeros(3))
    dispatch = DispatchEstimate(np.array([4.0, 4.0, 4.0]), 4.0, 1.0, 2.5, observations=3, gap_observations=3)
    levels = model.remaining(state, zero, dispatch)
    schedule = model.schedule(levels, 0.0, [Slots(0.0, 4)], 4, latency_s=dispatch.level_latency_s)
    assert schedule.end == pytest.approx(3 * (3.5 + 4.0))  # three levels: latency, then one 4-s gap of work


def test_paid_units_are_free_and_an_idle_gap_longer_than_a_comeback_lets_an_instance_go():
    from wire_daemon.core.billing import Billing
    from wire_daemon.plan.makespan import Schedule

    billing = Billing(3600.0)
    now = 1000.0
    paid = PoolMember("i-1", 4, now, now + 2600.0, 0.0)  # launched at 0: paid until 3600
    busy = Schedule(3000.0, np.array([now]), np.array([3000.0]), np.array([1]))
    assert plan_instances([paid], busy, billing, now, 180.0, 180.0).cost_units == 0  # within its paid unit
    longer = Schedule(5000.0, np.array([now]), np.array([5000.0]), np.array([1]))
    assert plan_instances([paid], longer, billing, now, 180.0, 180.0).cost_units == 1
    # Needed now and again at 20000: it goes at the end of its unit and comes back for one unit.
    gap = Schedule(20500.0, np.array([now, 20000.0]), np.array([1100.0, 20500.0]), np.array([1, 1]))
    assert plan_instances([paid], gap, billing, now, 180.0, 180.0).cost_units == 1
    # A new instance pays from its launch, boot included; launched now only if needed before a later one boots.
    new = PoolMember("new", 4, now + 180.0, now, now)
    soon = Schedule(1500.0, np.array([now + 180.0]), np.array([1500.0]), np.array([2]))
    plan = plan_instances([paid, new], soon, billing, now, 180.0, 180.0)
    assert (plan.launch_now, plan.cost_units) == (1, 1)
    later = Schedule(9000.0, np.array([8000.0]), np.array([9000.0]), np.array([2]))
    assert plan_instances([paid, new], later, billing, now, 180.0, 180.0).launch_now == 0


# -- the dispatch learner ------------------------------------------------------------------------


def test_the_dispatch_learner_measures_slot_gaps_start_and_submit_latencies():
    specs = [TaskSpec("a", "x"), TaskSpec("b", "x"), TaskSpec("c", "y", ("a",))]
    wf = build_workflow("w", "t", specs)
    state = RunState(wf)
    learner = DispatchLearner(wf, prior_s=2.0)
    before = learner.estimate()
    assert (before.default_gap_s, before.start_latency_s, before.gap_observations) == (2.0, 1.0, 0)
    E = EventKind
    state.apply_all(
        _events(
            (0, E.SUBMITTED, "a"),
            (0, E.SUBMITTED, "b"),
            (3, E.STARTED, "a", {"host": "h1"}),  # a slot of a new host: says nothing
            (10, E.FINISHED, "a", {"host": "h1", "exec_runtime_s": 7.0}),
            (14, E.STARTED, "b", {"host": "h1"}),  # b waited since 0 while the slot was free from 10: gap 4
            (11, E.SUBMITTED, "c"),  # 1 s after its parent a ended: submit latency 1
            (20, E.FINISHED, "b", {"host": "h1", "exec_runtime_s": 6.0}),
            (22, E.STARTED, "c", {"host": "h1"}),  # the slot freed at 20, after c's submit: a gap of 2
        )
    )
    learner.update(state, 25.0)
    est = learner.estimate()
    stage_x = wf.stage_of[wf.index_of("a")]
    assert est.gap_s[stage_x] != est.gap_s[stage_x] or est.gap_s[stage_x] == pytest.approx(3.0)  # < 3 per stage
    assert est.default_gap_s == pytest.approx((4.0 + 2.0) / 2)
    assert est.submit_latency_s == pytest.approx(1.0)
    assert est.gap_observations == 2


def test_the_dispatch_learner_sees_the_negotiation_cycle_of_the_emulated_site():
    from wire_daemon.emulated.site import EmulatedSite

    wf = load_trace(DATA / "traces" / "seismology-chameleon-300p-001.json.gz")
    site = EmulatedSite(wf, EmulationConfig(), 4, SteeringConfig().billing)
    state = RunState(wf)
    learner = DispatchLearner(wf, prior_s=0.0)
    for now in (180.0, 360.0, 540.0):
        site.advance_to(now)
        state.apply_all(site.poll_events())
        learner.update(state, now)
    assert state.is_finished()
    est = learner.estimate()
    # Half-second jobs and a 5-s negotiation cycle: a slot waits about 4.5 s between two of them.
    assert 4.0 <= est.default_gap_s <= 5.0
    assert est.submit_latency_s == pytest.approx(1.0)  # DAGMan's submit delay in the emulated site


# -- distribution-aware predictions and priors ---------------------------------------------------


def test_a_spread_gives_quantiles_and_remaining_times_conditioned_on_the_elapsed_time():
    spread = Spread()
    spread.add(np.arange(1.0, 11.0))  # 1 .. 10 s
    assert (spread.median, spread.mean) == (5.5, 5.5)
    assert spread.p90 == pytest.approx(9.1)
    med, mean, p90 = spread.conditional(np.zeros(2), np.array([6.5, 20.0]))
    assert med[0] == pytest.approx(8.5 - 6.5)  # the samples still running at 6.5 s: 7, 8, 9, 10
    assert mean[0] == pytest.approx(8.5 - 6.5)
    assert med[1] == pytest.approx(0.5 * 20.0) and p90[1] == pytest.approx(20.0)  # past every measurement


def _stage_workflow():
    specs = [TaskSpec(f"a{i}", "align", input_bytes=100) for i in range(10)]
    specs += [TaskSpec(f"b{i}", "sort", (f"a{i}",)) for i in range(10)]
    specs += [TaskSpec(f"c{i}", "align", (f"b{i}",), input_bytes=100) for i in range(10)]  # align again: own stage
    return build_workflow("w", "t", specs)


def _run(state: RunState, task: str, start: float, end: float, host: str = "h") -> None:
    E = EventKind
    state.apply_all(
        _events(
            (start, E.SUBMITTED, task),
            (start, E.STARTED, task, {"host": host}),
            (end, E.FINISHED, task, {"host": host, "exec_runtime_s": end - start}),
        )
    )


def test_unmeasured_stages_borrow_a_prior_instead_of_zero():
    wf = _stage_workflow()
    state = RunState(wf)
    predictor = DistributionPredictor(wf, PredictionConfig())
    for i in range(10):
        _run(state, f"a{i}", 0.0, 20.0 + i)
    predictor.update(state, 40.0)
    out = predictor.predict(state, 40.0)
    b, c = wf.index_of("b0"), wf.index_of("c0")
    assert out.policy[c] == POLICY_PRIOR_TRANSFORMATION  # align measured in another stage
    assert out.exec_s[c] == pytest.approx(24.5)
    assert out.policy[b] == POLICY_PRIOR_WORKFLOW  # nothing like "sort" measured: the workflow's tasks
    assert out.remaining_mean_s is not None and out.remaining_mean_s[b] == pytest.approx(24.5)


def test_a_running_task_past_the_workflow_s_short_tasks_is_not_given_its_long_stage_s_length():
    """Montage 0.1 deg at K = 100: mBgModel, never measured, 45 s in; the workflow's tasks so far are 21
    mProject of 1,600 s and 45 mDiffFit of 10 s. Conditioned on 45 s the mix is mProject's alone, 1,570 s
    more; the task ended 14 s later, and the pool was let go for a long tail that never came."""
    wf = _stage_workflow()
    state = RunState(wf)
    predictor = DistributionPredictor(wf, PredictionConfig())
    times = [10.0] * 6 + [1600.0] * 4  # the workflow's measured tasks: short ones and long ones
    for i, t in enumerate(times):
        _run(state, f"a{i}", 0.0, t)
    state.apply_all(_events((1600.0, EventKind.SUBMITTED, "b0"), (1600.0, EventKind.STARTED, "b0", {"host": "h"})))
    predictor.update(state, 1645.0)
    out = predictor.predict(state, 1645.0)
    b = wf.index_of("b0")
    assert out.policy[b] == POLICY_PRIOR_WORKFLOW
    assert out.remaining_s[b] == pytest.approx(45.0)  # as much again as it has run
    assert out.remaining_mean_s is not None and out.remaining_mean_s[b] == pytest.approx(45.0)
    assert out.remaining_p90_s is not None and out.remaining_p90_s[b] > 1000.0  # the tail a promise allows for


def test_a_deadline_s_90th_percentile_counts_a_stage_timed_by_a_prior_at_the_prior_s_median():
    """Another stage's spread says little about this stage's tasks, for a promise as for the estimate: the
    deadline's P90 work counts a task not started of a stage timed by the workflow's prior at that prior's
    median, not at the tail the one long measured task gives it."""
    wf = _stage_workflow()
    state = RunState(wf)
    predictor = DistributionPredictor(wf, PredictionConfig())
    times = [2, 2, 2, 2, 2, 3, 3, 3, 4, 40]  # the workflow's measured tasks: mostly short, one long
    for i, t in enumerate(times):
        _run(state, f"a{i}", 0.0, float(t))
    predictor.update(state, 50.0)
    out = predictor.predict(state, 50.0)
    b = wf.index_of("b0")
    assert out.policy[b] == POLICY_PRIOR_WORKFLOW
    assert out.remaining_p90_s is not None and out.remaining_p90_s[b] == pytest.approx(2.5)
    model = LevelModel(wf)
    levels = quantile_levels(model, state, out, _no_dispatch(len(wf.stages)))
    sorts = [wf.index_of(f"b{i}") for i in range(10)]
    assert all(model.level[t] == model.level[b] for t in sorts)
    assert levels.work_s[model.level[b] + 1] == pytest.approx(10 * 2.5)  # ten "sort" tasks at the median
    # The per-second bill to the workflow's end keeps the prior's tail.
    tail = quantile_levels(model, state, out, _no_dispatch(len(wf.stages)), prior_tail=True)
    assert tail.work_s[model.level[b] + 1] == pytest.approx(10 * np.quantile(times, 0.9))


def test_measured_stages_give_a_point_a_mean_and_a_90th_percentile():
    wf = _stage_workflow()
    state = RunState(wf)
    predictor = DistributionPredictor(wf, PredictionConfig())
    times = [2, 2, 2, 2, 2, 3, 3, 3, 4, 20]  # skewed: the mean is above the median
    for i, t in enumerate(times[:9]):
        _run(state, f"a{i}", 0.0, float(t))
    predictor.update(state, 25.0)
    out = predictor.predict(state, 25.0)
    last = wf.index_of("a9")
    assert out.policy[last] == POLICY_STAGE_MEDIAN
    assert out.exec_s[last] == pytest.approx(2.0)
    assert out.remaining_mean_s is not None and out.remaining_p90_s is not None
    assert out.remaining_mean_s[last] == pytest.approx(np.mean(times[:9]))
    assert out.remaining_p90_s[last] == pytest.approx(np.quantile(times[:9], 0.9))


def test_a_long_skewed_stage_is_predicted_for_the_relative_error_the_paper_measures():
    wf = build_workflow("w", "t", [TaskSpec(f"a{i}", "a") for i in range(12)])
    state = RunState(wf)
    predictor = DistributionPredictor(wf, PredictionConfig())
    times = [1.0, 1.0, 1.0, 1.0, 100.0, 100.0, 100.0, 100.0, 100.0, 100.0]  # mean 60.4 s: a long stage
    for i, t in enumerate(times):
        _run(state, f"a{i}", 0.0, t)
    predictor.update(state, 200.0)
    out = predictor.predict(state, 200.0)
    assert out.exec_s[wf.index_of("a11")] == pytest.approx(1.0)  # the 1/t-weighted median, not 100
    assert out.remaining_mean_s is not None and out.remaining_mean_s[wf.index_of("a11")] == pytest.approx(60.4)


# -- the knob ------------------------------------------------------------------------------------


def _wide_state(n: int = 200, runtime: float = 600.0):
    wf = build_workflow("w", "t", [TaskSpec(f"a{i}", "a", runtime_s=runtime) for i in range(n)])
    state = RunState(wf)
    E = EventKind
    events = [(0.0, E.SUBMITTED, f"a{i}") for i in range(n)]
    events += [(0.0, E.STARTED, f"a{i}", {"host": "i-1"}) for i in range(4)]
    events += [(0.0 + runtime, E.FINISHED, f"a{i}", {"host": "i-1", "exec_runtime_s": runtime}) for i in range(4)]
    events += [(runtime, E.STARTED, f"a{i}", {"host": "i-1"}) for i in range(4, 8)]
    state.apply_all(_events(*events))
    return wf, state


@pytest.mark.parametrize("u", [60.0, 3600.0])
def test_a_looser_target_never_asks_for_a_bigger_pool(u):
    sizes = []
    for target in (1.0, 1.5, 3.0, 10.0):
        wf, state = _wide_state()
        steering = SteeringConfig(charging_unit_s=u, target_slowdown=target)
        policy = SlowdownPolicy(DistributionPredictor(wf, PredictionConfig()), DispatchLearner(wf, 2.0), steering)
        pool = [Instance("i-1", -180.0, 4, CloudState.RUNNING)]
        plan = policy.plan(700.0, state, pool, state.idle_in_queue_order())
        sizes.append(plan.decision.target)
        assert [e.size for e in plan.estimates] == sorted(e.size for e in plan.estimates)
        assert any(e.size == plan.decision.planned for e in plan.estimates)
    assert sizes == sorted(sizes, reverse=True)
    assert sizes[0] == 12 and sizes[-1] < 12  # 196 ten-minute tasks: fast means the whole site


def _decide_wide(target: float, began: float) -> tuple[int, str]:
    """The pool size and the rule, at 700 s into the wide workflow begun at ``began``."""
    wf, state = _wide_state()
    state.first_event_time = began
    steering = SteeringConfig(charging_unit_s=60.0, target_slowdown=target)
    policy = SlowdownPolicy(DistributionPredictor(wf, PredictionConfig()), DispatchLearner(wf, 2.0), steering)
    decision = policy.plan(
        700.0, state, [Instance("i-1", -180.0, 4, CloudState.RUNNING)], state.idle_in_queue_order()
    ).decision
    return decision.target, decision.rule


def _seconds_to_deadline(rule: str) -> float:
    match = re.search(r"target end in (\d+) s", rule)
    assert match, rule
    return float(match.group(1))


def test_above_target_1_the_deadline_is_a_share_of_the_time_left_whatever_the_run_lost_so_far():
    # At target 1 the deadline is the full pool's end from the start: a run begun 3,000 s earlier is late.
    assert "target end in" in _decide_wide(1.0, 0.0)[1]
    assert "target end passed" in _decide_wide(1.0, -3000.0)[1]
    on_time = {t: _decide_wide(t, 0.0) for t in (1.5, 2.0)}
    late = {t: _decide_wide(t, -3000.0) for t in (1.5, 2.0)}
    assert on_time == late  # above 1, neither made up for nor spent again
    # The same fastest remaining time, shared out by the target.
    ratio = _seconds_to_deadline(on_time[2.0][1]) / _seconds_to_deadline(on_time[1.5][1])
    assert ratio == pytest.approx(2.0 / 1.5, rel=1e-3)


def test_of_equally_cheap_choices_a_target_above_1_launches_fewest():
    launch_more = Choice(size=9, end=1000.0, cost=10, launch=4, release=())
    launch_later = Choice(size=8, end=1100.0, cost=10, launch=1, release=())
    assert best_for_target([launch_more, launch_later], deadline=2000.0, price=0.2, target=1.0) is launch_more
    assert best_for_target([launch_more, launch_later], deadline=2000.0, price=0.2, target=1.5) is launch_later
    # Lateness still counts: past the deadline the faster one is cheaper.
    assert best_for_target([launch_more, launch_later], deadline=1000.0, price=0.2, target=1.5) is launch_more


def test_the_target_is_validated():
    with pytest.raises(Exception, match="target_slowdown"):
        SteeringConfig(target_slowdown=0.9)


# -- replays -------------------------------------------------------------------------------------


def test_target_slowdown_is_the_default_policy():
    assert DEFAULT_POLICY == "target-slowdown" and DEFAULT_POLICY in POLICY_NAMES
    assert Settings().policy == DEFAULT_POLICY


def test_a_replay_on_the_bundled_trace_records_its_estimates(tmp_path, capsys):
    out = tmp_path / "decisions.jsonl"
    assert main(["replay", "--time-scale", "20", "--charging-unit", "1", "--verbose", "--decisions-out", str(out)]) == 0
    text = capsys.readouterr().out
    assert "== decisions: target-slowdown ==" in text and "estimates " in text and "full pool:" in text
    records = [json.loads(line) for line in out.read_text().splitlines()]
    assert records and all(r["policy"] == "target-slowdown" for r in records)
    for r in records:
        if r["done"] < 103:
            sizes = [e["size"] for e in r["estimates"]]
            assert r["planned"] in sizes and all(abs(s - r["planned"]) <= 1 for s in sizes)
            # Seconds from the decision to the estimated end, as on a wall-clock site.
            assert all(e["makespan_s"] >= 0 and e["cost_units"] >= 0 for e in r["estimates"])
            assert r["time"] + r["full_pool_makespan_s"] > 0  # the full pool's end: after the workflow's start


def test_wire_records_keep_their_old_fields_only(tmp_path):
    out = tmp_path / "wire.jsonl"
    assert main(["replay", "--policy", "wire", "--decisions-out", str(out)]) == 0
    for line in out.read_text().splitlines():
        record = json.loads(line)
        assert "estimates" not in record and "full_pool_makespan_s" not in record


def test_many_short_tasks_make_the_pool_grow():
    # 300 half-second jobs: WIRE sees no load and stays on one instance; counting the dispatch, the pool grows.
    wf = load_trace(DATA / "traces" / "seismology-chameleon-300p-001.json.gz")
    config = ReplayConfig(steering=SteeringConfig(charging_unit_s=60.0))
    ours = replay(wf, "target-slowdown", config)
    wire = replay(wf, "wire", config)
    assert ours.peak_instances > 1 and wire.peak_instances == 1
    assert ours.makespan_s < 0.6 * wire.makespan_s


def test_a_kept_instance_pays_up_to_the_workflow_s_end_when_that_comes_before_the_next_decision():
    from wire_daemon.core.billing import Billing
    from wire_daemon.plan.makespan import Schedule

    now = 1000.0
    member = PoolMember("i-1", 4, now, now, 0.0)  # per-second billing: paid up to now
    ending = Schedule(now + 20.0, np.array([now]), np.array([now + 20.0]), np.array([1]))
    per_second = Billing.per_second()
    assert plan_instances([member], ending, per_second, now, 180.0, 180.0, pool_ends_at=now + 20.0).cost_units == 20
    # Not knowing when the pool goes, it is priced as renewed to the next decision.
    assert plan_instances([member], ending, per_second, now, 180.0, 180.0).cost_units == 180


@pytest.mark.parametrize("seed", [0, 1])
def test_no_running_task_is_killed_to_save_pool_seconds_past_the_workflow_s_end(seed):
    # 300 short tasks billed per second: with the end seconds away, keeping the pool to the next decision
    # was priced at a whole interval per instance, and a release that killed 4 running tasks looked cheaper.
    wf = load_trace(DATA / "traces" / "seismology-chameleon-300p-001.json.gz")
    steering = SteeringConfig(charging_unit_s=60.0, billing_model="second")
    config = ReplayConfig(steering=steering, emulation=EmulationConfig(seed=seed))
    ours = replay(wf, "target-slowdown", config)
    reactive = replay(wf, "pure-reactive", config)
    assert ours.restarts == 0
    assert ours.makespan_s <= reactive.makespan_s


def test_a_replay_on_a_real_trace_finishes_without_killing_work_twice():
    wf = load_trace(DATA / "srasearch-chameleon-30a-001.json")
    steering = SteeringConfig(charging_unit_s=900.0)
    config = ReplayConfig(steering=steering, emulation=EmulationConfig(time_scale=10.0))
    result = replay(wf, "target-slowdown", config)
    full = replay(wf, "full-site", config)
    assert result.cost_units < full.cost_units
    assert result.makespan_s <= 1.5 * full.makespan_s
    assert result.restarts <= 2
    loose = replay(wf, "target-slowdown", replace(config, steering=replace(steering, target_slowdown=2.0)))
    assert loose.cost_units <= result.cost_units
    assert math.isfinite(loose.makespan_s)


def test_status_and_the_decisions_command_say_the_estimates(tmp_path, capsys):
    from wire_daemon.runtime.settings import load_settings
    from wire_daemon.service.daemon import Daemon

    config = tmp_path / "config.yaml"
    config.write_text(
        f"""
site: {{kind: emulated, speedup: 1000000}}
emulation: {{time_scale: 20}}
steering: {{charging_unit_s: 900}}
state_path: {tmp_path / "state.sqlite"}
log: {{decisions_path: {tmp_path / "decisions.jsonl"}}}
"""
    )
    daemon = Daemon(load_settings(config), str(config))
    assert daemon.run(max_iterations=2) == 0
    assert main(["status", "--config", str(config)]) == 0
    status = capsys.readouterr().out
    assert "estimates: " in status and "(chosen)" in status and "the full pool would end in" in status
    assert main(["decisions", "--config", str(config), "--verbose"]) == 0  # the one-line form leaves them out
    lines = [line for line in capsys.readouterr().out.splitlines() if " pool " in line]
    assert lines and all("estimates: " in line for line in lines)


def test_estimates_and_the_deadline_read_as_times_from_the_decision():
    """On a real site the clock is epoch seconds: a reader gets "in 5.0 min", never 1795510151."""
    from wire_daemon.service.wording import decision_words

    record = {
        "time": 1_795_510_000.0,
        "policy": "target-slowdown",
        "planned": 5,
        "rule": "hold",
        "estimates": [
            {"size": 4, "makespan_s": 1_795_510_400.0, "cost_units": 8},
            {"size": 5, "makespan_s": 1_795_510_300.0, "cost_units": 6},
        ],
        "full_pool_makespan_s": 1_795_510_030.0,
    }
    words = decision_words(record, verbose=True)
    assert "4 instance(s): ends in 6.7 min, 8 more unit(s)" in words
    assert "5 instance(s) (chosen): ends in 5.0 min" in words and "the full pool would end in 30 s" in words
    assert "1795510" not in words
    assert "~" not in words  # no bill yet: units only


def test_estimates_are_given_in_money_too_at_what_a_unit_has_cost_so_far():
    from wire_daemon.service.wording import decision_words

    record = {
        "time": 600.0,
        "policy": "target-slowdown",
        "planned": 5,
        "rule": "hold",
        "cost_units": 40,
        "cost_money": 2.0,  # 0.05 a unit: spot and on-demand as bought so far
        "currency": "USD",
        "estimates": [{"size": 5, "makespan_s": 300.0, "cost_units": 6}],
    }
    assert "5 instance(s) (chosen): ends in 5.0 min, 6 more unit(s) (~0.30 USD)" in decision_words(record, True)


# -- rules from the grid's reading (docs/decisions.md, "target-slowdown, second pass") -----------


def test_a_level_uses_the_instances_still_there_not_those_already_gone():
    from wire_daemon.core.billing import Billing
    from wire_daemon.plan.makespan import Schedule

    now = 600.0  # every unit ends now (u = 1 min): all three are up for renewal
    gone = PoolMember("a", 4, now, now, 0.0, gone_at=now)  # the size looked at lets it go
    kept = [PoolMember(i, 4, now, now, 0.0) for i in ("b", "c")]
    level = Schedule(now + 500.0, np.array([now]), np.array([now + 500.0]), np.array([2]))
    plan = plan_instances([gone, *kept], level, Billing(60.0), now, 180.0, 180.0, ranked=True)
    assert plan.release_now == ("a",)  # b and c run the level's two instances; neither is let go


def _one_running_task(policy_code: int) -> tuple[RunState, Prediction]:
    wf = build_workflow("w", "t", [TaskSpec(f"a{i}", "a") for i in range(2)])
    state = RunState(wf)
    E = EventKind
    state.apply_all(_events((0.0, E.SUBMITTED, "a0"), (0.0, E.STARTED, "a0", {"host": "i-1"})))
    short = np.full(wf.n_tasks, 50.0)  # expected to end 50 s from now, long before the unit ends
    codes = np.full(wf.n_tasks, policy_code, dtype=np.int8)
    return state, Prediction(short, short * 4, short * 4, codes, short.copy(), short.copy())


@pytest.mark.parametrize("code, at_risk", [(POLICY_STAGE_MEDIAN, False), (POLICY_PRIOR_WORKFLOW, True)])
def test_a_task_predicted_only_from_a_prior_is_never_counted_on_to_end_in_time(code, at_risk):
    state, prediction = _one_running_task(code)
    wf = state.workflow
    policy = SlowdownPolicy(DistributionPredictor(wf, PredictionConfig()), DispatchLearner(wf, 2.0), SteeringConfig())
    cost = policy._restart_costs(state, prediction, [Instance("i-1", 0.0, 4, CloudState.RUNNING)], 100.0)
    assert (cost["i-1"] > 0.0) is at_risk


@pytest.mark.parametrize("code, guessed", [(POLICY_STAGE_MEDIAN, False), (POLICY_PRIOR_WORKFLOW, True)])
def test_the_pool_s_bill_stops_at_the_estimated_end_only_when_no_running_task_s_end_is_a_guess(code, guessed):
    state, prediction = _one_running_task(code)
    assert slowdown._running_end_guessed(state, prediction) is guessed


@pytest.mark.parametrize("u, limit", [(3600.0, 0.0), (60.0, 12.0)])
def test_with_units_longer_than_the_interval_no_release_may_sink_work(u, limit):
    wf = build_workflow("w", "t", [TaskSpec("a", "a")])
    steering = SteeringConfig(charging_unit_s=u)
    policy = SlowdownPolicy(DistributionPredictor(wf, PredictionConfig()), DispatchLearner(wf, 2.0), steering)
    assert policy._restart_limit() == pytest.approx(limit)


def _six_tasks_four_running(finished: int = 0) -> tuple[RunState, SlowdownPolicy, Prediction, list[Instance]]:
    """Six tasks queued or running on one 4-slot instance; ``finished`` earlier ones of the stage done."""
    wf = build_workflow("w", "t", [TaskSpec(f"a{i}", "a") for i in range(6 + finished)])
    state = RunState(wf)
    for i in range(finished):
        _run(state, f"a{6 + i}", -1000.0, -400.0, host="i-1")  # 600-s tasks
    E = EventKind
    events = [(0.0, E.SUBMITTED, f"a{i}") for i in range(6)]
    events += [(0.0, E.STARTED, f"a{i}", {"host": "i-1"}) for i in range(4)]
    state.apply_all(_events(*events))
    predictor = DistributionPredictor(wf, PredictionConfig())
    predictor.update(state, 0.0)
    policy = SlowdownPolicy(predictor, DispatchLearner(wf, 2.0), SteeringConfig())
    return state, policy, predictor.predict(state, 0.0), [Instance("i-1", -180.0, 4, CloudState.RUNNING)]


@pytest.mark.parametrize(
    "u, finished, floor",
    [
        (1800.0, 0, 2),  # long units, nothing measured: a slot per task
        (1800.0, 5, 0),  # long units, the stage measured: the model prices each launch's unit
        (60.0, 0, 1),  # per-minute units: each task's guessed interval of work, 4 of them done in one lag
    ],
)
def test_the_reactive_floor_with_long_units_holds_only_while_nothing_is_measured(u, finished, floor):
    state, policy, prediction, pool = _six_tasks_four_running(finished)
    policy.reconfigure(SteeringConfig(charging_unit_s=u))
    levels = LevelModel(state.workflow).remaining(state, prediction, _no_dispatch(1))
    assert policy._blind(state, prediction) is (finished == 0)
    assert policy._reactive_floor(levels, pool, policy._blind(state, prediction)) == floor


def test_no_launch_ahead_while_a_running_task_is_only_guessed_from_a_prior():
    state, policy, prediction, pool = _six_tasks_four_running(5)
    levels = LevelModel(state.workflow).remaining(state, prediction, _no_dispatch(1))
    assert policy._speculation_cap(state, prediction, levels) is None  # measured: the model may launch ahead
    prediction.policy[:] = POLICY_PRIOR_WORKFLOW
    assert policy._speculation_cap(state, prediction, levels) == 2  # a slot per queued or running task
    best = Choice(size=6, end=500.0, cost=5, launch=5, release=())
    assert policy._decide(0.0, best, pool, cap=2).launch == 1
    assert policy._decide(0.0, best, pool).launch == 5


def _serial_task_before_a_wide_level(started: float) -> tuple[RunState, SlowdownPolicy, list[Instance]]:
    """One serial task of a stage never measured, running on i-1; 40 tasks wait for it, of a transformation
    that ran 100 s elsewhere in the DAG; six instances at per-minute units (each up for renewal now)."""
    specs = [TaskSpec("serial", "serial")] + [TaskSpec(f"w{i}", "wide", ("serial",)) for i in range(40)]
    specs += [TaskSpec(f"x{i}", "wide") for i in range(3)]
    wf = build_workflow("w", "t", specs)
    state = RunState(wf)
    for i in range(3):
        _run(state, f"x{i}", -2000.0, -1900.0, host="i-1")
    E = EventKind
    state.apply_all(_events((started, E.SUBMITTED, "serial"), (started, E.STARTED, "serial", {"host": "i-1"})))
    steering = SteeringConfig(charging_unit_s=60.0, max_instances=6, min_instance_age_intervals=0)
    policy = SlowdownPolicy(DistributionPredictor(wf, PredictionConfig()), DispatchLearner(wf, 2.0), steering)
    pool = [Instance(f"i-{k}", -3600.0 - k, 4, CloudState.RUNNING) for k in range(1, 7)]
    return state, policy, pool


@pytest.mark.parametrize("ran_lags, long_guess", [(1.5, False), (2.05, True)])
def test_guesses_that_have_held_the_pool_two_launch_lags_no_longer_keep_it_waiting(ran_lags, long_guess):
    now, lag = 10_000.0, SteeringConfig().interval_s
    state, policy, pool = _serial_task_before_a_wide_level(started=now - ran_lags * lag)
    policy.plan(now - ran_lags * lag, state, pool, np.array([], dtype=np.int64))  # the guess begins
    decision = policy.plan(now, state, pool, np.array([], dtype=np.int64)).decision
    assert policy._guessed_for(now, 1) == pytest.approx(ran_lags * lag)  # since the first decision under the cap
    # Its end guessed about a launch lag away, the model alone keeps part of the pool for the 40 tasks
    # behind it (4 instances, just past two lags); past two lags, a slot per queued or running task.
    assert (decision.target == 1) is long_guess


def test_an_operator_s_deadline_is_not_given_up_for_a_cap_on_guesses():
    """Past two lags of guessing the cap keeps a slot per queued or running task (the test above). With a
    deadline the estimate, guesses and all, is what the operator holds the policy to: the cap kept one
    instance and said the deadline would be missed; without it the pool keeps what meets it."""
    now, lag = 10_000.0, SteeringConfig().interval_s
    state, policy, pool = _serial_task_before_a_wide_level(started=now - 2.05 * lag)
    start = -2000.0  # the workflow's first event
    policy.reconfigure(replace(policy.config, deadline=f"{now + 700.0 - start:.0f}s"))
    policy.plan(now - 2.05 * lag, state, pool, np.array([], dtype=np.int64))
    decision = policy.plan(now, state, pool, np.array([], dtype=np.int64)).decision
    assert decision.target == 2 and "met with" in decision.rule


def test_a_deadline_is_promised_on_whole_tasks_not_on_tasks_split_across_slots():
    """32 ten-minute tasks, 4 done and 4 running on one instance, 24 queued; at 700 s, new instances boot by
    880 s. Six instances (24 slots) leave 4 queued tasks for a second round, ending at 1,800 s; the fluid
    level gave 1,533 s, inside a deadline at 1,600 s. Seven (28 slots) end at 1,480 s."""
    wf, state = _wide_state(n=32)
    state.first_event_time = 0.0
    steering = SteeringConfig(charging_unit_s=60.0, deadline="1600s", deadline_quantile="p90")
    policy = SlowdownPolicy(DistributionPredictor(wf, PredictionConfig()), DispatchLearner(wf, 2.0), steering)
    pool = [Instance("i-1", -180.0, 4, CloudState.RUNNING)]
    decision = policy.plan(700.0, state, pool, state.idle_in_queue_order()).decision
    assert decision.target == 7 and "met with" in decision.rule


def test_under_a_deadline_the_pool_as_it_is_stays_unless_a_change_saves_more_than_the_margin():
    """Work costs about as much on 5 instances as on 12: a unit or two apart, the pool is not let go only to be
    bought back when the next estimate moves."""
    as_is = Choice(size=12, end=40_000.0, cost=103, launch=0, release=())
    fewer = Choice(size=5, end=70_000.0, cost=100, launch=0, release=("i-1", "i-2"))
    more = Choice(size=13, end=38_000.0, cost=99, launch=1, release=())
    aim = Aim(deadline=100_000.0)
    assert within([as_is, fewer], 100_000.0, aim) == (as_is, False)  # saves 3 %: kept
    assert within([as_is, more], 100_000.0, aim) == (as_is, False)
    much_fewer = replace(fewer, cost=90)  # saves 13 %: let go
    assert within([as_is, much_fewer], 100_000.0, aim) == (much_fewer, False)
    late = replace(as_is, end=110_000.0)  # the pool as it is would miss the deadline: the change is made
    assert within([late, fewer], 100_000.0, aim) == (fewer, False)


def test_the_wait_on_guesses_restarts_when_no_guess_is_running():
    state, policy, _ = _serial_task_before_a_wide_level(started=0.0)
    assert policy._guessed_for(100.0, 2) == 0.0
    assert policy._guessed_for(400.0, 2) == 300.0
    assert policy._guessed_for(500.0, None) == 0.0  # a measured task runs: the wait is over
    assert policy._guessed_for(700.0, 2) == 0.0


# -- per-minute units at target 1: time is worth money while tasks wait for a slot -----------------


def test_time_before_the_deadline_is_priced_only_when_asked_and_only_up_to_the_deadline():
    cheap = Choice(size=4, end=1800.0, cost=100, launch=3, release=())
    fast = Choice(size=8, end=1000.0, cost=110, launch=7, release=())
    assert best_for_target([cheap, fast], deadline=2000.0, price=0.2, target=1.0) is cheap  # before the deadline: free
    # 800 s sooner for 10 units more: worth it at 1.25 instance-seconds a second of one-minute units.
    assert best_for_target([cheap, fast], deadline=2000.0, price=0.2, target=1.0, early=1.25 / 60.0) is fast
    assert best_for_target([cheap, fast], deadline=2000.0, price=0.2, target=1.0, early=0.01 / 60.0) is cheap
    # Past the deadline only the lateness price counts: the early price stops at the deadline.
    late = Choice(size=4, end=2600.0, cost=100, launch=3, release=())
    less_late = Choice(size=8, end=2000.0, cost=110, launch=7, release=())
    assert best_for_target([late, less_late], deadline=1000.0, price=0.0, target=1.0, early=100.0) is late
    assert best_for_target([late, less_late], deadline=1000.0, price=0.2, target=1.0, early=100.0) is less_late


@pytest.mark.parametrize(
    "u, target, instances, priced",
    [
        (60.0, 1.0, 1, True),  # six tasks on four slots: two wait
        (60.0, 1.0, 2, False),  # eight slots up: nothing waits
        (60.0, 1.5, 1, False),  # slack to spend: time before the deadline stays free
        (3600.0, 1.0, 1, False),  # a launch pays a whole unit ahead: the model prices that
    ],
)
def test_time_is_priced_before_the_deadline_only_at_target_1_with_short_units_and_a_queue(u, target, instances, priced):
    state, policy, prediction, pool = _six_tasks_four_running()
    pool += [Instance(f"i-{k + 2}", -180.0, 4, CloudState.RUNNING) for k in range(instances - 1)]
    policy.reconfigure(SteeringConfig(charging_unit_s=u, target_slowdown=target))
    levels = LevelModel(state.workflow).remaining(state, prediction, _no_dispatch(1))
    expected = slowdown.QUEUED_SECOND_WORTH / u if priced else 0.0
    assert policy._queued_time_price(levels, pool) == pytest.approx(expected)


@pytest.mark.parametrize("worth, size", [(slowdown.QUEUED_SECOND_WORTH, 12), (0.0, 6)])
def test_with_slack_before_the_deadline_a_queue_still_grows_the_pool_at_per_minute_units(monkeypatch, worth, size):
    # Begun 4,000 s late by the policy's clock, the full-pool deadline leaves slack: without a price on
    # time before it, the cheapest pool that makes it keeps 196 ten-minute tasks waiting on 6 instances.
    monkeypatch.setattr(slowdown, "QUEUED_SECOND_WORTH", worth)
    wf, state = _wide_state()
    state.first_event_time = 4000.0
    steering = SteeringConfig(charging_unit_s=60.0)
    policy = SlowdownPolicy(DistributionPredictor(wf, PredictionConfig()), DispatchLearner(wf, 2.0), steering)
    plan = policy.plan(700.0, state, [Instance("i-1", -180.0, 4, CloudState.RUNNING)], state.idle_in_queue_order())
    assert plan.decision.target == size


@pytest.mark.parametrize(
    "u, state, busy, releasable",
    [
        (60.0, CloudState.RUNNING, False, True),  # a unit renewed at each decision: idle and young, it may go
        (60.0, CloudState.RUNNING, True, False),  # running work: the age guard holds
        (60.0, CloudState.PENDING, False, False),  # still booting: nothing says it is not wanted when up
        (1.0, CloudState.RUNNING, False, True),  # per second
        (3600.0, CloudState.RUNNING, False, False),  # a unit spans several decisions: the age guard holds
    ],
)
def test_a_young_idle_instance_may_go_only_when_each_decision_renews_its_unit(u, state, busy, releasable):
    wf = build_workflow("w", "t", [TaskSpec("a", "a")])
    steering = SteeringConfig(charging_unit_s=u)
    policy = SlowdownPolicy(DistributionPredictor(wf, PredictionConfig()), DispatchLearner(wf, 2.0), steering)
    now = 1000.0
    young = Instance("young", now - steering.interval_s, 4, state)  # younger than min_instance_age_intervals
    old = Instance("old", now - 10 * steering.interval_s, 4, CloudState.RUNNING)
    work_on = {"old": 60.0, "young": 60.0} if busy else {"old": 60.0}
    members = {m.instance_id: m for m in policy._members(now, [young, old], [], {}, work_on)}
    assert now - young.launch_time < steering.min_instance_age_intervals * steering.interval_s
    assert members["young"].releasable is releasable
    assert members["old"].releasable  # old enough, nothing it would lose


def test_of_two_instances_that_may_go_the_one_whose_release_kills_no_work_goes_first():
    """WIRE's release order: by the work a release would lose, then by when the paid unit ends."""
    wf = build_workflow("w", "t", [TaskSpec(f"a{i}", "a") for i in range(7)])
    state = RunState(wf)
    now = 10_000.0
    for i in range(6):  # a measured stage of 600-s tasks
        _run(state, f"a{i}", now - 2000.0, now - 1400.0, host="busy" if i % 2 else "idle")
    E = EventKind
    state.apply_all(_events((now - 2.0, E.SUBMITTED, "a6"), (now - 2.0, E.STARTED, "a6", {"host": "busy"})))
    predictor = DistributionPredictor(wf, PredictionConfig())
    policy = SlowdownPolicy(predictor, DispatchLearner(wf, 2.0), SteeringConfig(charging_unit_s=60.0))
    # u = 1 min: the busy instance's unit ends first (15 s), and killing its 2-s-old task would sink
    # 7 s of work, under the 12 s Algorithm 2 allows; the idle one is paid 50 s more.
    busy = Instance("busy", now - 1245.0, 4, CloudState.RUNNING)
    idle = Instance("idle", now - 1210.0, 4, CloudState.RUNNING)
    costs = policy._restart_costs(state, predictor.predict(state, now), [busy, idle], now)
    assert 0.0 < costs["busy"] <= policy._restart_limit() and costs["idle"] == 0.0
    decision = policy.plan(now, state, [busy, idle], np.empty(0, dtype=np.int64)).decision
    assert decision.release == ["idle"]


@pytest.mark.parametrize(
    "task_start, postponed",
    [
        (None, False),  # nothing runs on it: it goes as planned
        (3000.0, False),  # a 600-s task ends at 3,600 s, before the termination at 3,650 s
        (1000.0, True),  # overdue by 1,900 s: killed at 3,650 s it would be rerun from zero
    ],
)
def test_a_drained_instance_is_kept_a_unit_more_when_its_termination_would_kill_a_task(task_start, postponed):
    wf = build_workflow("w", "t", [TaskSpec(f"a{i}", "a") for i in range(7)])
    state = RunState(wf)
    for i in range(6):  # a measured stage of 600-s tasks
        _run(state, f"a{i}", 0.0, 600.0, host="other")
    if task_start is not None:
        E = EventKind
        state.apply_all(_events((task_start, E.SUBMITTED, "a6"), (task_start, E.STARTED, "a6", {"host": "i-1"})))
    predictor = DistributionPredictor(wf, PredictionConfig())
    policy = SlowdownPolicy(predictor, DispatchLearner(wf, 2.0), SteeringConfig(charging_unit_s=3600.0))
    now = 3500.0  # the last decision before i-1's termination, released earlier to end with its first hour
    policy.let_go("i-1", 3650.0)
    draining = Instance("i-1", 60.0, 4, CloudState.RUNNING)
    decision = policy.plan(now, state, [draining], np.empty(0, dtype=np.int64)).decision
    if postponed:  # to the end of the hour the next decision (3,680 s) falls in, just before it
        assert decision.postpone == {"i-1": 7250.0}
        assert "draining kept" in decision.rule
    else:
        assert decision.postpone == {}


def test_a_drained_instance_serves_only_the_tasks_on_it():
    assert slowdown._serves_until(1000.0, 400.0, 240.0, 4) == 460.0  # 4 slots end 240 slot-s of work in 60 s
    assert slowdown._serves_until(1000.0, 400.0, 0.0, 4) == 400.0  # idle: it takes no new job
    assert slowdown._serves_until(450.0, 400.0, 4000.0, 4) == 450.0  # never past its termination


@pytest.mark.parametrize("queued, released", [(4, True), (16, False)])
def test_an_instance_is_let_go_only_if_the_rest_can_take_the_queue_it_would_not(queued, released):
    """u = 15 min: both units end before the next decision, so a release drains the instance at once."""
    now = 10_000.0
    wf = build_workflow("w", "t", [TaskSpec(f"a{i}", "a") for i in range(14 + queued)])
    state = RunState(wf)
    for i in range(6):  # a measured stage of 60-s tasks
        _run(state, f"a{i}", now - 1000.0, now - 940.0, host="i-a")
    E = EventKind
    running = [(f"a{6 + i}", "i-a" if i < 4 else "i-b") for i in range(8)]  # 30 s left each
    events = [(now - 30.0, E.SUBMITTED, t) for t, _ in running]
    events += [(now - 30.0, E.STARTED, t, {"host": h}) for t, h in running]
    events += [(now - 30.0, E.SUBMITTED, f"a{14 + i}") for i in range(queued)]
    state.apply_all(_events(*events))
    predictor = DistributionPredictor(wf, PredictionConfig())
    policy = SlowdownPolicy(predictor, DispatchLearner(wf, 2.0), SteeringConfig(charging_unit_s=900.0))
    pool = [Instance(i, now - 730.0, 4, CloudState.RUNNING) for i in ("i-a", "i-b")]  # units end at now + 170
    decision = policy.plan(now, state, pool, np.empty(0, dtype=np.int64)).decision
    assert (len(decision.release) == 1) is released
