"""Distribution-aware online prediction of task occupancy, with priors for unmeasured stages.

WIRE's predictor (``predictor.py``) gives one number per task: a median, and
0 for a stage with no task started. This one keeps, per stage, every measured
occupancy and execution time, and predicts for each unfinished task

* a point execution time (the conditional median), which is what the paper's
  Fig. 4 measures;
* the expected remaining occupancy, which sums of work need (a median
  undercounts the work of a skewed stage);
* the 90th percentile of the remaining occupancy (the probabilistic-
  provisioning paper keeps such histograms), which a level's longest task
  needs.

Per stage, three rules compete for the point execution time, and the one
with the lowest error so far on the stage's own completions is used
(prequential: before a completion is learned from, each rule's prediction
for it is scored):

* the stage median (``POLICY_STAGE_MEDIAN``);
* the median of the completed tasks with the same input size, else the stage
  median (``POLICY_SAME_INPUT``, WIRE's policy 4);
* a least-squares line of execution time on input size (``POLICY_GRADIENT``,
  the closed form of what Algorithm 1 approaches step by step).

Input size explains little in many real stages; a size group of one or two
completions is then a poor predictor, and the stage median wins. The spread
is the stage's own: a task predicted above the stage median gets the whole
distribution shifted up by the difference.

A running task's remaining occupancy is the stage's distribution conditional
on what it has already run: only the measured occupancies above its elapsed
time count. A task that has outlasted every measurement is given half its
elapsed time more (as much again as it has run, for the 90th percentile).

A stage with no completion borrows a distribution (a prior): the same
transformation measured in other stages (``POLICY_PRIOR_TRANSFORMATION``),
else every measured task of the workflow (``POLICY_PRIOR_WORKFLOW``). Its
tasks are never expected to end before the stage's longest-running task has
(WIRE's policy 2 reading, ``stage-elapsed``). A running task of such a stage
follows the prior conditioned on its age, but the workflow's prior mixes
unlike stages: its median and mean remaining time are at most its age (or
the prior's median, if longer), never the longest stage's length merely
because it has outlasted the short ones. With nothing measured anywhere,
WIRE's policies 1 and 2 apply. The DAG's own runtime hints and earlier
workflows would be further priors; neither reaches the predictor today.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from wire_daemon.analyze.gradient import scaled_input
from wire_daemon.analyze.groups import SizeGroups, median_of_sorted
from wire_daemon.core.config import PredictionConfig
from wire_daemon.core.run_state import DONE, RUNNING, WAITING, RunState
from wire_daemon.core.workflow import Workflow
from wire_daemon.ports.prediction import (
    POLICY_DONE,
    POLICY_GRADIENT,
    POLICY_NOT_STARTED,
    POLICY_PRIOR_TRANSFORMATION,
    POLICY_PRIOR_WORKFLOW,
    POLICY_RUNNING_ONLY,
    POLICY_SAME_INPUT,
    POLICY_STAGE_MEDIAN,
    Prediction,
)

_RULES = (POLICY_STAGE_MEDIAN, POLICY_SAME_INPUT, POLICY_GRADIENT)
_MIN_SCORED = 5  # completions scored before a size rule may replace the stage median
_OUTLASTED_P50 = 0.5  # remaining occupancy of a task past every measurement, times its elapsed time
_OUTLASTED_P90 = 1.0
_THIN_TAIL = 3
LONG_STAGE_S = 30.0  # the paper's classes (§IV-D): short <= 10 s, medium <= 30 s, long above
_MIN_TIME_S = 1e-3  # measurements above a running task's age below which its spread is widened


@dataclass
class Spread:
    """A sorted sample of occupancies and its summary."""

    sorted_s: np.ndarray = field(default_factory=lambda: np.empty(0))
    median: float = float("nan")
    mean: float = float("nan")
    p90: float = float("nan")
    _prefix: np.ndarray = field(default_factory=lambda: np.zeros(1))  # cumulative sums, for tail means

    @property
    def n(self) -> int:
        return int(self.sorted_s.size)

    def add(self, values: np.ndarray) -> None:
        batch = np.sort(np.asarray(values, dtype=np.float64))
        self.sorted_s = np.insert(self.sorted_s, np.searchsorted(self.sorted_s, batch), batch)
        self._refresh()

    def merge(self, others: list[Spread]) -> None:
        self.sorted_s = np.sort(np.concatenate([o.sorted_s for o in others])) if others else np.empty(0)
        self._refresh()

    def _refresh(self) -> None:
        s = self.sorted_s
        self._prefix = np.concatenate(([0.0], np.cumsum(s)))
        if s.size:
            self.median = median_of_sorted(s)
            self.mean = float(self._prefix[-1] / s.size)
            self.p90 = _quantile_sorted(s, 0.9)

    def conditional(self, shift: np.ndarray, elapsed: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Remaining (median, mean, p90) of tasks that have run ``elapsed``, the sample shifted by ``shift``."""
        s, n = self.sorted_s, self.sorted_s.size
        k = np.searchsorted(s, elapsed - shift, side="right")  # first sample still running at that age
        tail = n - k
        some = tail > 0
        kk, tt = k[some], tail[some]
        med = 0.5 * (s[kk + (tt - 1) // 2] + s[kk + tt // 2])
        mean = (self._prefix[n] - self._prefix[kk]) / tt
        pos = kk + 0.9 * (tt - 1)
        lo = np.floor(pos).astype(np.int64)
        hi = np.minimum(lo + 1, n - 1)
        p90 = s[lo] + (s[hi] - s[lo]) * (pos - lo)
        out_med = _OUTLASTED_P50 * elapsed
        out_mean = _OUTLASTED_P50 * elapsed
        out_p90 = _OUTLASTED_P90 * elapsed
        e, sh = elapsed[some], shift[some]
        out_med[some] = np.maximum(med + sh - e, 0.0)
        out_mean[some] = np.maximum(mean + sh - e, 0.0)
        out_p90[some] = np.maximum(p90 + sh - e, 0.0)
        # A tail of one or two measurements says little: the mean and the 90th
        # percentile are not allowed below what a task past every measurement gets.
        thin = tail < _THIN_TAIL
        out_mean[thin] = np.maximum(out_mean[thin], _OUTLASTED_P50 * elapsed[thin])
        out_p90[thin] = np.maximum(out_p90[thin], _OUTLASTED_P90 * elapsed[thin])
        return out_med, out_mean, out_p90


@dataclass
class _Stage:
    name: str
    transformation: str
    n_tasks: int
    max_input: float
    pending: np.ndarray  # member tasks not yet seen DONE
    occupancy: Spread = field(default_factory=Spread)
    exec_sorted: np.ndarray = field(default_factory=lambda: np.empty(0))
    transfer_sorted: np.ndarray = field(default_factory=lambda: np.empty(0))
    groups: SizeGroups | None = None
    # running sums of the least-squares line exec = a + b x (x: input / stage's largest input)
    sx: float = 0.0
    sy: float = 0.0
    sxx: float = 0.0
    sxy: float = 0.0
    scored: int = 0
    errors: list[float] = field(default_factory=lambda: [0.0, 0.0, 0.0])  # per rule, prequential |error|

    @property
    def n_completed(self) -> int:
        return int(self.exec_sorted.size)

    def feature(self, sizes: np.ndarray) -> np.ndarray:
        return scaled_input(sizes, self.max_input)

    def line(self) -> tuple[float, float] | None:
        n = self.n_completed
        var = self.sxx - self.sx * self.sx / n if n else 0.0
        if n < 3 or var <= 1e-12 * max(self.sxx, 1e-300):
            return None
        slope = (self.sxy - self.sx * self.sy / n) / var
        return (self.sy - slope * self.sx) / n, slope

    def rule(self) -> int:
        if self.scored < _MIN_SCORED:
            return POLICY_STAGE_MEDIAN
        best = min(range(3), key=lambda r: (self.errors[r], r))  # ties: the simpler rule
        return _RULES[best]

    @property
    def long(self) -> bool:
        """A long stage (the paper's class: mean above 30 s), where errors count relative to the true time."""
        return bool(self.exec_sorted.size) and float(self.exec_sorted.mean()) > LONG_STAGE_S

    def central(self) -> float:
        """The stage-wide point: the median, or in a long stage the time that minimises the relative error.

        The latter is the median with every measurement weighted by 1 / its
        time: in a skewed stage (a few tasks of a second among tasks of a
        minute) the plain median is many times too long for the short ones.
        """
        s = self.exec_sorted
        if not self.long:
            return median_of_sorted(s)
        weights = np.cumsum(1.0 / np.maximum(s, _MIN_TIME_S))
        return float(s[min(int(np.searchsorted(weights, weights[-1] / 2)), s.size - 1)])

    def predict_exec(self, rule: int, sizes: np.ndarray) -> np.ndarray:
        out = np.full(sizes.size, self.central())
        if rule == POLICY_SAME_INPUT and self.groups is not None:
            gid = self.groups.find(sizes)
            known = gid >= 0
            out[known] = self.groups.median[gid[known]]
        elif rule == POLICY_GRADIENT:
            fit = self.line()
            if fit is not None:
                out = np.maximum(fit[0] + fit[1] * self.feature(sizes), 0.0)
        return out


class DistributionPredictor:
    """Per-stage occupancy distributions: point, mean and 90th percentile per task, with priors."""

    def __init__(self, workflow: Workflow, config: PredictionConfig) -> None:
        self.workflow = workflow
        self.config = config
        max_input = np.zeros(len(workflow.stages))
        np.maximum.at(max_input, workflow.stage_of, workflow.input_bytes.astype(np.float64))
        self._stages = [
            _Stage(
                name=stage.name,
                transformation=stage.transformation,
                n_tasks=int(members.size),
                max_input=float(max_input[stage.stage_id]),
                pending=members.astype(np.int32),
                groups=SizeGroups(config.same_input_relative_tolerance),
            )
            for stage, members in zip(workflow.stages, workflow.stage_members())
        ]
        self._cursor = 0
        self._everything = Spread()  # every measured pool task of the workflow
        self._by_transformation: dict[str, Spread] = {}  # pooled over the stages of one transformation
        self._stale: set[str] = set()

    # -- update ---------------------------------------------------------------

    def update(self, state: RunState, now: float) -> None:
        if len(state.completion_order) < self._cursor:
            raise ValueError("RunState.completion_order shrank: update() must see one RunState")
        new = np.asarray(state.completion_order[self._cursor :], dtype=np.int64)
        self._cursor = len(state.completion_order)
        if new.size == 0:
            return
        stage_ids = self.workflow.stage_of[new]
        order = np.argsort(stage_ids, kind="stable")
        new, stage_ids = new[order], stage_ids[order]
        uniq, starts = np.unique(stage_ids, return_index=True)
        for s, part in zip(uniq.tolist(), np.split(new, starts[1:])):
            self._learn(self._stages[s], state, part)
        pool = new[self.workflow.on_pool[new]]
        if pool.size:
            self._everything.add(state.occupancy_s[pool])

    def _learn(self, stage: _Stage, state: RunState, done: np.ndarray) -> None:
        execs = state.exec_s[done]
        sizes = self.workflow.input_bytes[done].astype(np.float64)
        if stage.n_completed:  # score every rule on completions it has not seen yet
            for r, rule in enumerate(_RULES):
                miss = np.abs(stage.predict_exec(rule, sizes) - execs)
                if stage.long:  # scored as the paper measures the class: relative to the true time
                    miss = miss / np.maximum(execs, _MIN_TIME_S)
                stage.errors[r] += float(miss.sum())
            stage.scored += int(done.size)
        stage.exec_sorted = _insert_sorted(stage.exec_sorted, execs)
        stage.transfer_sorted = _insert_sorted(stage.transfer_sorted, state.transfer_s[done])
        stage.occupancy.add(state.occupancy_s[done])
        assert stage.groups is not None
        stage.groups.add(sizes, execs)
        x = stage.feature(sizes)
        stage.sx += float(x.sum())
        stage.sy += float(execs.sum())
        stage.sxx += float((x * x).sum())
        stage.sxy += float((x * execs).sum())
        self._stale.add(stage.transformation)

    def _transformation_prior(self, transformation: str) -> Spread | None:
        if transformation in self._stale:
            self._stale.discard(transformation)
            measured = [s.occupancy for s in self._stages if s.transformation == transformation and s.n_completed]
            self._by_transformation.setdefault(transformation, Spread()).merge(measured)
        pooled = self._by_transformation.get(transformation)
        return pooled if pooled is not None and pooled.n else None

    # -- predict --------------------------------------------------------------

    def predict(self, state: RunState, now: float) -> Prediction:
        n = self.workflow.n_tasks
        out = Prediction.not_started(n, distribution=True)
        status = state.status
        for stage in self._stages:
            stage.pending = stage.pending[status[stage.pending] != DONE]
            idx = stage.pending
            if idx.size == 0:
                continue
            if stage.n_completed:
                self._measured(out, stage, state, now, idx)
            else:
                self._unmeasured(out, stage, state, now, idx)
        done = status == DONE
        assert out.remaining_mean_s is not None and out.remaining_p90_s is not None
        assert out.remaining_p90_wide_s is not None
        spreads = (out.remaining_mean_s, out.remaining_p90_s, out.remaining_p90_wide_s)
        for arr in (out.remaining_s, out.occupancy_s, out.exec_s, *spreads):
            arr[done] = np.nan
        out.policy[done] = POLICY_DONE
        return out

    def _measured(self, out: Prediction, stage: _Stage, state: RunState, now: float, idx: np.ndarray) -> None:
        rule = stage.rule()
        status = state.status[idx]
        sizes = self.workflow.input_bytes[idx].astype(np.float64)
        execs = stage.predict_exec(rule, sizes)
        policy = np.full(idx.size, rule, dtype=np.int8)
        # A task whose input size the DAG does not know yet (0) gets the stage median.
        unknown = (sizes <= 0) & (rule != POLICY_STAGE_MEDIAN)
        if unknown.any():
            execs[unknown] = stage.central()
            policy[unknown] = POLICY_STAGE_MEDIAN
        transfer = median_of_sorted(stage.transfer_sorted)
        occupancy = execs + transfer
        shift = execs - stage.central()  # what the input size says beyond the stage-wide point
        self._fill(out, idx, status, state, now, stage.occupancy, shift, occupancy, execs, policy)

    def _unmeasured(self, out: Prediction, stage: _Stage, state: RunState, now: float, idx: np.ndarray) -> None:
        status = state.status[idx]
        running = status == RUNNING
        elapsed = np.maximum(now - state.start_time[idx[running]], 0.0)
        longest = float(elapsed.max()) if elapsed.size else 0.0
        prior = self._transformation_prior(stage.transformation)
        code = POLICY_PRIOR_TRANSFORMATION
        if prior is None:
            prior, code = (self._everything, POLICY_PRIOR_WORKFLOW) if self._everything.n else (None, 0)
        if prior is None:  # nothing measured anywhere: WIRE's policies 1 and 2 for the point
            rem = np.full(idx.size, longest)
            occ = rem.copy()
            occ[running] = elapsed + longest
            # For the work ahead, a submitted task is taken to keep its slot at least
            # ``unknown_task_s`` (one interval by default: all reactive-conserving
            # assumes); a task not yet submitted counts no work until something is measured.
            spread = np.where(status == WAITING, rem, np.maximum(rem, self.config.unknown_task_s))
            if elapsed.size:
                self._set(out, idx, rem, spread, spread, occ, occ, POLICY_RUNNING_ONLY)
            else:
                self._set(out, idx, rem, spread, spread, occ, occ, POLICY_NOT_STARTED)
            return
        # A task not started is not expected to end before the stage's longest-running
        # task has; a running one follows the prior, conditioned on its own elapsed time.
        point = max(prior.median, longest)
        shift = np.where(running, 0.0, point - prior.median)
        occupancy = np.full(idx.size, point)
        policy = np.full(idx.size, code, dtype=np.int8)
        self._fill(out, idx, status, state, now, prior, shift, occupancy, occupancy.copy(), policy)
        # Another stage's spread says little about this one's: a task not started
        # is expected at the prior's median, without its tail (the wide P90 keeps it).
        waiting = idx[~running]
        assert out.remaining_mean_s is not None and out.remaining_p90_s is not None
        out.remaining_mean_s[waiting] = point
        out.remaining_p90_s[waiting] = point
        if code == POLICY_PRIOR_WORKFLOW and elapsed.size:
            # The workflow's tasks mix every stage measured; conditioned on a running task's age, the mix
            # drops the short stages it has outlasted and says the longest stage's length. A stage is not
            # drawn from the others: past the prior's median a task is given as much again as it has run
            # (as a task with nothing measured anywhere is), unless the prior says less. Its tail stays.
            ran = idx[running]
            again = np.maximum(elapsed, prior.median)
            out.remaining_s[ran] = np.minimum(out.remaining_s[ran], again)
            out.remaining_mean_s[ran] = np.minimum(out.remaining_mean_s[ran], again)

    @staticmethod
    def _fill(
        out: Prediction,
        idx: np.ndarray,
        status: np.ndarray,
        state: RunState,
        now: float,
        spread: Spread,
        shift: np.ndarray,
        occupancy: np.ndarray,
        execs: np.ndarray,
        policy: np.ndarray,
    ) -> None:
        mean = np.maximum(spread.mean + shift, 0.0)
        p90 = np.maximum(spread.p90 + shift, occupancy)
        rem_p50, rem_mean, rem_p90 = occupancy.copy(), mean, p90
        running = status == RUNNING
        if running.any():
            elapsed = np.maximum(now - state.start_time[idx[running]], 0.0)
            r50, rmean, r90 = spread.conditional(shift[running], elapsed)
            rem_p50[running], rem_mean[running], rem_p90[running] = r50, rmean, np.maximum(r90, r50)
        DistributionPredictor._set(out, idx, rem_p50, rem_mean, rem_p90, occupancy, execs, policy)

    @staticmethod
    def _set(
        out: Prediction,
        idx: np.ndarray,
        rem: np.ndarray,
        rem_mean: np.ndarray,
        rem_p90: np.ndarray,
        occ: np.ndarray,
        execs: np.ndarray,
        policy: int | np.ndarray,
    ) -> None:
        out.remaining_s[idx] = rem
        out.occupancy_s[idx] = occ
        out.exec_s[idx] = execs
        assert out.remaining_mean_s is not None and out.remaining_p90_s is not None
        out.remaining_mean_s[idx] = rem_mean
        out.remaining_p90_s[idx] = rem_p90
        assert out.remaining_p90_wide_s is not None
        out.remaining_p90_wide_s[idx] = rem_p90
        out.policy[idx] = policy

    # -- reporting ------------------------------------------------------------

    def stage_spreads(self) -> list[tuple[str, int, float, float, float]]:
        """(stage, completions, median, mean, 90th percentile) of each stage's measured occupancy."""
        return [(s.name, s.n_completed, s.occupancy.median, s.occupancy.mean, s.occupancy.p90) for s in self._stages]


def _insert_sorted(sorted_values: np.ndarray, new: np.ndarray) -> np.ndarray:
    batch = np.sort(np.asarray(new, dtype=np.float64))
    return np.insert(sorted_values, np.searchsorted(sorted_values, batch), batch)


def _quantile_sorted(s: np.ndarray, q: float) -> float:
    pos = q * (s.size - 1)
    lo = int(pos)
    hi = min(lo + 1, s.size - 1)
    return float(s[lo] + (s[hi] - s[lo]) * (pos - lo))
