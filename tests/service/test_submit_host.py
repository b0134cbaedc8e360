"""The submit host's observations and runtime, on live-written submit dirs (no daemon process)."""

from __future__ import annotations

from pathlib import Path

import pytest

from wire_daemon.core.config import EmulationConfig, SteeringConfig
from wire_daemon.core.errors import CondorUnreachable
from wire_daemon.core.instances import Instance
from wire_daemon.core.journal import Journal, NoticeBox
from wire_daemon.emulated.traces import bundled_trace_path, load_trace
from wire_daemon.execute.guarded_cloud import SafetyConfig
from wire_daemon.monitor.observations import FinishedMarkersOnly, SubmitHostObservations
from wire_daemon.monitor.submit_monitor import SubmitRootMonitor
from wire_daemon.persist.store import StateStore
from wire_daemon.runtime import runtimes
from wire_daemon.runtime.runtimes import SubmitHostRuntime
from wire_daemon.runtime.settings import CloudSettings, CondorSettings, Settings, SiteSettings
from wire_lab.live_writer import WriterOptions, build_live

DATA = Path(__file__).resolve().parents[1] / "data"
EPOCH = 1_700_000_000.0


def _live(root: Path, name: str, trace: Path, label: str):
    return build_live(
        load_trace(trace),
        root / name,
        EmulationConfig(initial_instances=2),
        4,
        3600.0,
        WriterOptions(epoch=EPOCH, label=label),
    )


def test_two_workflows_one_dag_and_a_finished_one_forgotten(tmp_path):
    montage = _live(tmp_path, "run1", bundled_trace_path(), "montage")
    sra = _live(tmp_path, "run2", DATA / "srasearch-chameleon-30a-001.json", "sra")
    montage.advance_to(30.0)
    sra.advance_to(30.0)
    obs = SubmitHostObservations(SubmitRootMonitor(tmp_path, settle_s=0.0))
    assert obs.refresh() is True
    sizes = montage.site.wf.n_tasks + sra.site.wf.n_tasks
    assert obs.workflow.n_tasks == sizes
    assert {t.split("/")[0] for t in obs.workflow.task_ids} == {"montage-0", "sra-0"}  # the names inspect shows
    history = obs.history()
    assert len(history) == len(montage.emitted) + len(sra.emitted)
    assert obs.poll_events() == []  # a rebuild hands everything out through history()

    montage.run()  # to the end; the writer closes the run (DAGMan finished)
    assert obs.refresh() is True
    assert obs.workflow.n_tasks == sra.site.wf.n_tasks  # montage is forgotten
    sra.advance_to(60.0)
    assert obs.refresh() is False
    assert all(e.task_id.startswith("sra-0/") for e in obs.poll_events())


class FakeDriver:
    slots_per_instance = 4

    def __init__(self) -> None:
        self.live: dict[str, Instance] = {}
        self.launches = 0

    def list_instances(self, include_unusable: bool = False) -> list[Instance]:
        return list(self.live.values())

    def find_request(self, request_id: str) -> list[Instance]:
        return [i for i in self.live.values() if i.request_id == request_id]

    def launch(self, count: int, request_id: str | None = None, user_data: str | None = None) -> list[Instance]:
        made = []
        for _ in range(count):
            self.launches += 1
            instance = Instance(
                f"i-{self.launches}", EPOCH, 4, "running", f"10.0.0.{self.launches}", request_id=request_id or ""
            )
            self.live[instance.instance_id] = instance
            made.append(instance)
        return made

    def terminate(self, instance_ids) -> list[str]:
        for i in instance_ids:
            self.live.pop(i, None)
        return list(instance_ids)


def test_the_runtime_rebuilds_its_loop_when_a_workflow_comes_and_goes(tmp_path):
    live = _live(tmp_path / "submit", "run1", bundled_trace_path(), "montage")
    live.advance_to(20.0)
    settings = Settings(
        site=SiteSettings(kind="condor", submit_root=str(tmp_path / "submit")),
        cloud=CloudSettings(kind="ec2"),
        condor=CondorSettings(control="off", settle_s=0.0),
        steering=SteeringConfig(min_instances=0),
        safety=SafetyConfig(),
        policy="wire",  # the release rule checked below is WIRE's
    )
    store = StateStore(tmp_path / "state.sqlite")
    clock = {"t": EPOCH + 20.0}
    journal, box = Journal(), NoticeBox()
    journal.subscribe(box)
    runtime = SubmitHostRuntime(settings, store, journal, driver=FakeDriver(), clock=lambda: clock["t"])
    assert runtime.loop.state.workflow.n_tasks == 0  # nothing read yet

    runtime.refresh()
    record = runtime.loop.iterate(clock["t"])
    assert runtime.loop.state.workflow.n_tasks == live.site.wf.n_tasks
    assert record.done == live.site.n_done and record.launched  # an idle queue and no instance: grow
    runtime.flush_notes()
    assert any("would boost JobPrio" in n.line for n in box.take())
    boosted = int(runtime.loop.boost.used.sum())

    # A restart on the same state file boosts no stage again: the boosted tasks are in the state file.
    again = SubmitHostRuntime(settings, store, Journal(), driver=FakeDriver(), clock=lambda: clock["t"])
    again.refresh()
    assert again.loop.iterate(clock["t"]).boosted == 0
    assert int(again.loop.boost.used.sum()) == boosted

    live.run()
    clock["t"] = EPOCH + live.site.last_finish + 1.0
    runtime.refresh()
    record = runtime.loop.iterate(clock["t"])
    assert runtime.loop.state.workflow.n_tasks == 0 and record.planned == 0  # no work: line 28 does not apply
    assert record.pool == 1 and "release" in record.rule  # it goes when its paid unit ends, not before
    assert boosted > 0
    assert runtime.cost_units(clock["t"]) == 1
    store.close()


def test_only_the_finished_list_is_persisted(tmp_path):
    store = StateStore(tmp_path / "state.sqlite")
    positions = FinishedMarkersOnly(store)
    positions.save_position("submit-root:/x", {"finished": {}})
    positions.save_position("submit-dir:abc:events", {"offset": 10})
    assert store.load_position("submit-root:/x") == {"finished": {}}
    assert store.load_position("submit-dir:abc:events") is None
    assert positions.load_position("submit-dir:abc:events") == {"offset": 10}
    store.close()


def _runtime(tmp_path: Path, clock: dict[str, float], sleep) -> SubmitHostRuntime:
    settings = Settings(
        site=SiteSettings(kind="condor", submit_root=str(tmp_path / "submit")),
        cloud=CloudSettings(kind="ec2"),
        condor=CondorSettings(control="off", settle_s=0.0),
        steering=SteeringConfig(),
        safety=SafetyConfig(),
    )
    store = StateStore(tmp_path / "state.sqlite")
    return SubmitHostRuntime(settings, store, Journal(), sleep, driver=FakeDriver(), clock=lambda: clock["t"])


def test_a_sleep_is_cut_short_once_when_dagman_finishes_a_followed_workflow(tmp_path, monkeypatch):
    """Billed per second, a pool idle until the next decision costs money: the runtime glances at DAGMan's
    status files while it sleeps, and wakes once per workflow that finished."""
    live = _live(tmp_path / "submit", "run1", bundled_trace_path(), "montage")
    live.advance_to(20.0)
    clock = {"t": EPOCH + 20.0}
    slept: list[float] = []
    end_after: list[int] = []  # DAGMan writes its exit while the daemon sleeps, at this glance

    def sleep(seconds: float) -> None:
        slept.append(seconds)
        clock["t"] += seconds
        if len(slept) in end_after:
            live.run()

    runtime = _runtime(tmp_path, clock, sleep)
    runtime.refresh()
    assert runtime.sleep_until(EPOCH + 20.0 + 60.0) is False  # nothing ended: asleep to the end, in glances
    assert slept == [runtimes.END_GLANCE_S] * 6
    assert clock["t"] == EPOCH + 80.0
    slept.clear()
    end_after.append(3)
    assert runtime.sleep_until(EPOCH + 260.0) is True  # woken at the first glance after the exit line
    assert clock["t"] == EPOCH + 80.0 + 3 * runtimes.END_GLANCE_S
    woken = clock["t"]
    assert runtime.sleep_until(EPOCH + 260.0) is True and clock["t"] == woken, "due until an iteration reads"
    away = CondorUnreachable("the collector does not answer")
    with monkeypatch.context() as patch:
        patch.setattr(runtime.condor, "probe", lambda: (_ for _ in ()).throw(away))
        with pytest.raises(CondorUnreachable):
            runtime.refresh()  # the iteration it woke for could not read the workflow
    assert runtime.sleep_until(EPOCH + 260.0) is False, "woken twice for one workflow"
    assert clock["t"] == EPOCH + 260.0
    runtime.refresh()  # the poll reads its last events and forgets it
    assert runtime.loop.state.workflow.n_tasks == 0
    sra = _live(tmp_path / "submit", "run2", DATA / "srasearch-chameleon-30a-001.json", "sra")
    sra.advance_to(20.0)
    runtime.refresh()
    assert runtime.loop.state.workflow.n_tasks == sra.site.wf.n_tasks
    sra.run()
    assert runtime.sleep_until(EPOCH + 440.0) is True, "the next workflow's end wakes it too"
    assert clock["t"] == EPOCH + 260.0 + runtimes.END_GLANCE_S


def test_a_sleep_cut_short_by_the_operator_is_not_a_workflow_end(tmp_path):
    live = _live(tmp_path / "submit", "run1", bundled_trace_path(), "montage")
    live.advance_to(20.0)
    clock = {"t": EPOCH + 20.0}

    def sleep(seconds: float) -> bool:
        clock["t"] += 1.0
        live.run()
        return True  # a command came in

    runtime = _runtime(tmp_path, clock, sleep)
    runtime.refresh()
    assert runtime.sleep_until(EPOCH + 200.0) is False and clock["t"] == EPOCH + 21.0
