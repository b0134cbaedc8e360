"""Replay public traces with request_memory at 4x the true peak, right-sizing off against on (issue 15).

For each WfFormat trace under ``--traces`` that carries per-task memory
(``memoryInBytes``), every task requests 4x its transformation's largest
peak (a typical user estimate). Each instance is one partitionable slot of
``--slots`` cores and ``--slots`` x the trace's largest peak of memory: jobs
of the true size fill every core, jobs at the 4x request fill a quarter.
A job over its request is held after half its run (the memory paper's middle
time to failure). Each trace runs under the default policy, with right-sizing
off and on (the paper's ``lr-mean-minus`` and ``pc95``), at the traced times
and 20x longer, for each seed.

    python3 benchmarks/memory_rightsizing.py --traces DIR [--out docs/results/memory.md]
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from wire_daemon.core.config import EmulationConfig, MemoryConfig, ReplayConfig, SteeringConfig
from wire_daemon.core.workflow import Workflow
from wire_daemon.emulated.traces import load_trace
from wire_daemon.runtime.replay import ReplayResult, replay

MODES = {"off": None, "on lr-mean-minus": "lr-mean-minus", "on pc95": "pc95"}
SCALES = {"traced": 1.0, "20x": 20.0}
MIB = float(1 << 20)


@dataclass(frozen=True)
class Case:
    trace: str
    scale: str
    seed: int
    mode: str


def config_for(wf: Workflow, slots: int, scale: float, seed: int, predictor: str | None) -> ReplayConfig:
    largest_mib = math.ceil(float(wf.peak_memory_bytes.max()) / MIB)
    memory = MemoryConfig(rightsizing=predictor is not None, predictor=predictor or "lr-mean-minus")
    return ReplayConfig(
        steering=SteeringConfig(slots_per_instance=slots),
        emulation=EmulationConfig(
            instance_memory_mib=float(slots * largest_mib),
            memory_request_factor=4.0,
            memory_failure_fraction=0.5,
            time_scale=scale,
            seed=seed,
        ),
        memory=memory,
    )


def row(case: Case, r: ReplayResult) -> str:
    m = r.memory
    return (
        f"| {case.trace} | {case.scale} | {case.seed} | {case.mode} | {r.cost_units} | {r.makespan_s:.0f} | "
        f"{r.utilization:.3f} | {m['memory_utilization']:.3f} | {m['failures']:.0f} | "
        f"{m['wasted_mib_s'] / 3600:.0f} | {m['maq']:.3f} | {m['requests_edited']:.0f} | {m['requests_grown']:.0f} |"
    )


HEADER = (
    "| trace | times | seed | right-sizing | cost (units) | makespan (s) | slot utilization | memory utilization | "
    "memory failures | wasted memory (MiB-h) | MAQ | requests lowered | requests grown |\n"
    "|---|---|---|---|---|---|---|---|---|---|---|---|---|"
)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--traces", required=True, help="a directory of WfFormat traces (.json, .json.gz)")
    parser.add_argument("--out", default="docs/results/memory.md")
    parser.add_argument("--slots", type=int, default=4)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1])
    args = parser.parse_args()
    rows, skipped, used = [], [], []
    started = time.perf_counter()
    for path in sorted(Path(args.traces).glob("*.json*")):
        wf = load_trace(path)
        if not (wf.peak_memory_bytes > 0).all():
            skipped.append(path.name)
            continue
        used.append(f"{path.name} ({wf.n_tasks} tasks, largest peak {wf.peak_memory_bytes.max() / MIB:.0f} MiB)")
        for scale_name, scale in SCALES.items():
            for seed in args.seeds:
                for mode, predictor in MODES.items():
                    result = replay(wf, "target-slowdown", config_for(wf, args.slots, scale, seed, predictor))
                    case = Case(path.name, scale_name, seed, mode)
                    rows.append(row(case, result))
                    print(rows[-1], flush=True)
    wall = time.perf_counter() - started
    write(Path(args.out), args, rows, used, skipped, wall)
    return 0


def write(
    out: Path, args: argparse.Namespace, rows: list[str], used: list[str], skipped: list[str], wall: float
) -> None:
    lines = [
        "# Memory right-sizing: replays with request_memory at 4x the true peak (issue 15)",
        "",
        f"Command: `python3 benchmarks/memory_rightsizing.py --traces <traces dir> --slots {args.slots} "
        f"--seeds {' '.join(map(str, args.seeds))}` ({wall:.0f} s of wall time).",
        "",
        __doc__.split("\n\n")[1].replace("\n", " "),
        "",
        "Traces replayed: " + "; ".join(used) + ".",
        "",
        "Skipped (no per-task memory in the trace): " + ", ".join(skipped) + ".",
        "",
        "Measures: cost in charging units; makespan; slot utilization (busy slot-seconds over paid ones); "
        "memory utilization (peak memory x occupancy of the finished attempts over paid instance memory-seconds); "
        "memory failures (holds for memory); wasted memory in the memory paper's sense (a finished attempt's "
        "request above its peak, all of a failed or evicted attempt's request, times its occupancy); "
        "MAQ = used / (used + wasted).",
        "",
        HEADER,
        *rows,
        "",
    ]
    out.write_text("\n".join(lines))


if __name__ == "__main__":
    sys.exit(main())
