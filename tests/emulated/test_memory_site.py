"""Issue 15: the emulated site's memory (partitionable slots, holds), the hold mapping, replays on and off."""

from __future__ import annotations

import pytest

from wire_daemon.core.billing import Billing
from wire_daemon.core.config import EmulationConfig, MemoryConfig, ReplayConfig, SteeringConfig
from wire_daemon.core.errors import ConfigError
from wire_daemon.core.events import EventKind
from wire_daemon.core.workflow import TaskSpec, build_workflow
from wire_daemon.emulated.site import EmulatedSite
from wire_daemon.monitor.eventlog import LogEvent
from wire_daemon.monitor.eventmap import TaskEventMapper
from wire_daemon.runtime.replay import replay

MIB = 1 << 20


def _site(specs, slots=4, **emulation):
    config = EmulationConfig(
        **{"boot_lag_s": 0.0, "negotiation_interval_s": 5.0, "bandwidth_bytes_per_s": 1e12, **emulation}
    )
    return EmulatedSite(build_workflow("w", "test", specs), config, slots, Billing(3600.0))


def _wide(n, peak_mib, runtime=100.0):
    return [TaskSpec(f"t{i}", "x", runtime_s=runtime, peak_memory_bytes=peak_mib * MIB) for i in range(n)]


def _running(site):
    return sum(len(i.running) for i in site._alive.values())


def test_without_instance_memory_requests_change_nothing():
    site = _site(_wide(4, 500))
    site.advance_to(1.0)
    assert _running(site) == 4 and site.request_memory_mib("t0") is None and not site.memory_on


def test_requests_pack_a_partitionable_slot_by_memory():
    # 4 cores, 1000 MiB; each job asks 2 x its 200 MiB peak = 400 MiB: two fit, not four.
    site = _site(_wide(4, 200), instance_memory_mib=1000, memory_request_factor=2.0)
    site.advance_to(1.0)
    assert _running(site) == 2
    idle = [f"t{i}" for i in range(4) if i not in site._host]  # roots start in a shuffled order
    assert all(site.set_request_memory(t, 250) for t in idle)
    assert not site.set_request_memory(site.wf.task_ids[next(iter(site._host))], 250)  # a running job: no
    site.advance_to(101.0)  # the first two finish at 100; the two smaller ones start
    assert _running(site) == 2 and site.used_memory_mib_s == pytest.approx(2 * 200 * 100)
    site.advance_to(300.0)
    assert site.finished
    # waste: (400 - 200) x 100 twice and (250 - 200) x 100 twice
    assert site.wasted_memory_mib_s == pytest.approx(2 * 200 * 100 + 2 * 50 * 100)


def test_an_under_requested_job_is_held_until_released_with_more():
    site = _site(_wide(1, 300), instance_memory_mib=1200, memory_failure_fraction=0.5)
    assert site.set_request_memory("t0", 100)
    site.advance_to(200.0)
    kinds = [(e.kind, e.time, e.memory_exceeded) for e in site.poll_events()]
    assert kinds[-1] == (EventKind.HELD, 50.0, True)  # half of its 100 s
    assert site.memory_failures == 1 and site.wasted_memory_mib_s == pytest.approx(100 * 50)
    assert not site.finished and _running(site) == 0
    assert site.set_request_memory("t0", 400) and site.release_job("t0")
    site.advance_to(400.0)
    events = site.poll_events()
    assert [e.kind for e in events] == [EventKind.RELEASED, EventKind.STARTED, EventKind.FINISHED]
    assert events[-1].peak_memory_bytes == 300 * MIB and site.finished


def test_a_request_no_instance_can_hold_is_refused():
    with pytest.raises(ConfigError, match="could never start"):
        _site(_wide(1, 300), instance_memory_mib=1000, memory_request_factor=4.0)


def test_a_memory_hold_is_marked_by_the_mapper():
    mapper = TaskEventMapper()
    submit = LogEvent("SUBMIT", 7, 0, 0.0, node="A")
    held = LogEvent("JOB_HELD", 7, 0, 5.0, reason="memory usage exceeded request_memory", hold_code=34)
    other = LogEvent("JOB_HELD", 7, 0, 6.0, reason="Error from slot: failed to transfer files", hold_code=13)
    policy = LogEvent("JOB_HELD", 7, 0, 7.0, reason="Job used more Memory than requested", hold_code=26)
    out = mapper.map([submit, held, other, policy])
    assert [e.memory_exceeded for e in out] == [False, True, False, True]


def _stage_wf():
    # One stage of 24 jobs of 100 MiB peak, each of 600 s: requested at 4x, 400 MiB.
    specs = [TaskSpec(f"t{i:02d}", "x", runtime_s=600.0, peak_memory_bytes=100 * MIB) for i in range(24)]
    return build_workflow("w", "test", specs)


def _config(rightsizing: bool) -> ReplayConfig:
    return ReplayConfig(
        steering=SteeringConfig(max_instances=2, min_instances=1, charging_unit_s=3600.0),
        emulation=EmulationConfig(instance_memory_mib=800.0, initial_instances=1),
        memory=MemoryConfig(rightsizing=rightsizing, predictor="pc95", min_observations=2),
    )


def test_right_sizing_packs_more_and_wastes_less_memory():
    off = replay(_stage_wf(), "target-slowdown", _config(False))
    on = replay(_stage_wf(), "target-slowdown", _config(True))
    assert off.memory["requests_edited"] == 0 and on.memory["requests_edited"] > 0
    assert on.memory["wasted_mib_s"] < off.memory["wasted_mib_s"]
    assert on.makespan_s < off.makespan_s
    assert on.memory["failures"] == 0  # every peak is the same: the 95th percentile never under-requests


def test_a_replay_without_memory_reports_none():
    result = replay(_stage_wf(), "target-slowdown", ReplayConfig())
    assert result.memory == {} and "memory" not in result.summary()
