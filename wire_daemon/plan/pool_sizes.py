"""Makespan and cost for each pool size: what ``wire-daemon plan`` prints.

For N instances, the question is: with a pool of N from now on, when would
the workflow end, and what would the pool cost? ``plan`` answers by
scheduling the remaining DAG on the pool (``simulate_pool_sizes``, the
estimator of ``simulate.py``: each task when its parents have ended and a
slot is free); ``estimate_pool_sizes`` gives the level-based model's answer
(``makespan.py``: ``LevelModel.remaining`` and ``schedule``) for comparison.
Both run on

* the task times: the online predictions for the unfinished tasks (expected
  work; the level model also takes the 90th percentile for a level's
  longest task, as target-slowdown uses it); a task nothing has been measured for (prediction policy 1 or 2)
  gets its known time (a trace's runtime) or the default, less what it has
  already run;
* the capacity: before the run, N instances up when the workflow starts
  (the full site of the baselines); during it, the instances running tasks
  now (up to N) from now, the others a launch lag after a launch made now.

Cost follows the one billing rule (``core.billing``): each instance pays
every started unit from its launch to the estimated end (before the run, it
was launched a lag before the start, its boot paid, as the emulated full
site bills it; during the run, the units from now on).

P50 and P90 come from drawing the task times again and again (Monte Carlo,
the same draws for every size, so sizes are compared on the same times): a
task of a stage with at least ``MIN_OBSERVATIONS`` measured occupancies
draws one of them, scaled by its predicted mean over the stage's measured
mean (the prediction's input-size shift); a running task draws among the
measurements longer than what it has run, less that. Every other task keeps
its predicted mean: it has no spread to draw from. The simulation takes
``SIMULATED_DRAWS`` draws (each costs a schedule per size).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np

from wire_daemon.core.billing import Billing
from wire_daemon.core.run_state import DONE, RUNNING, RunState
from wire_daemon.plan.makespan import LevelModel, Levels, Slots
from wire_daemon.plan.simulate import Simulator, remaining_of
from wire_daemon.ports.prediction import POLICY_NOT_STARTED, POLICY_RUNNING_ONLY, DispatchEstimate, Prediction

SIMULATED_DRAWS = 40  # a simulation costs more than the level model: fewer draws, P50/P90 still settle
# Task schedules (unfinished tasks x sizes x draws) one plan may spend on its draws; a large workflow gets
# fewer draws (at least MIN_DRAWS) so that plan stays within seconds.
DRAW_BUDGET = 50_000_000
MIN_DRAWS = 5
MIN_OBSERVATIONS = 3  # measured occupancies a stage needs before its spread is drawn from
DEFAULT_DRAWS = 200


@dataclass(frozen=True)
class PoolTerms:
    """How a pool of N instances comes about, and what it costs."""

    slots_per_instance: int
    billing: Billing
    launch_lag_s: float  # a launch until the instance's slots join the pool
    up_now: int | None = None  # instances running tasks now; None: before the run, the whole pool is up at the start


@dataclass(frozen=True)
class PoolSizeEstimate:
    instances: int
    makespan_s: float  # from the workflow's start (its first event) to the estimated end
    cost_units: int  # units the pool pays (before the run: all of them; during it: from now on)
    p50_makespan_s: float | None = None  # None: no task time has a spread to draw from
    p90_makespan_s: float | None = None
    p50_cost_units: int | None = None
    p90_cost_units: int | None = None


def with_known_times(prediction: Prediction, state: RunState, now: float, known_s: np.ndarray) -> Prediction:
    """The prediction, with ``known_s`` for the tasks it has nothing measured for (less what a task has run)."""
    # Policies 1 and 2 (WIRE's: no time, or only elapsed times) are what a predictor says with nothing measured.
    blind = (state.status != DONE) & np.isin(prediction.policy, (POLICY_NOT_STARTED, POLICY_RUNNING_ONLY))
    running = state.status == RUNNING
    elapsed = np.where(running, np.maximum(now - np.nan_to_num(state.start_time), 0.0), 0.0)
    fill = np.maximum(known_s - elapsed, 0.0)
    merged = {}
    for name in ("remaining_s", "remaining_mean_s", "remaining_p90_s"):
        current = getattr(prediction, name)
        base = prediction.remaining_s if current is None else current
        # A running task keeps what its elapsed time already says, if that is more.
        merged[name] = np.where(blind, np.where(running, np.maximum(fill, np.nan_to_num(base)), fill), base)
    return replace(prediction, **merged)


@dataclass(frozen=True)
class _Draws:
    """Tasks that draw from one stage's measured occupancies: remaining = draw x scale - elapsed."""

    tasks: np.ndarray
    measured: np.ndarray  # sorted
    low: np.ndarray  # per task: the first measurement it may draw (a running task: one it has not outlasted)
    scale: np.ndarray
    elapsed: np.ndarray


class TaskTimeSampler:
    """Draws every unfinished task's remaining occupancy from its stage's measured occupancies."""

    def __init__(self, state: RunState, prediction: Prediction, now: float) -> None:
        wf = state.workflow
        mean = prediction.mean_remaining()
        self.fixed = np.where(state.status == DONE, np.nan, mean)
        done = np.asarray(state.completion_order, dtype=np.int64)
        self._draws: list[_Draws] = []
        for stage, members in enumerate(wf.stage_members()):
            measured = np.sort(state.occupancy_s[done[wf.stage_of[done] == stage]])
            measured = measured[np.isfinite(measured)]
            if measured.size >= MIN_OBSERVATIONS:
                self._draws += _stage_draws(state, members, measured, mean, now)

    @property
    def has_spread(self) -> bool:
        return bool(self._draws)

    def draw(self, rng: np.random.Generator) -> np.ndarray:
        out = self.fixed.copy()
        for d in self._draws:
            pick = d.measured[d.low + (rng.random(d.tasks.size) * (d.measured.size - d.low)).astype(np.int64)]
            out[d.tasks] = np.maximum(pick * d.scale - d.elapsed, 0.0)
        return out


def _stage_draws(
    state: RunState, members: np.ndarray, measured: np.ndarray, mean: np.ndarray, now: float
) -> list[_Draws]:
    out = []
    status = state.status[members]
    waiting = members[(status != DONE) & (status != RUNNING)]
    if waiting.size:  # scaled to the task's predicted mean: the input-size shift the prediction made
        scale = mean[waiting] / max(float(measured.mean()), 1e-9)
        out.append(_Draws(waiting, measured, np.zeros(waiting.size, dtype=np.int64), scale, np.zeros(waiting.size)))
    running = members[status == RUNNING]
    elapsed = np.maximum(now - state.start_time[running], 0.0)
    low = np.searchsorted(measured, elapsed, side="right")
    tail = measured.size - low >= MIN_OBSERVATIONS  # a thinner tail keeps the prediction
    if tail.any():
        out.append(_Draws(running[tail], measured, low[tail], np.ones(int(tail.sum())), elapsed[tail]))
    return out


def estimate_pool_sizes(
    model: LevelModel,
    state: RunState,
    prediction: Prediction,
    dispatch: DispatchEstimate,
    sizes: Sequence[int],
    now: float,
    terms: PoolTerms,
    draws: int = DEFAULT_DRAWS,
    seed: int = 0,
) -> list[PoolSizeEstimate]:
    """The model's makespan and cost for each pool size, with P50 and P90 where the task times have a spread."""
    origin = state.first_event_time if state.first_event_time is not None else now
    ends = _ends(model, model.remaining(state, prediction, dispatch), dispatch, sizes, now, terms)
    sampler = TaskTimeSampler(state, prediction, now)
    spread: np.ndarray | None = None
    if sampler.has_spread and draws > 0:
        rng = np.random.default_rng(seed)
        runs = []
        for _ in range(draws):
            times = sampler.draw(rng)
            drawn = replace(prediction, remaining_mean_s=times, remaining_p90_s=times)
            runs.append(_ends(model, model.remaining(state, drawn, dispatch), dispatch, sizes, now, terms))
        spread = np.percentile(np.array(runs), [50, 90], axis=0)
    return _rows(sizes, ends, spread, origin, now, terms)


def simulate_pool_sizes(
    sim: Simulator,
    state: RunState,
    prediction: Prediction,
    sizes: Sequence[int],
    now: float,
    terms: PoolTerms,
    draws: int = SIMULATED_DRAWS,
    seed: int = 0,
) -> list[PoolSizeEstimate]:
    """The simulated makespan and cost for each pool size (``plan/simulate.py``), P50 and P90 as above."""
    origin = state.first_event_time if state.first_event_time is not None else now
    left = remaining_of(state, now)
    mean = prediction.mean_remaining()
    ends = [sim.run(left, mean, _capacity(n, now, terms)).end for n in sizes]
    sampler = TaskTimeSampler(state, prediction, now)
    spread: np.ndarray | None = None
    if sampler.has_spread and draws > 0:
        rng = np.random.default_rng(seed)
        runs = []
        affordable = DRAW_BUDGET // max(left.tasks.size * len(sizes), 1)
        for _ in range(min(draws, max(affordable, MIN_DRAWS))):
            times = sampler.draw(rng)
            runs.append([sim.run(left, times, _capacity(n, now, terms)).end for n in sizes])
        spread = np.percentile(np.array(runs), [50, 90], axis=0)
    return _rows(sizes, ends, spread, origin, now, terms)


def _rows(
    sizes: Sequence[int], ends: Sequence[float], spread: np.ndarray | None, origin: float, now: float, terms: PoolTerms
) -> list[PoolSizeEstimate]:
    out = []
    for j, n in enumerate(sizes):
        row = PoolSizeEstimate(n, ends[j] - origin, _cost(n, ends[j], now, terms))
        if spread is not None:
            p50, p90 = float(spread[0, j]), float(spread[1, j])
            row = replace(
                row,
                p50_makespan_s=p50 - origin,
                p90_makespan_s=p90 - origin,
                p50_cost_units=_cost(n, p50, now, terms),
                p90_cost_units=_cost(n, p90, now, terms),
            )
        out.append(row)
    return out


def _capacity(n: int, now: float, terms: PoolTerms) -> list[Slots]:
    """N instances: those up now (before the run: all of them) from now, the others a launch lag later."""
    up = n if terms.up_now is None else min(n, terms.up_now)
    return [
        Slots(now, up * terms.slots_per_instance),
        Slots(now + terms.launch_lag_s, (n - up) * terms.slots_per_instance),
    ]


def _ends(
    model: LevelModel, levels: Levels, dispatch: DispatchEstimate, sizes: Sequence[int], now: float, terms: PoolTerms
) -> list[float]:
    slots = terms.slots_per_instance
    return [model.schedule(levels, now, _capacity(n, now, terms), slots, dispatch.level_latency_s).end for n in sizes]


def _cost(n: int, end: float, now: float, terms: PoolTerms) -> int:
    """Units the N instances pay up to ``end``: from a lag before the start (before the run) or from now."""
    paid_from = now - terms.launch_lag_s if terms.up_now is None else now
    return n * terms.billing.units(paid_from, end)
