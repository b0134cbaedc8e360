"""Per-stage online prediction of task slot occupancy (WIRE §III-B1, §III-C).

Every MAPE interval the daemon calls ``update`` (ingest what completed since the
previous call, refresh each stage's statistics, run Algorithm 1, refresh the
data-transfer estimates) and then ``predict`` (for every unfinished task, its
predicted occupancy and remaining occupancy, and which of the paper's five
policies produced it).

A task's occupancy = execution time + data-transfer time. Execution times come
from completed tasks' ``RunState.exec_s``, transfer times from
``RunState.transfer_s``. Input sizes come from the DAG (``Workflow.input_bytes``),
which knows them for unfinished tasks too.

Cost per interval: proportional to the new completions, the unfinished tasks of
the stages that have started, and a few vectorised passes over per-task arrays
(the result itself is per task). No Python loop runs over all tasks.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from wire_daemon.analyze.gradient import LinearModel, scaled_input
from wire_daemon.analyze.groups import SizeGroups, median_of_sorted
from wire_daemon.core.config import PredictionConfig
from wire_daemon.core.run_state import RunState, TaskStatus
from wire_daemon.core.workflow import Workflow
from wire_daemon.ports.prediction import (
    POLICY_DONE,
    POLICY_GRADIENT,
    POLICY_ORACLE,
    POLICY_RUNNING_ONLY,
    POLICY_SAME_INPUT,
    POLICY_STAGE_MEDIAN,
    Prediction,
)


@dataclass(frozen=True)
class StageModel:
    """One stage's model, for status and verbose output."""

    stage_id: int
    name: str
    n_tasks: int
    n_completed: int
    median_exec_s: float  # NaN until the stage completes a task
    transfer_s: float  # the estimate policies 3-5 add (with the fallbacks applied)
    a0: float
    a1: float
    n_groups: int  # training points of Algorithm 1


@dataclass
class _Stage:
    """Mutable per-stage statistics of the online predictor."""

    name: str
    n_tasks: int
    max_input: float  # largest input size over ALL the stage's tasks (from the DAG)
    pending: np.ndarray  # member task indices not yet seen DONE (shrinks as tasks finish)
    groups: SizeGroups
    model: LinearModel
    exec_sorted: np.ndarray  # execution times of the completed tasks, sorted
    transfer_s: float = float("nan")  # own estimate; NaN until the stage completes a task

    @property
    def n_completed(self) -> int:
        return int(self.exec_sorted.size)

    def feature(self, sizes: np.ndarray) -> np.ndarray:
        return scaled_input(sizes, self.max_input)


class OnlinePredictor:
    """The five online prediction policies with one model per stage."""

    def __init__(self, workflow: Workflow, config: PredictionConfig) -> None:
        self.workflow = workflow
        self.config = config
        self._stages = self._build_stages(workflow, config)
        self._cursor = 0  # how much of RunState.completion_order has been ingested
        self._learning: set[int] = set()  # stages with completions and unfinished tasks
        self._global_transfer = float("nan")  # median transfer of the last interval with completions

    def _input(self, tasks: np.ndarray) -> np.ndarray:
        # Converted per use rather than kept as a float copy of every task's size.
        return self.workflow.input_bytes[tasks].astype(np.float64)

    @staticmethod
    def _build_stages(workflow: Workflow, config: PredictionConfig) -> list[_Stage]:
        max_input = np.zeros(len(workflow.stages))
        np.maximum.at(max_input, workflow.stage_of, workflow.input_bytes.astype(np.float64))
        return [
            _Stage(
                name=stage.name,
                n_tasks=int(members.size),
                max_input=float(max_input[stage.stage_id]),
                pending=members.astype(np.int32),  # int32 halves the one per-task array kept here
                groups=SizeGroups(config.same_input_relative_tolerance),
                model=LinearModel(),
                exec_sorted=np.empty(0),
            )
            for stage, members in zip(workflow.stages, workflow.stage_members())
        ]

    # -- update ---------------------------------------------------------------

    def update(self, state: RunState, now: float) -> None:
        """One MAPE iteration: ingest new completions, run Algorithm 1, refresh transfers."""
        if len(state.completion_order) < self._cursor:
            raise ValueError("RunState.completion_order shrank: update() must see one RunState")
        # The cursor makes every completion count exactly once, however often update() runs.
        new = np.asarray(state.completion_order[self._cursor :], dtype=np.int64)
        self._cursor = len(state.completion_order)
        if new.size:
            self._ingest(state, new)
        for s in self._learning:
            self._gradient_steps(self._stages[s])

    def _ingest(self, state: RunState, new: np.ndarray) -> None:
        # Transfer is memoryless (paper §III-B1): only this interval's completions count.
        self._global_transfer = float(np.median(state.transfer_s[new]))
        stage_ids = self.workflow.stage_of[new]
        order = np.argsort(stage_ids, kind="stable")
        new, stage_ids = new[order], stage_ids[order]
        uniq, starts = np.unique(stage_ids, return_index=True)
        for s, part in zip(uniq.tolist(), np.split(new, starts[1:])):
            self._ingest_stage(s, state, part)

    def _ingest_stage(self, s: int, state: RunState, done: np.ndarray) -> None:
        stage = self._stages[s]
        execs = state.exec_s[done]
        batch = np.sort(execs)
        at = np.searchsorted(stage.exec_sorted, batch)
        stage.exec_sorted = np.insert(stage.exec_sorted, at, batch)
        stage.groups.add(self._input(done), execs)
        # A stage with completions this interval takes their median transfer time;
        # otherwise it keeps its previous estimate.
        stage.transfer_s = float(np.median(state.transfer_s[done]))
        if stage.n_completed < stage.n_tasks:
            self._learning.add(s)
        else:
            # A finished stage's model is never consulted again: freezing it keeps
            # the per-interval work proportional to the stages still running.
            self._learning.discard(s)

    def _gradient_steps(self, stage: _Stage) -> None:
        # Training set: one point per size group, (anchor size, median exec of the group).
        x = stage.feature(stage.groups.anchor)
        t = stage.groups.median
        for _ in range(self.config.gradient_steps_per_interval):
            stage.model.step(x, t, self.config.learning_rate)

    def _transfer_estimate(self, stage: _Stage) -> float:
        # A stage that never completed a task borrows the median over all stages of
        # the last interval, else of the last interval that had completions (the two
        # collapse into one stored value), else 0.
        if not np.isnan(stage.transfer_s):
            return stage.transfer_s
        return 0.0 if np.isnan(self._global_transfer) else self._global_transfer

    # -- predict --------------------------------------------------------------

    def predict(self, state: RunState, now: float) -> Prediction:
        """Per-task predictions from what ``update`` has ingested so far."""
        n = self.workflow.n_tasks
        # Policy 1 for every task, in one vectorised assignment: a stage where no
        # task has started predicts 0 execution and 0 transfer.
        out = Prediction.not_started(n)
        started = set(np.unique(self.workflow.stage_of[state.running()]).tolist()) | self._learning
        for s in sorted(started):
            stage = self._stages[s]
            idx = self._unfinished(stage, state.status)
            if idx.size == 0:
                continue
            if stage.n_completed == 0:
                self._policy_2(out, state, now, idx, self.config.running_only_estimate)
            else:
                self._policies_3_to_5(out, stage, state, now, idx)
        done = state.status == TaskStatus.DONE
        for arr in (out.remaining_s, out.occupancy_s, out.exec_s):
            arr[done] = np.nan
        out.policy[done] = POLICY_DONE
        return out

    @staticmethod
    def _unfinished(stage: _Stage, status: np.ndarray) -> np.ndarray:
        # DONE is final, so dropping DONE tasks from the cached list is safe and
        # keeps this proportional to the stage's unfinished tasks.
        stage.pending = stage.pending[status[stage.pending] != TaskStatus.DONE]
        return stage.pending

    @staticmethod
    def _policy_2(out: Prediction, state: RunState, now: float, idx: np.ndarray, reading: str) -> None:
        is_running = state.status[idx] == TaskStatus.RUNNING
        run = idx[is_running]
        elapsed = np.maximum(now - state.start_time[run], 0.0)
        rest = idx[~is_running]
        if reading == "stage-elapsed":
            # The reading the paper's own analysis (§III-E) and linear-workflow
            # simulation (§IV-A) imply: while no task of the stage has completed,
            # every active task of the stage is expected to keep a slot busy for
            # at least as long as the stage's oldest task has been running. It
            # makes the pool grow by one instance every U/N while a stage of N
            # tasks stays unmeasured; see docs/decisions.md.
            longest = float(elapsed.max())
            out.occupancy_s[run] = elapsed + longest
            out.exec_s[run] = elapsed + longest
            out.remaining_s[run] = longest
            out.occupancy_s[rest] = longest
            out.exec_s[rest] = longest
            out.remaining_s[rest] = longest
            out.policy[idx] = POLICY_RUNNING_ONLY
            return
        # "median-elapsed", the literal §III-C text: presume the running tasks
        # are about to complete (remaining 0) and that every unstarted task runs
        # at least the median elapsed occupancy of the running ones. Elapsed
        # time already contains the transfer so far, so no transfer is added.
        median = float(np.median(elapsed))
        out.occupancy_s[run] = elapsed
        out.exec_s[run] = elapsed
        out.remaining_s[run] = 0.0
        out.occupancy_s[rest] = median
        out.exec_s[rest] = median
        out.remaining_s[rest] = median
        out.policy[idx] = POLICY_RUNNING_ONLY

    def _policies_3_to_5(self, out: Prediction, stage: _Stage, state: RunState, now: float, idx: np.ndarray) -> None:
        status = state.status[idx]
        execs = np.empty(idx.size)
        policy = np.empty(idx.size, dtype=np.int8)
        # Policy 3: not yet submitted (WAITING) -> median over the stage's completions.
        waiting = status == TaskStatus.WAITING
        execs[waiting] = median_of_sorted(stage.exec_sorted)
        policy[waiting] = POLICY_STAGE_MEDIAN
        # Ready (IDLE, and HELD treated like IDLE) or RUNNING: policy 4 or 5.
        ready = np.flatnonzero(~waiting)
        sizes = self._input(idx[ready])
        gid = stage.groups.find(sizes)
        same = gid >= 0
        # Policy 4: the input size matches a group of completed tasks -> its median.
        execs[ready[same]] = stage.groups.median[gid[same]]
        policy[ready[same]] = POLICY_SAME_INPUT
        # Policy 5: a size new to the stage -> Algorithm 1's model, clamped at 0.
        new = ready[~same]
        execs[new] = stage.model.predict(stage.feature(sizes[~same]))
        policy[new] = POLICY_GRADIENT

        occupancy = execs + self._transfer_estimate(stage)
        remaining = occupancy.copy()
        # A running task has already used part of its occupancy.
        running = status == TaskStatus.RUNNING
        elapsed = np.maximum(now - state.start_time[idx[running]], 0.0)
        remaining[running] = np.maximum(occupancy[running] - elapsed, 0.0)
        out.exec_s[idx] = execs
        out.occupancy_s[idx] = occupancy
        out.remaining_s[idx] = remaining
        out.policy[idx] = policy

    # -- reporting ------------------------------------------------------------

    def stage_summary(self) -> list[StageModel]:
        return [
            StageModel(
                stage_id=s,
                name=stage.name,
                n_tasks=stage.n_tasks,
                n_completed=stage.n_completed,
                median_exec_s=median_of_sorted(stage.exec_sorted) if stage.n_completed else float("nan"),
                transfer_s=self._transfer_estimate(stage),
                a0=stage.model.a0,
                a1=stage.model.a1,
                n_groups=len(stage.groups),
            )
            for s, stage in enumerate(self._stages)
        ]


class OraclePredictor:
    """Predicts from the truth the emulated world will use: the limit better prediction can reach."""

    def __init__(self, workflow: Workflow, true_occupancy_s: np.ndarray, true_exec_s: np.ndarray) -> None:
        self.workflow = workflow
        self.true_occupancy_s = _per_task(workflow, true_occupancy_s, "true_occupancy_s")
        self.true_exec_s = _per_task(workflow, true_exec_s, "true_exec_s")
        self._cursor = 0
        self._n_completed = np.zeros(len(workflow.stages), dtype=np.int64)

    def update(self, state: RunState, now: float) -> None:
        # Nothing to learn; count completions (once each) for the stage summary.
        new = np.asarray(state.completion_order[self._cursor :], dtype=np.int64)
        self._cursor = len(state.completion_order)
        np.add.at(self._n_completed, self.workflow.stage_of[new], 1)

    def predict(self, state: RunState, now: float) -> Prediction:
        occupancy = self.true_occupancy_s.copy()
        remaining = occupancy.copy()
        running = np.flatnonzero(state.status == TaskStatus.RUNNING)
        elapsed = np.maximum(now - state.start_time[running], 0.0)
        remaining[running] = np.maximum(occupancy[running] - elapsed, 0.0)
        out = Prediction(
            remaining_s=remaining,
            occupancy_s=occupancy,
            exec_s=self.true_exec_s.copy(),
            policy=np.full(self.workflow.n_tasks, POLICY_ORACLE, dtype=np.int8),
        )
        done = state.status == TaskStatus.DONE
        for arr in (out.remaining_s, out.occupancy_s, out.exec_s):
            arr[done] = np.nan
        out.policy[done] = POLICY_DONE
        return out

    def stage_summary(self) -> list[StageModel]:
        members = self.workflow.stage_members()
        return [
            StageModel(
                stage_id=stage.stage_id,
                name=stage.name,
                n_tasks=int(m.size),
                n_completed=int(self._n_completed[stage.stage_id]),
                median_exec_s=float(np.median(self.true_exec_s[m])),
                transfer_s=float(np.median(self.true_occupancy_s[m] - self.true_exec_s[m])),
                a0=0.0,
                a1=0.0,
                n_groups=0,
            )
            for stage, m in zip(self.workflow.stages, members)
        ]


def _per_task(workflow: Workflow, values: np.ndarray, what: str) -> np.ndarray:
    arr = np.asarray(values, dtype=np.float64)
    if arr.shape != (workflow.n_tasks,):
        raise ValueError(f"{what} must have one value per task ({workflow.n_tasks}), got shape {arr.shape}")
    return arr
