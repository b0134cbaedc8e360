"""The emulated site: DAGMan delays, negotiation cycles, JobPrio, billing, restarts."""

import pytest

from wire_daemon.core.billing import Billing
from wire_daemon.core.config import EmulationConfig
from wire_daemon.core.events import EventKind
from wire_daemon.core.workflow import TaskSpec, build_workflow
from wire_daemon.emulated.site import EmulatedSite


def _site(specs, **overrides):
    config = EmulationConfig(
        **{
            "boot_lag_s": 30.0,
            "negotiation_interval_s": 5.0,
            "submit_delay_s": 1.0,
            "bandwidth_bytes_per_s": 1e6,
            "initial_instances": 1,
            **overrides,
        }
    )
    return EmulatedSite(build_workflow("w", "test", specs), config, slots_per_instance=1, billing=Billing(60.0))


def _events(site):
    return [(e.kind.value, e.task_id, e.time) for e in site.poll_events()]


def test_chain_timing_submit_delay_negotiation_and_transfer():
    site = _site(
        [TaskSpec("A", "a", runtime_s=10.0, input_bytes=1_000_000), TaskSpec("B", "b", ("A",), runtime_s=20.0)]
    )
    site.advance_to(100.0)
    assert _events(site) == [
        ("submitted", "A", 0.0),
        ("started", "A", 0.0),  # a negotiation cycle at t=0
        ("finished", "A", 11.0),  # 1 s input transfer + 10 s runtime
        ("submitted", "B", 12.0),  # DAGMan submit delay
        ("started", "B", 15.0),  # next cycle
        ("finished", "B", 35.0),
    ]
    assert site.finished and site.last_finish == 35.0
    assert site.cost_units(35.0) == 2  # the initial instance was launched a boot lag (30 s) before time 0
    unbilled = _site([TaskSpec("A", "a", runtime_s=10.0)], bill_initial_boot=False)
    assert unbilled.cost_units(35.0) == 1
    assert site.busy_slot_s == pytest.approx(31.0)


def test_finished_event_carries_kickstart_runtime():
    site = _site([TaskSpec("A", "a", runtime_s=10.0, input_bytes=2_000_000)])
    site.advance_to(50.0)
    finished = [e for e in site.poll_events() if e.kind == EventKind.FINISHED][0]
    assert finished.exec_runtime_s == 10.0
    assert finished.input_bytes == 2_000_000
    assert finished.host == "i-00001"


def test_job_priority_orders_the_queue():
    site = _site([TaskSpec(f"T{i}", "t", runtime_s=10.0) for i in range(3)], seed=1, initial_instances=0)
    site.advance_to(0.0)
    submitted = [tid for kind, tid, _ in _events(site) if kind == "submitted"]
    site.set_job_priority(submitted[-1], 10)
    site.launch(1)
    site.advance_to(30.0)  # the instance boots at 30: the boosted job goes first, then submit order
    site.advance_to(100.0)
    started = [tid for kind, tid, _ in _events(site) if kind == "started"]
    assert started == [submitted[-1], submitted[0], submitted[1]]


def test_boot_lag_and_per_unit_billing():
    site = _site([TaskSpec("A", "a", runtime_s=100.0), TaskSpec("B", "a", runtime_s=100.0)], initial_instances=0)
    (inst,) = site.launch(1)
    assert inst.state == "pending"
    site.advance_to(29.0)
    assert site.list_instances()[0].state == "pending"
    site.advance_to(300.0)
    starts = [t for k, _, t in _events(site) if k == "started"]
    assert starts == [30.0, 130.0]  # boot lag; then the slot freed at 130, a cycle boundary
    assert site.cost_units(230.0) == 4  # 230 s of a 60 s unit -> 4 started units


def test_terminate_evicts_and_restarts_from_zero():
    site = _site([TaskSpec("A", "a", runtime_s=100.0)], bill_initial_boot=False)
    site.advance_to(50.0)
    site.poll_events()
    (spare,) = site.launch(1)
    site.terminate(["i-00001"])
    assert _events(site) == [("evicted", "A", 50.0)]
    site.advance_to(1000.0)
    events = _events(site)
    assert events == [("started", "A", 80.0), ("finished", "A", 180.0)]  # boots at 80, full rerun
    assert site.restarts == 1 and site.wasted_slot_s == pytest.approx(50.0)
    assert site.cost_units(180.0) == 1 + 3


def test_local_universe_jobs_need_no_slot():
    site = _site(
        [TaskSpec("mkdir", "create_dir", runtime_s=2.0, on_pool=False), TaskSpec("A", "a", ("mkdir",), runtime_s=1.0)],
        initial_instances=0,
    )
    site.advance_to(10.0)
    assert [(k, t) for k, t, _ in _events(site)] == [
        ("submitted", "mkdir"),
        ("started", "mkdir"),
        ("finished", "mkdir"),
        ("submitted", "A"),
    ]


def test_a_task_ending_at_the_moment_of_termination_completes():
    site = _site([TaskSpec("A", "a", runtime_s=30.0)])
    site.advance_to(30.0 - 1e-9)  # a rounding error before the task's end
    site.poll_events()
    site.terminate(["i-00001"])
    assert [k for k, _, _ in _events(site)] == ["finished"]
    assert site.restarts == 0 and site.finished


def test_only_live_instances_are_listed_and_the_oldest_fill_first():
    site = _site([TaskSpec(f"T{i}", "a", runtime_s=100.0) for i in range(3)], initial_instances=0, boot_lag_s=0.0)
    launched = [i.instance_id for i in site.launch(4)]
    site.terminate([launched[0], launched[2]])
    assert [i.instance_id for i in site.list_instances()] == [launched[1], launched[3]]
    assert len(site.all_instances()) == 4  # the dead still bill
    site.retire_instance(launched[1])  # draining: takes no job
    site.advance_to(1.0)
    hosts = [e.host for e in site.poll_events() if e.kind is EventKind.STARTED]
    assert hosts == [launched[3]]  # one slot left: the oldest live, non-draining instance
