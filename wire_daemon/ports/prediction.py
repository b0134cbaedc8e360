"""The predictor port: per-task predictions of remaining slot occupancy, from any model.

The online predictor (``analyze``) and the oracle implement it; the policies
(``plan``) consume it without knowing which one they have.
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
POLICY_ORACLE = 9


@dataclass
class Prediction:
    remaining_s: np.ndarray  # float64 per task index (len n_tasks); NaN for DONE tasks
    occupancy_s: np.ndarray  # float64 per task: predicted total occupancy (exec + transfer); NaN for DONE
    exec_s: np.ndarray  # float64 per task: predicted execution part; NaN for DONE
    policy: np.ndarray  # int8 per task: 1..5, 0 for DONE (9 from the oracle)


class Predictor(Protocol):
    """What the planner needs: either the online predictor or the oracle."""

    def update(self, state: RunState, now: float) -> None: ...

    def predict(self, state: RunState, now: float) -> Prediction: ...
