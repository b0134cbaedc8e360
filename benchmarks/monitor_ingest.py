"""Monitor costs: event-log ingestion rate and memory, .dag parse time and memory.

Usage: python3 benchmarks/monitor_ingest.py [--jobs N] [--dag-nodes N [N ...]] [--keep DIR]

Everything is generated locally in a temporary directory:

* a DAGMan event log in HTCondor's text format (ISO dates) of ``--jobs`` jobs,
  each with a submit event carrying ``DAG Node: <name>``, an execute event and
  a terminate event, jobs interleaved the way a wide workflow writes them;
* beside it a Pegasus-style ``.dag`` naming the same nodes, so that the whole
  ``SubmitDirMonitor`` path (event log -> task events -> ``RunState``) runs;
* Pegasus-style ``.dag`` files of ``--dag-nodes`` nodes (JOB, SCRIPT POST,
  PRIORITY, RETRY, CATEGORY, VARS per node; a fan-out/fan-in edge pattern).

Each measurement runs in a fresh Python process, so its peak memory (peak RSS
from ``resource.getrusage`` minus the RSS before the measured work, after
imports) is its own. Rates come from the process's CPU time (wall time is
printed too: on a busy machine it also counts other processes). Prints one
line per measurement with the per-item cost.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

_USAGE = (
    "\t\tUsr 0 00:00:01, Sys 0 00:00:00  -  Run Remote Usage\n"
    "\t\tUsr 0 00:00:00, Sys 0 00:00:00  -  Run Local Usage\n"
    "\t\tUsr 0 00:00:01, Sys 0 00:00:00  -  Total Remote Usage\n"
    "\t\tUsr 0 00:00:00, Sys 0 00:00:00  -  Total Local Usage\n"
    "\t1024  -  Run Bytes Sent By Job\n\t2048  -  Run Bytes Received By Job\n"
    "\t1024  -  Total Bytes Sent By Job\n\t2048  -  Total Bytes Received By Job\n"
)
_WIDTH = 500  # jobs in flight at once: events of different jobs interleave like a wide workflow's
_START = 1_700_000_000


# -- generators ------------------------------------------------------------------------


def node_name(i: int) -> str:
    return f"task_ID{i:07d}"


def _stamp(when: int) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(when))


def write_event_log(path: Path, jobs: int) -> int:
    """submit/execute/terminate per job; returns the number of events written."""
    with open(path, "w") as f:
        for batch in range(0, jobs, _WIDTH):
            members = range(batch, min(batch + _WIDTH, jobs))
            t = _START + batch
            for i in members:
                f.write(
                    f"000 ({i + 1:03d}.000.000) {_stamp(t)} Job submitted from host: "
                    f"<10.0.0.1:9618?addrs=10.0.0.1-9618>\n    DAG Node: {node_name(i)}\n...\n"
                )
            for i in members:
                host = f"10.0.{(i // 250) % 250}.{i % 250 + 1}"
                f.write(
                    f"001 ({i + 1:03d}.000.000) {_stamp(t + 5)} Job executing on host: "
                    f"<{host}:9618?addrs={host}-9618&alias=worker{i % 64}>\n\tSlotName: slot1@worker\n...\n"
                )
            for i in members:
                f.write(
                    f"005 ({i + 1:03d}.000.000) {_stamp(t + 65 + i % 7)} Job terminated.\n"
                    f"\t(1) Normal termination (return value 0)\n{_USAGE}...\n"
                )
    return 3 * jobs


def write_dag(path: Path, nodes: int) -> int:
    """A Pegasus-style .dag; returns the number of edges (fan-out from a root, fan-in to a sink per 1000)."""
    edges = 0
    with open(path, "w") as f:
        f.write(
            "######################################################################\n"
            "# PEGASUS WMS GENERATED DAG FILE (benchmark)\n"
            "######################################################################\n"
            "MAXJOBS stagein 10\n\n"
        )
        for i in range(nodes):
            name = node_name(i)
            f.write(
                f"JOB {name} 00/{i // 10000:02d}/{name}.sub\n"
                f"SCRIPT POST {name} /opt/pegasus/bin/pegasus-exitcode  -r $RETURN -l bench-0.exitcode.log "
                f"-M bench-0.cache.meta   .//00/{i // 10000:02d}/{name}.out\n"
                f"PRIORITY {name} {10 + i % 3}\nRETRY {name} 1\nCATEGORY {name} compute\n"
                f'VARS {name} +DAGNodeRetry="$(RETRY)"\n\n'
            )
        for i in range(1, nodes):
            # level 1 fans out from node 0; every 1000th node gathers the previous 999
            parent = 0 if i % 1000 else None
            if parent is not None:
                f.write(f"PARENT  {node_name(parent)} CHILD {node_name(i)}\n")
                edges += 1
            else:
                f.write(f"PARENT  {' '.join(node_name(j) for j in range(i - 999, i))} CHILD {node_name(i)}\n")
                edges += 999
    return edges


# -- measurements (each in its own process) ------------------------------------------------


def _rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def _measured(work: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    before = _rss_bytes()
    started, cpu = time.perf_counter(), time.process_time()
    result = work()
    result["seconds"] = time.perf_counter() - started
    result["cpu_seconds"] = time.process_time() - cpu
    result["peak_mib"] = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 - before) / 2**20
    return result


def measure_follower(log: str) -> dict[str, Any]:
    from wire_daemon.monitor.eventmap import EventLogFollower

    def work() -> dict[str, Any]:
        follower = EventLogFollower(log)
        events = 0
        while True:
            got = follower.poll()
            if not got:
                break
            events += len(got)
        return {"events": events, "checkpoint_kib": len(json.dumps(follower.checkpoint())) / 1024}

    return _measured(work)


def measure_monitor(submit_dir: str) -> dict[str, Any]:
    from wire_daemon.core.run_state import RunState
    from wire_daemon.monitor.submit_dir import read_submit_dir
    from wire_daemon.monitor.submit_monitor import MemoryPositionStore, SubmitDirMonitor

    loaded = read_submit_dir(submit_dir)  # not measured here: see the dag measurements

    def work() -> dict[str, Any]:
        store = MemoryPositionStore()
        monitor = SubmitDirMonitor(submit_dir, store=store, submit_dir=loaded)
        state = RunState(monitor.workflow)
        events = 0
        while True:
            got = monitor.poll_events()
            if not got:
                break
            for event in got:
                state.apply(event)
            events += len(got)
        assert state.n_done() == monitor.workflow.n_tasks, "every task should end DONE"
        return {"events": events, "checkpoint_kib": len(next(iter(store.values.values()))) / 1024}

    return _measured(work)


def measure_live(submit_dir: str, polls: int) -> dict[str, Any]:
    """The log appended in ``polls`` slices, one poll each: the cost of one MAPE interval's read."""
    from wire_daemon.core.run_state import RunState
    from wire_daemon.monitor.submit_dir import read_submit_dir
    from wire_daemon.monitor.submit_monitor import MemoryPositionStore, SubmitDirMonitor

    data = Path(submit_dir, "bench-0.dag.nodes.log").read_bytes()
    live = Path(submit_dir, "live")
    live.mkdir(exist_ok=True)
    (live / "bench-0.dag").write_bytes(Path(submit_dir, "bench-0.dag").read_bytes())
    log = live / "bench-0.dag.nodes.log"
    log.write_bytes(b"")
    loaded = read_submit_dir(live)

    def work() -> dict[str, Any]:
        monitor = SubmitDirMonitor(live, store=MemoryPositionStore(), submit_dir=loaded)
        state = RunState(monitor.workflow)
        slowest, events = 0.0, 0
        for k in range(1, polls + 1):
            with open(log, "ab") as f:
                f.write(data[len(data) * (k - 1) // polls : len(data) * k // polls])
            started = time.perf_counter()
            for event in monitor.poll_events():
                state.apply(event)
                events += 1
            slowest = max(slowest, time.perf_counter() - started)
        return {"events": events, "polls": polls, "slowest_poll_s": slowest}

    return _measured(work)


def measure_dag(path: str) -> dict[str, Any]:
    from wire_daemon.monitor.dag import parse_dag
    from wire_daemon.monitor.problems import Problems

    def work() -> dict[str, Any]:
        dag = parse_dag(path, Problems())
        return {"nodes": dag.n_nodes, "edges": dag.n_edges}

    return _measured(work)


def measure_workflow(submit_dir: str) -> dict[str, Any]:
    from wire_daemon.monitor.problems import Problems
    from wire_daemon.monitor.submit_dir import workflow_from_submit_dir

    def work() -> dict[str, Any]:
        wf = workflow_from_submit_dir(submit_dir, Problems())
        return {"nodes": wf.n_tasks, "edges": wf.n_edges, "stages": len(wf.stages)}

    return _measured(work)


def measure_kickstart(record: str, repeat: int) -> dict[str, Any]:
    from wire_daemon.monitor.kickstart import read_kickstart

    def work() -> dict[str, Any]:
        for _ in range(repeat):
            read_kickstart(record)
        return {"records": repeat}

    return _measured(work)


def measure_glance(submit_dir: str, repeat: int) -> dict[str, Any]:
    """What the daemon reads every few seconds while it sleeps, per followed workflow: the tails of DAGMan's
    two status files (``SubmitRootMonitor.finished_now``), here of a long-running workflow not yet done."""
    from wire_daemon.monitor.dagman_status import dag_status

    dagman_out, jobstate = Path(submit_dir, "bench-0.dag.dagman.out"), Path(submit_dir, "jobstate.log")
    line = "11/27/26 12:00:00 Event: ULOG_EXECUTE for HTCondor Node bench_ID0000001 (1.0.0) {11/27/26 12:00:00}\n"
    dagman_out.write_text(line * 40_000)  # a few MiB: only the tail is read
    jobstate.write_text("1700000000 bench_ID0000001 EXECUTE 1.0 local - 1\n" * 40_000)

    def work() -> dict[str, Any]:
        finished = sum(dag_status(dagman_out, jobstate).finished for _ in range(repeat))
        return {"glances": repeat, "finished": finished}

    return _measured(work)


_MEASURES = {
    "follower": measure_follower,
    "monitor": measure_monitor,
    "live": measure_live,
    "dag": measure_dag,
    "workflow": measure_workflow,
    "kickstart": measure_kickstart,
    "glance": measure_glance,
}


def _child(kind: str, args: list[str]) -> dict[str, Any]:
    command = [sys.executable, __file__, "--child", kind, *args]
    out = subprocess.run(command, check=True, capture_output=True, text=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


# -- driver -----------------------------------------------------------------------------


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--jobs", type=int, default=100_000)
    parser.add_argument("--dag-nodes", type=int, nargs="+", default=[100_000, 1_000_000])
    parser.add_argument("--polls", type=int, default=100, help="slices of the live-following run")
    parser.add_argument("--keep", type=Path, help="write the generated files here and keep them")
    parser.add_argument("--child", nargs="+", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        kind, *rest = args.child
        converted: list[Any] = [int(x) if x.isdigit() else x for x in rest]
        print(json.dumps(_MEASURES[kind](*converted)))
        return
    if args.keep:
        args.keep.mkdir(parents=True, exist_ok=True)
        run(args, args.keep)
    else:
        with tempfile.TemporaryDirectory(prefix="wire-monitor-bench-") as tmp:
            run(args, Path(tmp))


def run(args: argparse.Namespace, base: Path) -> None:
    print(f"monitor_ingest: python {sys.version.split()[0]}, {time.strftime('%Y-%m-%d')}")
    wf = base / f"events-{args.jobs}"
    wf.mkdir(exist_ok=True)
    events = write_event_log(wf / "bench-0.dag.nodes.log", args.jobs)
    write_dag(wf / "bench-0.dag", args.jobs)
    size = (wf / "bench-0.dag.nodes.log").stat().st_size
    print(f"event log: {args.jobs} jobs, {events} events, {size / 2**20:.1f} MiB")
    r = _child("follower", [str(wf / "bench-0.dag.nodes.log")])
    _line("EventLogFollower, one pass", r["events"], r, "events", f"checkpoint {r['checkpoint_kib']:.0f} KiB")
    r = _child("monitor", [str(wf)])
    _line(
        "SubmitDirMonitor + RunState, one pass", r["events"], r, "events", f"checkpoint {r['checkpoint_kib']:.0f} KiB"
    )
    r = _child("live", [str(wf), str(args.polls)])
    _line(
        f"SubmitDirMonitor, log grown in {args.polls} slices",
        r["events"],
        r,
        "events",
        f"slowest poll {r['slowest_poll_s'] * 1000:.0f} ms",
    )
    r = _child("glance", [str(wf), "2000"])
    _line("DAGMan status glance (two file tails), per followed workflow", r["glances"], r, "glances")
    record = (
        Path(__file__).resolve().parents[1]
        / "tests/data/fixtures/pegasus-submit/process_wf_success/00/00/ls_ID0000001.out.000"
    )
    if record.is_file():
        r = _child("kickstart", [str(record), "2000"])
        _line("kickstart YAML record read", r["records"], r, "records")
    for nodes in args.dag_nodes:
        dag_dir = base / f"dag-{nodes}"
        dag_dir.mkdir(exist_ok=True)
        edges = write_dag(dag_dir / "bench-0.dag", nodes)
        size = (dag_dir / "bench-0.dag").stat().st_size
        print(f".dag: {nodes} nodes, {edges} edges, {size / 2**20:.0f} MiB")
        r = _child("dag", [str(dag_dir / "bench-0.dag")])
        _line("parse_dag", r["nodes"], r, "nodes")
        r = _child("workflow", [str(dag_dir)])
        _line("workflow_from_submit_dir (parse + stages)", r["nodes"], r, "nodes")


def _line(what: str, items: int, r: dict[str, Any], unit: str, extra: str = "") -> None:
    # Rates from CPU time: on a shared machine wall time also counts other processes' turns.
    cpu = r["cpu_seconds"]
    rate = items / cpu if cpu > 0 else float("inf")
    per = cpu / items * 1e6 if items else float("nan")
    print(
        f"  {what}: {cpu:.2f} s CPU ({r['seconds']:.2f} s wall), {rate:,.0f} {unit}/s "
        f"({per:.1f} us/{unit[:-1]}), peak +{r['peak_mib']:.0f} MiB" + (f", {extra}" if extra else "")
    )


if __name__ == "__main__":
    main()
