"""Weather on the real pool: HTCondor going away, and a spot worker reclaimed, while the daemon steers a workflow.

One run (a module fixture) of a small three-stage workflow on spot instances
(``steering.market: spot``; moto's instances carry the spot life cycle, and
the test's metadata service tells each worker so). In order:

1. The daemon starts while the pool's schedd is off (``condor_off -schedd``):
   it must say so in one line, launch nothing, and keep asking. The schedd
   comes on, the DAG is submitted, and the daemon steers it.
2. In the middle of the run, workers up and jobs running,
   ``condor_restart -schedd``: the daemon holds the pool (no launch, no
   termination, no decision while the schedd is away) and goes on after.
3. A worker running jobs gets EC2's interruption notice from the metadata
   service (``spot/instance-action``). Its spot watch stops new jobs at once
   and, a grace period before the reclaim, shuts HTCondor down: its jobs go
   back to the queue, the worker leaves the pool, the instance powers off
   (and ends). The daemon records the interruption and replaces the
   capacity as its policy decides.

The workflow completes; no instance is leaked or launched twice, and no DAG
node succeeds twice. The tests read what the run left: the daemon's log, the
decisions log, moto's instances, the hypervisor's timeline and the job event
log.
"""

from __future__ import annotations

import json
import re
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from wire_lab.realpool.hypervisor import Hypervisor
from wire_lab.realpool.metadata import MetadataService, Notice
from wire_lab.realpool.pool import PersonalPool
from wire_lab.realpool.proc import wait_for
from wire_lab.realpool.session import CloudHistory, DaemonRun, RunSettings, cloud_history, wait_for_dag

from .jobs import instance_of

SETTINGS = dict(time_scale=1.0, charging_unit_s=30.0, interval_s=4.0, max_instances=2, slots=4)
DAEMON_CONFIG = {"steering": {"market": "spot"}}
# Each stage waits for all of the one before. The second's tasks outlast the notice's grace: the worker that
# hears it leaves with jobs running, which go back to the queue and run again on the replacement.
STAGES = (("first", 4, 8.0), ("second", 4, 25.0), ("third", 4, 8.0))
NOTICE_S = 26.0  # the notice's reclaim time from now (EC2 gives two minutes; the watch leaves 20 s before)
AWAY = "HTCondor unreachable"
BACK = "HTCondor answers again"
RUN_TIMEOUT_S = 600.0


@dataclass
class Weathered:
    run: DaemonRun
    dag_status: int
    history: CloudHistory
    decisions: list[dict[str, Any]]
    log: list[str]  # the daemon's log lines
    decisions_while_off: int  # decisions the daemon wrote while the schedd was off at its start
    live_while_off: list[str]
    live_before_restart: list[str]
    live_after_back: list[str]
    victim: str = ""  # the spot worker that got the notice
    notice: Notice | None = None
    left_pool_at: float | None = None  # when its startd ads were gone from the collector
    executions: list[tuple[float, str, str]] = field(default_factory=list)  # (time, job, instance)
    terminated_nodes: Counter[str] = field(default_factory=Counter)  # DAG node -> successful ends
    timings: dict[str, float] = field(default_factory=dict)


@pytest.fixture(scope="module")
def weathered(
    pool: PersonalPool,
    moto_ec2: str,
    ec2: Any,
    image_id: str,
    hypervisor: Hypervisor,
    metadata: MetadataService,
    pool_workdir: Path,
) -> Iterator[Weathered]:
    name = f"rp-weather-{int(time.time())}"
    settings = RunSettings(pool_name=name, config=DAEMON_CONFIG, **SETTINGS)
    run = DaemonRun(pool, moto_ec2, image_id, pool_workdir / name, settings)
    written = run.write_workflow(_write_trace(pool_workdir / f"{name}.json"), label="weather")
    run.write_config()
    timings: dict[str, float] = {}
    started = time.monotonic()
    _schedd_off(pool)
    try:
        # 1. Started before the schedd: it waits, says so once, and changes nothing.
        run.start()
        wait_for(lambda: _count(run, AWAY) >= 1, "the daemon's line saying HTCondor is unreachable", 60.0)
        time.sleep(2 * SETTINGS["interval_s"])
        assert run.process is not None and run.process.poll() is None, "the daemon exited while the schedd was off"
        decisions_while_off, live_while_off = len(run.decisions()), _live(ec2, name)
        timings["waited_s"] = time.monotonic() - started
        _schedd_on(pool)
        pool.submit_dag(written.dag)
        wait_for(lambda: _count(run, BACK) >= 1, "the daemon's line saying HTCondor answers again", 60.0)
        # 2. Mid-run, workers up and jobs running: the schedd restarts.
        wait_for(lambda: _running(run) >= 1, "jobs running on the pool", RUN_TIMEOUT_S)
        live_before = _live(ec2, name)
        restarted = time.monotonic()
        pool.run_as_root(["condor_restart", "-schedd"])
        wait_for(lambda: _count(run, BACK) >= 2, "the daemon back after the schedd's restart", 120.0)
        timings["restart_away_s"] = time.monotonic() - restarted
        live_after_back = _live(ec2, name)
        # 3. A spot worker running jobs hears the interruption notice.
        victim = wait_for(lambda: _busy_worker(pool, ec2, run), "a spot worker running jobs", RUN_TIMEOUT_S)
        notice = metadata.notice(victim, NOTICE_S)
        wait_for(lambda: not _slots(pool, victim), f"{victim} out of the pool", NOTICE_S + 60.0)
        left_pool_at = time.time()
        wait_for(lambda: _ended_by_cloud(ec2, victim, notice), f"{victim} ended", NOTICE_S + 60.0)
        status = wait_for_dag(written.dag, RUN_TIMEOUT_S)
        wait_for(lambda: not _live(ec2, name), "the pool released after the workflow", RUN_TIMEOUT_S)
    finally:
        _schedd_on(pool)  # whatever happened: the next module's pool has its schedd
        run.stop()
    timings["total_s"] = time.monotonic() - started
    addresses = {iid: w.address for iid, w in hypervisor.workers.items()}
    log_path = written.path / f"{written.label}-0.log"
    yield Weathered(
        run,
        status,
        cloud_history(ec2, hypervisor, pool_name=name),
        run.decisions(),
        _log(run),
        decisions_while_off,
        live_while_off,
        live_before,
        live_after_back,
        victim,
        notice,
        left_pool_at,
        _executions(log_path, addresses),
        _successful_ends(log_path),
        timings,
    )


def test_started_before_the_schedd_it_waits_in_one_line_and_changes_nothing(weathered: Weathered) -> None:
    assert weathered.decisions_while_off == 0, "a decision was made while the schedd was off"
    assert weathered.live_while_off == [], "an instance was launched while the schedd was off"
    first_away = [line for line in weathered.log if AWAY in line][0]
    assert "schedd does not answer" in first_away, first_away
    assert not [line for line in weathered.log if line.startswith("Traceback")], "a traceback in the daemon's log"


def test_the_workflow_completes_with_no_leak_and_no_duplicate(weathered: Weathered) -> None:
    assert weathered.dag_status == 0
    history = weathered.history
    assert 1 <= history.peak <= SETTINGS["max_instances"]
    assert history.live == [], f"instances left running: {history.live}"
    assert set(history.ended) == set(history.launched), "an instance ended without the hypervisor"
    logged = [i for d in weathered.decisions for i in d.get("launched", [])]
    assert sorted(logged) == sorted(set(logged)), "an instance was logged as launched twice"
    assert set(logged) == set(history.launched), "moto's instances are exactly those the log launched"
    twice = {node: n for node, n in weathered.terminated_nodes.items() if n > 1}
    assert not twice, f"DAG nodes that succeeded twice: {twice}"
    assert sum(weathered.terminated_nodes.values()) == sum(count for _, count, _ in STAGES)


def test_a_schedd_restart_mid_run_holds_the_pool(weathered: Weathered) -> None:
    away = [line for line in weathered.log if AWAY in line]
    back = [line for line in weathered.log if BACK in line]
    assert len(away) == 2 and len(back) == 2, away + back  # one line each way per outage, none per retry
    assert weathered.live_before_restart, "the restart should happen with workers up"
    # The log's times are whole seconds: a cloud action strictly inside the outage happened after the away
    # line's second and before the back line's. The decisions are judged by the log's order instead, since
    # the iteration that finds HTCondor back is stamped with its start, inside the outage, and decides.
    # While away the daemon logs nothing at INFO: its decisions and actions are INFO lines.
    since, until = _logged_at(away[1]) + 1.0, _logged_at(back[1])
    history = weathered.history
    launched = [i for i, at in history.launched.items() if since <= at < until]
    ended = [i for i, at in history.ended.items() if since <= at < until]
    outage = weathered.log[weathered.log.index(away[1]) + 1 : weathered.log.index(back[1])]
    decided = [line for line in outage if " INFO " in line]  # decisions and actions; waiting only warns
    assert not launched and not ended and not decided, (launched, ended, decided)
    assert set(weathered.live_before_restart) <= set(weathered.live_after_back) | set(history.ended)


def test_a_spot_notice_stops_new_jobs_and_the_worker_leaves_then_ends(weathered: Weathered) -> None:
    notice, victim = weathered.notice, weathered.victim
    assert notice is not None and notice.heard is not None, "the worker never polled its notice"
    # The watch polls every 5 s; one poll later at most, START is False. Allow a negotiation cycle of slack.
    stop_by = notice.heard + 4.0
    late = [(t, job) for t, job, host in weathered.executions if host == victim and t > stop_by]
    assert not late, f"jobs started on {victim} after its notice: {late}"
    assert weathered.left_pool_at is not None and weathered.left_pool_at <= notice.at + 10.0
    assert victim in weathered.history.ended and victim not in weathered.history.live
    # Its running jobs went back to the queue and ran again on another worker (once each: no node twice).
    on_victim = {job for _, job, host in weathered.executions if host == victim}
    again = {job for _, job, host in weathered.executions if job in on_victim and host not in ("", victim)}
    assert again, f"no job of {victim} ran again elsewhere"


def test_the_daemon_records_the_interruption_and_replaces_the_capacity(
    weathered: Weathered, capsys: pytest.CaptureFixture[str]
) -> None:
    victim = weathered.victim
    recorded = [(k, d) for k, d in enumerate(weathered.decisions) for n in d.get("notes", []) if _reclaimed(n, victim)]
    assert recorded, f"no decision records the interruption of {victim}"
    first, _ = recorded[0]
    assert len(recorded) == 1, "the interruption was recorded more than once"
    after = [i for d in weathered.decisions[first:] for i in d.get("launched", [])]
    assert after, "the reclaimed capacity was never replaced (work was left for it)"
    assert victim not in after
    with capsys.disabled():
        timings = ", ".join(f"{k}={v:.1f}" for k, v in weathered.timings.items())
        print(f"\n  weather on the pool: {timings}; reclaimed {victim}, replaced by {', '.join(after)}")


# -- helpers -------------------------------------------------------------------------------------


def _write_trace(path: Path) -> Path:
    """A WfFormat 1.4 trace of ``STAGES``: each task waits for every task of the stage before."""
    tasks: list[dict[str, Any]] = []
    before: list[str] = []
    for stage, count, runtime in STAGES:
        names = [f"{stage}_ID{len(tasks) + k + 1:07d}" for k in range(count)]
        tasks += [
            {"name": n, "type": "compute", "category": stage, "runtimeInSeconds": runtime, "parents": before}
            for n in names
        ]
        before = names
    for task in tasks:
        task["files"] = []
    path.write_text(json.dumps({"name": "weather", "schemaVersion": "1.4", "workflow": {"tasks": tasks}}))
    return path


def _schedd_off(pool: PersonalPool) -> None:
    pool.run_as_root(["condor_off", "-schedd"])
    wait_for(lambda: not _schedd_answers(pool), "the schedd off", 60.0)


def _schedd_on(pool: PersonalPool) -> None:
    if _schedd_answers(pool):
        return
    pool.run_as_root(["condor_on", "-schedd"])
    wait_for(lambda: _schedd_answers(pool), "the schedd on", 60.0)


def _schedd_answers(pool: PersonalPool) -> bool:
    try:
        pool.use_bindings("user")
        pool.schedd().query(constraint="false", projection=["ClusterId"])
    except Exception:  # noqa: BLE001 - the bindings raise HTCondorException and friends
        return False
    return True


def _slots(pool: PersonalPool, instance_id: str) -> list[Any]:
    import htcondor2

    constraint = f'WireInstanceId == "{instance_id}"'
    projection = ["State", "Activity"]
    return list(pool.collector().query(htcondor2.AdType.Startd, constraint=constraint, projection=projection))


def _busy_worker(pool: PersonalPool, ec2: Any, run: DaemonRun) -> str | None:
    """A live spot instance of the pool running a job of the second stage, as the schedd says."""
    spot = _live(ec2, run.settings.pool_name, spot_only=True)
    try:
        ads = pool.schedd().query(constraint="JobStatus == 2", projection=["DAGNodeName", "RemoteHost"])
    except Exception:  # noqa: BLE001 - the schedd is back from its restart moments ago: ask again
        return None
    second = STAGES[1][0]
    running = [ad for ad in ads if str(ad.get("DAGNodeName", "")).startswith(second)]
    hosts = [instance_of(str(ad.get("RemoteHost", ""))) for ad in running]
    return next((h for h in hosts if h in spot), None)


def _ended_by_cloud(ec2: Any, instance_id: str, notice: Notice) -> bool:
    """Gone in the cloud: powered off by its watch, or (as EC2 does at the notice's time) reclaimed."""
    if instance_id not in _live(ec2, None, ids=[instance_id]):
        return True
    if time.time() >= notice.at:
        ec2.terminate_instances(InstanceIds=[instance_id])
    return False


def _executions(event_log: Path, addresses: dict[str, str]) -> list[tuple[float, str, str]]:
    """Every execute event: (time, job, the instance whose worker address it names)."""
    import htcondor2

    by_address = {address: iid for iid, address in addresses.items()}
    out = []
    for event in htcondor2.JobEventLog(str(event_log)).events(stop_after=0):
        if event.type == htcondor2.JobEventType.EXECUTE:
            host = re.search(r"<([0-9.]+):", str(event.get("ExecuteHost", "")))
            instance = by_address.get(host.group(1), "") if host else ""
            out.append((event.timestamp, f"{event.cluster}.{event.proc}", instance))
    return out


def _successful_ends(event_log: Path) -> Counter[str]:
    """DAG node -> how many of its jobs ended with exit code 0."""
    import htcondor2

    node_of: dict[str, str] = {}
    ends: Counter[str] = Counter()
    for event in htcondor2.JobEventLog(str(event_log)).events(stop_after=0):
        job = f"{event.cluster}.{event.proc}"
        if event.type == htcondor2.JobEventType.SUBMIT:
            node_of[job] = str(event.get("LogNotes", "")).removeprefix("DAG Node: ").strip()
        elif event.type == htcondor2.JobEventType.JOB_TERMINATED and event.get("ReturnValue") == 0:
            ends[node_of.get(job, job)] += 1
    return ends


def _reclaimed(note: Any, instance_id: str) -> bool:
    text = note if isinstance(note, str) else json.dumps(note)
    return "spot interruption" in text and instance_id in text


def _log(run: DaemonRun) -> list[str]:
    path = run.workdir / "daemon" / "daemon.log"
    return path.read_text(errors="replace").splitlines() if path.exists() else []


def _logged_at(line: str) -> float:
    """The epoch time of a daemon log line (``2025-11-05T12:03:00Z INFO ...``)."""
    return datetime.strptime(line.split()[0], "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC).timestamp()


def _count(run: DaemonRun, text: str) -> int:
    return sum(text in line for line in _log(run))


def _running(run: DaemonRun) -> int:
    decisions = run.decisions()
    return int(decisions[-1].get("running", 0)) if decisions else 0


def _live(ec2: Any, pool_name: str | None, spot_only: bool = False, ids: list[str] | None = None) -> list[str]:
    filters = [{"Name": "instance-state-name", "Values": ["pending", "running"]}]
    if pool_name:
        filters.append({"Name": "tag:wire:pool", "Values": [pool_name]})
    args: dict[str, Any] = {"Filters": filters, **({"InstanceIds": ids} if ids else {})}
    instances = [i for r in ec2.describe_instances(**args)["Reservations"] for i in r["Instances"]]
    return sorted(i["InstanceId"] for i in instances if not spot_only or i.get("InstanceLifecycle") == "spot")
