"""Replay public traces on a pool of two instance types against the best one-type pool, in money.

Two types: ``small`` (4 cores) and ``large`` (16 cores, 4x the memory). Where a
trace carries per-task memory, each small instance has 4x the trace's largest
peak of memory and every task requests 4x its transformation's largest peak
(right-sizing off), so memory, not cores, bounds what fits; elsewhere only
cores count. Prices in money per instance-hour, on demand: small 0.17 (what
EC2 asks for a 4-core c5.xlarge in us-east-1); large 0.68 (proportional) or
0.544 (a 20 % discount). Each trace runs under the default policy with one type
only (each of small, large at 0.68, large at 0.544) and with both types at
either price, at ``--scale`` x the traced times, for each seed and each
billing rule: ``unit`` (every started hour paid in full, the paper's charging
unit) and ``second`` (per second after a first charge of 60 s, as EC2, Google
Cloud and Azure bill Linux VMs). The initial instance is of the first type
listed (small). Cost is the emulated site's bill: each instance's price per
hour times the seconds the billing rule charges.

    python3 benchmarks/instance_types.py --traces DIR [--match GLOB ...] [--held-out GLOB ...]
        [--billing unit second] [--out docs/results/instance_types.md]

``--match`` names the traces the type choice was tuned on; ``--held-out``
names traces replayed the same way and counted apart, to judge it on traces it
was not tuned on.
"""

from __future__ import annotations

import argparse
import math
import subprocess
import sys
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from wire_daemon.core.config import EmulationConfig, InstanceType, ReplayConfig, SteeringConfig
from wire_daemon.core.pricing import SECONDS_PER_HOUR
from wire_daemon.core.workflow import Workflow
from wire_daemon.emulated.traces import load_trace
from wire_daemon.runtime.replay import ReplayResult, replay

MIB = float(1 << 20)
CURRENCY = "USD"
PER_HOUR = {"small": 0.17, "large4": 0.68, "large32": 0.544}
POOLS = {
    "small only": ("small",),
    "large only (0.68)": ("large4",),
    "large only (0.544)": ("large32",),
    "both, proportional": ("small", "large4"),
    "both, large -20 %": ("small", "large32"),
}
BEST_SINGLE = {
    "both, proportional": ("small only", "large only (0.68)"),
    "both, large -20 %": ("small only", "large only (0.544)"),
}
BILLINGS = {
    "unit": "per started hour",
    "second": "per second, 60 s minimum",
}


def steering_for(billing: str, max_instances: int, types: tuple[InstanceType, ...]) -> SteeringConfig:
    if billing == "second":
        return SteeringConfig(
            max_instances=max_instances, instance_types=types, billing_model="second", currency=CURRENCY
        )
    return SteeringConfig(max_instances=max_instances, instance_types=types, currency=CURRENCY)


def types_for(wf: Workflow, billing: str) -> dict[str, InstanceType]:
    """The types, priced per charging unit of ``billing`` (what the config takes) from their price per hour."""
    memory = float(4 * math.ceil(float(wf.peak_memory_bytes.max()) / MIB)) if _has_memory(wf) else 0.0
    unit_s = steering_for(billing, 1, ()).billing.charging_unit_s
    per_unit = {k: v * unit_s / SECONDS_PER_HOUR for k, v in PER_HOUR.items()}
    return {
        "small": InstanceType("small", 4, memory, per_unit["small"]),
        "large4": InstanceType("large", 16, 4 * memory, per_unit["large4"]),
        "large32": InstanceType("large", 16, 4 * memory, per_unit["large32"]),
    }


def _has_memory(wf: Workflow) -> bool:
    return bool((wf.peak_memory_bytes > 0).all())


def config_for(
    wf: Workflow, pool: tuple[str, ...], scale: float, seed: int, max_instances: int, billing: str = "unit"
) -> ReplayConfig:
    kinds = types_for(wf, billing)
    listed = tuple(kinds[k] for k in pool)
    largest = max(t.memory_mib for t in listed)
    return ReplayConfig(
        steering=steering_for(billing, max_instances, listed),
        emulation=EmulationConfig(instance_memory_mib=largest, memory_request_factor=4.0, time_scale=scale, seed=seed),
    )


def row(billing: str, trace: str, seed: int, pool: str, r: ReplayResult) -> str:
    t = r.instance_types
    launched = ", ".join(f"{k} {v}" for k, v in sorted(t["instances_by_type"].items()))
    units = ", ".join(f"{k} {v}" for k, v in sorted(t["units_by_type"].items()))
    return (
        f"| {billing} | {trace} | {seed} | {pool} | {t['cost_money']:.3f} | {r.makespan_s:.0f} | "
        f"{r.utilization:.3f} | {launched} | {units} |"
    )


HEADER = (
    f"| billing | trace | seed | pool | cost ({CURRENCY}) | makespan (s) | slot utilization | instances launched | "
    "units paid |\n|---|---|---|---|---|---|---|---|---|"
)
SUMMARY_HEADER = (
    f"| billing | trace | seed | two-type pool | cost ({CURRENCY}) | makespan (s) | best single type | its cost | "
    "its makespan (s) | cost change |\n|---|---|---|---|---|---|---|---|---|---|"
)


@dataclass
class Outcome:
    """One set of traces replayed: every row, the comparisons, and how many two-type runs cost at most the best."""

    used: list[str] = field(default_factory=list)
    rows: list[str] = field(default_factory=list)
    summary: list[str] = field(default_factory=list)
    at_most: dict[str, int] = field(default_factory=dict)  # billing -> runs at most the best single type
    runs: dict[str, int] = field(default_factory=dict)  # billing -> runs compared


def replay_set(paths: list[Path], args: argparse.Namespace) -> Outcome:
    out = Outcome()
    for path in paths:
        wf = load_trace(path)
        out.used.append(f"{path.name} ({wf.n_tasks} tasks, {'memory' if _has_memory(wf) else 'cores only'})")
        for billing in args.billing:
            for seed in args.seeds:
                results = {}
                for name, pool in POOLS.items():
                    config = config_for(wf, pool, args.scale, seed, args.max_instances, billing)
                    results[name] = replay(wf, "target-slowdown", config)
                    out.rows.append(row(billing, path.name, seed, name, results[name]))
                    print(out.rows[-1], flush=True)
                for both, singles in BEST_SINGLE.items():
                    line, ok = compare(billing, path.name, seed, both, singles, results)
                    out.summary.append(line)
                    out.runs[billing] = out.runs.get(billing, 0) + 1
                    out.at_most[billing] = out.at_most.get(billing, 0) + int(ok)
    return out


def compare(
    billing: str, trace: str, seed: int, both: str, singles: tuple[str, ...], results: dict[str, ReplayResult]
) -> tuple[str, bool]:
    """The table row of one two-type run against the best single-type run, and whether it costs at most as much."""
    cost = {name: results[name].instance_types["cost_money"] for name in (both, *singles)}
    best = min(singles, key=lambda n: (cost[n], results[n].makespan_s))
    change = (cost[both] / cost[best] - 1.0) * 100 if cost[best] > 0 else 0.0
    line = (
        f"| {billing} | {trace} | {seed} | {both} | {cost[both]:.3f} | {results[both].makespan_s:.0f} | {best} | "
        f"{cost[best]:.3f} | {results[best].makespan_s:.0f} | {change:+.1f} % |"
    )
    return line, cost[both] <= cost[best] + 1e-9


def counts(out: Outcome) -> list[str]:
    lines = []
    for billing in out.runs:
        n, k = out.runs[billing], out.at_most[billing]
        lines.append(
            f"- billed {BILLINGS[billing]}: the two-type pool costs at most the best single-type pool "
            f"in **{k} of {n}** runs ({100 * k / n:.0f} %)."
        )
    n, k = sum(out.runs.values()), sum(out.at_most.values())
    if len(out.runs) > 1:
        lines.append(f"- together: **{k} of {n}** ({100 * k / n:.0f} %).")
    return lines


def section(title: str, out: Outcome) -> list[str]:
    return [
        f"## {title}",
        "",
        "Traces: " + "; ".join(out.used) + ".",
        "",
        *counts(out),
        "",
        SUMMARY_HEADER,
        *out.summary,
        "",
    ]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--traces", required=True, help="a directory of WfFormat traces (.json, .json.gz)")
    parser.add_argument("--match", nargs="+", default=["*.json*"], help="file name patterns to replay")
    parser.add_argument("--held-out", nargs="*", default=[], help="further patterns, replayed and counted apart")
    parser.add_argument("--billing", nargs="+", choices=sorted(BILLINGS), default=["unit", "second"])
    parser.add_argument("--out", default="docs/results/instance_types.md")
    parser.add_argument("--scale", type=float, default=20.0)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0])
    parser.add_argument("--max-instances", type=int, default=12)
    args = parser.parse_args()
    started = time.perf_counter()
    tuned = _paths(args.traces, args.match)
    held_out = [p for p in _paths(args.traces, args.held_out) if p not in tuned]
    tuned_out = replay_set(tuned, args)
    held_out_out = replay_set(held_out, args) if held_out else None
    write(Path(args.out), args, tuned_out, held_out_out, time.perf_counter() - started)
    return 0


def _today() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%d")


def _commit() -> str:
    """The checkout's commit, for the page; "unknown" outside a git checkout."""
    try:
        done = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=True)
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return done.stdout.strip()


def _paths(folder: str, patterns: list[str]) -> list[Path]:
    return sorted({p for pattern in patterns for p in Path(folder).glob(pattern)})


def write(out: Path, args: argparse.Namespace, tuned: Outcome, held_out: Outcome | None, wall: float) -> None:
    command = (
        f"python3 benchmarks/instance_types.py --traces <traces dir> --match {' '.join(args.match)} "
        + (f"--held-out {' '.join(args.held_out)} " if args.held_out else "")
        + f"--billing {' '.join(args.billing)} --scale {args.scale:g} --seeds {' '.join(map(str, args.seeds))} "
        f"--max-instances {args.max_instances}"
    )
    lines = [
        "# Two instance types against the best one-type pool, in money",
        "",
        f"Command: `{command}` ({wall:.0f} s of wall time), run {_today()} at commit {_commit()}.",
        "",
        " ".join(__doc__.split("\n\n")[1].split()),
        "",
        *section("Two types against the best single type: the traces the type choice was tuned on", tuned),
    ]
    if held_out is not None:
        lines += section("The same on traces the type choice was not tuned on", held_out)
    lines += ["## Every replay", "", HEADER, *tuned.rows, *(held_out.rows if held_out else []), ""]
    notes = out.with_suffix(".notes.md")  # the reading, written by hand: kept across runs
    if notes.exists():
        lines += [notes.read_text().rstrip(), ""]
    out.write_text("\n".join(lines))


if __name__ == "__main__":
    sys.exit(main())
