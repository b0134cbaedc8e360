"""``wire-daemon plan``: the estimated makespan and cost of a workflow for each pool size, 1 to max.

The input is a trace (WfFormat, as ``replay`` reads it) or a submit dir (as
``inspect`` reads it). A trace is planned before its run, on its own task
times as the emulated site would run them. A submit dir is read from the
start into a ``RunState``, and the predictors the default policy
(target-slowdown) composes run once at *now* (the last event, or the wall
clock): the distribution predictor for the unfinished tasks' remaining
occupancy, the dispatch learner for the per-job and per-level latencies.
Tasks with nothing measured get ``prediction.unknown_task_s`` (a submit dir
has no runtime hints). The estimate itself is ``plan.pool_sizes``: the
remaining DAG scheduled on each pool size (``plan.simulate``); this module
reads, composes and prints.
"""

from __future__ import annotations

import math
import os
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from wire_daemon.analyze.dispatch import DispatchLearner
from wire_daemon.analyze.distribution import DistributionPredictor
from wire_daemon.core.config import DEFAULT_CURRENCY
from wire_daemon.core.deadlines import parse_deadline
from wire_daemon.core.errors import InputError
from wire_daemon.core.pricing import SECONDS_PER_HOUR
from wire_daemon.core.run_state import RUNNING, RunState
from wire_daemon.core.workflow import Workflow
from wire_daemon.emulated.site import task_times, world_dispatch
from wire_daemon.emulated.traces import load_trace
from wire_daemon.monitor.problems import Problems
from wire_daemon.monitor.submit_monitor import SubmitDirMonitor
from wire_daemon.plan.makespan import LevelModel
from wire_daemon.plan.pool_sizes import (
    MIN_OBSERVATIONS,
    PoolSizeEstimate,
    PoolTerms,
    estimate_pool_sizes,
    simulate_pool_sizes,
    with_known_times,
)
from wire_daemon.plan.simulate import Simulator
from wire_daemon.ports.prediction import DispatchEstimate
from wire_daemon.runtime.settings import Settings
from wire_daemon.service.inspect import read_events
from wire_daemon.service.wording import duration

JSON_VERSION = 1
SIMULATED = "simulated"  # the remaining DAG scheduled on each pool (plan/simulate.py)
LEVELS = "levels"  # the level-based model (plan/makespan.py)


@dataclass
class PlanReport:
    input: str  # the trace or submit dir, as given
    kind: str  # trace | submit dir
    workflow: str
    tasks: int
    done: int
    running: int
    now: float | None  # the submit dir's now (Unix seconds); None for a trace
    now_from: str  # before-the-run | last-event | wall-clock
    elapsed_s: float  # since the workflow's first event
    task_times: str  # where the task times come from, in words
    slots_per_instance: int
    charging_unit_s: float  # the billing's unit: 1 s when billed per second
    launch_lag_s: float
    up_now: int | None  # instances running tasks now (a submit dir)
    price: float | None  # per instance and charging unit: --price, else the config's for the pool's own type
    sizes: list[PoolSizeEstimate] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    deadline: DeadlineFit | None = None  # plan --deadline: the cheapest size that meets it
    minimum_charge_s: float | None = None  # billed per second: the first charge; None: whole units
    currency: str = ""  # what the price is in (steering.currency)


@dataclass
class DeadlineFit:
    """``plan --deadline``: the cheapest pool size whose makespan, at the quantile, ends by the deadline."""

    given: str  # as the operator wrote it
    quantile: str  # p50 | p90 (the plain estimate where the sizes have no spread)
    within_s: float  # from the workflow's start (a trace: from now, the run starting now)
    instances: int | None  # None: no size meets it
    makespan_s: float
    cost_units: int
    late_s: float = 0.0  # no size meets it: the fastest size ends this much after the deadline


def fit_deadline(report: PlanReport, given: str, quantile: str, wall_now: float) -> DeadlineFit | None:
    """The cheapest size that meets ``given`` (core/deadlines.py), at ``quantile``; else the fastest and how late."""
    if not report.sizes:
        return None
    deadline = parse_deadline(given)
    start = wall_now if report.now is None else report.now - report.elapsed_s
    within = deadline.resolve(start) - start

    def end(size: PoolSizeEstimate) -> float:
        spread = size.p90_makespan_s if quantile == "p90" else size.p50_makespan_s
        return size.makespan_s if spread is None else spread

    meeting = [z for z in report.sizes if end(z) <= within]
    if meeting:
        best = min(meeting, key=lambda z: (z.cost_units, z.instances))
        return DeadlineFit(given, quantile, within, best.instances, end(best), best.cost_units)
    fastest = min(report.sizes, key=lambda z: (end(z), z.cost_units))
    return DeadlineFit(given, quantile, within, None, end(fastest), fastest.cost_units, end(fastest) - within)


def plan_input(
    path: str | os.PathLike[str],
    settings: Settings,
    max_instances: int,
    price: float | None = None,
    wall_clock: bool = False,
) -> PlanReport:
    """Plan a trace (a file) or a submit dir (a directory); ``InputError`` names a path that is neither."""
    where = Path(path)
    if where.is_dir():
        return plan_submit_dir(where, settings, max_instances, price, wall_clock)
    if not where.exists():
        raise InputError(os.fspath(path), "no such trace file or submit directory")
    return plan_trace(where, settings, max_instances, price)


def plan_trace(
    path: Path, settings: Settings, max_instances: int, price: float | None = None, estimator: str = SIMULATED
) -> PlanReport:
    """Before the run: the trace as the emulated site (emulation settings) would run it, its dispatch included.

    ``estimator``: ``SIMULATED`` (what ``plan`` prints) or ``LEVELS``, the level-based model, for comparison.
    """
    workflow = load_trace(path)
    state = RunState(workflow)
    known, _ = task_times(workflow, settings.emulation)
    report = _report(os.fspath(path), "trace", workflow, state, None, "before-the-run", settings, price)
    world = settings.emulation
    report.task_times = (
        f"the trace's runtimes and transfers{_scaled(world.time_scale)}; jobs start at the emulated site's "
        f"negotiation cycles ({duration(world.negotiation_interval_s)}), {duration(world.submit_delay_s)} "
        "after their parents"
    )
    dispatch = world_dispatch(workflow, settings.emulation)
    report.sizes = _estimate(state, 0.0, known, settings, max_instances, None, dispatch, estimator)
    return report


def plan_submit_dir(
    path: Path, settings: Settings, max_instances: int, price: float | None = None, wall_clock: bool = False
) -> PlanReport:
    """Before or during the run: the online predictions, the defaults where nothing is measured yet."""
    problems = Problems()
    monitor = SubmitDirMonitor(path, problems=problems)
    state = RunState(monitor.workflow)
    read = read_events(monitor, state)
    now = time.time() if wall_clock else read.last
    now_from = "wall-clock" if wall_clock else "last-event"
    up: int | None = len({state.host[i] for i in state.running().tolist() if i in state.host})
    if read.last is None:  # no event yet: the pool is up when the workflow starts, as for a trace
        now_from, up = "before-the-run", None
    report = _report(os.fspath(path), "submit dir", monitor.workflow, state, now, now_from, settings, price, up)
    report.warnings = list(problems.messages)
    if read.unknown:
        report.warnings.append(
            f"{sum(read.unknown.values())} event(s) name nodes the .dag does not have: not counted "
            "(`wire-daemon inspect` says more)"
        )
    default = settings.prediction.unknown_task_s
    report.task_times = (
        f"online predictions for the unfinished tasks (the default {duration(default)} where nothing is "
        "measured), observed times for the finished ones"
        if state.completion_order
        else f"nothing finished yet: the default {duration(default)} per task"
    )
    if state.n_done() < state.workflow.n_tasks:
        known = np.where(np.isnan(state.workflow.runtime_s), default, state.workflow.runtime_s)
        report.sizes = _estimate(state, now if now is not None else 0.0, known, settings, max_instances, up)
    return report


def _report(
    path: str,
    kind: str,
    workflow: Workflow,
    state: RunState,
    now: float | None,
    now_from: str,
    settings: Settings,
    price: float | None,
    up: int | None = None,
) -> PlanReport:
    first = state.first_event_time
    return PlanReport(
        input=path,
        kind=kind,
        workflow=workflow.name,
        tasks=workflow.n_tasks,
        done=state.n_done(),
        running=int(np.count_nonzero(state.status == RUNNING)),
        now=now,
        now_from=now_from,
        elapsed_s=max(now - first, 0.0) if now is not None and first is not None else 0.0,
        task_times="",
        slots_per_instance=settings.steering.slots_per_instance,
        charging_unit_s=settings.steering.billing.charging_unit_s,
        launch_lag_s=settings.steering.interval_s,
        up_now=up,
        price=_unit_price(settings) if price is None else price,
        currency=settings.steering.currency,
        minimum_charge_s=settings.steering.minimum_charge_s if settings.steering.billing_model == "second" else None,
    )


def _unit_price(settings: Settings) -> float:
    """One charging unit of the pool's own type on demand, in the config's money."""
    steering = settings.steering
    own = next(iter(steering.offers().values()))
    return own.on_demand_per_hour * steering.billing.charging_unit_s / SECONDS_PER_HOUR


def _estimate(
    state: RunState,
    now: float,
    known: np.ndarray,
    settings: Settings,
    max_instances: int,
    up: int | None,
    dispatch: DispatchEstimate | None = None,
    estimator: str = SIMULATED,
) -> list[PoolSizeEstimate]:
    """The predictors the default policy uses, one update at ``now``, then the model per pool size.

    ``dispatch``: the per-job and per-level latencies when they are known
    (a trace's world); else the dispatch learner's, from the events.
    """
    workflow, steering = state.workflow, settings.steering
    predictor = DistributionPredictor(workflow, settings.prediction)
    predictor.update(state, now)
    prediction = with_known_times(predictor.predict(state, now), state, now, known)
    if dispatch is None:
        learner = DispatchLearner(workflow, settings.prediction.dispatch_prior_s)
        learner.update(state, now)
        dispatch = learner.estimate()
    terms = PoolTerms(steering.slots_per_instance, steering.billing, steering.interval_s, up)
    sizes = list(range(1, max_instances + 1))
    if estimator == LEVELS:
        return estimate_pool_sizes(LevelModel(workflow), state, prediction, dispatch, sizes, now, terms)
    return simulate_pool_sizes(Simulator(workflow, dispatch), state, prediction, sizes, now, terms)


def _scaled(scale: float) -> str:
    return "" if scale == 1.0 else f", x {scale:g} (emulation.time_scale)"


# -- output ------------------------------------------------------------------------


def report_json(report: PlanReport) -> dict[str, Any]:
    data = {"version": JSON_VERSION, **asdict(report)}
    for row in data["sizes"]:
        row["cost"] = None if report.price is None else round(row["cost_units"] * report.price, 2)
    return _clean(data)


def _clean(value: Any) -> Any:
    if isinstance(value, float):
        return round(value, 1) if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: _clean(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_clean(v) for v in value]
    return value


def render_text(report: PlanReport) -> str:
    lines = [
        f"plan for {report.workflow} ({report.kind} {report.input}): {report.tasks} tasks, "
        f"{report.done} done, {report.running} running",
        "  " + _moment(report),
    ]
    if report.sizes:
        lines += _terms(report)
    if report.done == report.tasks:
        lines += ["", f"the workflow has finished, {duration(report.elapsed_s)} after its first event: nothing to plan"]
    if report.sizes:
        lines += ["", *_table(report)]
        if report.sizes[0].p50_makespan_s is None:
            why = f"no stage has {MIN_OBSERVATIONS} measured tasks"
            if report.kind == "trace":
                why = "the trace's task times are known"
            lines.append(f"(no P50/P90: {why}, so the task times have no spread)")
    if report.deadline is not None:
        lines += ["", _deadline_line(report.deadline, report)]
    if report.warnings:
        lines += ["", f"warnings ({len(report.warnings)}):", *(f"  {w}" for w in report.warnings)]
    return "\n".join(lines)


def _deadline_line(fit: DeadlineFit, report: PlanReport) -> str:
    head = f"deadline {fit.given} ({duration(fit.within_s)} from the start, {fit.quantile})"
    if fit.instances is None:
        return (
            f"{head}: no pool size meets it; the fastest ends {duration(fit.makespan_s)} from the start, "
            f"missed by ~{duration(fit.late_s)}"
        )
    return (
        f"{head}: the cheapest pool that meets it is {fit.instances} instance(s), "
        f"{duration(fit.makespan_s)}, {fit.cost_units} unit(s)"
        + ("" if report.price is None else f" ({fit.cost_units * report.price:.2f} {report.currency})")
    )


def _terms(report: PlanReport) -> list[str]:
    return [
        f"  task times: {report.task_times}",
        f"  pool: N instances x {report.slots_per_instance} slots; "
        + (
            "all N up when the workflow starts"
            if report.up_now is None
            else f"{report.up_now} instance(s) running tasks now, the others up {duration(report.launch_lag_s)} "
            "after a launch now"
        ),
        (
            f"  cost: every started charging unit of {duration(report.charging_unit_s)} paid in full, "
            if report.minimum_charge_s is None
            else f"  cost: billed per second (units are seconds), at least {duration(report.minimum_charge_s)} "
            "an instance, "
        )
        + ("from each instance's launch (its boot included)" if report.up_now is None else "from now on")
        + _price_words(report),
    ]


def _price_words(report: PlanReport) -> str:
    if report.price is None:
        return ""
    per_hour = report.price * SECONDS_PER_HOUR / report.charging_unit_s
    if report.currency == DEFAULT_CURRENCY and math.isclose(per_hour, 1.0):
        return "; money in on-demand instance-hours"  # not "priced 1 on-demand hours an instance-hour"
    return f"; priced {per_hour:.4g} {report.currency} an instance-hour"


def _moment(report: PlanReport) -> str:
    if report.now_from == "before-the-run" or report.now is None:
        return "before the run: makespans from the first submit"
    stamp = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(report.now))
    return f"now: {stamp} ({report.now_from}), {duration(report.elapsed_s)} since the first event; makespans from it"


def _table(report: PlanReport) -> list[str]:
    money = report.price is not None
    header = ("instances", "makespan", "units", *(("cost",) if money else ()), "P50", "P90", "P50 units", "P90 units")
    rows = [header]
    for s in report.sizes:
        rows.append(
            (
                str(s.instances),
                duration(s.makespan_s),
                str(s.cost_units),
                *((f"{s.cost_units * (report.price or 0.0):.2f}",) if money else ()),
                "-" if s.p50_makespan_s is None else duration(s.p50_makespan_s),
                "-" if s.p90_makespan_s is None else duration(s.p90_makespan_s),
                "-" if s.p50_cost_units is None else str(s.p50_cost_units),
                "-" if s.p90_cost_units is None else str(s.p90_cost_units),
            )
        )
    widths = [max(len(r[i]) for r in rows) for i in range(len(header))]
    return ["  ".join(cell.rjust(w) for cell, w in zip(r, widths)).rstrip() for r in rows]
