"""Spot interruptions per type and zone, their lost work, in status (text and JSON) and in the metrics."""

from __future__ import annotations

import json

import pytest
from prometheus_client import generate_latest

from wire_daemon.cli.main import main
from wire_daemon.core.events import EventKind, TaskEvent
from wire_daemon.core.journal import InstanceReclaimed
from wire_daemon.core.pricing import Market
from wire_daemon.core.run_state import RunState
from wire_daemon.core.workflow import TaskSpec, build_workflow
from wire_daemon.execute.market_fallback import SpotFallback
from wire_daemon.runtime.settings import load_settings
from wire_daemon.service.daemon import Daemon
from wire_daemon.service.interruptions import InterruptionTally
from wire_daemon.service.metrics import Metrics
from wire_daemon.service.status import StatusReport, StatusSnapshot, interruption_status
from wire_daemon.service.status_text import render_status

from .emulated_config import emulated_config
from .test_condor_away import Clock, Cloud, Condor, _daemon


def _state() -> RunState:
    """Three tasks: t0 evicted from i-a after 100 s, t1 still shown running on i-a, t2 running on i-b."""
    state = RunState(build_workflow("w", "test", [TaskSpec(f"t{i}", "a", ()) for i in range(3)]))
    for i in range(3):
        state.apply(TaskEvent(0.0, EventKind.SUBMITTED, f"t{i}"))
    state.apply(TaskEvent(10.0, EventKind.STARTED, "t0", host="i-a"))
    state.apply(TaskEvent(50.0, EventKind.STARTED, "t1", host="i-a"))
    state.apply(TaskEvent(20.0, EventKind.STARTED, "t2", host="i-b"))
    state.apply(TaskEvent(110.0, EventKind.EVICTED, "t0"))
    return state


def test_each_reclaim_counts_once_per_type_and_zone_and_its_lost_work_is_read_from_the_tasks():
    tally = InterruptionTally()
    tally.notify(InstanceReclaimed(110.0, "i-a", "c5.large", "us-east-1a"))
    tally.notify(InstanceReclaimed(111.0, "i-a", "c5.large", "us-east-1a"))  # told twice: one reclaim
    tally.notify(InstanceReclaimed(300.0, "i-c", "c5.large", "us-east-1b", lost_slot_s=40.0))  # measured
    tally.notify(InstanceReclaimed(300.0, "i-d", "m5.xlarge", "us-east-1a", lost_slot_s=0.0))
    assert tally.counts() == {
        ("c5.large", "us-east-1a"): 1,
        ("c5.large", "us-east-1b"): 1,
        ("m5.xlarge", "us-east-1a"): 1,
    }
    # i-a: t0's 100 s evicted, t1's 150 s still shown running at 200; i-b was not reclaimed; i-c measured 40 s
    assert tally.lost_slot_s(_state(), 200.0) == 100.0 + 150.0 + 40.0


def test_a_measured_loss_told_after_the_bare_reclaim_replaces_the_reading():
    tally = InterruptionTally()
    tally.notify(InstanceReclaimed(110.0, "i-a", "c5.large", ""))
    tally.notify(InstanceReclaimed(110.0, "i-a", "c5.large", "", lost_slot_s=7.0))
    assert tally.lost_slot_s(_state(), 200.0) == 7.0


def _report(snapshot: StatusSnapshot) -> StatusReport:
    return StatusReport(daemon="running", state_path="s.sqlite", snapshot=snapshot)


def test_status_shows_the_counts_and_the_lost_work_in_text_and_json_and_reads_them_back():
    seen = interruption_status({("c5.large", "us-east-1a"): 2, ("m5.xlarge", "us-east-1b"): 3}, 1234.56)
    snapshot = StatusSnapshot(time=1_800_000_000.0, clock="wall", interruptions=seen)
    data = json.loads(json.dumps(_report(snapshot).to_json()))
    assert data["interruptions"] == {
        "total": 5,
        "by_type_zone": [
            {"instance_type": "m5.xlarge", "zone": "us-east-1b", "count": 3},
            {"instance_type": "c5.large", "zone": "us-east-1a", "count": 2},
        ],
        "lost_slot_s": 1234.6,
        "back_offs": [],
    }
    assert StatusSnapshot.from_json(snapshot.to_json()) == snapshot
    text = render_status(_report(snapshot), now=1_800_000_000.0)
    assert (
        "spot interruptions: 5 reclaimed by the cloud (m5.xlarge in us-east-1b: 3, c5.large in us-east-1a: 2); "
        "work lost: 1235 slot-s (20.6 min of one slot), to run again"
    ) in text.splitlines()


def test_status_says_which_spot_types_launch_on_demand_and_for_how_long():
    """After a capacity error (or a restart that kept it, ``runtime/runtimes.py``) the operator sees why new
    workers are on-demand."""
    now = 1_800_000_000.0
    seen = interruption_status({}, 0.0, {"c5.xlarge": now + 540.0})
    snapshot = StatusSnapshot(time=now, clock="wall", interruptions=seen)
    assert StatusSnapshot.from_json(json.loads(json.dumps(snapshot.to_json()))) == snapshot
    lines = render_status(_report(snapshot), now=now).splitlines()
    assert "spot back-off: c5.xlarge launches on-demand for 9.0 min more" in lines
    assert not [line for line in lines if line.startswith("spot interruptions")]  # none reclaimed: no count


def test_no_interruption_no_line_and_an_older_snapshot_without_the_key_reads_as_none():
    snapshot = StatusSnapshot(time=1_800_000_000.0, clock="wall")
    assert "interruption" not in render_status(_report(snapshot), now=1_800_000_000.0)
    older = snapshot.to_json()
    del older["interruptions"]
    assert StatusSnapshot.from_json(older).interruptions.total == 0
    damaged = snapshot.to_json() | {"interruptions": {"total": "many", "by_type_zone": [3, {"count": 1}]}}
    assert StatusSnapshot.from_json(damaged).interruptions.by_type_zone[0].count == 1


def test_the_metrics_count_reclaims_by_type_and_zone_once_each():
    metrics = Metrics()
    for event in (
        InstanceReclaimed(1.0, "i-a", "c5.large", "us-east-1a"),
        InstanceReclaimed(2.0, "i-a", "c5.large", "us-east-1a", lost_slot_s=5.0),
        InstanceReclaimed(3.0, "i-b", "c5.large", "us-east-1a"),
    ):
        metrics.notify(event)
    metrics.interrupted_work.set(250.0)
    page = generate_latest(metrics.registry).decode()
    assert 'wire_interruptions_total{type="c5.large",zone="us-east-1a"} 2.0' in page
    assert "wire_interrupted_slot_seconds 250.0" in page


@pytest.mark.slow
def test_an_emulated_run_on_spot_shows_every_reclaim_and_its_measured_lost_work_in_status(tmp_path, capsys):
    config = emulated_config(tmp_path)
    text = config.read_text().replace(
        "steering: {charging_unit_s: 900}", "steering: {charging_unit_s: 900, market: spot}"
    )
    text = text.replace("emulation: {time_scale: 20}", "emulation: {time_scale: 20, spot_interruptions_per_hour: 6}")
    config.write_text(text)
    daemon = Daemon(load_settings(config), str(config))
    assert daemon.run() == 0
    reclaims = daemon.runtime.site.reclaims
    assert reclaims  # the rate makes some certain on this run
    assert main(["status", "--config", str(config), "--json"]) == 0
    seen = json.loads(capsys.readouterr().out)["interruptions"]
    assert seen["total"] == len(reclaims)
    assert seen["by_type_zone"] == [{"instance_type": "", "zone": "", "count": len(reclaims)}]
    assert seen["lost_slot_s"] == pytest.approx(sum(r[3] for r in reclaims), abs=0.1)
    assert main(["status", "--config", str(config)]) == 0
    assert f"spot interruptions: {len(reclaims)} reclaimed by the cloud (default type in no zone:" in (
        capsys.readouterr().out
    )


def test_the_tally_survives_a_restart_through_the_state_file_and_skips_what_it_cannot_trust():
    tally = InterruptionTally()
    tally.notify(InstanceReclaimed(110.0, "i-a", "c5.large", "us-east-1a"))
    tally.notify(InstanceReclaimed(300.0, "i-c", "c5.large", "us-east-1b", lost_slot_s=40.0))
    assert tally.changed
    kept = tally.to_json()
    assert not tally.changed
    again = InterruptionTally.from_json(kept)
    assert again.reclaims == tally.reclaims
    damaged = json.loads(kept) + [
        {"time": "late"},
        7,
        {"time": 1, "instance_id": "i-x", "instance_type": "", "zone": ""},
    ]
    assert set(InterruptionTally.from_json(json.dumps(damaged)).reclaims) == {"i-a", "i-c", "i-x"}
    assert InterruptionTally.from_json("{not json").reclaims == {} and InterruptionTally.from_json(None).reclaims == {}


def test_the_daemon_s_status_names_the_spot_back_offs_its_loop_is_under(tmp_path, monkeypatch):
    clock = Clock()
    daemon = _daemon(tmp_path, monkeypatch, Condor(up=True), Cloud(Market.SPOT), clock, keep=2, market="auto")
    assert isinstance(daemon.loop.cloud, SpotFallback)
    daemon.loop.cloud.ledger.backed_off_until["c5.xlarge"] = clock() + 900.0
    seen = daemon.status_snapshot(clock(), None).interruptions
    assert [(b.instance_type, b.until) for b in seen.back_offs] == [("c5.xlarge", clock() + 900.0)]


def test_the_metrics_say_how_long_each_type_s_spot_launches_stay_on_demand():
    metrics = Metrics()
    metrics.back_offs(1_000.0, {"c5.large": 1_540.0})
    assert 'wire_spot_back_off_seconds{type="c5.large"} 540.0' in generate_latest(metrics.registry).decode()
    metrics.back_offs(2_000.0, {})  # over: the series stays, at 0
    assert 'wire_spot_back_off_seconds{type="c5.large"} 0.0' in generate_latest(metrics.registry).decode()
