"""The live-writing emulator: the submit dir it writes reads back, through the project's own
readers, as the workflow and the task events the emulated site produced."""

from __future__ import annotations

import ipaddress
import json
import math
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from wire_daemon.core.billing import Billing
from wire_daemon.core.config import EmulationConfig
from wire_daemon.core.events import EventKind, TaskEvent
from wire_daemon.core.workflow import TaskSpec, build_workflow
from wire_daemon.emulated.site import EmulatedSite
from wire_daemon.emulated.traces import bundled_trace_path, load_trace
from wire_daemon.monitor.braindump import read_braindump
from wire_daemon.monitor.dag import parse_dag
from wire_daemon.monitor.eventlog import EventLogReader
from wire_daemon.monitor.eventmap import EventLogFollower
from wire_daemon.monitor.hosts import HostMap, parse_sinful
from wire_daemon.monitor.jobstate import JobstateMapper, JobstateReader
from wire_daemon.monitor.kickstart import kickstart_files, read_kickstart
from wire_daemon.monitor.problems import Problems
from wire_daemon.monitor.submit_dir import read_submit_dir, workflow_from_submit_dir
from wire_daemon.monitor.submit_file import parse_submit_file
from wire_lab.live_writer import (
    SUBMIT_HOST,
    HostAddresses,
    LiveWriterError,
    SubmitDirWriter,
    WriterOptions,
    build_live,
    run_live,
)

EPOCH = 1_700_000_000.0
CONFIG = EmulationConfig(initial_instances=2, negotiation_interval_s=5.0, submit_delay_s=1.0, seed=3)
DOC_NETWORKS = [ipaddress.ip_network(n) for n in ("203.0.113.0/24", "198.51.100.0/24", "192.0.2.0/24", "2001:db8::/32")]


@pytest.fixture(scope="module")
def montage():
    return load_trace(bundled_trace_path())


def _site(wf, config=CONFIG, slots=4):
    return EmulatedSite(wf, config, slots_per_instance=slots, billing=Billing(3600.0))


def _drive(site, writer, step_s, on_step=None):
    """Advance the site in steps, feeding the writer; returns everything the site emitted."""
    emitted: list[TaskEvent] = []
    t = 0.0
    while not site.finished:
        t += step_s
        site.advance_to(t)
        batch = list(site.poll_events())
        writer.feed(batch)
        emitted += batch
        if on_step is not None:
            on_step(batch)
    writer.close(site.last_finish)
    return emitted


def _resolver(writer):
    hosts = HostMap(problems=Problems())
    for host, address in writer.addresses.items():
        hosts.add(host, address)
    return hosts


def _key(event, epoch=EPOCH, whole_seconds=True):
    """What a reader can recover of a site event: kind, task, wall time, instance, exit code."""
    when = epoch + event.time
    return (
        event.kind,
        event.task_id,
        math.floor(when) if whole_seconds else when,
        event.host if event.kind == EventKind.STARTED else None,
        event.exit_code if event.kind == EventKind.FINISHED else None,
    )


def _read_key(event, hosts):
    host = hosts.resolve(event.host) if event.kind == EventKind.STARTED else None
    return (event.kind, event.task_id, event.time, host, event.exit_code if event.kind == EventKind.FINISHED else None)


# -- the planned submit dir ---------------------------------------------------------------------


def test_dag_and_submit_files_describe_the_workflow(tmp_path: Path, montage) -> None:
    writer = SubmitDirWriter(montage, tmp_path / "run", WriterOptions(epoch=EPOCH)).create()
    problems = Problems()
    dag = parse_dag(writer.dag_path, problems)
    assert dag.names == montage.task_ids  # file order = the workflow's topological order
    expected_edges = {
        (montage.task_ids[p], montage.task_ids[c]) for c in range(montage.n_tasks) for p in montage.parents(c)
    }
    assert set(dag.edges()) == expected_edges and dag.n_edges == montage.n_edges == 231
    assert all(n.retry == 1 and n.priority is not None and [s.kind for s in n.scripts] == ["POST"] for n in dag.nodes)
    assert dag.node("mProject_ID0000001").priority == 10 and (dag.node("mViewer_ID0000103").priority or 0) > 10
    assert dag.maxjobs == {"registration": 1, "stagein": 10, "cleanup": 4, "stageout": 10}
    dump = read_braindump(writer.braindump_path)
    assert dump.dag == writer.dag_path.name and dump.condor_log == writer.log_path.name
    assert dump.wf_uuid == dump.root_wf_uuid and dump.jobstate_log == "jobstate.log"
    assert dump.submit_dir == str((tmp_path / "run").resolve()) and dump.planner_version == "5.0.5"
    for i, task_id in enumerate(montage.task_ids):
        sub = parse_submit_file(tmp_path / "run" / (dag.node(task_id).submit_path or ""), problems)
        assert sub is not None and sub.queue == ""
        assert (sub.universe, sub.xformation, sub.job_class, sub.dag_job_id, sub.site) == (
            "vanilla",
            montage.transformation[i],
            1,
            task_id,
            "condorpool",
        )
        assert sub.dax_job_id == task_id.split("_")[-1] and Path(sub.log or "").name == dump.condor_log
    assert writer.jobstate_path.read_bytes() == b"" and writer.log_path.read_bytes() == b""
    assert problems.count == 0


def test_submit_dir_reads_back_as_the_same_workflow(tmp_path: Path, montage) -> None:
    SubmitDirWriter(montage, tmp_path, WriterOptions(epoch=EPOCH)).create()
    problems = Problems()
    back = workflow_from_submit_dir(tmp_path, problems)
    assert problems.count == 0
    assert back.task_ids == montage.task_ids and back.transformation == montage.transformation
    assert [(s.name, s.transformation, s.predecessor_stages) for s in back.stages] == [
        (s.name, s.transformation, s.predecessor_stages) for s in montage.stages
    ]
    assert np.array_equal(back.stage_of, montage.stage_of) and len(back.stages) == 8
    assert np.array_equal(back.on_pool, montage.on_pool)
    assert np.array_equal(back.input_bytes, montage.input_bytes)  # from workflow.yml
    assert np.array_equal(back.output_bytes, montage.output_bytes)
    assert np.array_equal(back.parent_idx, montage.parent_idx)


def _mixed_workflow():
    """Auxiliary jobs on and off the pool, and task ids DAGMan cannot use as node names."""
    return build_workflow(
        "mixed",
        "test",
        [
            TaskSpec("create_dir_mixed_0_local", "create_dir", runtime_s=1.0, on_pool=False),
            TaskSpec(
                "stage_in_remote_condorpool_0_0", "stage_in", ("create_dir_mixed_0_local",), 2.0, input_bytes=5_000_000
            ),
            TaskSpec("prep 1", "prep", ("stage_in_remote_condorpool_0_0",), 10.0, input_bytes=1000, output_bytes=2000),
            TaskSpec("PARENT", "prep", ("stage_in_remote_condorpool_0_0",), 11.0, input_bytes=3000),
            TaskSpec("prep_1", "prep", ("stage_in_remote_condorpool_0_0",), 12.0),
            TaskSpec("join", "join", ("prep 1", "PARENT", "prep_1"), 5.0, peak_memory_bytes=300 * 2**20),
            TaskSpec("stage_out_local_local_0_0", "stage_out", ("join",), 1.0, on_pool=False),
            TaskSpec("register_local_0_0", "register", ("stage_out_local_local_0_0",), 1.0, on_pool=False),
            TaskSpec("cleanup_mixed_0_local", "cleanup", ("stage_out_local_local_0_0",), 1.0, on_pool=False),
        ],
    )


def test_auxiliary_jobs_and_awkward_names(tmp_path: Path) -> None:
    wf = _mixed_workflow()
    writer = SubmitDirWriter(wf, tmp_path, WriterOptions(epoch=EPOCH)).create()
    assert writer.node_of("prep 1") == "prep_1_2"  # "prep_1" is a task of its own, kept as it is
    assert writer.node_of("PARENT") == "PARENT_" and writer.task_of("PARENT_") == "PARENT"
    problems = Problems()
    submit = read_submit_dir(tmp_path, problems)
    assert problems.count == 0
    back = submit.workflow
    assert back.task_ids == [writer.node_of(t) for t in wf.task_ids]
    assert back.transformation == wf.transformation and np.array_equal(back.stage_of, wf.stage_of)
    assert np.array_equal(back.on_pool, wf.on_pool)
    classes = {
        t: (submit.submit_files[writer.node_of(t)].universe, submit.submit_files[writer.node_of(t)].job_class)
        for t in wf.task_ids
    }
    assert classes["create_dir_mixed_0_local"] == ("local", 6)
    assert classes["stage_in_remote_condorpool_0_0"] == ("vanilla", 2)
    assert classes["stage_out_local_local_0_0"] == ("local", 3)
    assert classes["register_local_0_0"] == ("local", 4) and classes["cleanup_mixed_0_local"] == ("local", 8)
    assert submit.dag.node("stage_out_local_local_0_0").category == "stageout"
    assert submit.dag.node("create_dir_mixed_0_local").priority == 800
    # compute jobs carry their sizes in workflow.yml; planner-added jobs, as in Pegasus, do not
    compute = [i for i, t in enumerate(wf.transformation) if t in ("prep", "join")]
    assert np.array_equal(back.input_bytes[compute], wf.input_bytes[compute])
    assert back.input_bytes[wf.index_of("stage_in_remote_condorpool_0_0")] == 0


def test_local_universe_jobs_run_on_the_submit_host(tmp_path: Path) -> None:
    wf = _mixed_workflow()
    site = _site(wf, EmulationConfig(initial_instances=1, bandwidth_bytes_per_s=1e6), slots=2)
    writer = SubmitDirWriter(wf, tmp_path, WriterOptions(epoch=EPOCH, subsecond_times=True)).create()
    emitted = _drive(site, writer, step_s=2.0)
    problems = Problems()
    read = EventLogFollower(writer.log_path, problems=problems).poll()
    to_task = {writer.node_of(t): t for t in wf.task_ids}
    hosts = _resolver(writer)
    millis = [round(e.time, 3) for e in read]  # sub-second stamps: milliseconds, truncated
    assert millis == [round(math.floor((EPOCH + e.time) * 1000) / 1000, 3) for e in emitted]
    assert [(e.kind, to_task[e.task_id], hosts.resolve(e.host) if e.host else None) for e in read] == [
        (e.kind, e.task_id, e.host if e.kind == EventKind.STARTED else None) for e in emitted
    ]
    local = [e for e in emitted if e.kind == EventKind.STARTED and e.host == SUBMIT_HOST]
    assert {e.task_id for e in local} == {t for i, t in enumerate(wf.task_ids) if not wf.on_pool[i]}
    (record,) = read_kickstart(writer.kickstart_path("cleanup_mixed_0_local")).records  # type: ignore[union-attr]
    assert record.hostaddr == "198.51.100.1" and record.resource == "local"
    sites = {line.job: line.site for line in JobstateReader(writer.jobstate_path).read() if not line.internal}
    assert sites["create_dir_mixed_0_local"] == "local" and sites["stage_in_remote_condorpool_0_0"] == "condorpool"
    assert problems.count == 0


# -- events: job event log, kickstart, jobstate -------------------------------------------------


@pytest.fixture(scope="module")
def montage_run(tmp_path_factory, montage):
    """The bundled trace on 2 instances x 4 slots, followed as it grows, with a restart halfway."""
    root = tmp_path_factory.mktemp("montage_run")
    site = _site(montage)
    writer = SubmitDirWriter(montage, root, WriterOptions(epoch=EPOCH)).create()
    problems = Problems()
    state = {"follower": EventLogFollower(writer.log_path, problems=problems), "polls": 0, "read": []}

    def follow(batch):
        state["polls"] += 1
        state["read"] += state["follower"].poll()
        if state["polls"] == 10:  # the daemon restarts: only the persisted checkpoint survives
            saved = json.dumps(state["follower"].checkpoint())
            state["follower"] = EventLogFollower(writer.log_path, json.loads(saved), problems=problems)

    emitted = _drive(site, writer, step_s=5.0, on_step=follow)
    state["read"] += state["follower"].poll()
    return {
        "site": site,
        "writer": writer,
        "emitted": emitted,
        "read": state["read"],
        "problems": problems,
        "polls": state["polls"],
    }


def test_followed_event_log_equals_the_site_events(montage_run) -> None:
    run = montage_run
    hosts = _resolver(run["writer"])
    assert run["polls"] > 20 and len(run["emitted"]) == 3 * 103
    assert [_read_key(e, hosts) for e in run["read"]] == [_key(e) for e in run["emitted"]]
    assert run["problems"].count == 0
    started_hosts = {e.host for e in run["emitted"] if e.kind == EventKind.STARTED}
    assert started_hosts == {"i-00001", "i-00002"}


def test_node_log_and_raw_events(montage_run) -> None:
    writer, emitted = montage_run["writer"], montage_run["emitted"]
    hosts = _resolver(writer)
    problems = Problems()
    from_nodes_log = EventLogFollower(writer.nodes_log_path, problems=problems).poll()
    assert [_read_key(e, hosts) for e in from_nodes_log] == [_key(e) for e in emitted]
    raw = EventLogReader(writer.nodes_log_path, problems=problems).read()
    counts: dict[str, int] = {}
    for event in raw:
        counts[event.type] = counts.get(event.type, 0) + 1
    assert counts == {"SUBMIT": 103, "EXECUTE": 103, "JOB_TERMINATED": 103, "POST_SCRIPT_TERMINATED": 103}
    assert len({e.cluster for e in raw}) == 103 and min(e.cluster for e in raw) == 100
    node_of = {e.cluster: e.node for e in raw if e.type == "SUBMIT"}
    memory = {node_of[e.cluster]: e.memory_bytes for e in raw if e.type == "JOB_TERMINATED"}
    wf = writer.workflow
    assert memory == {
        t: math.ceil(wf.peak_memory_bytes[i] / 2**20) * 2**20  # the trace's peak, in whole MB
        for i, t in enumerate(wf.task_ids)
    }
    assert problems.count == 0


def test_kickstart_records_carry_the_trace(montage_run, montage) -> None:
    writer, emitted = montage_run["writer"], montage_run["emitted"]
    ran_on = {e.task_id: e.host for e in emitted if e.kind == EventKind.STARTED}
    spans = {e.task_id: [e.time] for e in emitted if e.kind == EventKind.STARTED}
    for e in emitted:
        if e.kind == EventKind.FINISHED:
            spans[e.task_id].append(e.time)
    problems = Problems()
    for i, task_id in enumerate(montage.task_ids):
        files = kickstart_files(writer.kickstart_path(task_id).with_suffix(""))
        assert files == [writer.kickstart_path(task_id)]
        out = read_kickstart(files[0], problems)
        assert out is not None
        (record,) = out.records
        assert record.main_duration == pytest.approx(montage.runtime_s[i], abs=1e-3)
        assert record.succeeded and record.transformation == montage.transformation[i]
        assert writer.host_of(record.hostaddr or "") == ran_on[task_id]
        assert record.input_bytes == montage.input_bytes[i] and record.output_bytes == montage.output_bytes[i]
        assert record.maxrss_bytes == math.ceil(montage.peak_memory_bytes[i] / 1024) * 1024
        start, end = spans[task_id]
        assert record.main_start is not None and record.main_duration is not None
        assert EPOCH + start <= record.main_start <= record.main_start + record.main_duration <= EPOCH + end + 1e-3
    assert problems.count == 0


def test_jobstate_log_parses(montage_run) -> None:
    writer, emitted = montage_run["writer"], montage_run["emitted"]
    problems = Problems()
    lines = JobstateReader(writer.jobstate_path, problems=problems).read()
    assert problems.count == 0
    internal = [line.state for line in lines if line.internal]
    assert internal == ["MONITORD_STARTED", "DAGMAN_STARTED", "DAGMAN_FINISHED", "MONITORD_FINISHED"]
    states = {line.state for line in lines if not line.internal}
    assert states == {
        "SUBMIT",
        "EXECUTE",
        "JOB_TERMINATED",
        "JOB_SUCCESS",
        "POST_SCRIPT_STARTED",
        "POST_SCRIPT_TERMINATED",
        "POST_SCRIPT_SUCCESS",
    }
    assert {line.site for line in lines if not line.internal} == {"condorpool"}
    events = JobstateMapper().map(lines)  # FINISHED at the JOB_TERMINATED time, with the exit code
    assert [(e.kind, e.task_id, e.time) for e in events] == [
        (e.kind, e.task_id, math.floor(EPOCH + e.time)) for e in emitted
    ]


# -- evictions, retries, holds ----------------------------------------------------------------


def test_eviction_keeps_the_cluster_and_reruns(tmp_path: Path) -> None:
    wf = build_workflow("evict", "test", [TaskSpec("long_ID0000001", "long", runtime_s=100.0)])
    config = EmulationConfig(initial_instances=1, boot_lag_s=30.0, negotiation_interval_s=5.0)
    site = _site(wf, config, slots=1)
    writer = SubmitDirWriter(wf, tmp_path, WriterOptions(epoch=EPOCH)).create()
    site.advance_to(50.0)
    first = list(site.poll_events())
    site.launch(1)
    site.terminate(["i-00001"])
    emitted = first + list(site.poll_events())
    writer.feed(emitted)
    emitted += _drive(site, writer, step_s=10.0)
    hosts = HostMap(writer.with_addresses(site.all_instances()), Problems())
    read = EventLogFollower(writer.log_path).poll()
    assert [_read_key(e, hosts) for e in read] == [_key(e) for e in emitted]
    assert [(e.kind.value, e.host) for e in emitted] == [
        ("submitted", None),
        ("started", "i-00001"),
        ("evicted", None),
        ("started", "i-00002"),
        ("finished", "i-00002"),
    ]
    raw = EventLogReader(writer.log_path).read()
    assert [e.type for e in raw] == ["SUBMIT", "EXECUTE", "JOB_EVICTED", "EXECUTE", "JOB_TERMINATED"]
    assert {e.cluster for e in raw} == {100}
    (record,) = read_kickstart(writer.kickstart_path("long_ID0000001")).records  # type: ignore[union-attr]
    assert record.main_duration == pytest.approx(100.0) and writer.host_of(record.hostaddr or "") == "i-00002"
    states = [line.state for line in JobstateReader(writer.jobstate_path).read() if not line.internal]
    assert states[:4] == ["SUBMIT", "EXECUTE", "JOB_EVICTED", "EXECUTE"]


def test_retry_hold_release_abort_and_transfer(tmp_path: Path) -> None:
    wf = build_workflow(
        "retry", "test", [TaskSpec("a_ID0000001", "a", runtime_s=4.0), TaskSpec("b_ID0000002", "b", runtime_s=2.0)]
    )
    E = EventKind
    events = [
        TaskEvent(0.0, E.SUBMITTED, "a_ID0000001"),
        TaskEvent(0.0, E.SUBMITTED, "b_ID0000002"),
        TaskEvent(1.0, E.STARTED, "a_ID0000001", host="i-1"),
        TaskEvent(1.0, E.STARTED, "b_ID0000002", host="i-2"),
        TaskEvent(2.25, E.TRANSFERRED, "a_ID0000001"),
        TaskEvent(3.5, E.HELD, "b_ID0000002"),
        TaskEvent(4.0, E.RELEASED, "b_ID0000002"),
        TaskEvent(5.0, E.FINISHED, "a_ID0000001", host="i-1", exec_runtime_s=4.0, exit_code=2),
        TaskEvent(6.0, E.STARTED, "b_ID0000002", host="i-2"),
        TaskEvent(7.0, E.SUBMITTED, "a_ID0000001"),  # the DAGMan retry: a new cluster
        TaskEvent(8.0, E.STARTED, "a_ID0000001", host="i-1"),
        TaskEvent(9.0, E.ABORTED, "b_ID0000002"),
        TaskEvent(10.0, E.SUBMITTED, "b_ID0000002"),
        TaskEvent(11.0, E.STARTED, "b_ID0000002", host="i-2"),
        TaskEvent(12.75, E.FINISHED, "a_ID0000001", host="i-1", exec_runtime_s=4.0, exit_code=0),
        TaskEvent(13.0, E.FINISHED, "b_ID0000002", host="i-2", exec_runtime_s=1.5, exit_code=-9),
    ]
    writer = SubmitDirWriter(wf, tmp_path, WriterOptions(epoch=EPOCH, subsecond_times=True)).create()
    writer.feed(events[:9])
    writer.feed(events[9:])
    writer.close(13.0, status=1)
    problems = Problems()
    read = EventLogFollower(writer.log_path, problems=problems).poll()
    hosts = _resolver(writer)
    # sub-second stamps: times come back exact (to the millisecond)
    assert [_read_key(e, hosts) for e in read] == [_key(e, whole_seconds=False) for e in events]
    raw = EventLogReader(writer.log_path, problems=problems).read()
    clusters = {(e.node or "", e.cluster) for e in raw if e.type == "SUBMIT"}
    assert clusters == {("a_ID0000001", 100), ("b_ID0000002", 101), ("a_ID0000001", 102), ("b_ID0000002", 103)}
    attempts = [
        read_kickstart(p).records[0] for p in kickstart_files(writer.kickstart_path("a_ID0000001").with_suffix(""))
    ]  # type: ignore[union-attr]
    assert [(r.exit_code, r.main_duration) for r in attempts] == [(2, 4.0), (0, 4.0)]
    (killed,) = read_kickstart(writer.kickstart_path("b_ID0000002")).records  # type: ignore[union-attr]
    assert (killed.status, killed.signal) == ("signalled", 9)
    lines = JobstateReader(writer.jobstate_path, problems=problems).read()
    pairs = [(line.job, line.state, line.condor_id or line.exit_code) for line in lines if not line.internal]
    for expected in [
        ("a_ID0000001", "JOB_FAILURE", 2),
        ("a_ID0000001", "POST_SCRIPT_FAILURE", 1),
        ("a_ID0000001", "SUBMIT", "102.0"),
        ("b_ID0000002", "JOB_HELD", "101.0"),
        ("b_ID0000002", "JOB_RELEASED", "101.0"),
        ("b_ID0000002", "JOB_ABORTED", "101.0"),
        ("b_ID0000002", "JOB_FAILURE", -9),
    ]:
        assert expected in pairs
    assert lines[-2].state == "DAGMAN_FINISHED" and problems.count == 0


def test_impossible_events_are_refused(tmp_path: Path) -> None:
    wf = build_workflow("bad", "test", [TaskSpec("a", "a", runtime_s=1.0)])
    writer = SubmitDirWriter(wf, tmp_path).create()
    with pytest.raises(LiveWriterError, match="no job in the queue"):
        writer.feed([TaskEvent(0.0, EventKind.STARTED, "a", host="i-1")])
    with pytest.raises(LiveWriterError, match="unknown task"):
        writer.feed([TaskEvent(0.0, EventKind.SUBMITTED, "zzz")])
    with pytest.raises(FileExistsError):
        SubmitDirWriter(wf, tmp_path).create()


# -- growing files ------------------------------------------------------------------------------


def test_half_written_last_event_waits_for_the_next_step(tmp_path: Path, montage) -> None:
    site = _site(montage)
    writer = SubmitDirWriter(montage, tmp_path, WriterOptions(epoch=EPOCH, tear_last_event=True)).create()
    problems = Problems()
    follower = EventLogFollower(writer.log_path, problems=problems)
    jobstate = JobstateReader(writer.jobstate_path, problems=problems)
    seen: list[TaskEvent] = []
    read: list[TaskEvent] = []
    waited = 0

    def check(batch):
        nonlocal waited
        seen.extend(batch)
        read.extend(follower.poll())
        jobstate.read()
        expected = seen[:-1] if batch else seen  # the torn event is the batch's last
        assert [e.task_id for e in read] == [e.task_id for e in expected]
        waited += bool(batch) and follower.reader.pending_bytes > 0

    _drive(site, writer, step_s=10.0, on_step=check)
    read += follower.poll()
    assert [_read_key(e, _resolver(writer)) for e in read] == [_key(e) for e in seen]
    assert waited >= 5 and problems.count == 0
    assert JobstateReader(writer.jobstate_path).read()[-1].state == "MONITORD_FINISHED"


def test_times_survive_a_non_utc_timezone(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("TZ", "IST-5:30")  # POSIX rule: UTC+05:30, no tz database needed
    time.tzset()
    try:
        wf = build_workflow("tz", "test", [TaskSpec("t_ID0000001", "t", runtime_s=7.25)])
        site = _site(wf, EmulationConfig(initial_instances=1), slots=1)
        writer = SubmitDirWriter(wf, tmp_path, WriterOptions(epoch=EPOCH + 0.5)).create()
        emitted = _drive(site, writer, step_s=3.0)
        read = EventLogFollower(writer.log_path).poll()
        assert [e.time for e in read] == [math.floor(EPOCH + 0.5 + e.time) for e in emitted]
        (record,) = read_kickstart(writer.kickstart_path("t_ID0000001")).records  # type: ignore[union-attr]
        assert record.main_start == pytest.approx(EPOCH + 0.5, abs=1e-3)
    finally:
        monkeypatch.undo()
        time.tzset()


# -- addresses ------------------------------------------------------------------------------------


def test_addresses_come_from_documentation_ranges_only() -> None:
    hosts = HostAddresses()
    addresses = [hosts.address_of(f"i-{k:05d}") for k in range(800)]
    assert addresses[0] == "203.0.113.1" and addresses[254] == "198.51.100.2"
    assert len(set(addresses)) == 800 and hosts.address_of(SUBMIT_HOST) == "198.51.100.1"
    assert SUBMIT_HOST not in [hosts.host_of(a) for a in addresses]
    for address in addresses:
        ip = ipaddress.ip_address(address)
        assert any(ip in net for net in DOC_NETWORKS) and not ip.is_global
    for host in ("i-00000", "i-00799", SUBMIT_HOST):
        sinful = parse_sinful(hosts.sinful(host))
        assert sinful is not None and sinful.host == hosts.address_of(host) and sinful.port == 9618
        assert hosts.address_of(host) in sinful.addrs and hosts.host_of(hosts.address_of(host)) == host
    assert hosts.address_of("i-00799").startswith("2001:db8::")


# -- the driver -----------------------------------------------------------------------------------


def test_run_live_paces_virtual_time_against_the_clock(tmp_path: Path) -> None:
    wall = [0.0]
    slept: list[float] = []

    def sleep(seconds: float) -> None:
        slept.append(seconds)
        wall[0] += seconds

    live = run_live(
        bundled_trace_path(),
        tmp_path,
        speedup=50.0,
        config=CONFIG,
        options=WriterOptions(epoch=EPOCH),
        step_s=2.0,
        sleep=sleep,
        clock=lambda: wall[0],
    )
    assert live.finished and len(live.emitted) == 309
    assert wall[0] == pytest.approx(math.ceil(live.site.last_finish / 2.0) * 2.0 / 50.0)
    assert len(slept) == math.ceil(live.site.last_finish / 2.0)
    assert JobstateReader(live.writer.jobstate_path).read()[-2].state == "DAGMAN_FINISHED"
    assert {i.address for i in live.instances()} == {"203.0.113.1", "203.0.113.2"}


@pytest.mark.slow
def test_readers_follow_a_real_time_run_from_another_thread(tmp_path: Path, montage) -> None:
    live = build_live(montage, tmp_path, CONFIG, slots_per_instance=4, options=WriterOptions(epoch=EPOCH))
    follower = EventLogFollower(live.writer.log_path, problems=Problems())
    runner = threading.Thread(target=live.run, kwargs={"speedup": 300.0, "step_s": 1.0})
    runner.start()
    read: list[TaskEvent] = []
    growing = 0
    while runner.is_alive():
        got = follower.poll()
        growing += bool(got)
        read += got
        time.sleep(0.02)
    runner.join()
    read += follower.poll()
    assert live.finished and growing >= 2  # the reader saw the log grow while it was written
    assert [_read_key(e, _resolver(live.writer)) for e in read] == [_key(e) for e in live.emitted]


def test_run_live_stops_at_until_and_goes_on(tmp_path: Path) -> None:
    live = run_live(bundled_trace_path(), tmp_path, speedup=None, config=CONFIG, until=40.0)
    assert live.now() == 40.0 and not live.finished
    assert live.writer.jobstate_path.read_text().count("DAGMAN_FINISHED") == 0
    live.run()
    assert live.finished and live.writer.jobstate_path.read_text().count("DAGMAN_FINISHED") == 1
