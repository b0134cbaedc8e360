"""Online peak-memory models per stage, and the rightsizer that applies them to queued jobs.

The models follow the feedback-based memory paper (Witt et al., §IV):

* ``pc50`` / ``pc95``: the 50th / 95th percentile of the peaks seen so far in
  the stage, ready after one finished task;
* ``lr``: a least-squares line of peak memory against the task's input size,
  updated with every finished task, ready after two;
* ``lr-mean-pm``: ``lr`` plus the sample standard deviation of all its errors
  on the tasks seen, ``sqrt(sum (f(x) - y)^2 / (n - 1))`` (paper eq. 1);
* ``lr-mean-minus``: the same over the underpredictions only (``f(x) < y``,
  ``m`` of them), ``sqrt(sum (f(x) - y)^2 / (m - 1))`` (eq. 2), the paper's
  favourite for its trade-off between failures and waste;
* ``lr-max-minus``: ``lr`` plus the largest underprediction seen,
  ``max (y - f(x))`` (eq. 3).

The offset is recomputed over every observation after each update, with the
line as it is now, as the paper does. Until a stage has
``memory.min_observations`` finished tasks (at least what its predictor
needs), its jobs keep the user's request.

Failure handling (paper §III-B, as HTCondor does it): a job held for memory
is released with a larger request. If its request was still the user's and
the model has become ready since, and predicts more than the failed request,
the prediction is used; otherwise the failed request is multiplied by
``memory.failure_factor``. Never above the largest slot: a job held at that
size is left held and reported, since no slot could run it.

Choices the paper leaves open (docs/decisions.md, "Memory right-sizing"):
the rightsizer only lowers a user's request, never raises it before a
failure; a job whose request was grown after a failure keeps it; ``mean -``
with a single underprediction uses that one error (eq. 2 divides by zero).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from wire_daemon.core.config import MemoryConfig
from wire_daemon.core.events import EventKind, TaskEvent
from wire_daemon.core.run_state import HELD, IDLE, RunState
from wire_daemon.core.workflow import Workflow
from wire_daemon.ports.memory import MemoryControl

MIB = float(1 << 20)
_PERCENTILE = {"pc50": 50.0, "pc95": 95.0}
USER, MODEL, GROWN = 0, 1, 2  # where a job's request came from


class OnlineRegression:
    """Least squares of y on x, one observation at a time (running means and co-moments: no big sums)."""

    def __init__(self) -> None:
        self.n = 0
        self.mean_x = 0.0
        self.mean_y = 0.0
        self.sxx = 0.0
        self.sxy = 0.0

    def add(self, x: float, y: float) -> None:
        self.n += 1
        dx = x - self.mean_x
        self.mean_x += dx / self.n
        self.mean_y += (y - self.mean_y) / self.n
        self.sxx += dx * (x - self.mean_x)
        self.sxy += dx * (y - self.mean_y)

    @property
    def slope(self) -> float:
        # Every input the same size (or one task): no slope to learn, the line is the mean.
        return self.sxy / self.sxx if self.sxx > 1e-9 * max(1.0, self.mean_x * self.mean_x) else 0.0

    @property
    def intercept(self) -> float:
        return self.mean_y - self.slope * self.mean_x

    def predict(self, x: np.ndarray | float) -> np.ndarray | float:
        return self.intercept + self.slope * x


def regression_offset(kind: str, predicted: np.ndarray, observed: np.ndarray) -> float:
    """The paper's offset o(f, D) of predictor ``kind`` (eqs. 1-3); 0 for plain ``lr``."""
    error = predicted - observed  # f(x) - y
    if kind == "lr":
        return 0.0
    if kind == "lr-mean-pm":
        return float(math.sqrt(np.sum(error**2) / (error.size - 1))) if error.size > 1 else 0.0
    if kind == "lr-mean-minus":
        under = error[error < 0]
        if under.size <= 1:  # eq. 2 needs two underpredictions; one is its own best estimate
            return float(-under.sum())
        return float(math.sqrt(np.sum(under**2) / (under.size - 1)))
    if kind == "lr-max-minus":
        return float(np.max(observed - predicted)) if error.size else 0.0
    raise ValueError(f"not a regression predictor: {kind!r}")


@dataclass
class PeakMemoryModel:
    """One stage's model: (input bytes, peak bytes) of its finished tasks, and a predictor over them."""

    predictor: str
    min_observations: int = 1
    inputs: list[float] = field(default_factory=list)
    peaks: list[float] = field(default_factory=list)
    fit: OnlineRegression = field(default_factory=OnlineRegression)
    _offset: float | None = None  # cached until the next observation

    @property
    def needed(self) -> int:
        return max(self.min_observations, 1 if self.predictor in _PERCENTILE else 2)

    @property
    def ready(self) -> bool:
        return len(self.peaks) >= self.needed

    def observe(self, input_bytes: float, peak_bytes: float) -> None:
        self.inputs.append(float(input_bytes))
        self.peaks.append(float(peak_bytes))
        self.fit.add(float(input_bytes), float(peak_bytes))
        self._offset = None

    def predict(self, input_bytes: float) -> float | None:
        """Predicted peak bytes of a task with this input size; None until the model is ready."""
        if not self.ready:
            return None
        if self.predictor in _PERCENTILE:
            return float(np.percentile(np.asarray(self.peaks), _PERCENTILE[self.predictor]))
        if self._offset is None:
            fitted = np.asarray(self.fit.predict(np.asarray(self.inputs)))
            self._offset = regression_offset(self.predictor, fitted, np.asarray(self.peaks))
        return max(float(self.fit.predict(float(input_bytes))) + self._offset, 0.0)


@dataclass
class SizerCounts:
    """What the rightsizer did, for replays and status."""

    edits: int = 0  # requests of idle jobs set from a model
    grown: int = 0  # held-for-memory jobs given a larger request and released
    stuck: int = 0  # held for memory at the largest slot: left held


class MemoryRightsizer:
    """Implements the loop's ``JobSizer``: learns peaks from finished tasks, resizes idle and held jobs.

    In ``dry_run`` it reads requests but changes none, and says what it would set.
    """

    def __init__(
        self, workflow: Workflow, config: MemoryConfig, control: MemoryControl, max_mib: float, dry_run: bool = False
    ) -> None:
        n = workflow.n_tasks
        self.workflow = workflow
        self.config = config
        self.control = control
        self.max_mib = max_mib
        self.dry_run = dry_run
        self.models = [PeakMemoryModel(config.predictor, config.min_observations) for _ in workflow.stages]
        self.user_mib = np.full(n, np.nan)  # the request the job came with (read once)
        self.request_mib = np.full(n, np.nan)  # the request we gave it, NaN: still the user's
        self.basis = np.zeros(n, dtype=np.int8)
        self.failures = np.zeros(n, dtype=np.int32)
        self.held_for_memory: set[int] = set()
        self.counts = SizerCounts()

    def step(self, now: float, events: Sequence[TaskEvent], state: RunState) -> list[str]:
        self.learn(events)
        return self._grow_held(state) + self._lower_idle(state)

    def wanted_mib(self, task: int) -> int | None:
        """Prediction plus margin, in whole MiB, capped at the largest slot; None before the model is ready."""
        model = self.models[int(self.workflow.stage_of[task])]
        peak = model.predict(float(self.workflow.input_bytes[task]))
        if peak is None:
            return None
        mib = peak * (1.0 + self.config.margin_fraction) / MIB + self.config.margin_mib
        return int(min(max(math.ceil(mib - 1e-6), 1), self.max_mib))  # 1e-6: 100 x 1.1 is 110, not 111

    def task_request_mib(self, tasks: np.ndarray) -> np.ndarray:
        """TaskShapes: the request we gave each task, else the user's as read; NaN for those not read yet.

        The rightsizer runs before the plan in each interval, so an idle job the
        model can size already carries its lowered request here.
        """
        given = self.request_mib[tasks]
        return np.where(np.isnan(given), self.user_mib[tasks], given)

    # -- learning -------------------------------------------------------------

    def learn(self, events: Sequence[TaskEvent]) -> None:
        """Feed the models the finished tasks' peaks; note the jobs held for memory (also used to rebuild)."""
        wanted = [e for e in events if _finished_with_peak(e) or (e.kind is EventKind.HELD and e.memory_exceeded)]
        for event, task in zip(wanted, self.workflow.indices_of([e.task_id for e in wanted])):
            if task < 0:
                continue
            if event.kind is EventKind.HELD:
                self.failures[task] += 1
                self.held_for_memory.add(task)
                continue
            size = event.input_bytes if event.input_bytes is not None else self.workflow.input_bytes[task]
            self.models[int(self.workflow.stage_of[task])].observe(float(size), float(event.peak_memory_bytes or 0))

    # -- failures: grow and release -------------------------------------------

    def _grow_held(self, state: RunState) -> list[str]:
        notes = []
        for task in sorted(self.held_for_memory):
            if state.status.item(task) != HELD:  # released or removed by someone else
                self.held_for_memory.discard(task)
                continue
            failed = self._current_mib(task)
            if failed is None:
                continue  # no number to grow (an expression): left to the user
            self.held_for_memory.discard(task)
            notes.append(self._grow(task, failed))
        return notes

    def _grow(self, task: int, failed: float) -> str:
        """The paper's rule: the model if the failed request was the user's guess, else double; never past the cap."""
        task_id = self.workflow.task_ids[task]
        wanted = self.wanted_mib(task)
        if self.basis[task] == USER and wanted is not None and wanted > failed:
            new, basis = wanted, MODEL
        else:
            new, basis = int(min(math.ceil(failed * self.config.failure_factor), self.max_mib)), GROWN
        if new <= failed:
            self.counts.stuck += 1
            return f"memory: {task_id} was held for memory at {failed:.0f} MiB, the largest slot: left held"
        if self.dry_run:
            return f"dry-run: would set request_memory of held {task_id} from {failed:.0f} to {new} MiB and release it"
        if not (self.control.set_request_memory(task_id, new) and self.control.release_job(task_id)):
            self.held_for_memory.add(task)  # retried next interval
            return f"memory: could not resize and release held {task_id}"
        self.request_mib[task], self.basis[task] = new, basis
        self.counts.grown += 1
        return f"memory: {task_id} was held for memory at {failed:.0f} MiB: request_memory {new} MiB, released"

    # -- idle jobs: lower to the prediction ------------------------------------

    def _lower_idle(self, state: RunState) -> list[str]:
        changes: dict[int, list[tuple[float, int]]] = {}  # stage -> (from, to) per edited job
        for task in state.idle_in_queue_order().tolist():
            if self.basis[task] == GROWN or state.status.item(task) != IDLE:
                continue
            change = self._lower_one(task)
            if change is not None:
                changes.setdefault(int(self.workflow.stage_of[task]), []).append(change)
        return [self._summary(stage, edits) for stage, edits in sorted(changes.items())]

    def _lower_one(self, task: int) -> tuple[float, int] | None:
        wanted = self.wanted_mib(task)
        if wanted is None:
            return None
        user = self._user_mib(task)
        current = self._current_mib(task)
        if user is None or current is None:
            return None
        new = int(min(wanted, user))  # lower only: the user's request is the most we give before a failure
        if abs(new - current) <= self.config.edit_tolerance * current:
            return None
        if not self.dry_run:
            if not self.control.set_request_memory(self.workflow.task_ids[task], new):
                return None
            self.request_mib[task], self.basis[task] = new, MODEL
            self.counts.edits += 1
        return current, new

    def _summary(self, stage: int, edits: list[tuple[float, int]]) -> str:
        verb = "dry-run: would set" if self.dry_run else "memory: set"
        name = self.workflow.stages[stage].name
        lo, hi = min(e[1] for e in edits), max(e[1] for e in edits)
        size = f"{lo} MiB" if lo == hi else f"{lo}-{hi} MiB"
        was = max(e[0] for e in edits)
        return f"{verb} request_memory of {len(edits)} idle job(s) of {name} to {size} (was up to {was:.0f} MiB)"

    def _user_mib(self, task: int) -> float | None:
        if math.isnan(self.user_mib[task]):
            read = self.control.request_memory_mib(self.workflow.task_ids[task])
            if read is None:
                return None
            self.user_mib[task] = read
        return float(self.user_mib[task])

    def _current_mib(self, task: int) -> float | None:
        if not math.isnan(self.request_mib[task]):
            return float(self.request_mib[task])
        return self._user_mib(task)


def _finished_with_peak(event: TaskEvent) -> bool:
    return event.kind is EventKind.FINISHED and event.exit_code in (None, 0) and bool(event.peak_memory_bytes)
