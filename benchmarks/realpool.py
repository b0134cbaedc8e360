"""Run a trace's workflow on a real HTCondor pool under `wire-daemon run`, next to the same trace replayed.

Usage (as root; the first run builds the cached chroot, about a minute):

    python3 benchmarks/realpool.py TRACE [--time-scale K] [--charging-unit S] [--interval S]
        [--max-instances N] [--policy P] [--boot-lag S] [--json]

It starts a central manager and schedd in a Debian chroot, moto's EC2 server
and the test hypervisor (workers boot from the daemon's own user-data after
--boot-lag seconds), writes the trace as a Pegasus-layout submit dir, starts
the daemon, submits the DAG with condor_submit_dag, waits for DAGMan and for
the pool to drain, then tears everything down. It prints the real run's
makespan, cost, peak pool and restarts beside a replay of the trace on the
emulated site with the same settings.
"""

from __future__ import annotations

import argparse
import json
import logging
import signal
import sys
import time
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from wire_daemon.core.config import EmulationConfig, ReplayConfig, SteeringConfig
from wire_daemon.emulated.traces import bundled_trace_path, load_trace
from wire_daemon.runtime.replay import replay
from wire_lab.realpool.chroot import ensure_chroot
from wire_lab.realpool.hypervisor import Hypervisor, ec2_client, pool_booter
from wire_lab.realpool.measure import RunMeasures, job_times, measure
from wire_lab.realpool.pool import PersonalPool
from wire_lab.realpool.session import DaemonRun, RunSettings, cloud_history, wait_for_dag

DRAIN_TIMEOUT_S = 900.0


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("trace", nargs="?", help="WfFormat trace (default: the bundled Montage trace)")
    parser.add_argument("--time-scale", type=float, default=1.0, help="multiply every task's runtime (default 1)")
    parser.add_argument("--charging-unit", type=float, default=120.0, help="charging unit, seconds (default 120)")
    parser.add_argument("--interval", type=float, default=30.0, help="MAPE interval, seconds (default 30)")
    parser.add_argument("--boot-lag", type=float, default=30.0, help="launch to worker boot, seconds (default 30)")
    parser.add_argument("--max-instances", type=int, default=6, help="pool size limit (default 6)")
    parser.add_argument("--policy", default="wire", help="the daemon's scaling policy (default wire)")
    parser.add_argument("--workdir", default="/var/tmp/wire-realpool-bench", help="where runs keep their files")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    return parser.parse_args()


def run_real(trace: Path, settings: RunSettings, boot_lag_s: float, workdir: Path) -> tuple[RunMeasures, float]:
    from moto.server import ThreadedMotoServer

    logging.getLogger("werkzeug").setLevel(logging.WARNING)
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    pool = PersonalPool(workdir / "pool", ensure_chroot())
    started = time.monotonic()
    try:
        host, port = server.get_host_and_port()
        endpoint = f"http://{host}:{port}"
        ec2 = ec2_client(endpoint)
        image = ec2.describe_images(Owners=["amazon"])["Images"][0]["ImageId"]
        pool.start()
        with Hypervisor(endpoint, pool_booter(pool), boot_lag_s=boot_lag_s, poll_s=0.5) as hypervisor:
            run = DaemonRun(pool, endpoint, image, workdir, settings)
            written = run.write_workflow(trace)
            run.write_config()
            run.start()
            try:
                pool.submit_dag(written.dag)
                wait_for_dag(written.dag, timeout_s=24 * 3600)
                deadline = time.monotonic() + DRAIN_TIMEOUT_S
                while cloud_history(ec2, hypervisor).live and time.monotonic() < deadline:
                    time.sleep(2.0)
            finally:
                run.stop()
            history = cloud_history(ec2, hypervisor)
            times = job_times(written.path / f"{written.label}-0.log")
            billing = SteeringConfig(charging_unit_s=settings.charging_unit_s).billing
            return measure(times, history, billing, until=time.time()), time.monotonic() - started
    finally:
        pool.stop()
        server.stop()


def run_emulated(trace: Path, settings: RunSettings, boot_lag_s: float) -> RunMeasures:
    steering = replace(
        SteeringConfig(),
        charging_unit_s=settings.charging_unit_s,
        interval_s=settings.interval_s,
        max_instances=settings.max_instances,
        slots_per_instance=settings.slots,
        min_instances=0,
    )
    # The real jobs only sleep: no data moves, so the replay moves none either.
    emulation = EmulationConfig(
        boot_lag_s=boot_lag_s, time_scale=settings.time_scale, initial_instances=0, bandwidth_bytes_per_s=1e18
    )
    result = replay(load_trace(trace), settings.policy, ReplayConfig(steering=steering, emulation=emulation))
    return RunMeasures(result.makespan_s, result.cost_units, result.peak_instances, result.restarts, 0)


def main() -> int:
    args = parse_args()
    # A SIGTERM ends the run like Ctrl-C: the finally blocks stop the pool, the workers and the daemon.
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
    trace = Path(args.trace) if args.trace else bundled_trace_path()
    settings = RunSettings(
        time_scale=args.time_scale,
        charging_unit_s=args.charging_unit,
        interval_s=args.interval,
        max_instances=args.max_instances,
        policy=args.policy,
    )
    workdir = Path(args.workdir) / time.strftime("%Y%m%d-%H%M%S")
    real, wall_s = run_real(trace, settings, args.boot_lag, workdir)
    emulated = run_emulated(trace, settings, args.boot_lag)
    report = {
        "trace": trace.name,
        "settings": settings.__dict__ | {"boot_lag_s": args.boot_lag},
        "real": real.as_dict(),
        "emulated": emulated.as_dict(),
        "wall_s": round(wall_s, 1),
        "workdir": str(workdir),
    }
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        print(f"{trace.name}: K={args.time_scale:g}, u={args.charging_unit:g} s, interval {args.interval:g} s")
        print(f"{'':10s} {'makespan(s)':>12s} {'cost(units)':>12s} {'peak':>5s} {'restarts':>9s}")
        for name, m in (("real", real), ("emulated", emulated)):
            print(f"{name:10s} {m.makespan_s:12.1f} {m.cost_units:12d} {m.peak_instances:5d} {m.restarts:9d}")
        print(f"wall time {wall_s:.0f} s; files in {workdir}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
