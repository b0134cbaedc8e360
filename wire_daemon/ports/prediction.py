"""The predictor port: per-task predictions of remaining slot occupancy, from any model.

The online predictor (``analyze``) and the oracle implement it; the policies
(``plan``) consume it without knowing which one they have. The dispatch model
(what a job costs the pool beyond its own occupancy) is a port of the same
kind: learned in ``analyze``, read in ``plan``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import numpy as np

from wire_daemon.core.run_state import RunState

# Which of the paper's prediction policies (§III-C) produced a task's prediction.
POLICY_DONE = 0
POLICY_NOT_STARTED = 1
POLICY_RUNNING_ONLY = 2
POLICY_STAGE_MEDIAN = 3
POLICY_SAME_INPUT = 4
POLICY_GRADIENT = 5
# The distribution predictor's own sources (analyze/distribution.py): a stage
# not yet measured borrows from what is known elsewhere.
POLICY_PRIOR_TRANSFORMATION = 6  # the same transformation, measured in another stage
POLICY_PRIOR_WORKFLOW = 7  # every measured task of the workflow
POLICY_ORACLE = 9


@dataclass
class Prediction:
    remaining_s: np.ndarray  # float64 per task index (len n_tasks); NaN for DONE tasks
    occupancy_s: np.ndarray  # float64 per task: predicted total occupancy (exec + transfer); NaN for DONE
    exec_s: np.ndarray  # float64 per task: predicted execution part; NaN for DONE
    policy: np.ndarray  # int8 per task: 1..5, 0 for DONE (9 from the oracle)
    # Distribution-aware predictors also give the expected remaining occupancy
    # (what sums of work need) and its 90th percentile (what a level's longest
    # task needs); None from point predictors.
    remaining_mean_s: np.ndarray | None = None
    remaining_p90_s: np.ndarray | None = None
    # The 90th percentile a per-second bill to the workflow's end is counted to: the same, except that a task
    # not started of a stage predicted from another stage's measurements (a prior) keeps that prior's tail.
    remaining_p90_wide_s: np.ndarray | None = None

    def mean_remaining(self) -> np.ndarray:
        """The expected remaining occupancy where the predictor gives one, else its point prediction."""
        return self.remaining_mean_s if self.remaining_mean_s is not None else self.remaining_s

    def p90_remaining(self) -> np.ndarray:
        """The 90th percentile of the remaining occupancy where the predictor gives one, else the point."""
        return self.remaining_p90_s if self.remaining_p90_s is not None else self.remaining_s

    @classmethod
    def not_started(cls, n_tasks: int, distribution: bool = False) -> Prediction:
        """Policy 1 for every task (no task of its stage has started: 0 s), to be filled stage by stage."""
        zeros, policy = np.zeros(n_tasks), np.full(n_tasks, POLICY_NOT_STARTED, dtype=np.int8)
        if not distribution:
            return cls(zeros, zeros.copy(), zeros.copy(), policy)
        return cls(zeros, zeros.copy(), zeros.copy(), policy, zeros.copy(), zeros.copy(), zeros.copy())


class Predictor(Protocol):
    """What the planner needs: either the online predictor or the oracle."""

    def update(self, state: RunState, now: float) -> None: ...

    def predict(self, state: RunState, now: float) -> Prediction: ...


@dataclass(frozen=True)
class DispatchEstimate:
    """What a job costs the pool beyond its own slot occupancy, as learned from the event stream.

    ``gap_s`` is the slot time lost between a job's end and the next job's
    start on that slot while work was waiting (negotiation cycle, claim,
    shadow and starter start), by the stage of the job that ended (NaN: no
    observation, use ``default_gap_s``). ``submit_latency_s`` is DAGMan's
    delay from a node's last parent ending to its submit; ``start_latency_s``
    the delay from submit to execute when a slot was free. The two latencies
    lie on every level of the critical path.
    """

    gap_s: np.ndarray  # float64 per stage
    default_gap_s: float
    submit_latency_s: float
    start_latency_s: float
    observations: int = 0
    gap_observations: int = 0  # 0: ``default_gap_s`` is still the prior

    def gap_per_task(self, stage_of: np.ndarray) -> np.ndarray:
        gaps = np.where(np.isnan(self.gap_s), self.default_gap_s, self.gap_s)
        return gaps[stage_of]

    @property
    def level_latency_s(self) -> float:
        return self.submit_latency_s + self.start_latency_s


class DispatchModel(Protocol):
    """Learns the per-job dispatch cost online (``analyze``); the planner reads the estimate."""

    def update(self, state: RunState, now: float) -> None: ...

    def estimate(self) -> DispatchEstimate: ...
