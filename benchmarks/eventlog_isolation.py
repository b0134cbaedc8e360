"""What screening events and parsing them in a worker process costs, per event, against the reader before it.

    python3 benchmarks/eventlog_isolation.py [--jobs 20000] [--slices 100] [--bad 20] [--baseline 87b84c6]

Three readers of the same generated job event log (``monitor_ingest``'s
generator: submit, execute and terminate events, jobs interleaved):

* ``before``: the reader as it was (``wire_daemon/monitor/eventlog.py`` at the
  ``--baseline`` commit, loaded with ``git show``): no screen, JobEventLog in
  this process over a temporary file;
* ``screen+in-process``: the screen, then the library in this process
  (``eventparse.InProcessParser``): what the screen alone costs;
* ``screen+worker``: the reader as it is (screen, then the library in the worker
  process): the default.

Scenarios, each in a fresh process: the whole log in one read; the log grown in
``--slices`` slices with a read after each (a live run followed poll by poll);
and ``--bad`` events the library cannot read (a Latin-1 byte in "Job submitted"),
between good ones. CPU time counts the worker process too. A last line gives the
time to recover from a worker crash (an event handed to the parser unscreened).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import types
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from monitor_ingest import write_event_log  # noqa: E402

READERS = ("before", "screen+in-process", "screen+worker")


def baseline_module(commit: str) -> types.ModuleType:
    """The event log reader as it was at ``commit`` (read with ``git show``; nothing is checked out)."""
    source = subprocess.run(
        ["git", "show", f"{commit}:wire_daemon/monitor/eventlog.py"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    module = types.ModuleType("wire_eventlog_before")
    module.__file__ = f"{commit}:wire_daemon/monitor/eventlog.py"
    sys.modules[module.__name__] = module
    exec(compile(source, module.__file__, "exec"), module.__dict__)
    return module


def make_reader(kind: str, path: Path, commit: str) -> tuple[Any, Any]:
    """(reader, parser or None)."""
    from wire_daemon.monitor.eventlog import EventLogReader
    from wire_daemon.monitor.eventparse import InProcessParser, IsolatedParser

    if kind == "before":
        return baseline_module(commit).EventLogReader(path), None
    if kind == "screen+in-process":
        parser: Any = InProcessParser()
        return EventLogReader(path, parser=parser, read_budget_s=None), parser
    parser = IsolatedParser()
    parser.parse([b"000 (001.000.000) 2024-01-01 00:00:00 Job submitted from host: <1.2.3.4:5>\n...\n"])  # start it
    return EventLogReader(path, parser=parser, read_budget_s=None), parser


def _worker_cpu(parser: Any) -> float:
    proc = getattr(parser, "_proc", None)
    if proc is None:
        return 0.0
    with open(f"/proc/{proc.pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def measure(kind: str, scenario: str, source: Path, slices: int, commit: str) -> dict[str, Any]:
    """Run in a fresh process: read ``source`` (copied as it grows) with one reader."""
    data = source.read_bytes()
    with tempfile.TemporaryDirectory(prefix="wire-bench-") as scratch:
        path = Path(scratch) / "wf.dag.nodes.log"
        path.write_bytes(b"")
        reader, parser = make_reader(kind, path, commit)
        parts = slices if scenario == "slices" else 1
        cuts = [len(data) * i // parts for i in range(parts + 1)]
        events = 0
        worker0, cpu0, wall0 = _worker_cpu(parser), time.process_time(), time.perf_counter()
        for a, b in zip(cuts, cuts[1:]):
            with open(path, "ab") as f:
                f.write(data[a:b])
            events += len(reader.read())
        wall = time.perf_counter() - wall0
        cpu = time.process_time() - cpu0 + _worker_cpu(parser) - worker0
    return {"reader": kind, "scenario": scenario, "events": events, "wall_s": wall, "cpu_s": cpu}


def crash_recovery(rounds: int = 5) -> float:
    """Seconds from a worker crash to the next event parsed (a new worker started)."""
    from wire_daemon.monitor.eventparse import IsolatedParser

    good = b"000 (001.000.000) 2024-01-01 00:00:00 Job submitted from host: <1.2.3.4:5>\n...\n"
    crash = b"014 (12.0.0) 2024-05-22 18:28:20 Node 0 executing on\x00host: <1.2.3.4:9618>\n...\n"
    parser = IsolatedParser()
    parser.parse([good])
    start = time.perf_counter()
    for _ in range(rounds):
        results = parser.parse([crash, good])
        assert results[0].lost and results[1].events, results
    parser.close()
    return (time.perf_counter() - start) / rounds


def bad_log(path: Path, bad: int) -> None:
    """``bad`` events the library cannot read, each between two good ones."""
    stamp = "2024-05-22 18:28:20"
    good = f"000 (%03d.000.000) {stamp} Job submitted from host: <10.0.0.1:9618>\n    DAG Node: n%d\n...\n"
    broken = f"000 (%03d.000.000) {stamp} Job subm\xe9tted from host: <10.0.0.1:9618>\n    DAG Node: n%d\n...\n"
    with open(path, "wb") as f:
        for i in range(bad):
            f.write((good % (2 * i, 2 * i)).encode())
            f.write((broken % (2 * i + 1, 2 * i + 1)).encode("latin-1"))
        f.write((good % (2 * bad, 2 * bad)).encode())


def _child(args: argparse.Namespace, kind: str, scenario: str, source: Path) -> dict[str, Any]:
    command = [sys.executable, __file__, "--measure", kind, scenario, str(source)]
    command += ["--slices", str(args.slices), "--baseline", args.baseline]
    out = subprocess.run(command, capture_output=True, text=True, check=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=20_000)
    parser.add_argument("--slices", type=int, default=100)
    parser.add_argument("--bad", type=int, default=20, help="unreadable events (the reader before pays ~1 s each)")
    parser.add_argument("--baseline", default="87b84c6", help="commit of the reader before (default 87b84c6)")
    parser.add_argument("--measure", nargs=3, metavar=("READER", "SCENARIO", "LOG"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.measure:
        import logging

        logging.disable(logging.WARNING)
        kind, scenario, log = args.measure
        print(json.dumps(measure(kind, scenario, Path(log), args.slices, args.baseline)))
        return 0

    with tempfile.TemporaryDirectory(prefix="wire-bench-") as scratch:
        log = Path(scratch) / "good.log"
        count = write_event_log(log, args.jobs)
        bad = Path(scratch) / "bad.log"
        bad_log(bad, args.bad)
        size = log.stat().st_size / 2**20
        print(f"log: {args.jobs:,} jobs, {count:,} events, {size:.1f} MiB; baseline {args.baseline}")
        print()
        print("| scenario | reader | events | wall s | CPU s | CPU us/event | ratio to before |")
        print("|---|---|---:|---:|---:|---:|---:|")
        for scenario, source in (("one pass", log), ("slices", log), ("bad events", bad)):
            rows = [_child(args, kind, "slices" if scenario == "slices" else "one", source) for kind in READERS]
            per = {r["reader"]: r["cpu_s"] / max(r["events"], 1) * 1e6 for r in rows}
            for r in rows:
                unit = r["cpu_s"] / max(r["events"], 1) * 1e6
                if scenario == "bad events":  # per unreadable event, wall time (the library sleeps)
                    unit = r["wall_s"] / args.bad * 1e6
                ratio = per[r["reader"]] / per["before"] if scenario != "bad events" else None
                shown = f"{ratio:.2f}" if ratio is not None else "-"
                print(
                    f"| {scenario} | {r['reader']} | {r['events']:,} | {r['wall_s']:.2f} | {r['cpu_s']:.2f} | "
                    f"{unit:,.0f}{' (wall, per bad event)' if scenario == 'bad events' else ''} | {shown} |"
                )
        print()
        print(f"worker crash -> next event parsed: {crash_recovery() * 1000:.0f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
