"""How fast a replay runs: wall time per policy on the largest real traces.

Usage: python3 benchmarks/replay_speed.py [TRACE ...] [--repeat N] [--time-scale K]

Without arguments it uses the largest traces of the shared trace folder beside
the repository (if present) and the bundled trace. Prints, per trace and
policy, the median wall time over the repeats, virtual seconds replayed per
wall second, and the per-iteration decision time.
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

from wire_daemon.core.config import EmulationConfig, ReplayConfig
from wire_daemon.emulated.traces import bundled_trace_path, load_trace
from wire_daemon.runtime.policies import POLICY_NAMES
from wire_daemon.runtime.replay import replay

SHARED_TRACES = Path(__file__).resolve().parents[2] / "shared" / "traces"
DEFAULT_TRACES = (
    "montage-chameleon-2mass-05d-001.json.gz",
    "epigenomics-chameleon-ilmn-6seq-50k-001.json.gz",
    "legacy/montage-4.0-osg-dataset02-run001.json.gz",
)


def default_traces() -> list[Path]:
    found = [SHARED_TRACES / name for name in DEFAULT_TRACES if (SHARED_TRACES / name).exists()]
    return found or [bundled_trace_path()]


def measure(path: Path, repeat: int, time_scale: float) -> None:
    started = time.perf_counter()
    workflow = load_trace(path)
    load_s = time.perf_counter() - started
    config = ReplayConfig(emulation=EmulationConfig(time_scale=time_scale))
    print(f"\n{path.name}: {workflow.n_tasks} tasks, {workflow.n_edges} edges, loaded in {load_s * 1e3:.0f} ms")
    print(
        f"{'policy':<20} {'wall s (median)':>15} {'virtual s / wall s':>19} "
        f"{'iterations':>10} {'decision ms mean/max':>21}"
    )
    total = 0.0
    for policy in POLICY_NAMES:
        runs = [replay(workflow, policy, config) for _ in range(repeat)]
        wall = statistics.median(r.wall_s for r in runs)
        total += wall
        r = runs[0]
        print(
            f"{policy:<20} {wall:>15.3f} {r.makespan_s / wall:>19.0f} {r.iterations:>10d} "
            f"{r.decision_mean_s * 1e3:>10.2f}/{r.decision_max_s * 1e3:<10.2f}"
        )
    print(f"all {len(POLICY_NAMES)} policies: {total:.2f} s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("traces", nargs="*", type=Path)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--time-scale", type=float, default=1.0)
    args = parser.parse_args()
    for path in args.traces or default_traces():
        measure(path, args.repeat, args.time_scale)


if __name__ == "__main__":
    main()
