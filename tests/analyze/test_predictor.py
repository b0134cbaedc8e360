"""Online prediction policies 1-5, Algorithm 1, transfer estimates and the oracle."""

from __future__ import annotations

import numpy as np
import pytest

from wire_daemon.analyze.gradient import LinearModel
from wire_daemon.analyze.groups import SizeGroups
from wire_daemon.analyze.predictor import OnlinePredictor, OraclePredictor, StageModel
from wire_daemon.core.config import PredictionConfig
from wire_daemon.core.events import EventKind, TaskEvent
from wire_daemon.core.run_state import RunState
from wire_daemon.core.workflow import TaskSpec, Workflow, build_workflow
from wire_daemon.ports.prediction import Prediction, Predictor

# -- helpers ------------------------------------------------------------------


def make(specs: list[TaskSpec]) -> tuple[Workflow, RunState]:
    wf = build_workflow("test", "test.json", specs)
    return wf, RunState(wf)


def ev(state: RunState, t: float, kind: EventKind, task: str, **kw: object) -> None:
    state.apply(TaskEvent(time=t, kind=kind, task_id=task, **kw))


def submit(state: RunState, t: float, *tasks: str) -> None:
    for task in tasks:
        ev(state, t, EventKind.SUBMITTED, task)


def start(state: RunState, t: float, task: str) -> None:
    ev(state, t, EventKind.STARTED, task, host="i-1")


def finish(state: RunState, t: float, task: str, exec_s: float) -> None:
    ev(state, t, EventKind.FINISHED, task, exec_runtime_s=exec_s, exit_code=0)


def complete(state: RunState, task: str, begin: float, end: float, exec_s: float) -> None:
    """Submit, start and finish one task: occupancy end-begin, transfer end-begin-exec."""
    submit(state, begin, task)
    start(state, begin, task)
    finish(state, end, task, exec_s)


def at(wf: Workflow, pred: Prediction, task: str) -> tuple[float, float, float, int]:
    i = wf.index_of(task)
    return (pred.exec_s[i], pred.occupancy_s[i], pred.remaining_s[i], int(pred.policy[i]))


def summary(p: OnlinePredictor, name: str) -> StageModel:
    return next(m for m in p.stage_summary() if m.name == name)


# -- policy 1 -----------------------------------------------------------------


def test_policy_1_stage_not_started_predicts_zero() -> None:
    wf, state = make([TaskSpec("a0", "a"), TaskSpec("a1", "a"), TaskSpec("b0", "b", parents=("a0", "a1"))])
    submit(state, 0.0, "a0", "a1")  # idle in the queue, but nothing started
    p = OnlinePredictor(wf, PredictionConfig())
    p.update(state, 10.0)
    pred = p.predict(state, 10.0)
    for task in ("a0", "a1", "b0"):
        assert at(wf, pred, task) == (0.0, 0.0, 0.0, 1)


def test_policy_1_evicted_task_leaves_stage_unstarted() -> None:
    wf, state = make([TaskSpec("a0", "a"), TaskSpec("a1", "a")])
    submit(state, 0.0, "a0", "a1")
    start(state, 1.0, "a0")
    ev(state, 5.0, EventKind.EVICTED, "a0")  # none running, none done again
    p = OnlinePredictor(wf, PredictionConfig())
    p.update(state, 10.0)
    pred = p.predict(state, 10.0)
    assert list(pred.policy) == [1, 1]
    assert list(pred.occupancy_s) == [0.0, 0.0]


# -- policy 2 -----------------------------------------------------------------


def running_only_stage() -> tuple[Workflow, RunState]:
    wf, state = make([TaskSpec(f"a{k}", "a") for k in range(5)] + [TaskSpec("b0", "b", parents=("a0",))])
    submit(state, 0.0, "a0", "a1", "a2", "a3")  # a4 stays WAITING
    start(state, 0.0, "a0")
    start(state, 10.0, "a1")
    start(state, 40.0, "a2")
    return wf, state


def test_policy_2_stage_elapsed_reading_is_the_default() -> None:
    wf, state = running_only_stage()
    p = OnlinePredictor(wf, PredictionConfig())
    p.update(state, 100.0)
    pred = p.predict(state, 100.0)
    # The stage's oldest task has run 100 s: every active task of the stage is
    # expected to keep its slot at least 100 s more (running: elapsed + 100 in all).
    assert at(wf, pred, "a0") == (200.0, 200.0, 100.0, 2)
    assert at(wf, pred, "a1") == (190.0, 190.0, 100.0, 2)
    assert at(wf, pred, "a2") == (160.0, 160.0, 100.0, 2)
    assert at(wf, pred, "a3") == (100.0, 100.0, 100.0, 2)
    assert at(wf, pred, "a4") == (100.0, 100.0, 100.0, 2)
    assert at(wf, pred, "b0") == (0.0, 0.0, 0.0, 1)


def test_policy_2_running_tasks_only() -> None:
    wf, state = running_only_stage()
    p = OnlinePredictor(wf, PredictionConfig(running_only_estimate="median-elapsed"))
    p.update(state, 100.0)
    pred = p.predict(state, 100.0)
    # Elapsed 100, 90, 60 -> median 90. Running tasks: about to complete.
    assert at(wf, pred, "a0") == (100.0, 100.0, 0.0, 2)
    assert at(wf, pred, "a1") == (90.0, 90.0, 0.0, 2)
    assert at(wf, pred, "a2") == (60.0, 60.0, 0.0, 2)
    # Not started (idle or waiting): the median elapsed, no transfer added.
    assert at(wf, pred, "a3") == (90.0, 90.0, 90.0, 2)
    assert at(wf, pred, "a4") == (90.0, 90.0, 90.0, 2)
    assert at(wf, pred, "b0") == (0.0, 0.0, 0.0, 1)


# -- policies 3, 4, 5 ---------------------------------------------------------


def stage_a(steps: int = 1) -> tuple[Workflow, RunState, OnlinePredictor]:
    """Stage a: three completions, then one task in each situation, at now = 40.

    Completed: a0 (size 100, exec 10, occupancy 12, transfer 2),
               a1 (size 100, exec 14, occupancy 15, transfer 1),
               a2 (size 200, exec 30, occupancy 34, transfer 4).
    Stage median exec = median(10, 14, 30) = 14; transfer = median(2, 1, 4) = 2.
    Groups: 100 -> median(10, 14) = 12; 200 -> 30. Largest size in the stage: 400.
    """
    sizes = {"a0": 100, "a1": 100, "a2": 200, "a3": 100, "a4": 100, "a5": 200, "a6": 400, "a7": 300}
    wf, state = make([TaskSpec(t, "a", input_bytes=s) for t, s in sizes.items()])
    complete(state, "a0", 0.0, 12.0, 10.0)
    complete(state, "a1", 0.0, 15.0, 14.0)
    complete(state, "a2", 0.0, 34.0, 30.0)
    submit(state, 0.0, "a4", "a5", "a6", "a7")  # a3 stays WAITING
    start(state, 35.0, "a5")
    ev(state, 36.0, EventKind.HELD, "a7")
    p = OnlinePredictor(wf, PredictionConfig(gradient_steps_per_interval=steps))
    p.update(state, 40.0)
    return wf, state, p


def test_policy_3_waiting_task_gets_stage_median() -> None:
    wf, state, p = stage_a()
    pred = p.predict(state, 40.0)
    # Its size (100) matches a group, but it is not ready: policy 3, 14 + 2.
    assert at(wf, pred, "a3") == pytest.approx((14.0, 16.0, 16.0, 3))


def test_policy_4_ready_or_running_task_with_known_size() -> None:
    wf, state, p = stage_a()
    pred = p.predict(state, 40.0)
    assert at(wf, pred, "a4") == pytest.approx((12.0, 14.0, 14.0, 4))  # idle, group 100
    # Running for 5 s: remaining = 30 + 2 - 5.
    assert at(wf, pred, "a5") == pytest.approx((30.0, 32.0, 27.0, 4))


def test_policy_5_new_size_uses_gradient_model() -> None:
    wf, state, p = stage_a()
    pred = p.predict(state, 40.0)
    # Training set (x = size/400): (0.25, 12), (0.5, 30); M = 2, from a0 = a1 = 0:
    #   g0 = -(2/2)(12 + 30) = -42            -> a0 = 0.1 * 42 = 4.2
    #   g1 = -(2/2)(0.25*12 + 0.5*30) = -18   -> a1 = 0.1 * 18 = 1.8
    m = summary(p, "a")
    assert (m.a0, m.a1) == pytest.approx((4.2, 1.8))
    # a6: x = 1 -> 4.2 + 1.8 = 6.0, plus transfer 2.
    assert at(wf, pred, "a6") == pytest.approx((6.0, 8.0, 8.0, 5))
    # a7 is HELD, treated like IDLE: x = 0.75 -> 4.2 + 1.35 = 5.55.
    assert at(wf, pred, "a7") == pytest.approx((5.55, 7.55, 7.55, 5))


def test_policy_5_clamps_negative_prediction_to_zero() -> None:
    wf, state, p = stage_a()
    stage = p._stages[0]
    stage.model.a0, stage.model.a1 = -10.0, 1.0
    pred = p.predict(state, 40.0)
    assert at(wf, pred, "a6") == pytest.approx((0.0, 2.0, 2.0, 5))


def test_running_task_remaining_is_clamped_at_zero() -> None:
    wf, state, p = stage_a()
    pred = p.predict(state, 100.0)  # a5 has run 65 s, predicted 32 s
    assert at(wf, pred, "a5") == pytest.approx((30.0, 32.0, 0.0, 4))


def test_done_tasks_are_nan_with_policy_0() -> None:
    wf, state, p = stage_a()
    pred = p.predict(state, 40.0)
    for task in ("a0", "a1", "a2"):
        e, o, r, pol = at(wf, pred, task)
        assert np.isnan(e) and np.isnan(o) and np.isnan(r) and pol == 0
    assert pred.policy.dtype == np.int8 and pred.exec_s.dtype == np.float64


# -- Algorithm 1 ----------------------------------------------------------------


def test_algorithm_1_two_points_one_and_two_steps() -> None:
    # Points (0.5, 10), (1.0, 20), M = 2, lr 0.1.
    # Step 1: residuals 10, 20; g0 = -30, g1 = -(5 + 20) = -25 -> (3.0, 2.5).
    # Step 2: predictions 4.25, 5.5; residuals 5.75, 14.5;
    #         g0 = -20.25, g1 = -(2.875 + 14.5) = -17.375 -> (5.025, 4.2375).
    x, t = np.array([0.5, 1.0]), np.array([10.0, 20.0])
    model = LinearModel()
    model.step(x, t, 0.1)
    assert (model.a0, model.a1) == pytest.approx((3.0, 2.5))
    model.step(x, t, 0.1)
    assert (model.a0, model.a1) == pytest.approx((5.025, 4.2375))
    assert model.predict(np.array([0.25])) == pytest.approx([5.025 + 4.2375 * 0.25])


def test_algorithm_1_three_points_two_steps() -> None:
    # Points (0, 1), (0.5, 2), (1, 4), M = 3.
    # Step 1: residuals 1, 2, 4; g0 = -(2/3)*7, g1 = -(2/3)*5 -> a0 = 7/15, a1 = 1/3.
    # Step 2: predictions 7/15, 19/30, 4/5; residuals 8/15, 41/30, 16/5 (sum 5.1);
    #         g0 = -(2/3)*5.1 = -3.4, g1 = -(2/3)*(41/60 + 16/5) = -233/90
    #         -> a0 = 7/15 + 0.34, a1 = 1/3 + 23.3/90.
    x, t = np.array([0.0, 0.5, 1.0]), np.array([1.0, 2.0, 4.0])
    model = LinearModel()
    model.step(x, t, 0.1)
    assert (model.a0, model.a1) == pytest.approx((7 / 15, 1 / 3))
    model.step(x, t, 0.1)
    assert (model.a0, model.a1) == pytest.approx((7 / 15 + 0.34, 1 / 3 + 23.3 / 90))


def test_algorithm_1_empty_training_set_leaves_model_at_zero() -> None:
    model = LinearModel()
    model.step(np.empty(0), np.empty(0), 0.1)
    assert (model.a0, model.a1) == (0.0, 0.0)


def test_predictor_steps_per_interval_and_per_update() -> None:
    # Continuing test_policy_5: from (4.2, 1.8), predictions at x = 0.25, 0.5 are
    # 4.65, 5.1; residuals 7.35, 24.9; g0 = -32.25, g1 = -(1.8375 + 12.45) = -14.2875
    # -> a0 = 7.425, a1 = 3.22875.
    expected = (7.425, 3.22875)
    wf, state, p = stage_a(steps=2)
    m = summary(p, "a")
    assert (m.a0, m.a1) == pytest.approx(expected)
    wf, state, p = stage_a(steps=1)
    p.update(state, 60.0)  # a second MAPE iteration, no new completion
    m = summary(p, "a")
    assert (m.a0, m.a1) == pytest.approx(expected)
    pred = p.predict(state, 60.0)
    assert at(wf, pred, "a6")[0] == pytest.approx(7.425 + 3.22875)


def test_stage_without_completions_keeps_zero_model() -> None:
    wf, state = make([TaskSpec("a0", "a", input_bytes=10), TaskSpec("a1", "a", input_bytes=20)])
    submit(state, 0.0, "a0", "a1")
    start(state, 0.0, "a0")
    p = OnlinePredictor(wf, PredictionConfig())
    p.update(state, 10.0)
    p.update(state, 20.0)
    m = summary(p, "a")
    assert (m.a0, m.a1, m.n_groups) == (0.0, 0.0, 0)


def test_finished_stage_model_is_frozen() -> None:
    wf, state = make(
        [
            TaskSpec("a0", "a", input_bytes=10),
            TaskSpec("a1", "a", input_bytes=20),
            TaskSpec("b0", "b", parents=("a0", "a1")),
        ]
    )
    p = OnlinePredictor(wf, PredictionConfig())
    complete(state, "a0", 0.0, 10.0, 10.0)
    p.update(state, 20.0)
    # One point (x = 10/20 = 0.5, t = 10): g0 = -2*10 = -20, g1 = -2*0.5*10 = -10 -> (2, 1).
    assert (summary(p, "a").a0, summary(p, "a").a1) == pytest.approx((2.0, 1.0))
    complete(state, "a1", 20.0, 40.0, 20.0)
    p.update(state, 40.0)
    p.update(state, 60.0)
    # Nothing left to predict in stage a: no further gradient step.
    m = summary(p, "a")
    assert (m.a0, m.a1, m.n_completed) == pytest.approx((2.0, 1.0, 2))


def test_zero_input_sizes_give_zero_feature() -> None:
    wf, state = make([TaskSpec(f"a{k}", "a") for k in range(3)])
    complete(state, "a0", 0.0, 10.0, 10.0)
    submit(state, 0.0, "a1")
    p = OnlinePredictor(wf, PredictionConfig())
    p.update(state, 20.0)
    # One group (size 0, x = 0, t = 10): g0 = -20 -> a0 = 2; g1 = 0 -> a1 = 0.
    m = summary(p, "a")
    assert (m.a0, m.a1) == pytest.approx((2.0, 0.0))
    # a1 has size 0 = the group's size: policy 4 with the group median 10.
    assert at(wf, p.predict(state, 20.0), "a1") == pytest.approx((10.0, 10.0, 10.0, 4))


# -- the "same input size" rule -------------------------------------------------


def test_group_tolerance_boundaries() -> None:
    groups = SizeGroups(0.1)
    groups.add(np.array([100.0]), np.array([5.0]))
    # |d - 100| <= 0.1 * max(d, 100): 110 (10 <= 11) and 90 (10 <= 10) match;
    # 89 (11 > 10) and 112 (12 > 11.2) do not.
    assert list(groups.find(np.array([110.0, 90.0, 89.0, 112.0]))) == [0, 0, -1, -1]


def test_group_lookup_picks_nearest_matching_group() -> None:
    groups = SizeGroups(0.1)
    groups.add(np.array([100.0, 120.0]), np.array([1.0, 2.0]))  # 20 > 12: two groups
    assert len(groups) == 2
    # 109: both match, 100 nearer; 111: 120 nearer; 110: tie -> the lower group.
    assert list(groups.find(np.array([109.0, 111.0, 110.0]))) == [0, 1, 0]
    wide = SizeGroups(0.5)
    wide.add(np.array([49.0, 152.0]), np.array([1.0, 2.0]))  # 103 > 76: two groups
    # 100: the nearer 49 fails (51 > 50) but the farther 152 matches (52 <= 76).
    assert list(wide.find(np.array([100.0]))) == [1]


def test_new_sizes_cluster_in_ascending_order() -> None:
    groups = SizeGroups(0.1)
    # Sorted: 100 founds a group; 105 (5 <= 10.5) and 111 (11 <= 11.1) join it; 200 founds another.
    groups.add(np.array([105.0, 100.0, 111.0, 200.0]), np.array([1.0, 2.0, 3.0, 7.0]))
    assert list(groups.anchor) == [100.0, 200.0]
    assert list(groups.median) == pytest.approx([2.0, 7.0])
    groups.add(np.array([95.0]), np.array([10.0]))  # 5 <= 10: joins group 100
    assert list(groups.median) == pytest.approx([2.5, 7.0])  # median(1, 2, 3, 10)


def test_predictor_uses_config_tolerance() -> None:
    sizes = {"a0": 1000, "a1": 1010, "a2": 1011}
    wf, state = make([TaskSpec(t, "a", input_bytes=s) for t, s in sizes.items()])
    complete(state, "a0", 0.0, 10.0, 10.0)
    submit(state, 0.0, "a1", "a2")
    p = OnlinePredictor(wf, PredictionConfig(same_input_relative_tolerance=0.01))
    p.update(state, 20.0)
    pred = p.predict(state, 20.0)
    assert at(wf, pred, "a1")[3] == 4  # 10 <= 10.1
    assert at(wf, pred, "a2")[3] == 5  # 11 > 10.11


# -- data-transfer estimate -----------------------------------------------------


def test_transfer_median_of_last_interval_and_fallbacks() -> None:
    wf, state = make(
        [TaskSpec(f"a{k}", "a") for k in range(4)] + [TaskSpec(f"b{k}", "b") for k in range(2)] + [TaskSpec("c0", "c")]
    )
    p = OnlinePredictor(wf, PredictionConfig())

    def transfers() -> tuple[float, float, float]:
        return tuple(summary(p, s).transfer_s for s in "abc")

    p.update(state, 0.0)
    assert transfers() == (0.0, 0.0, 0.0)  # nothing observed anywhere yet
    # Interval 1: stage a transfers 1, 3, 8 -> a = 3; b and c borrow the global 3.
    complete(state, "a0", 0.0, 11.0, 10.0)
    complete(state, "a1", 0.0, 13.0, 10.0)
    complete(state, "a2", 0.0, 18.0, 10.0)
    p.update(state, 20.0)
    assert transfers() == pytest.approx((3.0, 3.0, 3.0))
    # Interval 2: stage b transfers 5, 7 -> b = 6; a keeps 3; c borrows the global 6.
    complete(state, "b0", 20.0, 35.0, 10.0)
    complete(state, "b1", 20.0, 37.0, 10.0)
    p.update(state, 40.0)
    assert transfers() == pytest.approx((3.0, 6.0, 6.0))
    # Interval 3: no completion -> every estimate stays.
    p.update(state, 60.0)
    assert transfers() == pytest.approx((3.0, 6.0, 6.0))
    # Interval 4: a3 transfers 10 -> a = 10 (only the last interval counts, not
    # median(1, 3, 8, 10)); c borrows 10.
    complete(state, "a3", 60.0, 80.0, 10.0)
    p.update(state, 80.0)
    assert transfers() == pytest.approx((10.0, 6.0, 10.0))
    # Interval 5: nothing new: c keeps the last global value.
    p.update(state, 100.0)
    assert transfers() == pytest.approx((10.0, 6.0, 10.0))


# -- ingestion ----------------------------------------------------------------


def test_update_twice_does_not_double_count() -> None:
    wf, state, p = stage_a()
    before = summary(p, "a")
    p.update(state, 40.0)
    after = summary(p, "a")
    assert (after.n_completed, after.median_exec_s, after.transfer_s, after.n_groups) == (
        3,
        14.0,
        2.0,
        2,
    )
    assert (before.n_completed, before.median_exec_s, before.n_groups) == (3, 14.0, 2)
    # A later completion counts once: a5 (size 200, exec 40, transfer 4).
    finish(state, 79.0, "a5", 40.0)
    p.update(state, 80.0)
    p.update(state, 90.0)
    m = summary(p, "a")
    assert (m.n_completed, m.median_exec_s, m.transfer_s, m.n_groups) == pytest.approx(
        (4, 22.0, 4.0, 2)
    )  # median(10, 14, 30, 40) = 22
    pred = p.predict(state, 90.0)
    assert at(wf, pred, "a3")[:2] == pytest.approx((22.0, 26.0))  # policy 3 follows


def test_update_rejects_a_different_run_state() -> None:
    wf, state, p = stage_a()
    with pytest.raises(ValueError):
        p.update(RunState(wf), 50.0)


# -- oracle ---------------------------------------------------------------------


def test_oracle_predicts_the_truth() -> None:
    wf, state = make([TaskSpec("a0", "a"), TaskSpec("a1", "a"), TaskSpec("a2", "a")])
    oracle = OraclePredictor(wf, np.array([10.0, 20.0, 30.0]), np.array([8.0, 15.0, 25.0]))
    complete(state, "a0", 0.0, 10.0, 8.0)
    submit(state, 0.0, "a1")
    start(state, 0.0, "a1")
    oracle.update(state, 5.0)
    oracle.update(state, 5.0)
    pred = oracle.predict(state, 5.0)
    assert np.isnan(pred.remaining_s[0]) and np.isnan(pred.occupancy_s[0]) and np.isnan(pred.exec_s[0])
    assert list(pred.policy) == [0, 9, 9]
    assert list(pred.remaining_s[1:]) == [15.0, 30.0]  # running 5 s of 20; waiting: all 30
    assert list(pred.occupancy_s[1:]) == [20.0, 30.0]
    assert list(pred.exec_s[1:]) == [15.0, 25.0]
    assert oracle.predict(state, 50.0).remaining_s[1] == 0.0  # overran the truth: clamp
    assert oracle.stage_summary()[0].n_completed == 1


def test_oracle_rejects_wrong_length() -> None:
    wf, _ = make([TaskSpec("a0", "a"), TaskSpec("a1", "a")])
    with pytest.raises(ValueError):
        OraclePredictor(wf, np.array([1.0]), np.array([1.0, 2.0]))


def test_both_predictors_satisfy_the_protocol() -> None:
    wf, state = make([TaskSpec("a0", "a")])
    predictors: list[Predictor] = [
        OnlinePredictor(wf, PredictionConfig()),
        OraclePredictor(wf, np.array([1.0]), np.array([1.0])),
    ]
    for predictor in predictors:
        predictor.update(state, 0.0)
        assert predictor.predict(state, 0.0).remaining_s.shape == (1,)
