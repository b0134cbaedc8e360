"""Issue 15: the online peak-memory models against the memory paper's definitions, and the doubling rule."""

from __future__ import annotations

import math

import numpy as np
import pytest

from wire_daemon.analyze.memory import (
    MIB,
    MemoryRightsizer,
    OnlineRegression,
    PeakMemoryModel,
    regression_offset,
)
from wire_daemon.core.config import MemoryConfig
from wire_daemon.core.events import EventKind, TaskEvent
from wire_daemon.core.run_state import RunState
from wire_daemon.core.workflow import TaskSpec, build_workflow

X = np.array([1.0, 2.0, 3.0, 4.0, 5.0, 6.0])
Y = np.array([12.0, 19.0, 33.0, 38.0, 55.0, 58.0])


def _line():
    slope, intercept = np.polyfit(X, Y, 1)
    return slope * X + intercept


def test_the_online_regression_is_least_squares():
    rng = np.random.default_rng(3)
    x = rng.uniform(1e6, 1e9, 200)
    y = 3.0 * x + 5e7 + rng.normal(0, 1e7, 200)
    fit = OnlineRegression()
    for a, b in zip(x, y):
        fit.add(a, b)
    slope, intercept = np.polyfit(x, y, 1)
    assert fit.slope == pytest.approx(slope, rel=1e-9)
    assert fit.intercept == pytest.approx(intercept, rel=1e-6)


def test_equal_inputs_give_the_mean():
    fit = OnlineRegression()
    for y in (10.0, 20.0, 30.0):
        fit.add(7.0, y)
    assert fit.slope == 0.0 and fit.predict(123.0) == pytest.approx(20.0)


def test_offset_mean_pm_is_the_sample_standard_deviation_of_all_errors():
    f = _line()
    expected = math.sqrt(sum((f - Y) ** 2) / (len(Y) - 1))  # eq. 1
    assert regression_offset("lr-mean-pm", f, Y) == pytest.approx(expected)


def test_offset_mean_minus_counts_only_underpredictions():
    f = _line()
    under = f < Y
    m = int(under.sum())
    assert 2 <= m < len(Y)  # the data has both kinds of error
    expected = math.sqrt(sum((f[under] - Y[under]) ** 2) / (m - 1))  # eq. 2
    assert regression_offset("lr-mean-minus", f, Y) == pytest.approx(expected)
    assert regression_offset("lr-mean-minus", f, Y) != pytest.approx(regression_offset("lr-mean-pm", f, Y))


def test_offset_max_minus_is_the_largest_underprediction():
    f = _line()
    assert regression_offset("lr-max-minus", f, Y) == pytest.approx(max(Y - f))  # eq. 3
    assert regression_offset("lr", f, Y) == 0.0


def test_mean_minus_with_a_single_underprediction_uses_it():
    predicted, observed = np.array([10.0, 10.0]), np.array([8.0, 13.0])
    assert regression_offset("lr-mean-minus", predicted, observed) == pytest.approx(3.0)


@pytest.mark.parametrize("kind", ["lr", "lr-mean-pm", "lr-mean-minus", "lr-max-minus"])
def test_regression_models_predict_line_plus_offset_after_two_tasks(kind):
    model = PeakMemoryModel(kind)
    model.observe(X[0], Y[0])
    assert not model.ready and model.predict(3.0) is None  # the paper starts LR after 2
    for x, y in zip(X[1:], Y[1:]):
        model.observe(x, y)
    slope, intercept = np.polyfit(X, Y, 1)
    offset = regression_offset(kind, _line(), Y)
    assert model.predict(10.0) == pytest.approx(slope * 10.0 + intercept + offset)


@pytest.mark.parametrize(("kind", "q"), [("pc50", 50), ("pc95", 95)])
def test_percentile_models_ignore_input_size(kind, q):
    model = PeakMemoryModel(kind)
    model.observe(1.0, 40.0)
    assert model.ready and model.predict(999.0) == 40.0  # the paper starts PC after 1
    for x, y in zip(X, Y):
        model.observe(x, y)
    assert model.predict(0.0) == pytest.approx(np.percentile(np.r_[40.0, Y], q))


def test_min_observations_holds_the_model_back():
    model = PeakMemoryModel("pc95", min_observations=3)
    model.observe(1.0, 5.0)
    model.observe(1.0, 6.0)
    assert model.predict(1.0) is None
    model.observe(1.0, 7.0)
    assert model.predict(1.0) is not None


# -- the rightsizer, over a fake MemoryControl -----------------------------------------------------


class FakeControl:
    def __init__(self, user_mib: float) -> None:
        self.requests: dict[str, float] = {}
        self.user_mib = user_mib
        self.released: list[str] = []

    def request_memory_mib(self, task_id: str) -> float | None:
        return self.requests.get(task_id, self.user_mib)

    def set_request_memory(self, task_id: str, mib: int) -> bool:
        self.requests[task_id] = mib
        return True

    def release_job(self, task_id: str) -> bool:
        self.released.append(task_id)
        return True


def _stage(n: int, input_bytes: int = 0):
    specs = [TaskSpec(f"t{i}", "x", input_bytes=input_bytes) for i in range(n)]
    wf = build_workflow("w", "test", specs)
    state = RunState(wf)
    state.apply_all([TaskEvent(0.0, EventKind.SUBMITTED, f"t{i}") for i in range(n)])
    return wf, state


def _finish(state, task_id, peak_mib, t=1.0):
    events = [
        TaskEvent(t, EventKind.STARTED, task_id, host="i-1"),
        TaskEvent(t + 1, EventKind.FINISHED, task_id, exit_code=0, peak_memory_bytes=int(peak_mib * MIB)),
    ]
    state.apply_all(events)
    return events


def _sizer(wf, control, **config):
    return MemoryRightsizer(wf, MemoryConfig(rightsizing=True, **config), control, max_mib=1000)


def test_first_tasks_keep_the_user_request_then_the_model_lowers_idle_jobs():
    wf, state = _stage(6)
    control = FakeControl(user_mib=800)
    sizer = _sizer(wf, control, predictor="pc95", min_observations=2, margin_fraction=0.1)
    assert sizer.step(0.0, _finish(state, "t0", 100), state) == []  # one observation: not enough
    assert control.requests == {}
    notes = sizer.step(10.0, _finish(state, "t1", 100, t=5.0), state)
    assert control.requests == {f"t{i}": 110 for i in range(2, 6)}  # 100 MiB + 10 %
    assert notes == ["memory: set request_memory of 4 idle job(s) of x to 110 MiB (was up to 800 MiB)"]
    assert sizer.step(20.0, [], state) == []  # already there: no new edit


def test_the_model_never_raises_a_request():
    wf, state = _stage(4)
    control = FakeControl(user_mib=50)
    sizer = _sizer(wf, control, predictor="pc50", min_observations=1)
    sizer.step(0.0, _finish(state, "t0", 400), state)
    assert control.requests == {}


def _held(state, task_id, t=30.0):
    events = [
        TaskEvent(t, EventKind.STARTED, task_id, host="i-1"),
        TaskEvent(t + 1, EventKind.HELD, task_id, memory_exceeded=True),
    ]
    state.apply_all(events)
    return events


def test_a_job_held_at_a_predicted_request_is_doubled_and_released():
    wf, state = _stage(4)
    control = FakeControl(user_mib=800)
    sizer = _sizer(wf, control, predictor="pc50", min_observations=1, margin_fraction=0.0)
    sizer.step(0.0, _finish(state, "t0", 100), state)
    assert control.requests["t1"] == 100
    sizer.step(40.0, _held(state, "t1"), state)
    assert control.requests["t1"] == 200 and control.released == ["t1"]
    state.apply(TaskEvent(41.0, EventKind.RELEASED, "t1"))
    sizer.step(50.0, _held(state, "t1", t=60.0), state)  # held again: doubled again
    assert control.requests["t1"] == 400
    sizer.step(70.0, [], state)
    assert control.requests["t1"] == 400  # a grown job is not lowered back to the model


def test_doubling_stops_at_the_largest_slot():
    wf, state = _stage(2)
    control = FakeControl(user_mib=600)
    sizer = _sizer(wf, control, predictor="pc50", min_observations=5, failure_factor=3.0)
    sizer.step(0.0, _held(state, "t0"), state)
    assert control.requests["t0"] == 1000  # 600 x 3, capped at the largest slot
    state.apply(TaskEvent(32.0, EventKind.RELEASED, "t0"))
    notes = sizer.step(50.0, _held(state, "t0", t=60.0), state)
    assert control.released == ["t0"]  # not released a second time
    assert "left held" in notes[0] and sizer.counts.stuck == 1


def test_a_failed_user_guess_takes_the_model_if_it_says_more():
    wf, state = _stage(3)
    control = FakeControl(user_mib=100)
    sizer = _sizer(wf, control, predictor="pc95", min_observations=1, margin_fraction=0.0, failure_factor=2.0)
    events = _held(state, "t1") + _finish(state, "t0", 350, t=40.0)
    sizer.step(50.0, events, state)
    assert control.requests["t1"] == 350  # the model (350) rather than 2 x 100


def test_dry_run_changes_nothing_and_says_what_it_would():
    wf, state = _stage(3)
    control = FakeControl(user_mib=800)
    sizer = MemoryRightsizer(wf, MemoryConfig(predictor="pc50", min_observations=1), control, 1000, dry_run=True)
    notes = sizer.step(0.0, _finish(state, "t0", 100), state)
    assert control.requests == {}
    assert notes == ["dry-run: would set request_memory of 2 idle job(s) of x to 105 MiB (was up to 800 MiB)"]
