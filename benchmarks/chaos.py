"""The standing chaos suite in full (issue 14); its short form is tests/chaos/.

    python3 benchmarks/chaos.py [--kills 200] [--launch-kills 50] [--cycles 20]
                                [--fault-rates 0,0.3,0.6] [--fault-seconds 240]
                                [--fuzz-examples 10000] [--only kills,faults,fuzz] [--json out.json]

Three parts, against moto's EC2 server and a live-written Pegasus submit host
(``wire_lab/chaos``):

* kills: ``wire-daemon run`` killed with SIGKILL and restarted at once, at
  least ``--kills`` times, at least ``--launch-kills`` of them while a
  RunInstances call is open (the proxy holds each for a moment), until the
  pool has grown and shrunk at least ``--cycles`` times;
* faults: for each rate, the same workload for ``--fault-seconds`` with that
  share of the daemon's cloud requests throttled (400 RequestLimitExceeded,
  503), failed (500) or answered with nothing after taking effect; rate 0 is
  the fault-free baseline of the iteration rate;
* fuzz: ``benchmarks/fuzz_readers.py`` (every reader) and
  ``wire_lab.chaos.config_fuzz`` (the config), ``--fuzz-examples`` each, in
  child processes running beside the other two parts.

Each run ends with an audit against the endpoint: leaked instances,
duplicate launches, the peak against ``max_instances``. Exit status 1 if
anything failed.
"""

from __future__ import annotations

import argparse
import json
import logging
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from wire_lab.chaos.harness import KillPlan, Moto, RunShape, run_faults, run_kills  # noqa: E402


@dataclass
class Fuzzing:
    """The two fuzzers, as child processes started together and read at the end."""

    examples: int
    procs: dict[str, subprocess.Popen[str]] = field(default_factory=dict)
    started: float = 0.0

    def start(self) -> None:
        self.started = time.time()
        readers = [sys.executable, str(ROOT / "benchmarks" / "fuzz_readers.py"), "--examples", str(self.examples)]
        config = [sys.executable, "-m", "wire_lab.chaos.config_fuzz", "--examples", str(self.examples)]
        for name, command in (("readers", readers), ("config", config)):
            self.procs[name] = subprocess.Popen(
                [*command, "--json"], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True
            )

    def collect(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for name, proc in self.procs.items():
            stdout, _ = proc.communicate()
            try:
                out[name] = json.loads(stdout)
            except ValueError:
                out[name] = {"error": f"exit status {proc.returncode}, no report", "exit": proc.returncode}
            out[name]["exit"] = proc.returncode
        out["minutes"] = (time.time() - self.started) / 60
        return out


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--kills", type=int, default=200)
    parser.add_argument("--launch-kills", type=int, default=50)
    parser.add_argument("--cycles", type=int, default=20)
    parser.add_argument("--max-kill-minutes", type=float, default=30.0)
    parser.add_argument("--fault-rates", default="0,0.3,0.6")
    parser.add_argument("--fault-seconds", type=float, default=240.0)
    parser.add_argument("--fuzz-examples", type=int, default=10_000)
    parser.add_argument("--only", default="kills,faults,fuzz", help="comma-separated parts to run")
    parser.add_argument("--seed", type=int, default=14)
    parser.add_argument("--work", default="", help="keep the runs' files here (default: a temporary directory)")
    parser.add_argument("--json", default="", help="write the full report here")
    parser.add_argument(
        "--markdown", nargs="*", default=None, help="print the tables of these --json reports; run nothing"
    )
    return parser.parse_args()


def main() -> int:
    args = parse_args()
    if args.markdown is not None:
        merged: dict[str, Any] = {}
        for path in args.markdown:
            merged |= json.loads(Path(path).read_text())
        print(markdown(merged))
        return 0
    parts = set(args.only.split(","))
    logging.getLogger("werkzeug").setLevel(logging.ERROR)  # moto's request log
    work = Path(args.work) if args.work else Path(tempfile.mkdtemp(prefix="wire-chaos-"))
    report: dict[str, Any] = {"command": " ".join(sys.argv), "work": str(work)}
    fuzzing = Fuzzing(args.fuzz_examples)
    if "fuzz" in parts:
        fuzzing.start()
    moto = Moto.start() if parts & {"kills", "faults"} else None
    shape = RunShape()
    report["shape"] = {
        "max_instances": shape.max_instances,
        "slots": shape.slots,
        "interval_s": shape.interval_s,
        "charging_unit_s": shape.charging_unit_s,
        "max_launches_per_interval": shape.max_launches_per_interval,
        "boot_lag_s": shape.workload.boot_lag_s,
        "wide_tasks": shape.workload.wide,
        "task_s": shape.workload.runtime_s,
    }
    try:
        if moto is not None and "kills" in parts:
            plan = KillPlan(
                args.kills, args.launch_kills, args.cycles, max_minutes=args.max_kill_minutes, seed=args.seed
            )
            result = run_kills(work / "kills", moto, shape, plan)
            report["kills"] = result.as_dict() | {"ok": result.ok}
            _say(f"kills: {_kill_line(report['kills'])}")
        if moto is not None and "faults" in parts:
            report["faults"] = []
            for rate in [float(r) for r in args.fault_rates.split(",") if r]:
                fault = run_faults(work / f"faults-{rate:g}", moto, shape, rate, args.fault_seconds, args.seed)
                report["faults"].append(fault.as_dict() | {"ok": fault.ok})
                _say(f"faults {rate:.0%}: {_fault_line(report['faults'][-1])}")
    finally:
        if moto is not None:
            moto.stop()
    if "fuzz" in parts:
        report["fuzz"] = fuzzing.collect()
        _say(f"fuzz: {_fuzz_line(report['fuzz'])}")
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=2, default=str))
    return 0 if _all_ok(report) else 1


def _all_ok(report: dict[str, Any]) -> bool:
    runs = [report.get("kills", {"ok": True}), *report.get("faults", [])]
    fuzz = report.get("fuzz", {})
    return all(r["ok"] for r in runs) and all(v.get("exit", 0) == 0 for v in fuzz.values() if isinstance(v, dict))


def _kill_line(r: dict[str, Any]) -> str:
    return (
        f"{r['kills']} kill -9s, {r['kills_launch_open']} with a launch open, {r['cycles']} pool cycles, "
        f"leaked {r['leaked']}, duplicates {r['duplicates']}, peak {r['peak']} of {r['max_instances']}, "
        f"unknown after a restart {len(r['audit']['unknown_after_restart'])}, {r['minutes']:.1f} min"
    )


def _fault_line(r: dict[str, Any]) -> str:
    return (
        f"{r['proxy']['faults']} of {r['proxy']['requests']} requests faulted, "
        f"{r['iterations_per_minute']:.1f} iterations/min, {r['cycles']} cycles, leaked {r['leaked']}, "
        f"duplicates {r['duplicates']}, peak {r['peak']} of {r['max_instances']}, tracebacks {r['tracebacks']}"
    )


def _fuzz_line(f: dict[str, Any]) -> str:
    readers = f.get("readers", {}).get("readers", [])
    config = f.get("config", {})
    failed = sum(r.get("foreign", 0) + r.get("deaths", 0) + r.get("hangs", 0) for r in readers)
    return (
        f"{len(readers)} reader rows, min {min((r['inputs'] for r in readers), default=0):,} inputs each, "
        f"{failed} failures; config {config.get('inputs', 0):,} inputs, "
        f"{config.get('foreign', 0) + config.get('death', 0) + config.get('hang', 0)} failures"
    )


def markdown(report: dict[str, Any]) -> str:
    """The figures of a report as the tables of docs/results/reliability.md."""
    out: list[str] = []
    if "kills" in report:
        k = report["kills"]
        out += [
            "| kill -9s | with a launch open | with a request open in the state file | pool cycles | workflows "
            "| leaked | duplicates | unknown after a restart | peak / max_instances | daemon deaths not ours "
            "| tracebacks | minutes |",
            "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
            f"| {k['kills']} | {k['kills_launch_open']} | {k['kills_request_open_in_state']} | {k['cycles']} "
            f"| {k['workflows_done']} | {k['leaked']} | {k['duplicates']} | {len(k['audit']['unknown_after_restart'])} "
            f"| {k['peak']} / {k['max_instances']} | {len(k['unexpected_exits'])} | {k['tracebacks']} "
            f"| {k['minutes']:.1f} |",
            "",
        ]
    if report.get("faults"):
        out += [
            "| fault rate | requests | faulted (share) | lost replies (RunInstances) | iterations / min | cycles "
            "| leaked | duplicates | peak / max_instances | drain (s) | tracebacks |",
            "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
        ]
        for f in report["faults"]:
            proxy = f["proxy"]
            lost = proxy["faults_by_kind"].get("lost", 0)
            requests, faulted = proxy["requests"], proxy["faults"]
            share = faulted / requests if requests else 0.0
            out.append(
                f"| {f['rate']:.0%} | {requests} | {faulted} ({share:.0%}) | {lost} "
                f"({proxy['run_instances_lost_replies']}) | {f['iterations_per_minute']:.1f} | {f['cycles']} "
                f"| {f['leaked']} | {f['duplicates']} | {f['peak']} / {f['max_instances']} | {f['drain_s']:.0f} "
                f"| {f['tracebacks']} |"
            )
        out.append("")
    if "fuzz" in report:
        out += _fuzz_table(report["fuzz"])
    return "\n".join(out)


def _fuzz_table(fuzz: dict[str, Any]) -> list[str]:
    rows = [
        "| input | inputs | ok | own error | foreign | deaths | hangs | slowest input |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in fuzz.get("readers", {}).get("readers", []):
        rows.append(
            f"| {r['reader']} | {r['inputs']:,} | {r['ok']:,} | {r['own_error']:,} | {r['foreign']} | {r['deaths']} "
            f"| {r['hangs']} | {r['slowest_s'] * 1000:.1f} ms ({r['slowest_gave']}) |"
        )
    c = fuzz.get("config", {})
    if c.get("inputs"):
        rows.append(
            f"| config | {c['inputs']:,} | {c['ok']:,} | {c['error']:,} | {c['foreign']} | {c['death']} | {c['hang']} "
            f"| {c['slowest_s'] * 1000:.1f} ms ({c['slowest_gave']}) |"
        )
    return rows


def _say(line: str) -> None:
    print(line, flush=True)


if __name__ == "__main__":
    sys.exit(main())
