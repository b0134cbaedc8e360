"""Algorithm 1 of the WIRE paper: online gradient descent for t = a0 + a1 * x.

One model per stage. Each MAPE iteration takes one (or a configured number of)
batch gradient step(s) of the mean squared error over the stage's current
training set, starting from a0 = a1 = 0 in the first iteration, exactly as the
paper's pseudo-code: the gradient is summed with the previous coefficients held
fixed, then both coefficients move at once.

Feature scaling (our decision, the paper is silent): the paper's feature is the
raw input size, which diverges with its learning rate of 0.1 once sizes are in
bytes. The predictor therefore passes x = input size / the stage's largest
input size over all its tasks (known from the DAG up front), so x is in [0, 1]
and the paper's learning rate keeps its meaning.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


def scaled_input(sizes: np.ndarray, max_input: float) -> np.ndarray:
    """Algorithm 1's feature scaled to [0, 1] by the stage's largest input; all-empty inputs give x = 0."""
    if max_input <= 0:
        return np.zeros(np.shape(sizes))
    return np.asarray(sizes, dtype=np.float64) / max_input


@dataclass
class LinearModel:
    """t = a0 + a1 * x for one stage."""

    a0: float = 0.0  # the paper's initial state: alpha_0 = alpha_1 = 0
    a1: float = 0.0

    def step(self, x: np.ndarray, t: np.ndarray, learning_rate: float) -> None:
        """One pass of Algorithm 1 (lines 5-12) over the training set (x, t)."""
        m = x.size
        if m == 0:
            return  # no training point yet: nothing to learn from
        residual = t - (self.a1 * x + self.a0)
        g0 = -2.0 / m * float(residual.sum())
        g1 = -2.0 / m * float((x * residual).sum())
        self.a0 -= learning_rate * g0
        self.a1 -= learning_rate * g1

    def predict(self, x: np.ndarray) -> np.ndarray:
        """Predicted execution times, clamped at 0: a minimum time cannot be negative."""
        return np.maximum(self.a0 + self.a1 * x, 0.0)
