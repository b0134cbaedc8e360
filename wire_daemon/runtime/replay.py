"""Replay a workflow trace through the emulated site under one or more policies.

Measures (DESIGN.md): cost in charging units, makespan (first submit to last
task end), relative execution time (makespan over the full-site makespan),
utilization (busy slot-seconds over paid slot-seconds) and the prediction
error of the tasks' execution times.

Accounting choices:

* The pool is released when the last task ends: every policy is billed up to
  the makespan (a live daemon notices at its next interval; that lag is the
  same for every policy, so it is left out of the comparison).
* Busy slot-seconds count every attempt, including work later thrown away by
  a release; the wasted part is reported separately.
* Prediction error follows the paper (§IV-D): the execution time predicted
  for a task at the last iteration before it started, by policies 3-5, against
  its measured execution time. Stages are classed by their mean measured
  execution time: short (<= 10 s), medium (<= 30 s), long. Short and medium
  stages report the error in seconds, long stages relative to the true time.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from wire_daemon.analyze.memory import MemoryRightsizer
from wire_daemon.core.config import ReplayConfig
from wire_daemon.core.errors import WireError
from wire_daemon.core.journal import Journal
from wire_daemon.core.run_state import RunState, TaskStatus
from wire_daemon.core.workflow import Workflow
from wire_daemon.emulated.site import EmulatedSite
from wire_daemon.loop.mape import DecisionRecord
from wire_daemon.loop.schedule import iteration_times, release_until
from wire_daemon.ports.prediction import Prediction
from wire_daemon.runtime.assembly import LoopOptions, World, assemble_loop, emulated_site
from wire_daemon.runtime.policies import PolicyInputs, compared_policies, market_at_submit, policy_entry

MAX_ITERATIONS = 1_000_000
# The policy whose makespan is the best one, the denominator of relative execution time (DESIGN.md):
# the static pool of max_instances, up from the first moment.
REFERENCE_POLICY = "full-site"
SHORT_STAGE_S = 10.0
MEDIUM_STAGE_S = 30.0
STAGE_CLASSES = (("short", "s"), ("medium", "s"), ("long", "relative"))  # and the unit of their errors


@dataclass
class ErrorSummary:
    """Prediction error of one stage class."""

    stage_class: str  # short | medium | long
    unit: str  # "s" (true error) or "relative"
    tasks: int = 0
    mean_abs: float = float("nan")
    median: float = float("nan")
    p90_abs: float = float("nan")


@dataclass
class ReplayResult:
    policy: str
    cost_units: int
    makespan_s: float
    utilization: float
    iterations: int
    decision_mean_s: float
    decision_max_s: float
    peak_instances: int
    restarts: int
    wasted_slot_s: float
    cost_money: float = 0.0  # the bill: each instance's price per hour x the seconds billed
    interruptions: int = 0  # spot reclaim notices
    interrupted_slot_s: float = 0.0  # work lost to reclaims, rerun from zero
    relative_time: float = float("nan")
    errors: list[ErrorSummary] = field(default_factory=list)
    error_samples: dict[str, np.ndarray] = field(default_factory=dict)  # stage class -> per-task errors
    first_completion_s: dict[str, float] = field(default_factory=dict)  # stage name -> time
    records: list[DecisionRecord] = field(default_factory=list)
    wall_s: float = 0.0
    memory: dict[str, float] = field(default_factory=dict)  # only when the site models memory
    # Only with steering.instance_types: the bill at the types' prices, and instances and units per type.
    instance_types: dict[str, Any] = field(default_factory=dict)

    def summary(self) -> dict:
        return {
            "cost_units": self.cost_units,
            "cost": round(self.cost_money, 4),
            "makespan_s": round(self.makespan_s, 3),
            "relative_time": round(self.relative_time, 4),
            "utilization": round(self.utilization, 4),
            "peak_instances": self.peak_instances,
            "iterations": self.iterations,
            "restarts": self.restarts,
            "interruptions": self.interruptions,
            "interrupted_slot_s": round(self.interrupted_slot_s, 1),
            "decision_mean_ms": round(self.decision_mean_s * 1e3, 3),
            "decision_max_ms": round(self.decision_max_s * 1e3, 3),
            "prediction_error": {
                e.stage_class: {
                    "unit": e.unit,
                    "tasks": e.tasks,
                    "mean_abs": _round(e.mean_abs),
                    "median": _round(e.median),
                    "p90_abs": _round(e.p90_abs),
                }
                for e in self.errors
            },
            "wall_s": round(self.wall_s, 3),
        } | self._extras()

    def _extras(self) -> dict:
        """What only some replays measure: memory, and the bill per instance type."""
        return ({"memory": self.memory} if self.memory else {}) | self.instance_types


def replay(workflow: Workflow, policy_name: str, config: ReplayConfig, boost: bool = True) -> ReplayResult:
    """Run ``workflow`` to completion on the emulated site under one policy."""
    steering, emulation = config.steering, config.emulation
    entry = policy_entry(policy_name)
    if entry.static_pool:
        emulation = replace(emulation, initial_instances=steering.max_instances)
    started = time.perf_counter()
    site = emulated_site(workflow, steering, emulation, market_at_submit(entry, steering))
    state = RunState(workflow)
    truth = lambda: (site.true_occupancy_s, site.true_exec_s)  # noqa: E731
    sizer = _rightsizer(workflow, config, site)
    loop = assemble_loop(
        policy_name,
        PolicyInputs(state, steering, config.prediction, config.policy_options, truth),
        World(site, site, site, clock=site.now),
        steering.instance_memory_mib or emulation.instance_memory_mib,
        site,
        LoopOptions(memory=sizer, boost=boost, journal=Journal()),
    )
    tracker = _PredictionTracker(workflow.n_tasks)
    records: list[DecisionRecord] = []
    times = iteration_times(0.0, steering.interval_s)
    now = next(times)
    while True:
        site.advance_to(now)
        if site.finished:
            break
        if len(records) >= MAX_ITERATIONS:
            raise WireError(
                f"replay of {workflow.source} under {policy_name} did not finish in {MAX_ITERATIONS} intervals"
            )
        records.append(loop.iterate(now))
        if loop.last_plan is not None and loop.last_plan.prediction is not None:
            tracker.capture(state, loop.last_plan.prediction)
        now = next(times)
        release_until(loop, site, now)
    end = site.last_finish
    samples = tracker.samples(workflow, site.true_exec_s) if tracker.captured else {}
    paid = site.paid_slot_seconds(end)
    decisions = np.array([r.decision_s for r in records]) if records else np.zeros(1)
    result = ReplayResult(
        policy=policy_name,
        cost_units=site.cost_units(end),
        makespan_s=end,
        utilization=site.busy_slot_s / paid if paid > 0 else 0.0,
        iterations=len(records),
        decision_mean_s=float(decisions.mean()),
        decision_max_s=float(decisions.max()),
        peak_instances=max((r.pool + len(r.launched) for r in records), default=0),
        restarts=site.restarts,
        wasted_slot_s=site.wasted_slot_s,
        cost_money=site.cost_money(end),
        interruptions=site.interruptions,
        interrupted_slot_s=site.interrupted_slot_s,
        errors=summarize_errors(samples) if samples else [],
        error_samples=samples,
        first_completion_s={workflow.stages[s].name: t for s, t in site.first_completion.items()},
        records=records,
        memory=_memory_measures(site, end, sizer),
        instance_types=_type_measures(site, end) if steering.instance_types else {},
    )
    result.wall_s = time.perf_counter() - started
    return result


def _rightsizer(workflow: Workflow, config: ReplayConfig, site: EmulatedSite) -> MemoryRightsizer | None:
    if not (config.memory.rightsizing and site.memory_on):
        return None
    cap = config.memory.max_request_mib or config.emulation.instance_memory_mib
    return MemoryRightsizer(workflow, config.memory, site, min(cap, config.emulation.instance_memory_mib))


def _type_measures(site: EmulatedSite, end: float) -> dict[str, Any]:
    """The bill in money, and per instance type the instances launched and the units they paid."""
    launched: dict[str, int] = {}
    units: dict[str, int] = {}
    for inst in site.all_instances():
        launched[inst.instance_type] = launched.get(inst.instance_type, 0) + 1
    for name, paid in site.units_by_type(end).items():
        units[name] = paid
    return {"cost_money": round(site.cost_money(end), 4), "instances_by_type": launched, "units_by_type": units}


def _memory_measures(site: EmulatedSite, end: float, sizer: MemoryRightsizer | None) -> dict[str, float]:
    """The memory paper's measures, in MiB-seconds: used (peak), wasted, their MAQ, and paid memory's use."""
    if not site.memory_on:
        return {}
    used, wasted = site.used_memory_mib_s, site.wasted_memory_mib_s
    paid = site.paid_memory_mib_s(end)
    return {
        "failures": site.memory_failures,
        "used_mib_s": round(used, 1),
        "wasted_mib_s": round(wasted, 1),
        "maq": round(used / (used + wasted), 4) if used + wasted > 0 else 1.0,
        "memory_utilization": round(used / paid, 4) if paid > 0 else 0.0,
        "requests_edited": sizer.counts.edits if sizer else 0,
        "requests_grown": sizer.counts.grown if sizer else 0,
        "left_held": sizer.counts.stuck if sizer else 0,
    }


def compare(
    workflow: Workflow, config: ReplayConfig, policies: tuple[str, ...] | None = None, boost: bool = True
) -> dict[str, ReplayResult]:
    """Run several policies on the same world; relative time is against REFERENCE_POLICY's makespan.

    By default, every policy (those that buy only spot where spot is on the table: ``compared_policies``).
    """
    policies = compared_policies(config.steering) if policies is None else policies
    names = policies if REFERENCE_POLICY in policies else (REFERENCE_POLICY, *policies)
    results = {name: replay(workflow, name, config, boost) for name in names}
    best = results[REFERENCE_POLICY].makespan_s
    for result in results.values():
        result.relative_time = result.makespan_s / best if best > 0 else 1.0
    return {name: results[name] for name in policies}


class _PredictionTracker:
    """The last pre-start prediction of each task's execution time."""

    def __init__(self, n_tasks: int) -> None:
        self.exec_s = np.full(n_tasks, np.nan)
        self.policy = np.zeros(n_tasks, dtype=np.int8)
        self.captured = False  # only policies that predict have errors to report

    def capture(self, state: RunState, prediction: Prediction) -> None:
        self.captured = True
        unstarted = (state.status == TaskStatus.WAITING) | (state.status == TaskStatus.IDLE)
        self.exec_s[unstarted] = prediction.exec_s[unstarted]
        self.policy[unstarted] = prediction.policy[unstarted]

    def samples(self, workflow: Workflow, true_exec_s: np.ndarray) -> dict[str, np.ndarray]:
        """Per-task prediction errors by stage class: seconds (short, medium) or relative (long)."""
        stage_mean = np.array([true_exec_s[m].mean() if m.size else 0.0 for m in workflow.stage_members()])
        task_mean = stage_mean[workflow.stage_of]
        measured = np.isin(self.policy, (3, 4, 5))
        out: dict[str, np.ndarray] = {}
        for (name, unit), in_class in zip(STAGE_CLASSES, _class_masks(task_mean)):
            mask = measured & in_class
            err = self.exec_s[mask] - true_exec_s[mask]
            out[name] = err / np.maximum(true_exec_s[mask], 1e-9) if unit == "relative" else err
        return out


def summarize_errors(samples: dict[str, np.ndarray]) -> list[ErrorSummary]:
    out = []
    for name, unit in STAGE_CLASSES:
        err = samples.get(name, np.zeros(0))
        summary = ErrorSummary(name, unit, int(err.size))
        if summary.tasks:
            summary.mean_abs = float(np.mean(np.abs(err)))
            summary.median = float(np.median(err))
            summary.p90_abs = float(np.percentile(np.abs(err), 90))
        out.append(summary)
    return out


def _class_masks(task_mean: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Which tasks are in a short, medium and long stage (STAGE_CLASSES order)."""
    return (
        task_mean <= SHORT_STAGE_S,
        (task_mean > SHORT_STAGE_S) & (task_mean <= MEDIUM_STAGE_S),
        task_mean > MEDIUM_STAGE_S,
    )


def _round(x: float) -> float | None:
    return None if np.isnan(x) else round(float(x), 4)
