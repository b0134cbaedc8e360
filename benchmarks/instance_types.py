"""Replay public traces on a pool of two instance types against the best one-type pool (issue 15).

Two types: ``small`` (4 cores) and ``large`` (16 cores, 4x the memory). Where a
trace carries per-task memory, each small instance has 4x the trace's largest
peak of memory and every task requests 4x its transformation's largest peak
(right-sizing off), so memory, not cores, bounds what fits; elsewhere only
cores count. Prices per charging unit: small 1; large 4 (proportional) or 3.2
(a 20 % discount). Each trace runs under the default policy with one type only
(each of small, large at 4, large at 3.2) and with both types at either price,
at ``--scale`` x the traced times, for each seed. The initial instance is of
the first type listed (small). Cost is money: units x price.

    python3 benchmarks/instance_types.py --traces DIR [--match GLOB ...] [--out docs/results/instance_types.md]
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path

from wire_daemon.core.config import EmulationConfig, InstanceType, ReplayConfig, SteeringConfig
from wire_daemon.core.workflow import Workflow
from wire_daemon.emulated.traces import load_trace
from wire_daemon.runtime.replay import ReplayResult, replay

MIB = float(1 << 20)
POOLS = {
    "small only": ("small",),
    "large only (4)": ("large4",),
    "large only (3.2)": ("large32",),
    "both, proportional": ("small", "large4"),
    "both, large -20 %": ("small", "large32"),
}
BEST_SINGLE = {
    "both, proportional": ("small only", "large only (4)"),
    "both, large -20 %": ("small only", "large only (3.2)"),
}


def types_for(wf: Workflow) -> dict[str, InstanceType]:
    memory = float(4 * math.ceil(float(wf.peak_memory_bytes.max()) / MIB)) if _has_memory(wf) else 0.0
    return {
        "small": InstanceType("small", 4, memory, 1.0),
        "large4": InstanceType("large", 16, 4 * memory, 4.0),
        "large32": InstanceType("large", 16, 4 * memory, 3.2),
    }


def _has_memory(wf: Workflow) -> bool:
    return bool((wf.peak_memory_bytes > 0).all())


def config_for(wf: Workflow, pool: tuple[str, ...], scale: float, seed: int, max_instances: int) -> ReplayConfig:
    kinds = types_for(wf)
    listed = tuple(kinds[k] for k in pool)
    largest = max(t.memory_mib for t in listed)
    return ReplayConfig(
        steering=SteeringConfig(max_instances=max_instances, instance_types=listed),
        emulation=EmulationConfig(instance_memory_mib=largest, memory_request_factor=4.0, time_scale=scale, seed=seed),
    )


def row(trace: str, seed: int, pool: str, r: ReplayResult) -> str:
    t = r.instance_types
    launched = ", ".join(f"{k} {v}" for k, v in sorted(t["instances_by_type"].items()))
    units = ", ".join(f"{k} {v}" for k, v in sorted(t["units_by_type"].items()))
    return (
        f"| {trace} | {seed} | {pool} | {t['cost_money']:.1f} | {r.makespan_s:.0f} | {r.utilization:.3f} | "
        f"{launched} | {units} |"
    )


HEADER = (
    "| trace | seed | pool | cost (money) | makespan (s) | slot utilization | instances launched | units paid |\n"
    "|---|---|---|---|---|---|---|---|"
)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--traces", required=True, help="a directory of WfFormat traces (.json, .json.gz)")
    parser.add_argument("--match", nargs="+", default=["*.json*"], help="file name patterns to replay")
    parser.add_argument("--out", default="docs/results/instance_types.md")
    parser.add_argument("--scale", type=float, default=20.0)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0])
    parser.add_argument("--max-instances", type=int, default=12)
    args = parser.parse_args()
    rows, summary, used = [], [], []
    started = time.perf_counter()
    paths = sorted({p for pattern in args.match for p in Path(args.traces).glob(pattern)})
    for path in paths:
        wf = load_trace(path)
        used.append(f"{path.name} ({wf.n_tasks} tasks, {'memory' if _has_memory(wf) else 'cores only'})")
        for seed in args.seeds:
            results = {}
            for name, pool in POOLS.items():
                results[name] = replay(
                    wf, "target-slowdown", config_for(wf, pool, args.scale, seed, args.max_instances)
                )
                rows.append(row(path.name, seed, name, results[name]))
                print(rows[-1], flush=True)
            summary += [compare(path.name, seed, both, singles, results) for both, singles in BEST_SINGLE.items()]
    wall = time.perf_counter() - started
    write(Path(args.out), args, rows, summary, used, wall)
    return 0


def compare(trace: str, seed: int, both: str, singles: tuple[str, ...], results: dict[str, ReplayResult]) -> str:
    cost = {name: results[name].instance_types["cost_money"] for name in (both, *singles)}
    best = min(singles, key=lambda n: (cost[n], results[n].makespan_s))
    change = (cost[both] / cost[best] - 1.0) * 100 if cost[best] > 0 else 0.0
    return (
        f"| {trace} | {seed} | {both} | {cost[both]:.1f} | {results[both].makespan_s:.0f} | {best} | "
        f"{cost[best]:.1f} | {results[best].makespan_s:.0f} | {change:+.1f} % |"
    )


def write(
    out: Path, args: argparse.Namespace, rows: list[str], summary: list[str], used: list[str], wall: float
) -> None:
    lines = [
        "# Two instance types against the best one-type pool (issue 15)",
        "",
        f"Command: `python3 benchmarks/instance_types.py --traces <traces dir> --match {' '.join(args.match)} "
        f"--scale {args.scale:g} --seeds {' '.join(map(str, args.seeds))} --max-instances {args.max_instances}` "
        f"({wall:.0f} s of wall time).",
        "",
        __doc__.split("\n\n")[1].replace("\n", " "),
        "",
        "Traces replayed: " + "; ".join(used) + ".",
        "",
        "## Two types against the best single type",
        "",
        "| trace | seed | two-type pool | cost | makespan (s) | best single type | its cost | its makespan (s) | "
        "cost change |\n|---|---|---|---|---|---|---|---|---|",
        *summary,
        "",
        "## Every replay",
        "",
        HEADER,
        *rows,
        "",
    ]
    out.write_text("\n".join(lines))


if __name__ == "__main__":
    sys.exit(main())
