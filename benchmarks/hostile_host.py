"""A hostile submit host's costs: finished runs, oversized files, FIFOs, a cut event log.

Usage: python3 benchmarks/hostile_host.py [--finished N] [--cycle-nodes N] [--kickstart-mib N]

The full form of the chaos suite's hostile-host cases
(tests/chaos/test_chaos_hostile_host.py), with the sizes of the probe that
found them. Everything is generated in a temporary directory; each
measurement runs in a fresh Python process so its memory is its own. Prints
one line per figure:

* ``--finished`` finished workflow directories (hard-linked copies of one
  live-written 30-task run): the daemon's first poll (time, RSS growth) and a
  steady poll (time, rows written to the state file);
* a DAG of ``--cycle-nodes`` nodes with a cycle: first poll, steady poll, the
  warning's length;
* a kickstart record with one argument of ``--kickstart-mib`` MiB: time and
  memory of reading it;
* FIFOs under every name the monitor reads: the time of a poll;
* an event log cut to half its size mid-run: the tasks counted done against
  ``jobstate.log``'s successes.
"""

from __future__ import annotations

import argparse
import inspect
import json
import logging
import os
import resource
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _rss_mib() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def finished(work: Path, count: int) -> str:
    from wire_daemon.monitor.observations import FinishedMarkersOnly, SubmitHostObservations
    from wire_daemon.monitor.submit_monitor import SubmitRootMonitor
    from wire_daemon.persist.store import StateStore
    from wire_lab.chaos.hostile import finished_workflow, many_finished

    root = work / "submit"
    root.mkdir()
    many_finished(root, count, finished_workflow(work / "template"))
    store = StateStore(work / "state.sqlite")
    # As the daemon builds it; a tree from before read_finished existed reads every run.
    skip = {"read_finished": False} if "read_finished" in inspect.signature(SubmitRootMonitor).parameters else {}
    monitor = SubmitRootMonitor(root, store=FinishedMarkersOnly(store), settle_s=0.0, **skip)
    observations = SubmitHostObservations(monitor)
    before, started = _rss_mib(), time.perf_counter()
    observations.refresh()
    first, grew = time.perf_counter() - started, _rss_mib() - before
    changes, started = store.rows_changed, time.perf_counter()
    polls = 5
    for _ in range(polls):
        observations.refresh()
    steady = (time.perf_counter() - started) / polls
    written = store.rows_changed - changes
    return (
        f"{count:,} finished workflows: first poll {first:.2f} s, RSS +{grew:.0f} MiB; "
        f"steady poll {steady:.3f} s, {written} row(s) written in {polls} polls"
    )


def cycle(work: Path, nodes: int) -> str:
    from wire_daemon.monitor.problems import Problems
    from wire_daemon.monitor.submit_monitor import SubmitRootMonitor
    from wire_lab.chaos.hostile import live_workflow

    root = work / "submit"
    live_workflow(root / "cyc", "cyc")
    body = "".join(f"JOB n{i} n.sub\n" for i in range(nodes))
    body += "".join(f"PARENT n{i} CHILD n{i + 1}\n" for i in range(nodes - 1)) + f"PARENT n{nodes - 1} CHILD n0\n"
    (root / "cyc" / "cyc-0.dag").write_text(body)
    problems = Problems()
    monitor = SubmitRootMonitor(root, problems=problems, settle_s=0.0)
    started = time.perf_counter()
    monitor.poll()
    first = time.perf_counter() - started
    started = time.perf_counter()
    for _ in range(5):
        monitor.poll()
    steady = (time.perf_counter() - started) / 5
    longest = max(len(m) for m in problems.messages if "cycle" in m)
    return (
        f"{nodes:,}-node DAG with a cycle: first poll {first:.2f} s, steady poll {steady:.4f} s, "
        f"warning {longest} chars"
    )


def kickstart(work: Path, mib: int) -> str:
    from wire_daemon.monitor.kickstart import read_kickstart
    from wire_daemon.monitor.problems import Problems

    record = work / "job.out.000"
    with open(record, "w") as f:
        f.write("- invocation: true\n  mainjob:\n    executable:\n      arguments: [")
        for _ in range(mib):  # in pieces: the peak measured below is the reader's alone
            f.write("x" * (1 << 20))
        f.write("]\n")
    problems = Problems()
    before, started = _rss_mib(), time.perf_counter()
    read_kickstart(record, problems)
    took = time.perf_counter() - started
    grew = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024 - before  # peak: this process ran only this
    said = problems.messages[0].split(": ", 1)[1] if problems.messages else "no warning"
    return f"kickstart record of {mib} MiB: {took:.3f} s, peak RSS +{grew:.0f} MiB; {said}"


def fifos(work: Path) -> str:
    import shutil

    from wire_daemon.monitor.problems import Problems
    from wire_daemon.monitor.submit_monitor import SubmitRootMonitor
    from wire_lab.chaos.hostile import live_workflow

    root = work / "submit"
    good = root / "good"
    live_workflow(good, "good").advance_to(30.0)
    names = ["good-0.dag.dagman.out", "jobstate.log", "good-0.dag.nodes.log", "good-0.log", "braindump.yml"]
    for name in names:
        target = root / f"fifo-{name}"
        shutil.copytree(good, target)
        (target / name).unlink(missing_ok=True)
        os.mkfifo(target / name)
    problems = Problems()
    monitor = SubmitRootMonitor(root, problems=problems, settle_s=0.0)
    started = time.perf_counter()
    for _ in range(3):
        monitor.poll()
    took = (time.perf_counter() - started) / 3
    said = sum("FIFO" in m for m in problems.messages)
    return f"FIFOs under {len(names)} names the monitor reads: poll {took:.3f} s, {said} warning(s) in 3 polls"


def cut_log(work: Path) -> str:
    from wire_daemon.core.run_state import RunState
    from wire_daemon.monitor.submit_monitor import SubmitDirMonitor
    from wire_lab.chaos.hostile import live_workflow

    live = live_workflow(work / "wf", "cut")
    monitor, state, at = None, None, 0.0
    while state is None or state.n_done() < 12:
        at += 60.0
        live.advance_to(at)
        if monitor is None and (work / "wf" / "cut-0.dag.nodes.log").exists():
            monitor = SubmitDirMonitor(work / "wf")
            state = RunState(monitor.workflow)
        if monitor is not None:
            state.apply_all(monitor.poll_events())
    assert monitor is not None and state is not None and monitor.source_file is not None
    done_at_cut = state.n_done()
    os.truncate(monitor.source_file, monitor.source_file.stat().st_size // 2)
    while state.n_done() < 40 and not live.finished:
        at += 60.0
        live.advance_to(at)
        state.apply_all(monitor.poll_events())
    state.apply_all(monitor.poll_events())
    lines = (work / "wf" / "jobstate.log").read_text().splitlines()
    succeeded = len({line.split()[1] for line in lines if " JOB_SUCCESS " in line})
    return (
        f"event log cut to half after {done_at_cut} tasks done: {state.n_done()} of {state.workflow.n_tasks} "
        f"counted done, jobstate.log says {succeeded} succeeded"
    )


def daemon_finished(work: Path, count: int) -> str:
    """``wire-daemon run`` (EC2 on moto) over a root of ``count`` finished runs: its first iteration and RSS."""
    from wire_lab.chaos.daemon import DaemonProcess, DaemonSettings, read_decisions
    from wire_lab.chaos.harness import Moto
    from wire_lab.chaos.hostile import finished_workflow, many_finished

    root = work / "submit"
    root.mkdir()
    many_finished(root, count, finished_workflow(work / "template"))
    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    moto = Moto.start()
    settings = DaemonSettings(
        submit_root=root,
        endpoint=moto.url,
        pool="hostile-bench",
        image_id=moto.image_id,
        subnet_id=moto.subnet_id,
        state_path=work / "state.sqlite",
        decisions_path=work / "decisions.jsonl",
    )
    (work / "config.yaml").write_text(settings.yaml())
    daemon = DaemonProcess(work / "config.yaml", work / "daemon.err")
    try:
        daemon.start()
        started = time.monotonic()
        while not read_decisions(settings.decisions_path) and time.monotonic() - started < 120:
            time.sleep(0.05)
        first = time.monotonic() - started
        time.sleep(5.0)
        pid = daemon.pids[-1]
        with open(f"/proc/{pid}/status") as f:
            rss = next(int(line.split()[1]) for line in f if line.startswith("VmRSS")) / 1024
        decisions = len(read_decisions(settings.decisions_path))
        daemon.terminate(timeout=30)
    finally:
        moto.stop()
    said = [line for line in (work / "daemon.err").read_text().splitlines() if "marked finished, not read" in line]
    return (
        f"wire-daemon run over {count:,} finished workflows: first decision {first:.1f} s after start, "
        f"RSS {rss:.0f} MiB after {decisions} decisions (interval 1 s); {said[0].split(' INFO ')[-1] if said else ''}"
    )


MEASURES: dict[str, Callable[..., str]] = {
    "finished": finished,
    "cycle": cycle,
    "kickstart": kickstart,
    "fifos": fifos,
    "cut_log": cut_log,
    "daemon_finished": daemon_finished,
}


def _child(name: str, args: list[str]) -> None:
    with tempfile.TemporaryDirectory(prefix="hostile-") as work:
        print(MEASURES[name](Path(work), *(int(a) for a in args)))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--finished", type=int, default=5000)
    parser.add_argument("--cycle-nodes", type=int, default=100_000)
    parser.add_argument("--kickstart-mib", type=int, default=100)
    parser.add_argument("--daemon", action="store_true", help="also run the daemon over the finished runs (moto)")
    parser.add_argument("--child", nargs="+", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        _child(args.child[0], args.child[1:])
        return
    print(f"hostile_host: python {sys.version.split()[0]}, {time.strftime('%Y-%m-%d')}")
    runs = [
        ("finished", [args.finished]),
        ("cycle", [args.cycle_nodes]),
        ("kickstart", [args.kickstart_mib]),
        ("fifos", []),
        ("cut_log", []),
    ]
    if args.daemon:
        runs.append(("daemon_finished", [args.finished]))
    for name, values in runs:
        command = [sys.executable, __file__, "--child", name, *map(str, values)]
        done = subprocess.run(
            command, capture_output=True, text=True, cwd=ROOT, env=os.environ | {"PYTHONPATH": str(ROOT)}
        )
        line = done.stdout.strip() or json.dumps({"measure": name, "failed": done.stderr.strip()[-500:]})
        print("  " + line, flush=True)


if __name__ == "__main__":
    main()
