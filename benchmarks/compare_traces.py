#!/usr/bin/env python3
"""Compare the five scaling policies on every public trace.

For every trace of the traces folder (``*.json`` / ``*.json.gz``, sub-folders
such as ``legacy/`` included), every charging unit ``u`` and every time scale,
run ``wire_daemon.runtime.replay.compare`` with the paper's setting (interval = boot
lag = 3 min, 4 slots per instance, at most 12 instances) and write

* ``docs/results/traces_compare.csv``: one row per trace x u x policy x time
  scale x seed;
* ``docs/results/traces_compare.md``: the command, the date, one table per
  time scale and u (rows grouped by how many intervals the full-site makespan
  spans), the observations and the runtime.

The observations have two parts: the hand-written reading of the numbers, kept
in ``docs/results/traces_compare.notes.md`` (included as is when it exists),
and lists of runs computed here from the results (where WIRE does not beat
full-site, where a reactive baseline is cheaper, how the oracle compares).

Usage (from the repository root)::

    python3 benchmarks/compare_traces.py --time-scale 1 10 100
"""

from __future__ import annotations

import argparse
import csv
import os
import resource
import sys
import time
from collections import defaultdict
from collections.abc import Iterable, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import asdict, dataclass, fields, replace
from datetime import UTC, datetime
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "docs" / "results"

try:  # run from a checkout without installing the package
    import wire_daemon  # noqa: F401
except ImportError:
    sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO))  # wire_lab is not installed

from wire_lab.traces import BUNDLED_TRACES  # noqa: E402

DEFAULT_TRACES = BUNDLED_TRACES

from wire_daemon.core.config import EmulationConfig, PredictionConfig, ReplayConfig, SteeringConfig  # noqa: E402
from wire_daemon.runtime.replay import ReplayResult, compare  # noqa: E402
from wire_lab.evaluation.report import library_version  # noqa: E402

# One definition of each run-level helper, shared with the evaluation.
from wire_lab.evaluation.runs import GROUPS, ReplayTimeout, _csv_value, _json_bytes, _workflow, cpu_limit, group_of  # noqa: E402

POLICIES = ("wire", "full-site", "pure-reactive", "reactive-conserving", "oracle")
REACTIVE = ("pure-reactive", "reactive-conserving")
UNITS_MIN = (1.0, 15.0, 30.0, 60.0)
INTERVAL_S = 180.0  # the MAPE interval and the boot lag (the paper's 3 minutes)
SLOTS = 4
MAX_INSTANCES = 12
EPS_S = 1e-6  # makespans closer than this are equal
DEFAULT_TIMEOUT_S = 20.0  # CPU seconds; the slowest policy replay that ends takes ~11 s


@dataclass(frozen=True)
class Job:
    """One ``compare()`` call: a trace at one charging unit, time scale and seed."""

    trace: str  # path relative to the traces folder, POSIX style
    path: str
    u_min: float
    time_scale: float
    seed: int


@dataclass(frozen=True)
class Row:
    """One line of the CSV: one policy's result on one job (the measures are None if it timed out)."""

    trace: str
    tasks: int
    time_scale: float
    seed: int
    fullsite_makespan_s: float
    intervals: float
    u_min: float
    policy: str
    status: str  # "ok", or "timeout" when the run did not end within the CPU-time limit
    cost_units: int | None = None
    makespan_s: float | None = None
    relative_time: float | None = None
    utilization: float | None = None
    restarts: int | None = None
    peak_instances: int | None = None

    @property
    def ok(self) -> bool:
        return self.status == "ok"


@dataclass(frozen=True)
class Timing:
    job: Job
    policy: str
    wall_s: float
    cpu_s: float
    timed_out: bool = False


# --- running -----------------------------------------------------------------


def paper_config(u_min: float, time_scale: float, seed: int) -> ReplayConfig:
    steering = SteeringConfig(
        charging_unit_s=u_min * 60.0, interval_s=INTERVAL_S, slots_per_instance=SLOTS, max_instances=MAX_INSTANCES
    )
    emulation = EmulationConfig(boot_lag_s=INTERVAL_S, time_scale=time_scale, seed=seed)
    return ReplayConfig(PredictionConfig(), steering, emulation)


def run_job(job: Job, limit_s: float) -> tuple[list[Row], list[Timing]]:
    """Run every policy on one job (in a worker process).

    Each policy gets its own ``compare()`` call (which adds the full-site run
    that relative time needs), so a replay that never ends costs one time
    limit and leaves the other policies' results intact.
    """
    workflow = _workflow(job.path)
    config = paper_config(job.u_min, job.time_scale, job.seed)
    results: dict[str, ReplayResult | None] = {}
    timings: list[Timing] = []
    for name in POLICIES:
        started, cpu = time.perf_counter(), time.process_time()
        try:
            with cpu_limit(limit_s):
                results[name] = compare(workflow, config, (name,))[name]
        except ReplayTimeout:
            results[name] = None
        wall, cpu = time.perf_counter() - started, time.process_time() - cpu
        timings.append(Timing(job, name, wall, cpu, results[name] is None))
    best = results["full-site"]
    if best is None:
        raise RuntimeError(f"the full-site replay of {job.trace} did not end within {limit_s:g} CPU s")
    return [_row(job, workflow.n_tasks, best.makespan_s, name, r) for name, r in results.items()], timings


def _row(job: Job, tasks: int, best: float, policy: str, r: ReplayResult | None) -> Row:
    base = Row(
        trace=job.trace,
        tasks=tasks,
        time_scale=job.time_scale,
        seed=job.seed,
        fullsite_makespan_s=round(best, 3),
        intervals=round(best / INTERVAL_S, 4),
        u_min=job.u_min,
        policy=policy,
        status="timeout",
    )
    if r is None:
        return base
    return replace(
        base,
        status="ok",
        cost_units=r.cost_units,
        makespan_s=round(r.makespan_s, 3),
        relative_time=round(r.relative_time, 4),
        utilization=round(r.utilization, 4),
        restarts=r.restarts,
        peak_instances=r.peak_instances,
    )


def find_traces(folder: Path) -> list[Path]:
    traces = sorted(p for p in folder.rglob("*") if p.is_file() and p.name.endswith((".json", ".json.gz")))
    if not traces:
        raise SystemExit(f"compare_traces: no .json or .json.gz trace under {folder}")
    return traces


def make_jobs(folder: Path, traces: Sequence[Path], args: argparse.Namespace) -> list[Job]:
    jobs = [
        Job(p.relative_to(folder).as_posix(), str(p), u, k, s)
        for p in traces
        for k in args.time_scale
        for s in args.seeds
        for u in args.units
    ]
    # the longest first, so the workers finish together: large scales, then big traces
    return sorted(jobs, key=lambda j: (-j.time_scale, -_json_bytes(Path(j.path))))


def run_all(jobs: Sequence[Job], workers: int, limit_s: float) -> tuple[list[Row], list[Timing]]:
    rows: list[Row] = []
    timings: list[Timing] = []
    started = time.perf_counter()
    with ProcessPoolExecutor(max_workers=workers) as pool:
        futures = {pool.submit(run_job, job, limit_s): job for job in jobs}
        for done, future in enumerate(as_completed(futures), 1):
            job_rows, job_timings = future.result()
            rows += job_rows
            timings += job_timings
            _progress(done, len(jobs), futures[future], job_timings, time.perf_counter() - started)
    return rows, timings


def _progress(done: int, total: int, job: Job, timings: Sequence[Timing], elapsed: float) -> None:
    wall, cpu = sum(t.wall_s for t in timings), sum(t.cpu_s for t in timings)
    late = [t.policy for t in timings if t.timed_out]
    note = f"  TIMEOUT: {', '.join(late)}" if late else ""
    print(
        f"[{done:3d}/{total}] {elapsed:7.1f}s  scale {job.time_scale:g} seed {job.seed} u={job.u_min:g} min "
        f"{job.trace}: {wall:.2f} s wall, {cpu:.2f} s CPU{note}",
        flush=True,
    )


# --- CSV ---------------------------------------------------------------------


def sort_rows(rows: Iterable[Row]) -> list[Row]:
    order = {p: i for i, p in enumerate(POLICIES)}
    return sorted(rows, key=lambda r: (r.time_scale, r.seed, r.u_min, r.intervals, r.trace, order[r.policy]))


def write_csv(rows: Sequence[Row], path: Path) -> None:
    with path.open("w", newline="") as out:
        writer = csv.DictWriter(out, fieldnames=[f.name for f in fields(Row)])
        writer.writeheader()
        for row in rows:
            writer.writerow({k: _csv_value(v) for k, v in asdict(row).items()})


# --- grouping ----------------------------------------------------------------

Key = tuple[str, float, int, float]  # trace, time scale, seed, u


def by_run(rows: Iterable[Row]) -> dict[Key, dict[str, Row]]:
    runs: dict[Key, dict[str, Row]] = defaultdict(dict)
    for r in rows:
        runs[(r.trace, r.time_scale, r.seed, r.u_min)][r.policy] = r
    return runs


def run_name(r: Row) -> str:
    """The trace, with the seed when it is not the default one."""
    return f"{r.trace} (seed {r.seed})" if r.seed else r.trace


def cell(r: Row) -> str:
    if not r.ok:
        return "**timeout**"
    return f"{r.cost_units} / {r.relative_time:.2f} / {r.utilization:.2f}"


# --- markdown: tables --------------------------------------------------------


def tables_md(rows: Sequence[Row], scales: Sequence[float], seeds: Sequence[int], units: Sequence[float]) -> list[str]:
    runs = by_run(rows)
    lines: list[str] = []
    for k in scales:
        for s in seeds:
            seed = f", seed {s}" if len(seeds) > 1 else ""
            lines += [f"## Time scale {k:g}{seed}", ""]
            lines += _scale_summary(runs, k, s)
            for u in units:
                lines += [f"### u = {u:g} min", ""] + _unit_table(runs, k, s, u) + [""]
    return lines


def _scale_summary(runs: dict[Key, dict[str, Row]], k: float, s: int) -> list[str]:
    spans = {key[0]: v["full-site"].intervals for key, v in runs.items() if key[1] == k and key[2] == s}
    counts = [sum(group_of(x) == g for x in spans.values()) for g in GROUPS]
    parts = ", ".join(f"{n} span {g}" for n, g in zip(counts, GROUPS))
    return [f"Full-site makespans: {parts}.", ""]


def _unit_table(runs: dict[Key, dict[str, Row]], k: float, s: int, u: float) -> list[str]:
    mine = sorted(
        (v for key, v in runs.items() if key[1:] == (k, s, u)),
        key=lambda v: (v["full-site"].intervals, v["full-site"].trace),
    )
    head = "| trace | tasks | full-site makespan (s) | intervals | " + " | ".join(POLICIES) + " |"
    lines = [head, "|" + "---|" * (4 + len(POLICIES))]
    group = None
    for v in mine:
        fs = v["full-site"]
        if group_of(fs.intervals) != group:
            group = group_of(fs.intervals)
            lines.append(f"| **{group}** |" + " |" * (3 + len(POLICIES)))
        cells = " | ".join(cell(v[p]) for p in POLICIES)
        lines.append(f"| {fs.trace} | {fs.tasks} | {fs.fullsite_makespan_s:.1f} | {fs.intervals:.2f} | {cells} |")
    return lines


# --- markdown: generated observations ----------------------------------------


def observations_md(rows: Sequence[Row], scales: Sequence[float]) -> list[str]:
    runs = by_run(rows)
    lines = [
        "### Run lists (computed by the script)",
        "",
        "Cells in these tables: cost (units) / makespan (s) / utilization / restarts.",
        "",
    ]
    for k in scales:
        mine = {key: v for key, v in runs.items() if key[1] == k}
        lines += [f"#### Time scale {k:g}", ""]
        lines += _timeouts(mine) + _vs_fullsite(mine) + _vs_reactive(mine) + _vs_oracle(mine)
    return lines


def _timeouts(runs: dict[Key, dict[str, Row]]) -> list[str]:
    late = [r for v in _sorted(runs.values()) for r in v.values() if not r.ok]
    if not late:
        return ["- Every run ended within the CPU-time limit.", ""]
    names = "; ".join(f"{r.policy} on {run_name(r)}, u={r.u_min:g} min" for r in late)
    return [f"- {len(late)} run(s) did not end within the CPU-time limit (**timeout** in the tables): {names}.", ""]


def _vs_fullsite(runs: dict[Key, dict[str, Row]]) -> list[str]:
    bad = _sorted(v for v in runs.values() if not _cheaper(v["wire"], v["full-site"]))
    lines = [f"- WIRE costs strictly less than full-site in {len(runs) - len(bad)} of {len(runs)} runs.", ""]
    if bad:
        lines += ["| trace | u (min) | wire | full-site |", "|---|---|---|---|"]
        lines += [
            f"| {run_name(v['wire'])} | {v['wire'].u_min:g} | {_measures(v['wire'])} | {_measures(v['full-site'])} |"
            for v in bad
        ]
        lines.append("")
    return lines


def _vs_reactive(runs: dict[Key, dict[str, Row]]) -> list[str]:
    heads: list[str] = []
    found: list[tuple[Row, Row, str]] = []
    for name in REACTIVE:
        head, losses = _losses_to(runs, name)
        heads.append(head)
        found += losses
    lines = heads + [""]
    if found:
        found.sort(key=lambda f: (f[0].trace, f[0].u_min, f[1].policy))
        lines += ["| trace | u (min) | baseline | what | wire | baseline |", "|---|---|---|---|---|---|"]
        lines += [
            f"| {run_name(w)} | {w.u_min:g} | {o.policy} | {what} | {_measures(w)} | {_measures(o)} |"
            for w, o, what in found
        ]
        lines.append("")
    return lines


def _losses_to(runs: dict[Key, dict[str, Row]], name: str) -> tuple[str, list[tuple[Row, Row, str]]]:
    """Runs where WIRE costs more than ``name``, or the same and is slower."""
    both = [v for v in runs.values() if v["wire"].ok and v[name].ok]
    dearer = [(v["wire"], v[name], "dearer") for v in both if v["wire"].cost_units > v[name].cost_units]
    slower = [(v["wire"], v[name], "same cost, slower") for v in both if _slower_at_equal_cost(v["wire"], v[name])]
    faster = sum(w.makespan_s < o.makespan_s - EPS_S for w, o, _ in dearer)
    head = (
        f"- WIRE costs more than {name} in {len(dearer)} of {len(both)} runs (and is faster in {faster} of them); "
        f"it costs the same and is slower in {len(slower)}."
    )
    return head, dearer + slower


def _vs_oracle(runs: dict[Key, dict[str, Row]]) -> list[str]:
    pairs = [(v["wire"], v["oracle"]) for v in _sorted(runs.values()) if v["wire"].ok and v["oracle"].ok]
    cheaper = sum(o.cost_units < w.cost_units for w, o in pairs)
    dearer = sum(o.cost_units > w.cost_units for w, o in pairs)
    faster = sum(o.makespan_s < w.makespan_s - EPS_S for w, o in pairs)
    slower = sum(o.makespan_s > w.makespan_s + EPS_S for w, o in pairs)
    lines = [
        f"- Oracle vs WIRE over {len(pairs)} runs: the oracle is cheaper in {cheaper}, costs the same in "
        f"{len(pairs) - cheaper - dearer}, is dearer in {dearer}; it is faster in {faster} and slower in {slower}. "
        f"Oracle cost over WIRE cost, summed per u: {_ratio_per_unit(pairs)}; mean relative time "
        f"{_mean(o.relative_time for _, o in pairs):.2f} (oracle) "
        f"vs {_mean(w.relative_time for w, _ in pairs):.2f} (WIRE).",
        "",
    ]
    differ = [(w, o) for w, o in pairs if w.cost_units != o.cost_units]
    if differ:
        lines += ["Runs where their costs differ:", "", "| trace | u (min) | wire | oracle |", "|---|---|---|---|"]
        lines += [f"| {run_name(w)} | {w.u_min:g} | {_measures(w)} | {_measures(o)} |" for w, o in differ]
        lines.append("")
    return lines


def _ratio_per_unit(pairs: Sequence[tuple[Row, Row]]) -> str:
    units = sorted({w.u_min for w, _ in pairs})
    parts = []
    for u in units:
        mine = [(w, o) for w, o in pairs if w.u_min == u]
        parts.append(f"u={u:g}: {sum(o.cost_units for _, o in mine) / sum(w.cost_units for w, _ in mine):.2f}")
    return ", ".join(parts)


def _cheaper(w: Row, other: Row) -> bool:
    return w.ok and other.ok and w.cost_units < other.cost_units


def _slower_at_equal_cost(w: Row, other: Row) -> bool:
    return w.cost_units == other.cost_units and w.makespan_s > other.makespan_s + EPS_S


def _measures(r: Row) -> str:
    if not r.ok:
        return "timeout"
    return f"{r.cost_units} / {r.makespan_s:.0f} / {r.utilization:.2f} / {r.restarts}"


def _mean(values: Iterable[float]) -> float:
    data = list(values)
    return sum(data) / len(data) if data else float("nan")


def _sorted(runs: Iterable[dict[str, Row]]) -> list[dict[str, Row]]:
    return sorted(runs, key=lambda v: (v["wire"].trace, v["wire"].u_min, v["wire"].seed))


# --- markdown: document ------------------------------------------------------


def cpu_seconds() -> float:
    """CPU time of this process and of its finished children (the workers)."""
    own, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


def runtime_md(
    timings: Sequence[Timing], total_s: float, cpu_s: float, workers: int, scales: Sequence[float]
) -> list[str]:
    late = sum(t.timed_out for t in timings)
    late_cpu = sum(t.cpu_s for t in timings if t.timed_out)
    lines = [
        "## Runtime",
        "",
        f"{len(timings)} policy runs in {total_s:.1f} s wall time ({cpu_s:.1f} s CPU) with {workers} worker "
        f"process(es) on {os.cpu_count()} CPU(s); load average {_load()} when the run ended (wall time "
        "grows with whatever else the machine runs; CPU time does not). "
        f"{late_cpu:.1f} s of the CPU time went to the {late} run(s) stopped at the CPU-time limit. "
        "A policy run is one `compare()` call: the policy and the full-site replay its relative time "
        "needs (full-site replays take well under a second). CPU time of the policy runs per time scale:",
        "",
    ]
    for k in scales:
        mine = [t for t in timings if t.job.time_scale == k]
        late = sum(t.timed_out for t in mine)
        note = f", {late} stopped at the CPU-time limit" if late else ""
        lines.append(f"- scale {k:g}: {sum(t.cpu_s for t in mine):.1f} s over {len(mine)} runs{note}")
    lines += ["", "Slowest policy runs:", "", "| trace | scale | u (min) | policy | CPU (s) |", "|---|---|---|---|---|"]
    for t in sorted(timings, key=lambda t: -t.cpu_s)[:12]:
        cpu = f"{t.cpu_s:.2f}" + (" (limit)" if t.timed_out else "")
        lines.append(f"| {t.job.trace} | {t.job.time_scale:g} | {t.job.u_min:g} | {t.policy} | {cpu} |")
    return lines + [""]


def _load() -> str:
    try:
        return " / ".join(f"{x:.1f}" for x in os.getloadavg()) + " (1 / 5 / 15 min)"
    except OSError:
        return "unknown"


def header_md(command: str, n_traces: int, args: argparse.Namespace) -> list[str]:
    date = datetime.now(UTC).strftime("%Y-%m-%d")  # same as `date -u +%F`
    seeds = ", ".join(str(s) for s in args.seeds)
    return [
        "# Scaling policies on the public traces",
        "",
        f"Produced on {date} (UTC), wire_daemon at {library_version(REPO)}, by",
        "",
        "```",
        command,
        "```",
        "",
        f"Setting: {n_traces} traces, charging units u = {', '.join(f'{u:g}' for u in args.units)} min; "
        f"MAPE interval = boot lag = {INTERVAL_S:g} s; {SLOTS} slots per instance, at most {MAX_INSTANCES} "
        f"instances; seed {seeds}; at most {args.timeout:g} s of CPU time per policy run; "
        "every other setting at its default (one instance up at submit, "
        "priority boost of each stage's first tasks, 125 MB/s per slot). Relative time is the makespan "
        "over the full-site makespan; *intervals* is the full-site makespan over the interval.",
        "",
        "Each policy cell is **cost (charging units) / relative time / utilization**. Rows are grouped by "
        "how many intervals the full-site makespan spans (see DESIGN.md, Measures: a workflow shorter than "
        "the boot lag cannot gain from an elastic pool). The CSV beside this file holds every number, "
        "including makespans, restarts and peak instances.",
        "",
    ]


def notes_md(path: Path) -> list[str]:
    if not path.exists():
        return ["(No hand-written notes yet: see the lists below.)", ""]
    return path.read_text().rstrip("\n").splitlines() + [""]


def command_line(args: argparse.Namespace) -> str:
    parts = ["python3 benchmarks/compare_traces.py"]
    if args.traces.resolve() != DEFAULT_TRACES:
        parts += ["--traces", _display_path(args.traces)]
    parts += ["--time-scale", *(f"{k:g}" for k in args.time_scale)]
    if list(args.seeds) != [0]:
        parts += ["--seeds", *(str(s) for s in args.seeds)]
    if tuple(args.units) != UNITS_MIN:
        parts += ["--units", *(f"{u:g}" for u in args.units)]
    if args.timeout != DEFAULT_TIMEOUT_S:
        parts += ["--timeout", f"{args.timeout:g}"]
    return " ".join(parts)


def _display_path(path: Path) -> str:
    """A path that names no local directory: relative to the checkout's parent, or the bare name."""
    try:
        return "../" + path.resolve().relative_to(REPO.parent).as_posix()
    except ValueError:
        return path.name


def write_md(path: Path, parts: Iterable[list[str]]) -> None:
    path.write_text("\n".join(line for part in parts for line in part).rstrip("\n") + "\n")


# --- main --------------------------------------------------------------------


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument(
        "--traces",
        type=Path,
        default=DEFAULT_TRACES,
        metavar="DIR",
        help="traces folder (default: the bundled copies, tests/data/traces; the full public set: its folder)",
    )
    p.add_argument(
        "--time-scale",
        type=float,
        nargs="+",
        action="extend",
        metavar="K",
        help="runtime scale factor(s); repeatable (default 1)",
    )
    p.add_argument("--seeds", type=int, nargs="+", default=[0], metavar="S", help="emulation seed(s) (default 0)")
    p.add_argument(
        "--units",
        type=float,
        nargs="+",
        default=list(UNITS_MIN),
        metavar="MIN",
        help="charging units in minutes (default 1 15 30 60)",
    )
    p.add_argument(
        "--jobs", type=int, default=os.cpu_count() or 1, metavar="N", help="worker processes (default: CPU count)"
    )
    p.add_argument(
        "--timeout",
        type=float,
        default=DEFAULT_TIMEOUT_S,
        metavar="SEC",
        help="CPU-time limit per policy run; 0 = none (default 20)",
    )
    p.add_argument(
        "--out-dir",
        type=Path,
        default=RESULTS,
        metavar="DIR",
        help="where traces_compare.{csv,md} go (default docs/results)",
    )
    args = p.parse_args(argv)
    args.time_scale = _unique(args.time_scale or [1.0])
    args.seeds, args.units = _unique(args.seeds), _unique(args.units)
    return args


def _unique(values: Iterable) -> list:
    return list(dict.fromkeys(values))


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    started = time.perf_counter()
    traces = find_traces(args.traces)
    jobs = make_jobs(args.traces, traces, args)
    print(
        f"{len(traces)} traces x {len(args.units)} units x {len(args.time_scale)} scales x {len(args.seeds)} seeds "
        f"= {len(jobs)} comparisons of {len(POLICIES)} policies, {args.jobs} workers",
        flush=True,
    )
    rows, timings = run_all(jobs, args.jobs, args.timeout)
    rows = sort_rows(rows)
    total_s, cpu_s = time.perf_counter() - started, cpu_seconds()
    args.out_dir.mkdir(parents=True, exist_ok=True)
    write_csv(rows, args.out_dir / "traces_compare.csv")
    write_md(
        args.out_dir / "traces_compare.md",
        [
            header_md(command_line(args), len(traces), args),
            tables_md(rows, args.time_scale, args.seeds, args.units),
            ["## Observations", ""],
            notes_md(args.out_dir / "traces_compare.notes.md"),
            observations_md(rows, args.time_scale),
            runtime_md(timings, total_s, cpu_s, args.jobs, args.time_scale),
        ],
    )
    print(
        f"wrote traces_compare.csv and .md in {args.out_dir}; total {total_s:.1f} s wall, {cpu_s:.1f} s CPU", flush=True
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
