#!/usr/bin/env python3
"""An operator's deadline: target-slowdown given a wall-clock deadline against its peers, on every trace, one command.

Usage (from the repository root)::

    python3 benchmarks/deadlines.py --traces <traces dir>

On the grid of ``benchmarks/target_slowdown.py`` (every trace of the folder,
``legacy/`` included; u = 1, 15, 30, 60 min; K = 1, 10, 100; seeds 0 and 1;
paper setting) it replays each job under the full pool and the peers an
operator could run instead (``wire``, ``pure-reactive``,
``reactive-conserving``, ``pfa``), then under ``target-slowdown`` given a
deadline of 1.25, 1.5 and 2 times that job's full-pool makespan, set at
submit (``steering.deadline`` as a duration from the start, the moment the
replay's clock starts at: a fixed point on the clock, as a wall-clock time
is), at ``steering.deadline_quantile`` (``--quantile``, default p90). It writes

* ``docs/results/deadlines.csv``: one row per trace x u x K x seed x policy;
* ``docs/results/deadlines.md``: the command, the grid, and for each deadline,
  on the tuning traces, on the hold-out traces and on all: how often the
  deadline is met in the runs of 10 intervals or more (90 % asked), and how
  often the cost is at most that of the cheapest peer meeting the same
  deadline in that run (80 % asked); beside it, each peer's share of met
  deadlines and the cost against the cheapest peer that meets the deadline in
  at least 80 % of the long runs.

The hold-out traces (``HOLD_OUT``, whole families) were fixed before any rule
of the deadline was tuned; only the others were looked at while tuning.

Finished jobs are cached under ``docs/results/.cache/`` (not versioned): the
peers keyed by a hash of ``wire_daemon``'s sources less the deadline's own
files (no peer reads them), the deadline runs by a hash of all of them.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from functools import partial
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))  # target_slowdown's grid, beside this file

from target_slowdown import (  # noqa: E402
    EPS_S,
    KNOB_PEERS,
    REPO,
    RESULTS,
    SCALES,
    SEEDS,
    SETTING,
    UNITS_MIN,
    WORKERS,
    Job,
    Runs,
    by_job,
    long_runs,
)

from wire_daemon.runtime.replay import replay  # noqa: E402
from wire_lab.evaluation.grid import (  # noqa: E402
    cached_grid,
    how_it_ran,
    shown_arguments,
    source_fingerprint,
    write_rows,
    yes_or_no,
)
from wire_lab.evaluation.report import library_version  # noqa: E402
from wire_lab.evaluation.runs import _workflow, find_traces, replay_config  # noqa: E402

FACTORS = (1.25, 1.5, 2.0)
QUANTILE = "p90"
POLICY = "target-slowdown"
# Whole families held out of the tuning (5 of the 16 public traces), fixed before the first rule was tried.
HOLD_OUT = ("1000genome", "cycles")
MET_ASKED, CHEAP_ASKED, PEER_QUALIFIES = 0.90, 0.80, 0.80
# The deadline's own files: no peer reads them, so a change there keeps the peers' cache.
DEADLINE_FILES = ("plan/slowdown.py", "core/deadlines.py")
COLUMNS = (
    "trace",
    "tasks",
    "u_min",
    "time_scale",
    "seed",
    "policy",
    "factor",
    "deadline_s",
    "cost_units",
    "makespan_s",
    "fullsite_makespan_s",
    "intervals",
    "relative_time",
    "met",
)


def held_out(trace: str) -> bool:
    return trace.split("-")[0].lower() in HOLD_OUT or any(f"-{f}-" in trace for f in HOLD_OUT)


def peers_fingerprint() -> str:
    package = REPO / "wire_daemon"
    digest = hashlib.sha256()
    for p in sorted(package.rglob("*.py")):
        name = p.relative_to(package).as_posix()
        if name not in DEADLINE_FILES:
            digest.update(name.encode())
            digest.update(p.read_bytes())
    return digest.hexdigest()[:16]


def _row(job: Job, tasks: int, policy: str, factor: float | None, cost: int, end: float, full: float) -> dict:
    deadline = None if factor is None else factor * full
    return {
        "trace": job.trace,
        "tasks": tasks,
        "u_min": job.u_min,
        "time_scale": job.scale,
        "seed": job.seed,
        "policy": policy,
        "factor": factor,
        "deadline_s": None if deadline is None else round(deadline, 3),
        "cost_units": cost,
        "makespan_s": round(end, 3),
        "fullsite_makespan_s": round(full, 3),
        "intervals": round(full / SETTING.interval_s, 4),
        "relative_time": round(end / full, 5),
        "met": None if deadline is None else bool(end <= deadline + EPS_S),
    }


def run_peers(job: Job) -> dict:
    workflow = _workflow(job.path)
    config = replay_config(SETTING, job.u_min, job.scale, job.seed)
    results = {p: replay(workflow, p, config) for p in KNOB_PEERS}
    full = results["full-site"].makespan_s
    rows = [_row(job, workflow.n_tasks, p, None, r.cost_units, r.makespan_s, full) for p, r in results.items()]
    return {"rows": rows}


def run_deadlines(job: Job, full_s: dict[str, float], factors: Sequence[float], quantile: str) -> dict:
    workflow = _workflow(job.path)
    base = replay_config(SETTING, job.u_min, job.scale, job.seed)
    full = full_s[job.key]
    rows = []
    for f in factors:
        # At submit: a duration from the start is a fixed moment of the replay's clock, which starts there.
        steering = replace(base.steering, deadline=f"{f * full:.3f}s", deadline_quantile=quantile)
        r = replay(workflow, POLICY, replace(base, steering=steering))
        rows.append(_row(job, workflow.n_tasks, f"{POLICY}@{f:g}", f, r.cost_units, r.makespan_s, full))
    return {"rows": rows}


# --- the figures ---------------------------------------------------------------------


@dataclass
class Score:
    runs: int = 0
    met: int = 0
    cheap: int = 0
    both: int = 0
    ratios: list[float] | None = None

    def pct(self, n: int) -> str:
        return f"{n} of {self.runs} ({100 * n / self.runs:.1f} %)" if self.runs else "-"

    def share(self, n: int) -> float:
        return n / self.runs if self.runs else float("nan")


def meets(row: dict, deadline: float) -> bool:
    return bool(row["makespan_s"] <= deadline + EPS_S)


def cheapest_meeting(row: dict, deadline: float) -> int:
    """The least any peer that meets ``deadline`` paid in this run (full-site always meets it)."""
    return min(row[p]["cost_units"] for p in KNOB_PEERS if meets(row[p], deadline))


def score(runs: Runs, keys: Sequence[tuple[str, float, float, int]], factor: float) -> Score:
    """The deadline knob on ``keys``: met, and cost at most the cheapest peer meeting the same deadline in that run."""
    out = Score(ratios=[])
    name = f"{POLICY}@{factor:g}"
    for k in keys:
        row = runs[k]
        me = row[name]
        deadline = factor * row["full-site"]["makespan_s"]
        cheapest = cheapest_meeting(row, deadline)
        ok_time, ok_cost = meets(me, deadline), me["cost_units"] <= cheapest
        out.runs += 1
        out.met += ok_time
        out.cheap += ok_cost
        out.both += ok_time and ok_cost
        assert out.ratios is not None
        out.ratios.append(me["cost_units"] / cheapest)
    return out


def peer_shares(runs: Runs, keys: Sequence[tuple[str, float, float, int]], factor: float) -> dict[str, float]:
    """Each peer's share of the long runs in which it meets the deadline."""
    out = {}
    for p in KNOB_PEERS:
        hits = [meets(runs[k][p], factor * runs[k]["full-site"]["makespan_s"]) for k in keys]
        out[p] = sum(hits) / len(hits) if hits else float("nan")
    return out


def cheapest_shares(runs: Runs, keys: Sequence[tuple[str, float, float, int]], factor: float) -> dict[str, int]:
    """Runs of ``keys`` in which each peer meets the deadline at the cheapest peer's cost: the knob's
    "both" measure, each peer held to it."""
    out = dict.fromkeys(KNOB_PEERS, 0)
    for k in keys:
        row = runs[k]
        deadline = factor * row["full-site"]["makespan_s"]
        cheapest = cheapest_meeting(row, deadline)
        for p in KNOB_PEERS:
            out[p] += meets(row[p], deadline) and row[p]["cost_units"] <= cheapest
    return out


def against_qualified(runs: Runs, keys: Sequence[tuple[str, float, float, int]], factor: float) -> tuple[str, float]:
    """The cheapest (by total cost) peer meeting the deadline in >= 80 % of ``keys``, and the knob's cost over it."""
    shares = peer_shares(runs, keys, factor)
    qualified = [p for p, s in shares.items() if s >= PEER_QUALIFIES]
    totals = {p: sum(runs[k][p]["cost_units"] for k in keys) for p in qualified}
    best = min(totals, key=lambda p: totals[p])
    mine = sum(runs[k][f"{POLICY}@{factor:g}"]["cost_units"] for k in keys)
    return best, mine / totals[best] if totals[best] else float("nan")


def page(
    runs: Runs,
    traces: Sequence[tuple[str, Path]],
    factors: Sequence[float],
    quantile: str,
    wall_s: float,
    argv: Sequence[str],
    cached: int = 0,
) -> str:
    every = long_runs(runs)
    sets = {
        "tuning": [k for k in every if not held_out(k[0])],
        "hold-out": [k for k in every if held_out(k[0])],
        "all": every,
    }
    names = sorted({n for n, _ in traces})
    out = [
        "# Deadlines: target-slowdown given an operator's deadline, against its peers",
        "",
        f"Produced on {datetime.now(UTC):%Y-%m-%d %H:%M} (UTC), wire_daemon at {library_version(REPO)}, "
        f"{os.cpu_count()} CPU cores, by",
        "",
        "```",
        "python3 benchmarks/deadlines.py" + ("" if not argv else " " + " ".join(argv)),
        "```",
        "",
        f"Grid: {len(traces)} traces, u = {', '.join(f'{u:g}' for u in UNITS_MIN)} min, "
        f"K = {', '.join(f'{k:g}' for k in SCALES)}, seeds {', '.join(str(s) for s in SEEDS)}: "
        f"{len(runs)} runs per policy, {len(every)} of them of 10 intervals or more (the full pool's makespan "
        "over the 3-min interval); paper setting. Each run's deadline is a factor "
        f"({', '.join(f'{f:g}' for f in factors)}) times the full pool's makespan in that run, set at submit as "
        f"`steering.deadline` with `deadline_quantile: {quantile}`. Peers: {', '.join(KNOB_PEERS)}. "
        f"{how_it_ran(wall_s, cached, 2 * len(runs), WORKERS)}.",
        "",
        f"Hold-out traces (whole families: {', '.join(HOLD_OUT)}, fixed before tuning; the deadline's rules were "
        f"tried on the others only): {', '.join(n for n in names if held_out(n))}.",
        "",
        "## Must show",
        "",
        "| deadline | set | long runs | met (>= 90 % asked) | | cost <= cheapest peer meeting it (>= 80 % asked) "
        "| | both | median cost / cheapest peer meeting it |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for f in factors:
        for label, keys in sets.items():
            s = score(runs, keys, f)
            ratio = float(np.median(s.ratios)) if s.ratios else float("nan")
            out.append(
                f"| {f:g} | {label} | {s.runs} | {s.pct(s.met)} | {yes_or_no(s.share(s.met) >= MET_ASKED)} "
                f"| {s.pct(s.cheap)} | {yes_or_no(s.share(s.cheap) >= CHEAP_ASKED)} | {s.pct(s.both)} | {ratio:.3f} |"
            )
    out += [
        "",
        "## The peers",
        "",
        "Share of the long runs in which each peer meets the deadline (all traces), and the knob's total cost "
        "over the cheapest (total cost) peer meeting it in at least 80 % of them.",
        "",
        f"| deadline | {' | '.join(KNOB_PEERS)} | {POLICY} | cheapest peer meeting >= 80 % | knob's cost over it |",
        f"|---|{'---|' * len(KNOB_PEERS)}---|---|---|",
    ]
    for f in factors:
        shares = peer_shares(runs, every, f)
        mine = score(runs, every, f)
        best, over = against_qualified(runs, every, f)
        cells = " | ".join(f"{100 * shares[p]:.1f} %" for p in KNOB_PEERS)
        out.append(f"| {f:g} | {cells} | {100 * mine.share(mine.met):.1f} % | {best} | {over:.3f} |")
    out += [
        "",
        "The knob's measure is against the cheapest of five peers run by run, a choice made in hindsight. Each "
        "peer held to the same measure (long runs in which it meets the deadline at the cheapest peer's cost, "
        "ties counted for each; all traces):",
        "",
        f"| deadline | long runs | {' | '.join(KNOB_PEERS)} | {POLICY} (both) |",
        f"|---|---|{'---|' * len(KNOB_PEERS)}---|",
    ]
    for f in factors:
        own, mine = cheapest_shares(runs, every, f), score(runs, every, f)
        cells = " | ".join(f"{own[p]} ({100 * mine.share(own[p]):.1f} %)" for p in KNOB_PEERS)
        out.append(f"| {f:g} | {len(every)} | {cells} | {mine.both} ({100 * mine.share(mine.both):.1f} %) |")
    out += ["", "## Per time scale (all traces, long runs)", ""]
    out += ["| deadline | K | long runs | met | cost <= cheapest peer meeting it |", "|---|---|---|---|---|"]
    for f in factors:
        for k_scale in SCALES:
            s = score(runs, [k for k in every if k[2] == k_scale], f)
            out.append(f"| {f:g} | {k_scale:g} | {s.runs} | {s.pct(s.met)} | {s.pct(s.cheap)} |")
    return "\n".join(out) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--traces", type=Path, default=REPO / "tests" / "data" / "traces")
    parser.add_argument("--out", type=Path, default=RESULTS)
    parser.add_argument("--workers", type=int, default=WORKERS)
    parser.add_argument("--factors", type=float, nargs="+", default=list(FACTORS))
    parser.add_argument("--quantile", choices=("p50", "p90"), default=QUANTILE)
    parser.add_argument("--tuning-only", action="store_true", help="only the tuning traces (no page written)")
    args = parser.parse_args(argv)
    traces = find_traces([args.traces])
    if args.tuning_only:
        traces = [(n, p) for n, p in traces if not held_out(n)]
    jobs = [Job(n, str(p), u, k, s) for n, p in traces for u in UNITS_MIN for k in SCALES for s in SEEDS]
    jobs.sort(key=lambda j: (-j.scale, j.key))  # long runs first, so that the workers finish together
    started = time.perf_counter()
    cache, workers = args.out / ".cache", min(args.workers, WORKERS)
    peers, peers_cached = cached_grid(jobs, run_peers, cache / "deadlines_peers.jsonl", workers, peers_fingerprint())
    full_s = {
        j.key: next(r["makespan_s"] for r in d["rows"] if r["policy"] == "full-site") for j, d in zip(jobs, peers)
    }
    knob = partial(run_deadlines, full_s=full_s, factors=args.factors, quantile=args.quantile)
    stamp = source_fingerprint() + json.dumps([list(args.factors), args.quantile])
    mine, mine_cached = cached_grid(jobs, knob, cache / "deadlines.jsonl", workers, stamp)
    wall = time.perf_counter() - started
    rows = [r for d in [*peers, *mine] for r in d["rows"]]
    runs = by_job(rows)
    if args.tuning_only:
        for f in args.factors:
            s = score(runs, long_runs(runs), f)
            ratio = float(np.median(s.ratios)) if s.ratios else float("nan")
            print(f"{f:g}: met {s.pct(s.met)}, cheap {s.pct(s.cheap)}, both {s.pct(s.both)}, median ratio {ratio:.3f}")
        return 0
    args.out.mkdir(parents=True, exist_ok=True)
    write_rows(rows, args.out / "deadlines.csv", COLUMNS)
    extra = shown_arguments(sys.argv[1:] if argv is None else argv, args.traces)
    (args.out / "deadlines.md").write_text(
        page(runs, traces, args.factors, args.quantile, wall, extra, peers_cached + mine_cached)
    )
    print(f"wrote {args.out / 'deadlines.md'}, deadlines.csv")
    return 0


if __name__ == "__main__":
    sys.exit(main())
