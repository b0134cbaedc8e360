"""Fuzz every reader in full: the long form of tests/monitor/test_fuzz_readers.py.

    python3 benchmarks/fuzz_readers.py --examples 10000 [--readers eventlog,dag] [--seed 1] [--json]

For each reader (event log, kickstart YAML and XML, DAG, .sub, jobstate.log,
braindump, workflow.yml, WfFormat trace) it runs ``--examples`` inputs from the
same Hypothesis strategy as the test (real files mangled at the byte level,
hostile bits inserted), plus the issue-14 regression inputs, and counts instead
of asserting:

* inputs: how many were run;
* ok / own error: a result (maybe with warnings), or the project's error type;
* foreign: another exception, or a value that cannot be true (a NaN time...);
* deaths: the process reading the input died (each input runs in a forked
  child);
* hangs: still reading after 30 s;
* slowest: the longest wall time one input took, and what it gave; most CPU:
  the most CPU time one input took in the process that read it (a machine
  loaded by other work inflates the first, not the second).

Exit status 1 if anything failed. The event parser against htcondor2's own
reader, event by event: ``WIRE_FUZZ_EXAMPLES=N pytest tests/monitor/test_eventparse.py``.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import logging
import platform
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from hypothesis import HealthCheck, given, seed, settings  # noqa: E402


def _load_harness() -> Any:
    spec = importlib.util.spec_from_file_location(
        "wire_fuzz_harness", ROOT / "tests" / "monitor" / "test_fuzz_readers.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look the module up while the class is built
    spec.loader.exec_module(module)
    return module


@dataclass
class Tally:
    name: str
    inputs: int = 0
    counts: dict[str, int] = field(default_factory=dict)
    slowest: float = 0.0
    slowest_status: str = ""
    slowest_input: str = ""
    most_cpu: float = 0.0
    most_cpu_input: str = ""
    failures: list[str] = field(default_factory=list)
    seconds: float = 0.0

    def add(self, status: str, seconds: float, detail: str = "", data: bytes = b"", cpu: float = 0.0) -> None:
        self.inputs += 1
        self.counts[status] = self.counts.get(status, 0) + 1
        if seconds > self.slowest:
            self.slowest, self.slowest_status = seconds, status
            self.slowest_input = f"{len(data):,} bytes: {data[:160]!r}"
        if cpu > self.most_cpu:
            self.most_cpu, self.most_cpu_input = cpu, f"{len(data):,} bytes: {data[:160]!r}"
        if detail and len(self.failures) < 5:
            self.failures.append(detail)

    def row(self) -> dict[str, Any]:
        return {
            "reader": self.name,
            "inputs": self.inputs,
            "ok": self.counts.get("ok", 0),
            "own_error": self.counts.get("error", 0),
            "foreign": self.counts.get("foreign", 0),
            "deaths": self.counts.get("death", 0),
            "hangs": self.counts.get("hang", 0),
            "slowest_s": round(self.slowest, 4),
            "slowest_gave": self.slowest_status,
            "slowest_input": self.slowest_input,
            "most_cpu_s": round(self.most_cpu, 4),
            "most_cpu_input": self.most_cpu_input,
            "wall_s": round(self.seconds, 1),
            "failures": self.failures,
        }


def fuzz_reader(harness: Any, name: str, examples: int, rng_seed: int) -> Tally:
    reader = harness.READERS[name]
    tally = Tally(name)
    start = time.perf_counter()

    def record(data: bytes) -> None:
        outcome = harness.check(reader, data)
        detail = harness._describe(outcome, data) if outcome.failed else ""
        tally.add(outcome.status, outcome.seconds, detail, data, outcome.cpu)

    for case in reader.regressions:
        record(case)
    run = seed(rng_seed)(_settings(examples)(given(harness.inputs(reader))(record)))
    run()
    tally.seconds = time.perf_counter() - start
    return tally


def _settings(examples: int) -> settings:
    return settings(
        max_examples=examples,
        deadline=None,
        database=None,
        suppress_health_check=list(HealthCheck),
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--examples", type=int, default=1000, help="inputs per reader (default 1000)")
    parser.add_argument("--readers", default="", help="comma-separated reader names (default: all)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of the table")
    args = parser.parse_args()

    logging.disable(logging.WARNING)  # the readers warn on nearly every input: counted, not printed
    harness = _load_harness()
    names = [n for n in args.readers.split(",") if n] or sorted(harness.READERS)
    tallies = []
    for name in names:
        tallies.append(fuzz_reader(harness, name, args.examples, args.seed))
        print(f"{name}: done ({tallies[-1].seconds:.0f} s)", file=sys.stderr)
    report = {
        "examples_per_reader": args.examples,
        "seed": args.seed,
        "python": platform.python_version(),
        "machine": f"{platform.system()} {platform.machine()}",
        "readers": [t.row() for t in tallies],
    }
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        _print_table(report)
    failed = any(r["foreign"] or r["deaths"] or r["hangs"] for r in report["readers"])
    return 1 if failed else 0


def _print_table(report: dict[str, Any]) -> None:
    print(f"{report['examples_per_reader']} examples per reader, seed {report['seed']}, Python {report['python']}")
    print()
    print("| reader | inputs | ok | own error | foreign | deaths | hangs | slowest input (wall) | most CPU | run |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in report["readers"]:
        slowest = f"{r['slowest_s'] * 1000:.1f} ms ({r['slowest_gave']})"
        cpu = f"{r['most_cpu_s'] * 1000:.1f} ms" if r["most_cpu_s"] else "-"
        print(
            f"| {r['reader']} | {r['inputs']:,} | {r['ok']:,} | {r['own_error']:,} | {r['foreign']} | "
            f"{r['deaths']} | {r['hangs']} | {slowest} | {cpu} | {r['wall_s']:.0f} s |"
        )
    for r in report["readers"]:
        for failure in r["failures"]:
            print(f"FAILED {r['reader']}: {failure}")


if __name__ == "__main__":
    sys.exit(main())
