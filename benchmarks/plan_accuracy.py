#!/usr/bin/env python3
"""Issue 13: how close ``wire-daemon plan`` comes to the emulated site's makespan, on every public trace.

Usage (from the repository root)::

    python3 benchmarks/plan_accuracy.py --traces DIR

For every trace of ``DIR`` (``legacy/`` included; by default the copies
bundled in ``tests/data/traces``), pool sizes of 1, 2, 4, 8 and 16 instances
of 4 slots (the makespan-model paper's 4 to 64 slots) and time scales
K = 1, 10 and 100, in the paper's 3-minute setting (u = 60 min, seed 0), it
compares plan's estimate (``service.sizing.plan_trace``: the code of
``wire-daemon plan TRACE``) with the makespan of the emulated site running the
trace on a fixed pool of N instances up from the start (the ``full-site``
baseline, ``runtime/replay.py``). The error of a case is the paper's
|real - estimate| / real. It writes

* ``docs/results/plan.csv``: one row per trace x K x N;
* ``docs/results/plan.md``: the command, the per-trace error (mean and worst),
  the share of cases under 10 % and 20 % error against the paper's figures.

Under a minute on 2 cores for the public traces, so the grid holds every
pool size the paper measured.
"""

from __future__ import annotations

import argparse
import csv
import os
import sys
import time
from collections import defaultdict
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict, dataclass, fields, replace
from datetime import UTC, datetime
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DEFAULT_TRACES = REPO / "tests" / "data" / "traces"  # a fresh clone's; the figures: the public traces
RESULTS = REPO / "docs" / "results"

sys.path.insert(0, str(REPO))  # this checkout's wire_daemon and wire_lab, installed or not

from wire_daemon.emulated.traces import load_trace  # noqa: E402
from wire_daemon.runtime.replay import replay  # noqa: E402
from wire_daemon.runtime.settings import Settings  # noqa: E402
from wire_daemon.service.sizing import plan_trace  # noqa: E402
from wire_lab.evaluation.report import library_version  # noqa: E402
from wire_lab.evaluation.runs import SETTINGS, find_traces, replay_config  # noqa: E402

SIZES = (1, 2, 4, 8, 16)
SCALES = (1.0, 10.0, 100.0)
U_MIN = 60.0
SEED = 0
WORKERS = 2
PAPER_UNDER_20 = 96.8  # % of its 95 experiments (Pietri et al., §V-C)
PAPER_UNDER_10 = 81.0


@dataclass(frozen=True)
class Case:
    """One trace at one time scale on one pool size: a row of plan.csv."""

    trace: str
    tasks: int
    time_scale: float
    instances: int
    slots: int
    real_makespan_s: float
    plan_makespan_s: float
    error: float  # signed: (estimate - real) / real

    @property
    def abs_error(self) -> float:
        return abs(self.error)


def run_job(name: str, path: str, scale: float) -> list[Case]:
    """Plan's estimate for every size, and one full-site replay per size."""
    config = replay_config(SETTINGS["paper"], U_MIN, scale, SEED)
    settings = Settings(prediction=config.prediction, steering=config.steering, emulation=config.emulation)
    estimates = {e.instances: e.makespan_s for e in plan_trace(Path(path), settings, max(SIZES)).sizes}
    workflow = load_trace(path)
    out = []
    for n in SIZES:
        fixed = replace(config, steering=replace(config.steering, max_instances=n))
        real = replay(workflow, "full-site", fixed).makespan_s
        error = (estimates[n] - real) / real
        slots = n * config.steering.slots_per_instance
        out.append(Case(name, workflow.n_tasks, scale, n, slots, round(real, 3), round(estimates[n], 3), error))
    return out


def run_all(traces: Sequence[tuple[str, Path]], workers: int) -> list[Case]:
    jobs = [(name, str(path), k) for name, path in traces for k in SCALES]
    with ProcessPoolExecutor(max_workers=max(1, min(workers, WORKERS))) as pool:
        futures = [pool.submit(run_job, *job) for job in jobs]
        return [case for f in futures for case in f.result()]


def write_csv(cases: Sequence[Case], path: Path) -> None:
    with path.open("w", newline="") as out:
        writer = csv.DictWriter(out, fieldnames=[f.name for f in fields(Case)])
        writer.writeheader()
        for c in cases:
            writer.writerow({**asdict(c), "error": f"{c.error:.4f}"})


def _pct(part: int, whole: int) -> str:
    return f"{100 * part / whole:.1f} %" if whole else "-"


def _summary(cases: Sequence[Case]) -> tuple[str, str, str, str, str]:
    """Mean |error|, worst |error| (where), bias, share under 10 % and 20 %."""
    worst = max(cases, key=lambda c: c.abs_error)
    mean = sum(c.abs_error for c in cases) / len(cases)
    bias = sum(c.error for c in cases) / len(cases)
    under10 = sum(c.abs_error < 0.10 for c in cases)
    under20 = sum(c.abs_error < 0.20 for c in cases)
    return (
        f"{100 * mean:.1f} %",
        f"{100 * worst.abs_error:.1f} % (N = {worst.instances}, K = {worst.time_scale:g})",
        f"{100 * bias:+.1f} %",
        _pct(under10, len(cases)),
        _pct(under20, len(cases)),
    )


def _group_rows(cases: Sequence[Case], key: str, label: str) -> list[str]:
    groups: dict[float, list[Case]] = defaultdict(list)
    for c in cases:
        groups[getattr(c, key)].append(c)
    rows = [f"| {label} | cases | mean error | bias | under 10 % | under 20 % |", "|---|---|---|---|---|---|"]
    for value in sorted(groups):
        mean, _, bias, u10, u20 = _summary(groups[value])
        rows.append(f"| {value:g} | {len(groups[value])} | {mean} | {bias} | {u10} | {u20} |")
    return rows


def page(cases: Sequence[Case], n_traces: int, wall_s: float, default_dir: bool) -> str:
    under20 = sum(c.abs_error < 0.20 for c in cases)
    under10 = sum(c.abs_error < 0.10 for c in cases)
    by_trace: dict[str, list[Case]] = defaultdict(list)
    for c in cases:
        by_trace[c.trace].append(c)
    lines = [
        "# `wire-daemon plan` against the emulated makespan (issue 13)",
        "",
        f"Produced on {datetime.now(UTC):%Y-%m-%d} (UTC), wire_daemon at {library_version(REPO)}, "
        f"{os.cpu_count()} CPU cores, by",
        "",
        "```",
        "python3 benchmarks/plan_accuracy.py" + ("" if default_dir else " --traces TRACES"),
        "```",
        "",
        "with the traces bundled in `tests/data/traces`."
        if default_dir
        else "where TRACES is the directory of the public traces (every file, `legacy/` included).",
        "",
        f"Grid: {n_traces} traces x K = {', '.join(f'{k:g}' for k in SCALES)} (time scale) x N = "
        f"{', '.join(str(n) for n in SIZES)} instances of 4 slots (the paper's 4 to 64 slots): {len(cases)} "
        f"cases; paper setting (3-minute interval and boot lag, u = {U_MIN:g} min, seed {SEED}). "
        f"{wall_s:.0f} s wall time with at most {WORKERS} processes: every pool size the paper measured fits "
        "easily in the 10-minute budget, so none was left out.",
        "",
        "Each case compares `wire-daemon plan TRACE`'s estimated makespan for N instances (the level-based "
        "model of `plan/makespan.py`, on the trace's own task times and the emulated world's dispatch: "
        "`service/sizing.py`, `plan/pool_sizes.py`) with the makespan of the emulated site running the trace "
        "on a fixed pool of N instances up from the start (the `full-site` baseline of `runtime/replay.py`). "
        "The error is the paper's |real - estimate| / real; the bias is the mean signed error "
        "(positive: the estimate is too long). `plan.csv` holds every case.",
        "",
        "## Headline",
        "",
        "| measure | plan | the makespan-model paper |",
        "|---|---|---|",
        f"| cases under 20 % error | {under20} of {len(cases)} ({_pct(under20, len(cases))}) | 92 of 95 "
        f"({PAPER_UNDER_20:g} %) |",
        f"| cases under 10 % error | {under10} of {len(cases)} ({_pct(under10, len(cases))}) | 77 of 95 "
        f"({PAPER_UNDER_10:g} %) |",
        f"| mean error | {_summary(cases)[0]} | - |",
        "",
        *_comparison(cases, by_trace),
        "",
        "## Per trace",
        "",
        "| trace | tasks | cases | mean error | worst error | bias | under 10 % | under 20 % |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for name in sorted(by_trace):
        group = by_trace[name]
        mean, worst, bias, u10, u20 = _summary(group)
        lines.append(f"| {name} | {group[0].tasks} | {len(group)} | {mean} | {worst} | {bias} | {u10} | {u20} |")
    lines += ["", "## By pool size", "", *_group_rows(cases, "instances", "N"), ""]
    lines += ["## By time scale", "", *_group_rows(cases, "time_scale", "K"), ""]
    lines += NOTES
    return "\n".join(lines) + "\n"


def _comparison(cases: Sequence[Case], by_trace: dict[str, list[Case]]) -> list[str]:
    """Where plan meets the paper's share of cases under 20 % error, and where it does not."""
    small = [c for c in cases if c.instances <= 2]
    wide = [c for c in cases if c.instances > 2]
    clean = sorted(name for name, group in by_trace.items() if all(c.abs_error < 0.20 for c in group))
    ok = sum(c.abs_error < 0.20 for c in cases)
    verdict = "meets" if 100 * ok / len(cases) >= PAPER_UNDER_20 else "falls short of"
    return [
        f"Overall plan {verdict} the paper's {PAPER_UNDER_20:g} %. On 1 or 2 instances "
        f"{_pct(sum(c.abs_error < 0.20 for c in small), len(small))} of the cases are under 20 % error, "
        f"on 4 to 16 instances {_pct(sum(c.abs_error < 0.20 for c in wide), len(wide))}; "
        f"{len(clean)} of the {len(by_trace)} traces have every case under 20 %. The notes below say why."
    ]


NOTES = [
    "## Reading it",
    "",
    "- **The setting differs from the paper's.** The paper compared its model with real Pegasus runs on EC2 "
    "(Montage, Epigenome, Broadband; 4 to 64 slots) and added a fixed 25 s per level for DAGMan and Condor. "
    "Here the reference is the emulated site and the model knows its dispatch exactly as configured: a job "
    "starts only at a negotiation cycle (`emulation.negotiation_interval_s`), so on a busy slot a task of "
    "occupancy o loses ceil(o / cycle) x cycle - o (charged to its level's work), and a level waits "
    "`submit_delay_s` plus half a cycle (`plan/pool_sizes.py`, `emulated/site.py: world_dispatch`).",
    "- **What is left is the model's own behaviour.** A level ends when its longest task does, and the next "
    "starts only then; in the emulated run (as on a real pool) a task starts as soon as its own parents are "
    "done. Where the longest tasks of successive levels lie on different chains, the sum of the levels' "
    "longest tasks exceeds the critical path and the estimate is too long: wide pools on workflows of many "
    "short levels (Montage 2MASS, Seismology at 16 instances) and the Epigenomics run whose lanes are "
    "longest (ilmn-6seq). "
    "Where a level is narrower than the pool and its tasks of unequal length, "
    "max(work / slots, longest) can also fall short of the real packing (1000Genome, SRA Search at 2 to 4 "
    "instances).",
    "- **Before a run only.** A trace is planned on its own task times, so these figures measure the model, "
    "not the predictions; during a run `plan` feeds the same model with the online predictions (and gives "
    "P50/P90), whose errors `docs/results/policy.md` reports.",
]


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description="plan's estimated makespan against the emulated site's, per trace")
    p.add_argument(
        "--traces",
        type=Path,
        default=DEFAULT_TRACES,
        help="a directory of WfFormat traces (default: the bundled ones, tests/data/traces)",
    )
    p.add_argument("--out", type=Path, default=RESULTS, help="where plan.md and plan.csv go (default docs/results)")
    p.add_argument("--workers", type=int, default=WORKERS, help=f"processes (at most {WORKERS})")
    args = p.parse_args(argv)
    if not args.traces.is_dir():
        print(f"plan_accuracy: --traces {args.traces}: not a directory", file=sys.stderr)
        return 2
    traces = find_traces([args.traces])
    if not traces:
        print(f"plan_accuracy: --traces {args.traces}: no .json or .json.gz trace in it", file=sys.stderr)
        return 2
    started = time.perf_counter()
    cases = run_all(traces, args.workers)
    wall = time.perf_counter() - started
    args.out.mkdir(parents=True, exist_ok=True)
    write_csv(cases, args.out / "plan.csv")
    default_dir = args.traces.resolve() == DEFAULT_TRACES.resolve()
    (args.out / "plan.md").write_text(page(cases, len(traces), wall, default_dir))
    under20 = sum(c.abs_error < 0.20 for c in cases)
    print(f"{len(cases)} cases, {under20} under 20 % error; wrote {args.out / 'plan.md'} in {wall:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
