"""What the priority boost (first five ready tasks of each stage) does, on the emulated site.

Usage: python3 benchmarks/boost_effect.py [TRACE ...] [--seeds 0 1 2] [--time-scale 10]
                                          [--charging-unit 15] [--out FILE]

For every trace it replays WIRE with and without the boost on the same seeds,
and reports how much earlier each stage's first task completes, the
prediction error, the cost and the makespan. Prints markdown; --out also
writes it to a file.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from datetime import date
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the lab package is not installed

from wire_daemon.core.config import EmulationConfig, ReplayConfig, SteeringConfig
from wire_daemon.emulated.traces import bundled_trace_path, load_trace
from wire_daemon.runtime.replay import ReplayResult, replay
from wire_lab.traces import BUNDLED_TRACES, find_traces, traces_flag


def traces(named: list[Path], folder: Path) -> list[Path]:
    if named:
        return named
    return find_traces(folder) or [bundled_trace_path()]


def run_pair(path: Path, seed: int, scale: float, unit_min: float) -> tuple[ReplayResult, ReplayResult]:
    workflow = load_trace(path)
    config = ReplayConfig(
        steering=SteeringConfig(charging_unit_s=unit_min * 60.0),
        emulation=EmulationConfig(time_scale=scale, seed=seed),
    )
    return replay(workflow, "wire", config, boost=True), replay(workflow, "wire", config, boost=False)


def mean_abs_error(result: ReplayResult, stage_class: str) -> float:
    for e in result.errors:
        if e.stage_class == stage_class and e.tasks:
            return e.mean_abs
    return float("nan")


def earlier_by(boosted: ReplayResult, plain: ReplayResult) -> list[float]:
    """Per stage: seconds by which the first completion arrives earlier with the boost."""
    common = boosted.first_completion_s.keys() & plain.first_completion_s.keys()
    return [plain.first_completion_s[s] - boosted.first_completion_s[s] for s in sorted(common)]


def row(path: Path, seeds: list[int], scale: float, unit_min: float) -> str:
    gains, costs, spans, errs = [], [], [], {c: ([], []) for c in ("short", "medium", "long")}
    for seed in seeds:
        boosted, plain = run_pair(path, seed, scale, unit_min)
        gains += earlier_by(boosted, plain)
        costs.append((boosted.cost_units, plain.cost_units))
        spans.append((boosted.makespan_s, plain.makespan_s))
        for c, (on, off) in errs.items():
            on.append(mean_abs_error(boosted, c))
            off.append(mean_abs_error(plain, c))
    g = np.array(gains)
    cost_on, cost_off = (statistics.mean(x) for x in zip(*costs))
    span_on, span_off = (statistics.mean(x) for x in zip(*spans))
    err = " / ".join(f"{_nanmean(on)} vs {_nanmean(off)}" for on, off in errs.values())
    return (
        f"| {path.name} | {np.mean(g):.1f} | {np.median(g):.1f} | {np.max(g):.1f} "
        f"| {np.mean(g > 0) * 100:.0f}% / {np.mean(g < 0) * 100:.0f}% "
        f"| {cost_on:.1f} vs {cost_off:.1f} | {span_on:.0f} vs {span_off:.0f} | {err} |"
    )


def _nanmean(values: list[float]) -> str:
    arr = np.array(values, dtype=float)
    return "-" if np.all(np.isnan(arr)) else f"{np.nanmean(arr):.2f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("traces", nargs="*", type=Path, help="trace files (default: every trace of --traces)")
    parser.add_argument(
        "--traces",
        dest="folder",
        type=Path,
        default=BUNDLED_TRACES,
        metavar="DIR",
        help="traces folder (default: the bundled copies, tests/data/traces; the full public set: its folder)",
    )
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    parser.add_argument("--time-scale", type=float, default=10.0)
    parser.add_argument("--charging-unit", type=float, default=15.0, metavar="MIN")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    lines = [
        "# The priority boost: first five ready tasks of each stage",
        "",
        f"Command: `python3 benchmarks/boost_effect.py{traces_flag(args.folder)} "
        f"--seeds {' '.join(map(str, args.seeds))} "
        f"--time-scale {args.time_scale:g} --charging-unit {args.charging_unit:g}` "
        f"({date.today().isoformat()}). WIRE policy, with and without the boost, same seeds; "
        "3-minute interval, 4 slots x 12 instances.",
        "",
        "Columns: how much earlier (s) each stage's first task completes with the boost "
        "(mean, median, max over stages and seeds); "
        "share of stages where it is earlier / later; mean cost and makespan with vs without; mean |prediction error| "
        "with vs without for short (s) / medium (s) / long (relative) stages.",
        "",
        "| trace | earlier mean | median | max | earlier / later "
        "| cost (units) | makespan (s) | error short / medium / long |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for path in traces(args.traces, args.folder):
        lines.append(row(path, args.seeds, args.time_scale, args.charging_unit))
        print(lines[-1], flush=True)
    text = "\n".join(lines) + "\n"
    if args.out:
        args.out.write_text(text)
    print(text)


if __name__ == "__main__":
    main()
