"""Memory right-sizing (issue 15) on the real pool: `wire-daemon run` with ``memory.rightsizing: true``.

The workflow is a Pegasus-layout submit dir (what the daemon reads in
production) of two stages with no edge between them:

* ``fat``: ten 20 s jobs that really hold 90 MiB each (the task emulator's
  ``-M``) and ask for ``request_memory = 360``, four times that, as a user's
  guess per transformation does;
* ``tight``: one 30 s job that holds 180 MiB and asks for 128 (doubled, 256: it fits).

The worker is what the daemon's own user-data makes of ``cloud.worker``: one
partitionable slot of 4 cores with ``MEMORY = 1024`` (``extra_config``).
HTCondor rounds a dynamic slot's memory up to 128 MiB
(``MODIFY_REQUEST_EXPR_REQUESTMEMORY``), so a ``fat`` job at its user's
request takes 384 MiB and only two fit on the worker; at the model's ~100 MiB
it takes 128 and four fit (the cores). ``max_instances`` is 1: every job runs
on the same worker. The daemon's ``memory.max_request_mib`` is that worker's
memory.

**How a job over its request gets held.** The workers run in a chroot without
cgroups, so the starter cannot enforce memory (HTCondor's own hold, code 34,
never comes). A site in that position holds such jobs with a schedd policy,
which is what this test sets on the pool while it runs (``SITE_MEMORY_POLICY``,
via ``PersonalPool.set_site_config``)::

    SYSTEM_PERIODIC_HOLD = JobUniverse == 5 && JobStatus == 2 && MemoryUsage > RequestMemory
    SYSTEM_PERIODIC_HOLD_REASON = "memory usage ... exceeded request_memory ..."

The schedd holds with HoldReasonCode 26 (a system policy), and the daemon's
event mapper takes a code 3 or 26 hold whose reason mentions memory as a hold
for memory (``monitor/eventmap.py``, ``held_for_memory``), so the reason must
say "memory". ``PERIODIC_EXPR_INTERVAL`` is 2 s here (60 s by default) and the
workers report usage every 2 s. The submit files keep a held job for 30
minutes before their ``periodic_remove`` (Pegasus' own default; the harness's
default of 10 s would remove it before the daemon's next interval).

What the tests read back: the schedd's job ads, polled every second during the
run (RequestMemory and status of each job: (a) and (c)), the job event log
(execute and terminate times and hosts, holds and releases: (b) and (c)), the
schedd's history and the daemon's decisions log.
"""

from __future__ import annotations

import json
import time
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from wire_lab.realpool.hypervisor import Hypervisor
from wire_lab.realpool.pool import PersonalPool
from wire_lab.realpool.session import DaemonRun, RunSettings, dag_exit_status
from wire_lab.realpool.submitdir import SubmitDirOptions, WrittenSubmitDir

MIB = 1 << 20
WORKER_MIB = 1024
SLOT_QUANTUM_MIB = 128  # HTCondor's default MODIFY_REQUEST_EXPR_REQUESTMEMORY: quantize(RequestMemory, {128})
FAT = dict(count=10, runtime_s=20.0, use_mib=90, request_mib=360)  # 4x what they use
TIGHT = dict(count=1, runtime_s=30.0, use_mib=180, request_mib=128)  # below what it uses
FAILURE_FACTOR = 2.0
RUN_TIMEOUT_S = 600.0
IDLE, RUNNING, HELD, COMPLETED = 1, 2, 5, 4
HOLD_CODE_SYSTEM_POLICY = 26

SITE_MEMORY_POLICY = (
    "# A site's memory policy on workers that cannot enforce memory: hold a running job over its request.",
    "SYSTEM_PERIODIC_HOLD = (JobUniverse == 5) && (JobStatus == 2) && (MemoryUsage =!= undefined) && "
    "(MemoryUsage > RequestMemory)",
    'SYSTEM_PERIODIC_HOLD_REASON = strcat("memory usage ", MemoryUsage, " MiB exceeded request_memory ", '
    'RequestMemory, " MiB")',
    "SYSTEM_PERIODIC_HOLD_SUBCODE = 34",
    "PERIODIC_EXPR_INTERVAL = 2",
)
DAEMON_CONFIG = {
    "memory": {"rightsizing": True, "max_request_mib": WORKER_MIB, "failure_factor": FAILURE_FACTOR},
    "steering": {"instance_memory_mib": WORKER_MIB},
    "cloud": {"worker": {"slot_mode": "partitionable", "extra_config": [f"MEMORY = {WORKER_MIB}"]}},
}
SETTINGS = dict(time_scale=1.0, charging_unit_s=120.0, interval_s=10.0, max_instances=1, slots=4)
AD = ["ClusterId", "ProcId", "DAGNodeName", "JobStatus", "RequestMemory", "HoldReasonCode", "HoldReason"]


@dataclass(frozen=True)
class Snapshot:
    """One job's ad as the schedd gave it at ``at``."""

    at: float
    node: str
    job: str
    status: int
    request_mib: int
    hold_code: int | None
    hold_reason: str


@dataclass
class Attempt:
    """One run of a job, from the event log."""

    job: str
    started: float
    host: str
    ended: float | None = None
    how: str = ""  # terminated | held | evicted


@dataclass
class EventLog:
    node_of: dict[str, str] = field(default_factory=dict)  # cluster.proc -> DAG node
    attempts: list[Attempt] = field(default_factory=list)
    sequence: dict[str, list[str]] = field(default_factory=lambda: defaultdict(list))  # job -> event kinds
    holds: dict[str, list[tuple[int, int, str]]] = field(default_factory=lambda: defaultdict(list))
    exit_codes: dict[str, int] = field(default_factory=dict)


@dataclass
class MemoryRun:
    written: WrittenSubmitDir
    dag_status: int
    snapshots: list[Snapshot]
    log: EventLog
    final_request: dict[str, int]  # cluster.proc -> RequestMemory in the schedd's history
    notes: list[str]
    duration_s: float

    def jobs_of(self, prefix: str) -> list[str]:
        return [job for job, node in self.log.node_of.items() if node.startswith(prefix)]


@pytest.fixture(scope="module")
def memory_run(
    pool: PersonalPool, moto_ec2: str, ec2: Any, image_id: str, hypervisor: Hypervisor, pool_workdir: Path
) -> Iterator[MemoryRun]:
    started = time.monotonic()
    name = f"rp-memory-{int(time.time())}"
    settings = RunSettings(pool_name=name, config=DAEMON_CONFIG, **SETTINGS)  # type: ignore[arg-type]
    run = DaemonRun(pool, moto_ec2, image_id, pool_workdir / name, settings)
    trace = _write_trace(pool_workdir / f"{name}.json")
    options = SubmitDirOptions(
        request_memory_mib={"fat": int(FAT["request_mib"]), "tight": int(TIGHT["request_mib"])},
        hold_memory=True,
        held_remove_s=1800,
    )
    written = run.write_workflow(trace, label="memory", options=options)
    run.write_config()
    try:
        pool.set_site_config(SITE_MEMORY_POLICY, check="PERIODIC_EXPR_INTERVAL")
        run.start()
        pool.submit_dag(written.dag)
        status, snapshots = _follow(pool, run, written)
        assert run.stop() == 0
    finally:
        run.stop()
        _terminate_pool(ec2, name)
        pool.set_site_config(())
    yield MemoryRun(
        written,
        status,
        snapshots,
        _read_event_log(written.path / f"{written.label}-0.log"),
        _final_requests(pool, written),
        [note for d in run.decisions() for note in d.get("notes", [])],
        time.monotonic() - started,
    )


def test_the_workflow_completes(memory_run: MemoryRun, capsys: pytest.CaptureFixture[str]) -> None:
    assert memory_run.dag_status == 0
    done = [job for job in memory_run.log.node_of if memory_run.log.exit_codes.get(job) == 0]
    assert len(done) == FAT["count"] + TIGHT["count"]
    with capsys.disabled():
        print(f"\n  memory run: {memory_run.duration_s:.0f} s, from writing the workflow to ending its worker")


def test_idle_requests_of_the_inflated_stage_are_lowered(
    memory_run: MemoryRun, capsys: pytest.CaptureFixture[str]
) -> None:
    fat = memory_run.jobs_of("fat_")
    lowered = {job: memory_run.final_request[job] for job in fat if memory_run.final_request[job] < FAT["request_mib"]}
    assert lowered, f"no fat job got a lower request: {memory_run.final_request}"
    # Seen on the schedd while idle, before it ran: the daemon edits idle jobs only.
    idle_lowered = {s.job for s in memory_run.snapshots if s.status == IDLE and s.request_mib < FAT["request_mib"]}
    assert idle_lowered, "no lowered request was seen on an idle job"
    values = sorted(set(lowered.values()))
    # Above the measured use (else the policy would hold them), under the first slot quantum: four fit.
    assert all(FAT["use_mib"] < v <= SLOT_QUANTUM_MIB for v in values), values
    assert not any(_held(memory_run, job) for job in lowered), "a lowered job was held for memory"
    assert any("memory: set request_memory" in n and "fat" in n for n in memory_run.notes), memory_run.notes
    with capsys.disabled():
        print(f"\n  fat requests: {FAT['request_mib']} MiB -> {values} MiB on {len(lowered)} of {len(fat)} jobs")


def test_more_jobs_of_the_stage_run_at_once_on_the_worker_after_the_lowering(
    memory_run: MemoryRun, capsys: pytest.CaptureFixture[str]
) -> None:
    fat = set(memory_run.jobs_of("fat_"))
    attempts = [a for a in memory_run.log.attempts if a.job in fat]
    hosts = {a.host for a in attempts}
    assert len(hosts) == 1, f"fat jobs ran on {hosts}: max_instances is 1"
    lowered_starts = [a.started for a in attempts if memory_run.final_request[a.job] < FAT["request_mib"]]
    first_lowered = min(lowered_starts)
    before = _peak_running(attempts, until=first_lowered)
    after = _peak_running(attempts, since=first_lowered)
    fit_before = WORKER_MIB // _quantized(int(FAT["request_mib"]))
    assert before <= fit_before, f"{before} fat jobs at {FAT['request_mib']} MiB ran at once on {WORKER_MIB} MiB"
    assert after > before, f"{after} at once after the lowering, {before} before"
    with capsys.disabled():
        print(f"\n  fat jobs at once on the worker: {before} before the lowering, {after} after")


def test_an_under_request_is_held_doubled_released_and_completes(
    memory_run: MemoryRun, capsys: pytest.CaptureFixture[str]
) -> None:
    [job] = memory_run.jobs_of("tight_")  # one job: the hold cost no DAGMan retry
    holds = memory_run.log.holds[job]
    assert holds, f"{job} was never held: {memory_run.log.sequence[job]}"
    code, subcode, reason = holds[0]
    assert code == HOLD_CODE_SYSTEM_POLICY and subcode == 34 and "memory" in reason.lower(), holds[0]
    assert memory_run.log.sequence[job][-4:] == ["held", "released", "execute", "terminated"], memory_run.log.sequence
    assert memory_run.log.exit_codes[job] == 0
    # The request it was held at, from the hold's own reason: a schedd poll every second can miss a hold
    # the daemon releases within a second (its iteration may fall right after the hold).
    assert f"exceeded request_memory {TIGHT['request_mib']} MiB" in reason, reason
    held = [s.request_mib for s in memory_run.snapshots if s.job == job and s.status == HELD]
    later = [s.request_mib for s in memory_run.snapshots if s.job == job and s.status in (IDLE, RUNNING)]
    grown = int(TIGHT["request_mib"] * FAILURE_FACTOR)
    assert set(held) <= {TIGHT["request_mib"], grown}, held
    assert later and later[-1] == grown and memory_run.final_request[job] == grown
    expected = f"held for memory at {TIGHT['request_mib']} MiB: request_memory {grown} MiB, released"
    assert any(expected in n for n in memory_run.notes), memory_run.notes
    with capsys.disabled():
        print(f"\n  tight: held ({reason}), request {TIGHT['request_mib']} -> {grown} MiB, released, exit 0")


# -- the run ---------------------------------------------------------------------------------------


def _write_trace(path: Path) -> Path:
    """A flat WfFormat 1.4 trace: the fat stage, then the tight one (no edges); each task with its peak."""
    tasks: list[dict[str, Any]] = []
    for stage, spec in (("fat", FAT), ("tight", TIGHT)):
        for _ in range(int(spec["count"])):
            number = len(tasks) + 1
            tasks.append(
                {
                    "name": f"{stage}_ID{number:07d}",
                    "type": "compute",
                    "category": stage,
                    "runtimeInSeconds": spec["runtime_s"],
                    "memoryInBytes": int(spec["use_mib"]) * MIB,
                    "parents": [],
                    "files": [{"name": f"in{number}", "sizeInBytes": 1_000_000, "link": "input"}],
                }
            )
    path.write_text(json.dumps({"name": "memory", "schemaVersion": "1.4", "workflow": {"tasks": tasks}}))
    return path


def _follow(pool: PersonalPool, run: DaemonRun, written: WrittenSubmitDir) -> tuple[int, list[Snapshot]]:
    """Poll the schedd every second until DAGMan ends; DAGMan's status and every job's ads on the way."""
    deadline = time.monotonic() + RUN_TIMEOUT_S
    snapshots: list[Snapshot] = []
    while (status := dag_exit_status(written.dag)) is None:
        assert run.process is not None and run.process.poll() is None, "the daemon exited during the run"
        assert time.monotonic() < deadline, f"DAGMan did not finish in {RUN_TIMEOUT_S:.0f} s"
        snapshots += _snapshot(pool, written)
        time.sleep(1.0)
    return status, snapshots


def _snapshot(pool: PersonalPool, written: WrittenSubmitDir) -> list[Snapshot]:
    now = time.time()
    ads = pool.schedd().query(constraint=f'pegasus_wf_uuid == "{written.wf_uuid}"', projection=AD)
    return [
        Snapshot(
            now,
            str(ad.get("DAGNodeName", "")),
            f"{ad['ClusterId']}.{ad['ProcId']}",
            int(ad["JobStatus"]),
            int(ad.get("RequestMemory", 0)),
            ad.get("HoldReasonCode"),
            str(ad.get("HoldReason", "")),
        )
        for ad in ads
    ]


def _terminate_pool(ec2: Any, pool_name: str) -> None:
    """The workflow is done: end its worker now rather than at the end of its charging unit."""
    reply = ec2.describe_instances(Filters=[{"Name": "tag:wire:pool", "Values": [pool_name]}])
    ids = [i["InstanceId"] for r in reply["Reservations"] for i in r["Instances"]]
    if ids:
        ec2.terminate_instances(InstanceIds=ids)


def _final_requests(pool: PersonalPool, written: WrittenSubmitDir) -> dict[str, int]:
    ads = pool.schedd().history(f'pegasus_wf_uuid == "{written.wf_uuid}"', ["ClusterId", "ProcId", "RequestMemory"])
    return {f"{ad['ClusterId']}.{ad['ProcId']}": int(ad["RequestMemory"]) for ad in ads}


def _read_event_log(path: Path) -> EventLog:
    import htcondor2

    kinds = htcondor2.JobEventType
    log = EventLog()
    running: dict[str, Attempt] = {}
    for event in htcondor2.JobEventLog(str(path)).events(stop_after=0):
        job = f"{event.cluster}.{event.proc}"
        if event.type == kinds.SUBMIT:
            log.node_of[job] = str(event.get("LogNotes", "")).removeprefix("DAG Node: ").strip()
        elif event.type == kinds.EXECUTE:
            running[job] = Attempt(job, event.timestamp, str(event.get("ExecuteHost", "")))
            log.attempts.append(running[job])
            log.sequence[job].append("execute")
        elif event.type in (kinds.JOB_TERMINATED, kinds.JOB_HELD, kinds.JOB_EVICTED):
            _end_attempt(log, running.pop(job, None), event, job)
        elif event.type == kinds.JOB_RELEASED:
            log.sequence[job].append("released")
    return log


def _end_attempt(log: EventLog, attempt: Attempt | None, event: Any, job: str) -> None:
    import htcondor2

    how = {
        htcondor2.JobEventType.JOB_TERMINATED: "terminated",
        htcondor2.JobEventType.JOB_HELD: "held",
        htcondor2.JobEventType.JOB_EVICTED: "evicted",
    }[event.type]
    log.sequence[job].append(how)
    if attempt is not None:
        attempt.ended, attempt.how = event.timestamp, how
    if how == "held":
        code, subcode = int(event.get("HoldReasonCode", 0)), int(event.get("HoldReasonSubCode", 0))
        log.holds[job].append((code, subcode, str(event.get("HoldReason", ""))))
    elif how == "terminated" and event.get("ReturnValue") is not None:
        log.exit_codes[job] = int(event.get("ReturnValue"))


# -- measures ------------------------------------------------------------------------------------


def _peak_running(attempts: list[Attempt], since: float = float("-inf"), until: float = float("inf")) -> int:
    """Most attempts running at once at an instant in [since, until) (an end at t comes before a start at t)."""
    changes = sorted(
        [(a.started, 1) for a in attempts] + [(a.ended if a.ended is not None else until, -1) for a in attempts]
    )
    running = peak = 0
    for at, step in changes:
        running += step
        if since <= at < until:
            peak = max(peak, running)
    return peak


def _quantized(mib: int) -> int:
    return -(-mib // SLOT_QUANTUM_MIB) * SLOT_QUANTUM_MIB


def _held(run: MemoryRun, job: str) -> bool:
    return bool(run.log.holds.get(job))
