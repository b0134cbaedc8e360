#!/usr/bin/env python3
"""Reproduce the WIRE paper's experiments on every trace of a traces folder.

For every trace (``*.json`` / ``*.json.gz``, sub-folders included), the
paper's setting (3-minute interval = boot lag; u = 1, 15, 30, 60 min) and a
modern-cloud setting (60 s interval = boot lag; u = 1 min), runtime scales
K = 1, 10, 100 and several seeds, replay the six policies (wire, full-site,
pure-reactive, reactive-conserving, pfa, oracle) on 12 instances x 4 slots and
write, in ``docs/results/evaluation/``:

* ``runs.csv``: every policy run;
* ``tables.md``, ``per_trace.md``: medians per setting, scale, interval group,
  policy and u; one row per trace; decision overhead; peak memory;
* ``prediction_errors.csv`` and ``fig4_prediction_error_cdf.png``: WIRE's
  per-task prediction error by stage class (paper Fig. 4);
* ``fig5_cost.png``, ``fig6_relative_time.png``, ``groups_paper.png``;
* ``README.md``: the command, date, machine, runtime, headline numbers and the
  hand-written reading in ``notes.md``.

Finished jobs go to a cache (``.cache/jobs.jsonl`` in the output folder, keyed
by a hash of the package's source): an interrupted run resumes, and a run of
unchanged code only re-renders.

Usage (from the repository root)::

    nice python3 benchmarks/evaluate.py
    python3 benchmarks/evaluate.py --traces some/trace.json --units 60 --scales 1 --seeds 0 \\
        --settings paper --out /tmp/eval
"""

from __future__ import annotations

import argparse
import os
import platform
import resource
import sys
import time
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DEFAULT_OUT = REPO / "docs" / "results" / "evaluation"

try:  # run from a checkout without installing the package
    import wire_daemon  # noqa: F401
except ImportError:
    sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO))  # wire_lab is not installed

from wire_lab.traces import BUNDLED_TRACES  # noqa: E402

DEFAULT_TRACES = BUNDLED_TRACES

import numpy as np  # noqa: E402

from wire_lab.evaluation.report import ReportMeta, library_version, write_report  # noqa: E402
from wire_lab.evaluation.runs import (  # noqa: E402
    MAX_WORKERS,
    SETTINGS,
    ResultCache,
    all_runs,
    find_traces,
    make_jobs,
    pooled_errors,
    run_grid,
    source_fingerprint,
    write_runs_csv,
)

UNITS_MIN = (1.0, 15.0, 30.0, 60.0)
SCALES = (1.0, 10.0, 100.0)
SEEDS = (0, 1, 2)
DEFAULT_TIMEOUT_S = 300.0  # CPU seconds per policy replay; the slowest takes about 30 s


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument(
        "--traces",
        type=Path,
        nargs="+",
        default=[DEFAULT_TRACES],
        metavar="PATH",
        help="trace files or folders, searched recursively (default: the bundled copies, tests/data/traces; "
        "the full public set: its folder)",
    )
    p.add_argument(
        "--settings", nargs="+", choices=list(SETTINGS), default=list(SETTINGS), help="default: paper modern"
    )
    p.add_argument(
        "--units",
        type=float,
        nargs="+",
        default=list(UNITS_MIN),
        metavar="MIN",
        help="charging units in minutes (default 1 15 30 60; the modern setting only has 1)",
    )
    p.add_argument(
        "--scales", type=float, nargs="+", default=list(SCALES), metavar="K", help="runtime scales (default 1 10 100)"
    )
    p.add_argument(
        "--seeds", type=int, nargs="+", default=list(SEEDS), metavar="S", help="emulation seeds (default 0 1 2)"
    )
    p.add_argument(
        "--out", type=Path, default=DEFAULT_OUT, metavar="DIR", help="output folder (default docs/results/evaluation)"
    )
    p.add_argument(
        "--jobs",
        type=int,
        default=MAX_WORKERS,
        metavar="N",
        help=f"worker processes, at most {MAX_WORKERS} (default {MAX_WORKERS})",
    )
    p.add_argument(
        "--timeout",
        type=float,
        default=DEFAULT_TIMEOUT_S,
        metavar="SEC",
        help=f"CPU-time limit per policy replay; 0 = none (default {DEFAULT_TIMEOUT_S:g})",
    )
    p.add_argument("--no-cache", action="store_true", help="neither read nor write the job cache")
    p.add_argument("--no-memory", action="store_true", help="skip the peak-memory replays")
    args = p.parse_args(argv)
    for name in ("settings", "units", "scales", "seeds"):
        setattr(args, name, list(dict.fromkeys(getattr(args, name))))
    return args


def command_line(args: argparse.Namespace) -> str:
    """The command as run, naming no local directory."""
    parts = ["python3 benchmarks/evaluate.py"]
    if [t.resolve() for t in args.traces] != [DEFAULT_TRACES.resolve()]:
        parts += ["--traces", *(_display(t) for t in args.traces)]
    for flag, value, default in (
        ("--settings", args.settings, list(SETTINGS)),
        ("--units", args.units, list(UNITS_MIN)),
        ("--scales", args.scales, list(SCALES)),
        ("--seeds", args.seeds, list(SEEDS)),
    ):
        if list(value) != list(default):
            parts += [flag, *(f"{v:g}" if isinstance(v, float) else str(v) for v in value)]
    if args.out.resolve() != DEFAULT_OUT.resolve():
        parts += ["--out", _display(args.out)]
    if args.timeout != DEFAULT_TIMEOUT_S:
        parts += ["--timeout", f"{args.timeout:g}"]
    return " ".join(parts)


def _display(path: Path) -> str:
    """Relative to the checkout (or its parent), else the bare name."""
    for base, prefix in ((REPO, ""), (REPO.parent, "../")):
        try:
            return prefix + path.resolve().relative_to(base).as_posix()
        except ValueError:
            continue
    return path.name


def machine() -> str:
    model = platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            model = next((line.split(":", 1)[1].strip() for line in f if line.startswith("model name")), model)
    except OSError:
        pass
    return f"{os.cpu_count()} CPU cores ({model}), Python {platform.python_version()}, numpy {np.__version__}"


def grid_line(args: argparse.Namespace, n_traces: int) -> str:
    def fmt(values: Iterable) -> str:
        return ", ".join(f"{v:g}" if isinstance(v, float) else str(v) for v in values)

    units = {s: [u for u in SETTINGS[s].units_min if u in args.units] for s in args.settings}
    settings = "; ".join(f"{SETTINGS[s].label} (u = {fmt(u)} min)" for s, u in units.items() if u)
    traces = f"{n_traces} trace" + ("s" if n_traces != 1 else "")
    return f"{traces}; {settings}; runtime scales K = {fmt(args.scales)}; seeds {fmt(args.seeds)}"


def cpu_seconds() -> float:
    own, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    started = time.perf_counter()
    traces = find_traces(args.traces)
    if not traces:
        print(f"evaluate: no .json or .json.gz trace in {', '.join(map(str, args.traces))}", file=sys.stderr)
        return 2
    jobs = make_jobs(traces, args.settings, args.units, args.scales, args.seeds)
    if not jobs:
        print("evaluate: the selection leaves no job (the modern setting only has u = 1)", file=sys.stderr)
        return 2
    args.out.mkdir(parents=True, exist_ok=True)
    cache = ResultCache(None if args.no_cache else args.out / ".cache" / "jobs.jsonl", source_fingerprint())
    outcome = run_grid(jobs, [] if args.no_memory else traces, cache, args.jobs, args.timeout)
    runs = all_runs(outcome.results)
    write_runs_csv(runs, args.out / "runs.csv")
    meta = ReportMeta(
        command=command_line(args),
        date=datetime.now(UTC).strftime("%Y-%m-%d"),
        version=library_version(REPO),
        machine=machine(),
        wall_s=time.perf_counter() - started,
        cpu_s=sum(r.cpu_s for r in outcome.results),
        reused_jobs=outcome.reused,
        jobs=len(jobs),
        grid=grid_line(args, len(traces)),
    )
    write_report(args.out, meta, runs, pooled_errors(outcome.results), outcome.memory)
    print(
        f"wrote {args.out}: {len(runs)} runs, {meta.wall_s:.0f} s wall, "
        f"{cpu_seconds():.0f} s CPU in this process and its workers"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
