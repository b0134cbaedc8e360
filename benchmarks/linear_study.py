#!/usr/bin/env python3
"""Reproduce the WIRE paper's linear-workflow simulations (§IV-A, Fig. 2 and Fig. 3).

One stage of N identical tasks of runtime R runs on the emulated site under the
``wire`` policy, in the idealised setting of §III-E: one instance at the start,
one slot per instance, a pool that may grow to N, no boot lag, no DAGMan submit
delay and a MAPE interval ``dt`` far below U/N and R (bounded by an iteration
budget, see ``choose_dt``). Each point runs with both Algorithm-3 packings
("paper", the literal algorithm, and "fluid", the §III-E arithmetic).

Measures, as §IV-A defines them:

* resource usage ratio = charged instance-units / (N R / U), the cost of one
  instance running every task in sequence;
* completion time ratio = makespan / R, the time of N instances at once.

Writes into ``--out`` (default ``docs/results``): ``linear_r_gt_u.csv`` and
``linear_fig2.png`` (R > U), ``linear_r_le_u.csv`` and ``linear_fig3.png``
(R <= U), ``linear_extra.csv`` (R/U = 1.1 and 1.25), and prints a table.

Usage (from the repository root)::

    python3 benchmarks/linear_study.py            # full sweep
    python3 benchmarks/linear_study.py --quick    # N in {10, 100}, a few points
"""

from __future__ import annotations

import argparse
import csv
import os
import sys
import time
from collections.abc import Iterable, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "docs" / "results"

try:  # run from a checkout without installing the package
    import wire_daemon  # noqa: F401
except ImportError:
    sys.path.insert(0, str(REPO))

from wire_daemon.core.config import (
    EmulationConfig,
    PredictionConfig,
    ReplayConfig,
    SteeringConfig,
)
from wire_daemon.core.workflow import TaskSpec, Workflow, build_workflow
from wire_daemon.loop.mape import DecisionRecord
from wire_daemon.runtime.replay import replay

if TYPE_CHECKING:
    from matplotlib.axes import Axes

UNIT_S = 100.0  # U; the ratios are scale-free
SIZES = (10, 100, 1000)
PACKINGS = ("paper", "fluid")
R_GT_U = (1.5, 2, 3, 4, 5, 10, 20, 50, 100, 200, 400)  # Fig. 2 x-axis: R/U
R_LE_U = (1, 2, 5, 10, 20, 50, 100, 200, 500, 1000)  # Fig. 3 x-axis: U/R
EXTRA_R_GT_U = (1.1, 1.25)  # below the paper's smallest R/U: see linear_study.md
QUICK_SIZES = (10, 100)
QUICK_R_GT_U = (1.5, 2, 10)
QUICK_R_LE_U = (1, 10, 100)
DT_FRACTION = 0.25  # dt = min(U/N, R) * this, unless the iteration budget forbids it
FINE_FRACTION = 0.025  # dt = U/(40 N) where the budget allows: the control lag dt/R stays below 0.2% of R
ITERATION_BUDGET = 20_000  # per run, for N <= 100
LARGE_N = 1000
LARGE_N_ITERATION_BUDGET = 2_500  # per run for N = 1000: each iteration there costs ~4 ms
RESOURCE_BOUND = 4 / 3  # the paper's "1.33x" (= 2 units / 1.5 at R/U = 1.5)
COMPLETION_BOUND = 5 / 3  # the paper's "1.67x" (= (U + R) / R at R/U = 1.5)

SWEEPS = {  # name -> (CSV file, ratio column, figure file, figure title)
    "r_gt_u": ("linear_r_gt_u.csv", "r_over_u", "linear_fig2.png", "R > U (paper Fig. 2)"),
    "r_le_u": ("linear_r_le_u.csv", "u_over_r", "linear_fig3.png", "R <= U (paper Fig. 3)"),
    "extra": ("linear_extra.csv", "r_over_u", None, "R/U just above 1"),
}
CSV_COLUMNS = (
    "n_tasks",
    "{ratio}",
    "packing",
    "dt_s",
    "cost_units",
    "optimal_units",
    "resource_ratio",
    "makespan_s",
    "completion_ratio",
    "peak_instances",
)


@dataclass(frozen=True)
class Point:
    """One simulation to run: a sweep, its x value (R/U or U/R), N and a packing."""

    sweep: str
    x: float
    n_tasks: int
    packing: str

    @property
    def runtime_s(self) -> float:
        return UNIT_S / self.x if self.sweep == "r_le_u" else UNIT_S * self.x


@dataclass(frozen=True)
class Outcome:
    """What one run measured, with the ratios §IV-A plots."""

    sweep: str
    x: float
    n_tasks: int
    packing: str
    dt_s: float
    cost_units: int
    optimal_units: float
    resource_ratio: float
    makespan_s: float
    completion_ratio: float
    peak_instances: int
    iterations: int
    restarts: int
    stranded_iterations: int  # see ``stranded_iterations``; 0 in a sound run
    wall_s: float


# -- one run --------------------------------------------------------------------


def linear_stage(n_tasks: int, runtime_s: float) -> Workflow:
    """One stage of identical tasks with no files, so occupancy is exactly R."""
    specs = [TaskSpec(f"t{i}", "stage", runtime_s=runtime_s) for i in range(n_tasks)]
    return build_workflow("linear", "linear-study", specs)


def iteration_budget(n_tasks: int) -> int:
    """Iterations a run may take; N = 1000 gets fewer because each one costs ~N."""
    return LARGE_N_ITERATION_BUDGET if n_tasks >= LARGE_N else ITERATION_BUDGET


def choose_dt(n_tasks: int, runtime_s: float, unit_s: float = UNIT_S) -> float:
    """The MAPE interval: well below U/N and R, but coarse enough to fit the budget.

    Continuous monitoring needs dt << U/N (here U/(40 N) where the budget allows), the time in which the §III-E
    analysis adds one instance. A run lasts about R + U (R > U) up to a few U
    (R <= U); 2 (R + U) stands for it in the budget, which may coarsen dt past
    U/N (the dt used is in the CSV). dt never exceeds R/4 whatever the budget:
    Condor negotiates every dt/2, so a coarser dt would stretch each task's
    slot occupancy by up to a negotiation cycle.
    """
    fine = min(unit_s / n_tasks * FINE_FRACTION, runtime_s * DT_FRACTION)
    budgeted = max(fine, 2.0 * (runtime_s + unit_s) / iteration_budget(n_tasks))
    return min(budgeted, runtime_s * DT_FRACTION)


def study_config(n_tasks: int, dt_s: float, packing: str, unit_s: float = UNIT_S) -> ReplayConfig:
    """The §III-E idealisation: P = 1, l = 1, pool up to N, instantaneous control."""
    steering = SteeringConfig(
        charging_unit_s=unit_s,
        interval_s=dt_s,
        slots_per_instance=1,
        max_instances=n_tasks,
        release_guard_s=0.0,
        boost_first_tasks=0,
        packing=packing,
    )
    emulation = EmulationConfig(
        boot_lag_s=0.0, negotiation_interval_s=dt_s / 2, submit_delay_s=0.0, initial_instances=1
    )
    return ReplayConfig(PredictionConfig(), steering, emulation)


def stranded_iterations(records: Sequence[DecisionRecord]) -> int:
    """MAPE iterations before the first completion with an up instance idle and tasks queued.

    All N tasks are queued at time 0, nothing is released before a task ends
    and instances boot at once, so until the first completion every instance
    must run a task from the negotiation cycle it was launched in. An iteration
    that sees fewer running tasks than instances while tasks wait reveals an
    instance Condor (the emulated site) left idle: such runs are not evidence
    about the policy (see linear_study.md, "Emulator defect").
    """
    return sum(1 for r in records if r.done == 0 and r.idle > 0 and r.running < r.pool)


def run_point(
    n_tasks: int, runtime_s: float, packing: str, dt_s: float | None = None, unit_s: float = UNIT_S
) -> Outcome:
    """Simulate one stage and return the §IV-A ratios (the core the test exercises)."""
    dt = choose_dt(n_tasks, runtime_s, unit_s) if dt_s is None else dt_s
    result = replay(linear_stage(n_tasks, runtime_s), "wire", study_config(n_tasks, dt, packing, unit_s), boost=False)
    optimal = n_tasks * runtime_s / unit_s
    return Outcome(
        sweep="",
        x=float("nan"),
        n_tasks=n_tasks,
        packing=packing,
        dt_s=dt,
        cost_units=result.cost_units,
        optimal_units=optimal,
        resource_ratio=result.cost_units / optimal,
        makespan_s=result.makespan_s,
        completion_ratio=result.makespan_s / runtime_s,
        peak_instances=result.peak_instances,
        iterations=result.iterations,
        restarts=result.restarts,
        stranded_iterations=stranded_iterations(result.records),
        wall_s=result.wall_s,
    )


def run_study_point(point: Point) -> Outcome:
    """``run_point`` tagged with its sweep and x value (picklable for the pool)."""
    out = run_point(point.n_tasks, point.runtime_s, point.packing)
    return Outcome(point.sweep, point.x, **{k: v for k, v in vars(out).items() if k not in ("sweep", "x")})


# -- the sweep ------------------------------------------------------------------


def plan_points(quick: bool) -> list[Point]:
    """Every (sweep, x, N, packing) to run; ``quick`` keeps a small smoke subset."""
    sizes = QUICK_SIZES if quick else SIZES
    sweeps = {
        "r_gt_u": QUICK_R_GT_U if quick else R_GT_U,
        "r_le_u": QUICK_R_LE_U if quick else R_LE_U,
        "extra": EXTRA_R_GT_U,
    }
    return [
        Point(sweep, float(x), n, packing)
        for sweep, xs in sweeps.items()
        for n in sizes
        for x in xs
        for packing in PACKINGS
    ]


def expected_work(point: Point) -> float:
    """Rough cost of a run (iterations x pool size), to start the longest first."""
    dt = choose_dt(point.n_tasks, point.runtime_s)
    return 2.0 * (point.runtime_s + UNIT_S) / dt * point.n_tasks


def run_all(points: Sequence[Point], jobs: int) -> list[Outcome]:
    """Run the points on ``jobs`` processes, longest first so the cores stay busy."""
    ordered = sorted(points, key=expected_work, reverse=True)
    if jobs <= 1:
        outcomes = [run_study_point(p) for p in ordered]
    else:
        with ProcessPoolExecutor(max_workers=jobs) as pool:
            outcomes = list(pool.map(run_study_point, ordered))
    return sorted(outcomes, key=lambda o: (o.sweep, o.n_tasks, o.x, PACKINGS.index(o.packing)))


# -- outputs --------------------------------------------------------------------


def _fmt(value: float | str) -> str:
    return f"{value:.10g}" if isinstance(value, float) else str(value)


def write_csv(path: Path, outcomes: Iterable[Outcome], ratio_column: str) -> None:
    """One row per run, with the x value under its sweep's column name."""
    columns = [c.format(ratio=ratio_column) for c in CSV_COLUMNS]
    with path.open("w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(columns)
        for o in outcomes:
            values = {**vars(o), ratio_column: o.x}
            writer.writerow([_fmt(values[c]) for c in columns])


def plot_sweep(path: Path, outcomes: Sequence[Outcome], x_label: str, title: str, sizes: Sequence[int]) -> None:
    """Three panels (one per N) like the paper's figures, both ratios on twin axes."""
    import matplotlib  # here, not at the top: the simulation core needs no plotting

    matplotlib.use("Agg")  # files only: the study runs headless
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(sizes), figsize=(5.2 * len(sizes), 5.0), squeeze=False)
    log_y = max(max(o.resource_ratio, o.completion_ratio) for o in outcomes) > 4
    for ax, n in zip(axes[0], sizes):
        _plot_panel(ax, [o for o in outcomes if o.n_tasks == n], n, x_label, log_y)
    handles, labels = _legend_entries(log_y, any(o.stranded_iterations for o in outcomes))
    fig.legend(handles, labels, loc="lower center", ncol=3, frameon=False)
    fig.suptitle(f"WIRE resource steering on one stage of N tasks, {title}")
    fig.tight_layout(rect=(0, 0.13, 1, 0.95))
    fig.savefig(path, dpi=120)
    plt.close(fig)


def _plot_panel(ax: Axes, outcomes: Sequence[Outcome], n: int, x_label: str, log_y: bool) -> None:
    """Left axis: resource ratio (blue); right axis: completion ratio (red)."""
    right = ax.twinx()
    styles = {"paper": ("-", "o"), "fluid": ("--", "x")}
    for packing, (line, marker) in styles.items():
        rows = sorted((o for o in outcomes if o.packing == packing), key=lambda o: o.x)
        xs = [o.x for o in rows]
        ax.plot(xs, [o.resource_ratio for o in rows], line, marker=marker, color="tab:blue")
        right.plot(xs, [o.completion_ratio for o in rows], line, marker=marker, color="tab:red")
        _ring_stranded(ax, right, rows)
    if not log_y:  # Fig. 2: show the paper's bounds, on a common scale
        ax.axhline(RESOURCE_BOUND, color="tab:blue", linestyle=":", linewidth=1)
        right.axhline(COMPLETION_BOUND, color="tab:red", linestyle=":", linewidth=1)
    _style_axes(ax, right, outcomes, log_y)
    ax.set_xscale("log")
    ax.set_title(f"N = {n}")
    ax.set_xlabel(x_label)
    ax.set_ylabel("resource usage ratio (cost / NR/U)", color="tab:blue")
    right.set_ylabel("completion time ratio (makespan / R)", color="tab:red")


def _ring_stranded(ax: Axes, right: Axes, rows: Sequence[Outcome]) -> None:
    """Circle the runs in which the emulated site left an instance idle (not the policy's doing)."""
    bad = [o for o in rows if o.stranded_iterations]
    ring: dict[str, Any] = {
        "marker": "o",
        "markersize": 13,
        "markerfacecolor": "none",
        "markeredgecolor": "grey",
        "linestyle": "none",
    }
    ax.plot([o.x for o in bad], [o.resource_ratio for o in bad], **ring)
    right.plot([o.x for o in bad], [o.completion_ratio for o in bad], **ring)


def _style_axes(ax: Axes, right: Axes, outcomes: Sequence[Outcome], log_y: bool) -> None:
    """Both y axes share one range so a reader can compare them against 1."""
    values = [v for o in outcomes for v in (o.resource_ratio, o.completion_ratio)]
    if log_y:
        low, high = min(values) / 1.5, max(values) * 1.5
        for a in (ax, right):
            a.set_yscale("log")
    else:
        low, high = 0.95, max(max(values), COMPLETION_BOUND) + 0.08
    for a, color in ((ax, "tab:blue"), (right, "tab:red")):
        a.set_ylim(low, high)
        a.tick_params(axis="y", colors=color)
    ax.grid(True, which="major", alpha=0.3)


def _legend_entries(log_y: bool, stranded: bool) -> tuple[list, list[str]]:
    """Proxy lines: colour = measure, line style = packing, dotted = paper bound."""
    from matplotlib.lines import Line2D

    entries = [
        (Line2D([], [], color="tab:blue", linestyle="-", marker="o"), "resource ratio, paper packing"),
        (Line2D([], [], color="tab:blue", linestyle="--", marker="x"), "resource ratio, fluid packing"),
        (Line2D([], [], color="tab:red", linestyle="-", marker="o"), "completion ratio, paper packing"),
        (Line2D([], [], color="tab:red", linestyle="--", marker="x"), "completion ratio, fluid packing"),
    ]
    if not log_y:
        entries.append((Line2D([], [], color="grey", linestyle=":"), "paper bound (4/3, 5/3)"))
    if stranded:
        ring = Line2D(
            [], [], marker="o", markersize=10, markerfacecolor="none", markeredgecolor="grey", linestyle="none"
        )
        entries.append((ring, "instance left idle by the emulated site (defect)"))
    return [h for h, _ in entries], [label for _, label in entries]


def print_table(outcomes: Sequence[Outcome]) -> None:
    """The numbers behind the CSVs, one line per run, grouped by sweep."""
    header = (
        f"{'sweep':<7}{'N':>6}{'x':>8} {'packing':<7}{'dt_s':>9}{'cost':>8}{'optimal':>10}"
        f"{'res.ratio':>10}{'makespan':>11}{'compl.ratio':>12}{'peak':>6}{'restarts':>9}{'iters':>7}{'stranded':>9}{'wall_s':>8}"
    )
    print(header)
    for o in outcomes:
        print(
            f"{o.sweep:<7}{o.n_tasks:>6}{o.x:>8g} {o.packing:<7}{o.dt_s:>9.4g}{o.cost_units:>8}{o.optimal_units:>10.4g}"
            f"{o.resource_ratio:>10.4f}{o.makespan_s:>11.2f}{o.completion_ratio:>12.4f}{o.peak_instances:>6}"
            f"{o.restarts:>9}{o.iterations:>7}{o.stranded_iterations:>9}{o.wall_s:>8.2f}"
        )


def bound_summary(outcomes: Sequence[Outcome]) -> list[str]:
    """Per N and packing, the worst R > U ratios against 4/3 and 5/3, over sound runs."""
    lines = []
    rows = [o for o in outcomes if o.sweep == "r_gt_u"]
    for n in sorted({o.n_tasks for o in rows}):
        for packing in PACKINGS:
            mine = [o for o in rows if o.n_tasks == n and o.packing == packing]
            sound = [o for o in mine if o.stranded_iterations == 0]
            head = f"N={n:<5} {packing:<6} {len(sound):>2}/{len(mine):<2} sound"
            if not sound:
                lines.append(f"{head}  (no sound run)")
                continue
            res = max(sound, key=lambda o: o.resource_ratio)
            com = max(sound, key=lambda o: o.completion_ratio)
            lines.append(
                f"{head}  max resource {res.resource_ratio:.4f} "
                f"(R/U={res.x:g}, {res.resource_ratio - RESOURCE_BOUND:+.4f}"
                f" vs 4/3)  max completion {com.completion_ratio:.4f} (R/U={com.x:g},"
                f" {com.completion_ratio - COMPLETION_BOUND:+.4f} vs 5/3)"
            )
    return lines


def write_outputs(out_dir: Path, outcomes: Sequence[Outcome], sizes: Sequence[int]) -> None:
    """CSV per sweep, and the two figures."""
    out_dir.mkdir(parents=True, exist_ok=True)
    for sweep, (csv_name, column, png_name, title) in SWEEPS.items():
        rows = [o for o in outcomes if o.sweep == sweep]
        if not rows:
            continue
        write_csv(out_dir / csv_name, rows, column)
        if png_name is not None:
            x_label = "R / U" if column == "r_over_u" else "U / R"
            plot_sweep(out_dir / png_name, rows, x_label, title, sizes)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=RESULTS, help="output folder (default: docs/results)")
    parser.add_argument("--quick", action="store_true", help="N in {10, 100} and a few points: a smoke run")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="worker processes (default: all cores)")
    args = parser.parse_args(argv)
    started = time.perf_counter()
    outcomes = run_all(plan_points(args.quick), args.jobs)
    write_outputs(args.out, outcomes, QUICK_SIZES if args.quick else SIZES)
    print_table(outcomes)
    print("\nR > U (R/U >= 1.5), worst ratios of the sound runs (stranded = 0) against the paper's bounds:")
    print("\n".join(bound_summary(outcomes)))
    flagged = [o for o in outcomes if o.stranded_iterations]
    print(f"runs with an instance left idle by the emulated site (stranded > 0): {len(flagged)} of {len(outcomes)}")
    print(f"{len(outcomes)} runs in {time.perf_counter() - started:.1f} s wall on {args.jobs} process(es)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
