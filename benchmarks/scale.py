"""How the daemon scales with the workflow: iteration latency, memory per task, replay speed.

Usage: python3 -u benchmarks/scale.py [--sizes 1000,10000,100000,1000000]
           [--shapes epigenomics,montage] [--repeat 3] [--profile FILE] [--skip-memory]
           [--policy wire|target-slowdown|...] [--market on-demand|spot|auto]
           [--billing unit|second] [--interruptions R]

For each synthetic workflow (wire_daemon/workflow/synthetic.py) and size:

* iteration latency: a whole replay on the emulated site under the WIRE
  policy, timing every MAPE iteration as the loop runs it (ingest the
  interval's events, update the predictors, project the wavefront, steer,
  execute, boost). p50, p99 and max over the run's iterations, and the
  median iteration's CPU time (which other jobs on the machine do not
  inflate); then the median over ``--repeat`` runs (emulation seeds 0, 1,
  ...). Also p50 per wavefront task (running + idle tasks at the decision,
  plus those the projection finished).
* memory: resident bytes per task added by building the workflow, its
  RunState and the online predictor, in a fresh interpreter per size.
* replay speed: virtual seconds replayed per wall second, over the whole
  replay (emulated world + loop).

The world scales with the workflow so that every size spans a similar number
of intervals: ``max(4, n // 500)`` instances of 4 slots, u = 60 min, a
3-minute interval equal to the boot lag, time scale 1.
"""

from __future__ import annotations

import argparse
import cProfile
import gc
import json
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # this checkout's wire_daemon and wire_lab

from wire_daemon.core.config import MARKET_MODES, EmulationConfig, PredictionConfig, SteeringConfig
from wire_daemon.core.run_state import RunState
from wire_daemon.core.workflow import Workflow
from wire_daemon.emulated.site import EmulatedSite
from wire_daemon.runtime.assembly import World, assemble_loop
from wire_daemon.runtime.policies import PolicyInputs
from wire_lab.synthetic import synthetic_workflow

SIZES = (1_000, 10_000, 100_000, 1_000_000)
SHAPES = ("epigenomics", "montage")


@dataclass
class RunFigures:
    iterations: int
    p50_s: float
    p99_s: float
    max_s: float
    cpu_p50_s: float  # this process's CPU time: what the code costs, whatever else the machine runs
    decision_max_s: float  # the longest Analyze + Plan (policy.plan) of the run: one decision
    wavefront: float  # median over iterations of running + idle + projected-done tasks
    virtual_per_wall: float
    wall_s: float


def steering_for(n_tasks: int, market: str = "on-demand", billing: str = "unit") -> SteeringConfig:
    return SteeringConfig(max_instances=max(4, n_tasks // 500), market=market, billing_model=billing)


def run_once(
    workflow: Workflow,
    seed: int,
    profiler: cProfile.Profile | None = None,
    policy_name: str = "wire",
    market: str = "on-demand",
    billing: str = "unit",
    interruptions: float = 0.0,
) -> RunFigures:
    """One replay under ``policy_name``, timing each ``MapeLoop.iterate`` (the loop of ``replay.replay``)."""
    steering = steering_for(workflow.n_tasks, market, billing)
    started = time.perf_counter()
    world = EmulationConfig(seed=seed, spot_interruptions_per_hour=interruptions)
    site = EmulatedSite(workflow, world, steering.slots_per_instance, steering.billing)
    state = RunState(workflow)
    inputs = PolicyInputs(state, steering, PredictionConfig())
    loop = assemble_loop(policy_name, inputs, World(site, site, site), steering.instance_memory_mib, site)
    times: list[float] = []
    cpu: list[float] = []
    decisions: list[float] = []
    wavefront: list[int] = []
    now = 0.0
    while True:
        site.advance_to(now)
        if site.finished:
            break
        if profiler is not None:
            profiler.enable()
        t0, c0 = time.perf_counter(), time.process_time()
        record = loop.iterate(now)
        times.append(time.perf_counter() - t0)
        cpu.append(time.process_time() - c0)
        decisions.append(record.decision_s)
        if profiler is not None:
            profiler.disable()
        projected = (
            loop.last_plan.upcoming.projected_done
            if loop.last_plan is not None and loop.last_plan.upcoming is not None
            else 0
        )
        wavefront.append(record.running + record.idle + projected)
        now = len(times) * steering.interval_s
        while (when := loop.next_release()) is not None and when < now:
            site.advance_to(when)
            loop.release_due(when)
    wall = time.perf_counter() - started
    arr = np.array(times)
    return RunFigures(
        iterations=len(times),
        p50_s=float(np.percentile(arr, 50)),
        p99_s=float(np.percentile(arr, 99)),
        max_s=float(arr.max()),
        cpu_p50_s=float(np.median(cpu)),
        decision_max_s=float(max(decisions)),
        wavefront=float(np.median(wavefront)),
        virtual_per_wall=site.last_finish / wall,
        wall_s=wall,
    )


def memory_child(shape: str, n_tasks: int) -> None:
    """Run in a fresh interpreter: print resident bytes added per task, as JSON.

    A small workflow is built and dropped first, so that one-time costs
    (numpy's lazily loaded modules and caches, the allocator's first arenas:
    about 8 MB) are not charged to the tasks.
    """
    from wire_daemon.analyze.predictor import OnlinePredictor

    def build(n: int) -> tuple[object, ...]:
        workflow = synthetic_workflow(shape, n, seed=0)
        return workflow, RunState(workflow), OnlinePredictor(workflow, PredictionConfig())

    build(1_000)  # warm-up, dropped at once
    gc.collect()
    before = _rss_bytes()
    built = build(n_tasks)
    gc.collect()
    after = _rss_bytes()
    assert built
    print(json.dumps({"bytes_per_task": (after - before) / n_tasks}))


def _rss_bytes() -> int:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError("no VmRSS in /proc/self/status")


def measure_memory(shape: str, n_tasks: int, repeat: int) -> float:
    values = []
    for _ in range(repeat):
        out = subprocess.run(
            [sys.executable, __file__, "--memory-child", shape, str(n_tasks)],
            check=True,
            capture_output=True,
            text=True,
        )
        values.append(json.loads(out.stdout)["bytes_per_task"])
    return statistics.median(values)


def report(shape: str, n_tasks: int, runs: list[RunFigures], bytes_per_task: float | None) -> None:
    def med(key: str) -> float:
        return statistics.median(getattr(r, key) for r in runs)

    p50, p99, top, cpu, wave = med("p50_s"), med("p99_s"), med("max_s"), med("cpu_p50_s"), med("wavefront")
    memory = f"{bytes_per_task:>8.0f}" if bytes_per_task is not None else f"{'-':>8}"
    print(
        f"{shape:<12} {n_tasks:>9,d} {int(med('iterations')):>6d} "
        f"{p50 * 1e3:>9.1f} {p99 * 1e3:>9.1f} {top * 1e3:>9.1f} {cpu * 1e3:>9.1f} "
        f"{p50 / max(wave, 1) * 1e6:>12.2f} {int(wave):>10,d} {memory} "
        f"{med('virtual_per_wall'):>11.0f} {med('wall_s'):>8.1f} {med('decision_max_s') * 1e3:>10.1f}",
        flush=True,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default=",".join(str(s) for s in SIZES))
    parser.add_argument("--shapes", default=",".join(SHAPES))
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--skip-memory", action="store_true")
    parser.add_argument("--profile", metavar="FILE", help="cProfile every MAPE iteration of the first run into FILE")
    parser.add_argument(
        "--policy",
        default="wire",
        help="the scaling policy replayed (default wire, the paper's; the daemon's default is target-slowdown)",
    )
    parser.add_argument("--market", choices=MARKET_MODES, default="on-demand", help="as replay's --market")
    parser.add_argument("--billing", choices=("unit", "second"), default="unit", help="as replay's --billing")
    parser.add_argument("--interruptions", type=float, default=0.0, metavar="R", help="spot reclaims per hour")
    parser.add_argument("--memory-child", nargs=2, metavar=("SHAPE", "N"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.memory_child:
        memory_child(args.memory_child[0], int(args.memory_child[1]))
        return
    print(
        f"policy {args.policy}, market {args.market}, billing per {args.billing}, "
        f"{args.interruptions:g} reclaims per spot instance-hour; median of {args.repeat} runs; "
        "iteration = one whole MAPE step; wavefront = running + idle + projected-done tasks"
    )
    print(
        f"{'shape':<12} {'tasks':>9} {'iters':>6} "
        f"{'p50 ms':>9} {'p99 ms':>9} {'max ms':>9} {'cpu p50':>9} {'p50 us/wave':>12} "
        f"{'wavefront':>10} {'B/task':>8} {'virt s/s':>11} {'wall s':>8} {'plan max':>10}"
    )
    profiler = cProfile.Profile() if args.profile else None
    for n_tasks in (int(s) for s in args.sizes.split(",")):
        for shape in args.shapes.split(","):
            workflow = synthetic_workflow(shape, n_tasks, seed=0)
            runs = []
            for seed in range(args.repeat):
                profiled = profiler if seed == 0 else None
                runs.append(
                    run_once(workflow, seed, profiled, args.policy, args.market, args.billing, args.interruptions)
                )
                gc.collect()
            del workflow
            gc.collect()
            memory = None if args.skip_memory else measure_memory(shape, n_tasks, args.repeat)
            report(shape, n_tasks, runs, memory)
    if profiler is not None:
        profiler.dump_stats(args.profile)


if __name__ == "__main__":
    main()
