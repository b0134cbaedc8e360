"""How fast a replay runs: wall time per policy on the largest real traces.

Usage: python3 benchmarks/replay_speed.py [TRACE ...] [--repeat N] [--time-scale K]

Without arguments it uses the largest traces of the traces folder
(``--traces``; default: the bundled copies, tests/data/traces) and the
bundled trace. Prints, per trace and
policy, the median wall time over the repeats, virtual seconds replayed per
wall second, and the per-iteration decision time.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the lab package is not installed

from wire_daemon.core.config import EmulationConfig, ReplayConfig
from wire_daemon.emulated.traces import bundled_trace_path, load_trace
from wire_daemon.runtime.policies import POLICY_NAMES
from wire_daemon.runtime.replay import replay
from wire_lab.traces import BUNDLED_TRACES

DEFAULT_TRACES = (
    "montage-chameleon-2mass-05d-001.json.gz",
    "epigenomics-chameleon-ilmn-6seq-50k-001.json.gz",
    "legacy/montage-4.0-osg-dataset02-run001.json.gz",
)


def default_traces(folder: Path = BUNDLED_TRACES) -> list[Path]:
    found = [folder / name for name in DEFAULT_TRACES if (folder / name).exists()]
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
    parser.add_argument("traces", nargs="*", type=Path, help="trace files (default: the largest of --traces)")
    parser.add_argument(
        "--traces",
        dest="folder",
        type=Path,
        default=BUNDLED_TRACES,
        metavar="DIR",
        help="traces folder (default: the bundled copies, tests/data/traces; the full public set: its folder)",
    )
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--time-scale", type=float, default=1.0)
    args = parser.parse_args()
    for path in args.traces or default_traces(args.folder):
        measure(path, args.repeat, args.time_scale)


if __name__ == "__main__":
    main()
