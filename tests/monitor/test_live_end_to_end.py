"""The readers follow a live-written submit directory and agree with the emulator's ground truth.

The emulated site runs the bundled real trace and writes a real-format
Pegasus submit directory as its virtual time advances; SubmitDirMonitor reads
the growing files. At every checkpoint the state rebuilt from the files must
equal the state rebuilt from the site's own events: task states, hosts,
stage membership and per-stage predictions. A reader killed mid-run and
restarted from its saved positions continues with no event counted twice.
"""

from __future__ import annotations

import numpy as np
import pytest

from wire_daemon.analyze.predictor import OnlinePredictor
from wire_daemon.core.config import EmulationConfig, PredictionConfig
from wire_daemon.core.run_state import RunState
from wire_daemon.emulated.traces import bundled_trace_path, load_trace
from wire_daemon.monitor.hosts import HostMap
from wire_daemon.monitor.submit_monitor import MemoryPositionStore, SubmitDirMonitor
from wire_lab.live_writer import WriterOptions, build_live


def _by_task(state: RunState) -> dict[str, tuple[int, str | None]]:
    return {tid: (int(state.status[i]), state.host.get(i)) for i, tid in enumerate(state.workflow.task_ids)}


def _stages(state: RunState) -> dict[str, str]:
    wf = state.workflow
    return {tid: wf.stages[wf.stage_of[i]].name for i, tid in enumerate(wf.task_ids)}


def _predictions(state: RunState, now: float) -> dict[str, tuple[int, float]]:
    predictor = OnlinePredictor(state.workflow, PredictionConfig())
    predictor.update(state, now)
    return {m.name: (m.n_completed, round(m.median_exec_s, 2)) for m in predictor.stage_summary() if m.n_completed}


class Follower:
    def __init__(self, path, store, hosts):
        self.monitor = SubmitDirMonitor(path, store=store, hosts=hosts)
        self.state = RunState(self.monitor.workflow)
        self.seen = 0

    def poll(self):
        events = self.monitor.poll_events()
        for event in events:
            self.state.apply(event)
        self.seen += len(events)
        return events


@pytest.fixture(scope="module")
def live(tmp_path_factory):
    workflow = load_trace(bundled_trace_path())
    config = EmulationConfig(initial_instances=2, time_scale=5.0)
    return build_live(
        workflow, tmp_path_factory.mktemp("live") / "run", config, options=WriterOptions(subsecond_times=True)
    )


def test_readers_agree_with_the_emulator_at_every_checkpoint_and_survive_a_restart(live):
    truth = RunState(live.site.wf)
    store = MemoryPositionStore()
    hosts = HostMap()
    submit_dir = live.writer.dag_path.parent
    reader = Follower(submit_dir, store, hosts)
    fed = 0
    checkpoints = 0
    restarted = False
    busy = False
    t = 0.0
    while not live.site.finished:
        t += 30.0
        live.advance_to(t)
        for inst in live.instances():
            hosts.add(inst.instance_id, inst.address)
        for event in live.emitted[fed:]:
            truth.apply(event)
        fed = len(live.emitted)
        if not restarted and truth.n_done() > live.site.wf.n_tasks // 2:
            # Kill the reader: a new one resumes from the saved positions into the old state.
            before = reader.seen
            old_state = reader.state
            reader = Follower(submit_dir, store, hosts)
            reader.state = old_state
            reader.seen = before
            restarted = True
        reader.poll()
        assert _by_task(reader.state) == _by_task(truth), f"task states differ at t={t}"
        assert _stages(reader.state) == _stages(truth)
        assert _predictions(reader.state, t) == _predictions(truth, t)
        checkpoints += 1
        busy = busy or bool(reader.state.host)
    assert restarted and busy and checkpoints > 5, checkpoints
    assert reader.seen == len(live.emitted)  # every event once: nothing lost, nothing twice
    assert reader.state.is_finished()


def test_a_reader_restarted_from_scratch_rebuilds_the_same_state(live):
    submit_dir = live.writer.dag_path.parent
    hosts = HostMap(live.instances())
    fresh = Follower(submit_dir, MemoryPositionStore(), hosts)
    fresh.poll()
    truth = RunState(live.site.wf)
    for event in live.emitted:
        truth.apply(event)
    assert _by_task(fresh.state) == _by_task(truth)
    assert np.array_equal(
        np.sort(fresh.state.completion_order),
        np.sort([fresh.state.workflow.index_of(live.site.wf.task_ids[i]) for i in truth.completion_order]),
    )
