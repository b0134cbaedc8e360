"""The chaos suite's hostile submit host: what an unlucky production host holds in its submit root.

``wire-daemon run`` (a condor site on moto's EC2) next to a live-written
workflow, with, in other workflow directories, FIFOs and a device under the
names the monitor reads, and a directory whose name is not UTF-8: the daemon
keeps its interval, steers the healthy workflow, never enters the safe state,
and stops on SIGTERM within 10 s. Then, without a daemon (the monitor is what
they load): thousands of finished workflows, an oversized kickstart record
and a long DAG cycle, each within its time and memory bound.
"""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import stat
import time
import uuid
from pathlib import Path

import pytest

from wire_daemon.monitor.kickstart import read_kickstart
from wire_daemon.monitor.observations import FinishedMarkersOnly, SubmitHostObservations
from wire_daemon.monitor.problems import Problems
from wire_daemon.monitor.safe_open import KICKSTART_LIMIT
from wire_daemon.monitor.submit_monitor import SubmitRootMonitor
from wire_daemon.persist.store import StateStore
from wire_lab.chaos.daemon import DaemonProcess, DaemonSettings, read_decisions
from wire_lab.chaos.hostile import finished_workflow, live_workflow, many_finished, undecodable_dir

pytestmark = pytest.mark.slow

RUN_S = 8.0
INTERVAL_S = 1.0


def _start(tmp_path: Path, moto, root: Path) -> tuple[DaemonProcess, DaemonSettings]:
    settings = DaemonSettings(
        submit_root=root,
        endpoint=moto.url,
        pool=f"hostile-{uuid.uuid4().hex[:8]}",
        image_id=moto.image_id,
        subnet_id=moto.subnet_id,
        state_path=tmp_path / "state.sqlite",
        decisions_path=tmp_path / "decisions.jsonl",
        interval_s=INTERVAL_S,
    )
    config = tmp_path / "config.yaml"
    config.write_text(settings.yaml())
    daemon = DaemonProcess(config, tmp_path / "daemon.err")
    daemon.start()
    return daemon, settings


def _status(state_path: Path) -> dict:
    db = sqlite3.connect(f"file:{state_path}?mode=ro", uri=True, timeout=10)
    try:
        row = db.execute("SELECT value FROM meta WHERE key = 'status'").fetchone()
    finally:
        db.close()
    return json.loads(row[0]) if row else {}


def _stop_within(daemon: DaemonProcess, seconds: float) -> float:
    started = time.monotonic()
    code = daemon.terminate(timeout=seconds)
    took = time.monotonic() - started
    assert code == 0, f"SIGTERM: exit {code} after {took:.1f} s (killed after {seconds} s if negative)"
    return took


def _healthy_workflow(root: Path) -> Path:
    live = live_workflow(root / "good", "good")
    live.advance_to(30.0)  # tasks queued, none finished: the policy wants workers
    return root / "good"


def _steered(decisions: list[dict]) -> bool:
    return any((d.get("target") or 0) > 0 for d in decisions)


def test_fifos_and_devices_in_the_submit_root_never_stall_the_daemon(tmp_path, chaos_moto):
    root = tmp_path / "submit"
    good = _healthy_workflow(root)
    hostile = []
    for name in ("good-0.dag.dagman.out", "jobstate.log", "good-0.dag.nodes.log"):
        target = root / f"fifo-{name}"
        shutil.copytree(good, target)
        (target / name).unlink(missing_ok=True)
        os.mkfifo(target / name)
        hostile.append(target / name)
    both = root / "fifo-both-logs"  # the job's own log too: no event log left, jobstate.log read instead
    shutil.copytree(good, both)
    for name in ("good-0.dag.nodes.log", "good-0.log"):
        (both / name).unlink()
        os.mkfifo(both / name)
        hostile.append(both / name)
    device = root / "device"
    shutil.copytree(good, device)
    (device / "good-0.dag.dagman.out").unlink(missing_ok=True)
    if os.geteuid() == 0:
        os.mknod(device / "good-0.dag.dagman.out", stat.S_IFCHR | 0o644, os.makedev(1, 5))  # /dev/zero's
    else:
        (device / "good-0.dag.dagman.out").symlink_to("/dev/zero")  # what anyone can make; the node: as root
    hostile.append(device / "good-0.dag.dagman.out")

    daemon, settings = _start(tmp_path, chaos_moto, root)
    try:
        time.sleep(RUN_S)
        assert daemon.alive
    finally:
        took = _stop_within(daemon, 10.0)
    decisions = [d for d in read_decisions(settings.decisions_path) if "target" in d]
    assert len(decisions) >= RUN_S / INTERVAL_S * 0.5, f"{len(decisions)} decisions in {RUN_S:.0f} s: not its interval"
    assert _steered(decisions), "the healthy workflow was not steered"
    notes = [n for d in decisions for n in d.get("notes") or []]
    for path in hostile:
        said = [n for n in notes if n.startswith(f"{path}: ")]
        assert len(said) == 1, f"{path}: {said} (one warning expected)"
    assert "Traceback" not in (tmp_path / "daemon.err").read_text(errors="replace")
    assert took < 10.0


def test_a_directory_named_with_undecodable_bytes_costs_no_safe_state(tmp_path, chaos_moto):
    root = tmp_path / "submit"
    good = _healthy_workflow(root)
    undecodable_dir(root, good)
    daemon, settings = _start(tmp_path, chaos_moto, root)
    try:
        time.sleep(RUN_S)
        assert daemon.alive
        status = _status(settings.state_path)
    finally:
        _stop_within(daemon, 10.0)
    assert not status["safe_state"]["active"], status["safe_state"]
    assert sorted(w["submit_dir"].rsplit("/", 1)[-1] for w in status["workflows"]) == ["good", "wf-\\xff"]
    decisions = [d for d in read_decisions(settings.decisions_path) if "target" in d]
    assert _steered(decisions)
    err = (tmp_path / "daemon.err").read_text(errors="replace")
    assert "Traceback" not in err and "failed" not in err, err[-3000:]


def _rss_mb() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def test_a_thousand_finished_workflows_cost_little_and_are_not_rewritten(tmp_path):
    # The full form (benchmarks/hostile_host.py) takes 5,000: first poll under 10 s, under 200 MB.
    root = tmp_path / "submit"
    root.mkdir()
    many_finished(root, 1000, finished_workflow(tmp_path / "template"))
    store = StateStore(tmp_path / "state.sqlite")
    observations = SubmitHostObservations(
        SubmitRootMonitor(root, store=FinishedMarkersOnly(store), settle_s=0.0, read_finished=False)
    )
    before = _rss_mb()
    started = time.monotonic()
    observations.refresh()
    first = time.monotonic() - started
    grew = _rss_mb() - before
    assert len(observations.root.finished) == 1000 and observations.tracked == {}
    assert first < 5.0, f"first poll {first:.1f} s"
    assert grew < 50.0, f"memory grew {grew:.0f} MB"
    changes = store.rows_changed
    for _ in range(3):
        observations.refresh()
    assert store.rows_changed == changes, "steady polls wrote to the state file"
    store.close()


def test_an_oversized_kickstart_record_is_refused_quickly(tmp_path):
    record = tmp_path / "job.out.000"
    argument = "x" * (100 << 20)
    record.write_text(f"- invocation: true\n  mainjob:\n    executable:\n      arguments: [{argument}]\n")
    problems = Problems()
    before, started = _rss_mb(), time.monotonic()
    assert read_kickstart(record, problems) is None
    assert time.monotonic() - started < 1.0 and _rss_mb() - before < 20.0
    assert f"over the {KICKSTART_LIMIT:,}-byte bound" in problems.messages[0]


def test_a_hundred_thousand_node_cycle_is_parsed_once_and_said_in_one_short_line(tmp_path):
    root = tmp_path / "submit"
    template = tmp_path / "template"
    live_workflow(template, "cyc")
    shutil.copytree(template, root / "cyc")
    n = 100_000
    body = "".join(f"JOB n{i} n.sub\n" for i in range(n))
    body += "".join(f"PARENT n{i} CHILD n{i + 1}\n" for i in range(n - 1)) + f"PARENT n{n - 1} CHILD n0\n"
    (root / "cyc" / "cyc-0.dag").write_text(body)
    problems = Problems()
    monitor = SubmitRootMonitor(root, problems=problems, settle_s=0.0)
    monitor.poll()
    started = time.monotonic()
    for _ in range(3):
        monitor.poll()
    steady = (time.monotonic() - started) / 3
    assert steady < 0.2, f"{steady:.2f} s per poll: parsed again"
    (line,) = [m for m in problems.messages if "cycle" in m]
    assert len(line) < 500 and "(100,000 nodes)" in line
