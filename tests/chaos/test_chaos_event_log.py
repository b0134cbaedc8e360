"""Chaos: a damaged job event log under a live-written submit directory.

* **Impossible times.** Events dated 2099 (an execute of a queued task, a
  terminate of a running one) and one dated 1999 (a submit of a task not yet
  submitted) are appended to a copy of the event logs mid-run. The monitor
  refuses each with a warning naming the file and the byte offset, and the
  policy's decision (pool target, launches, releases) and the predicted load
  are the same as on the undamaged copy, checkpoint after checkpoint.
* **A NUL gap.** Mid-run the event logs get a run of NUL bytes longer than the
  reader's 64 MiB chunk (a sparse hole, as a crash or a preallocating file
  system leaves), and the writer goes on after it. The monitor warns once per
  log with the byte range and ends with the emulator's own task states.
"""

from __future__ import annotations

import re
import shutil
from datetime import datetime
from pathlib import Path

import numpy as np
import pytest

from wire_daemon.analyze.predictor import OnlinePredictor
from wire_daemon.core.config import EmulationConfig, PredictionConfig, SteeringConfig
from wire_daemon.core.run_state import RunState, TaskStatus
from wire_daemon.monitor.hosts import HostMap
from wire_daemon.monitor.position import DEFAULT_MAX_READ
from wire_daemon.monitor.submit_monitor import SubmitDirMonitor
from wire_daemon.plan.wire import WirePolicy
from wire_lab.chaos.world import Workload, cycled_workflow
from wire_lab.live_writer import LiveEmulation, build_live

pytestmark = pytest.mark.slow

EPOCH = 1_700_000_000.0  # the live writer's wall-clock time of virtual time 0
FAR_FUTURE = datetime(2099, 1, 1, 12).timestamp()
FAR_PAST = datetime(1999, 6, 1, 12).timestamp()


def _live(tmp_path: Path) -> LiveEmulation:
    workflow = cycled_workflow(0, Workload(wide=40, runtime_s=120.0, join_s=30.0))
    return build_live(workflow, tmp_path / "run", EmulationConfig(initial_instances=2, boot_lag_s=60.0))


def _event_logs(directory: Path) -> list[Path]:
    return sorted(p for p in directory.glob("*.log") if p.name != "jobstate.log")


def _stamp(when: float) -> str:
    return datetime.fromtimestamp(when).strftime("%Y-%m-%d %H:%M:%S")


def _read(directory: Path, live: LiveEmulation) -> tuple[RunState, SubmitDirMonitor]:
    hosts = HostMap()
    for inst in live.instances():
        hosts.add(inst.instance_id, inst.address)
    monitor = SubmitDirMonitor(directory, hosts=hosts)
    state = RunState(monitor.workflow)
    for event in monitor.poll_events():
        state.apply(event)
    return state, monitor


def _decide(state: RunState, live: LiveEmulation, now: float):
    policy = WirePolicy(OnlinePredictor(state.workflow, PredictionConfig()), SteeringConfig(max_instances=12))
    result = policy.plan(now, state, live.instances(), state.idle_in_queue_order())
    return result.decision, repr(result.upcoming)  # the predicted load holds arrays: compared as text


def _impossible_events(log: Path) -> tuple[str, int]:
    """Three events no clock could have written, for jobs of this log; and how many."""
    text = log.read_text()
    jobs = {kind: [int(c) for c in re.findall(rf"(?m)^{kind} \((\d+)\.", text)] for kind in ("000", "001", "005")}
    submitted, started, ended = jobs["000"], set(jobs["001"]), set(jobs["005"])
    queued = next(c for c in submitted if c not in started)
    running = next(c for c in submitted if c in started and c not in ended)
    host = "<10.9.9.9:9618?addrs=10.9.9.9-9618>"
    usage = "\t\tUsr 0 00:00:00, Sys 0 00:00:00  -  Run Remote Usage\n" * 4
    text = (
        f"001 ({queued:03d}.000.000) {_stamp(FAR_FUTURE)} Job executing on host: {host}\n...\n"
        f"005 ({running:03d}.000.000) {_stamp(FAR_FUTURE)} Job terminated.\n"
        f"\t(1) Normal termination (return value 0)\n{usage}...\n"
        f"000 ({max(submitted) + 50:03d}.000.000) {_stamp(FAR_PAST)} Job submitted from host: {host}\n"
        "    DAG Node: join_ID9999999\n...\n"
    )
    return text, 3


def test_events_dated_2099_and_1999_are_refused_and_do_not_steer(tmp_path: Path) -> None:
    live = _live(tmp_path)
    clean = live.writer.dag_path.parent
    damaged = tmp_path / "damaged"
    checked = 0
    for t in (60.0, 150.0, 240.0):
        live.advance_to(t)
        shutil.rmtree(damaged, ignore_errors=True)
        shutil.copytree(clean, damaged)
        injected = {}
        for log in _event_logs(damaged):
            offset = log.stat().st_size
            text, count = _impossible_events(log)
            with open(log, "a") as f:
                f.write(text)
            injected[log] = (offset, count)
        want_state, _ = _read(clean, live)
        got_state, monitor = _read(damaged, live)
        if not any(want_state.status == TaskStatus.RUNNING):
            continue
        warned = [log for log in injected if any(m.startswith(f"{log}:") for m in monitor.problems.messages)]
        assert warned, f"no warning for the impossible events: {monitor.problems.messages}"
        read_log = warned[0]
        offset, count = injected[read_log]
        refused = [m for m in monitor.problems.messages if "refused" in m]
        assert len(refused) == count, monitor.problems.messages
        assert all(m.startswith(f"{read_log}:") and "(byte " in m for m in refused)
        assert f"(byte {offset}): EXECUTE event dated 2099-01-01T" in refused[0]
        assert np.array_equal(got_state.status, want_state.status)
        assert _decide(got_state, live, EPOCH + t) == _decide(want_state, live, EPOCH + t)
        checked += 1
    assert checked >= 2


def test_a_nul_gap_longer_than_the_read_chunk_hides_no_event(tmp_path: Path) -> None:
    live = _live(tmp_path)
    submit_dir = live.writer.dag_path.parent
    hosts = HostMap()
    monitor = SubmitDirMonitor(submit_dir, hosts=hosts)
    state = RunState(monitor.workflow)
    truth = RunState(live.site.wf)
    fed = 0
    gap = DEFAULT_MAX_READ + (5 << 20)
    gaps: dict[Path, int] = {}
    t = 0.0
    while not live.site.finished and t < 20_000:
        t += 60.0
        live.advance_to(t)
        for inst in live.instances():
            hosts.add(inst.instance_id, inst.address)
        if t == 240.0:  # mid-run: a sparse hole at the end of every event log; the writer appends after it
            for log in _event_logs(submit_dir):
                size = log.stat().st_size
                with open(log, "r+b") as f:
                    f.truncate(size + gap)
                gaps[log] = size
        for event in monitor.poll_events():
            state.apply(event)
        for event in live.emitted[fed:]:
            truth.apply(event)
        fed = len(live.emitted)
    assert live.site.finished and gaps
    for event in monitor.poll_events():
        state.apply(event)
    assert np.array_equal(state.status, truth.status)
    nul = [m for m in monitor.problems.messages if "NUL bytes" in m]
    assert len(nul) == 1, monitor.problems.messages
    (log, start), *_ = [(p, s) for p, s in gaps.items() if nul[0].startswith(f"{p}:")]
    assert f"bytes {start} to {start + gap} skipped: NUL bytes (a sparse or damaged log)" in nul[0]
