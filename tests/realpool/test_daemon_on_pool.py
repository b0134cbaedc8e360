"""`wire-daemon run` steering a real DAGMan workflow on the real pool, with EC2 on moto.

One run (a module fixture) of the bundled Montage trace, stretched 4 times so
its tasks last seconds, under short settings: a 15 s interval, a 2-minute
charging unit, 4 slots, at most 4 instances. The daemon is stopped with
SIGTERM in the middle and started again. The tests then read what the run
left: the decisions log, moto's instances, the hypervisor's timeline, the
schedd's history and the job event log.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from wire_daemon.core.billing import Billing
from wire_daemon.emulated.traces import bundled_trace_path, load_trace
from wire_lab.realpool.hypervisor import Hypervisor
from wire_lab.realpool.measure import JobTimes, job_times, measure
from wire_lab.realpool.pool import PersonalPool
from wire_lab.realpool.session import CloudHistory, DaemonRun, RunSettings, cloud_history, wait_for_dag
from wire_lab.realpool.submitdir import WrittenSubmitDir

TIME_SCALE = 4.0
SETTINGS = dict(time_scale=TIME_SCALE, charging_unit_s=120.0, interval_s=15.0, max_instances=4, slots=4)
BOOST_PRIORITY = 10  # steering.boost_priority's default


@dataclass
class Finished:
    run: DaemonRun
    written: WrittenSubmitDir
    dag_status: int
    history: CloudHistory
    times: JobTimes
    decisions: list[dict[str, Any]]
    live_before_restart: list[str]
    launched_at_restart: list[str]
    predictions: dict[str, tuple[float, int]]  # stage -> last (predicted occupancy s, policy) seen in status
    job_prio: dict[str, int]  # DAG node -> JobPrio in the schedd's history
    ended_at: float


@pytest.fixture(scope="module")
def finished(
    pool: PersonalPool, moto_ec2: str, ec2: Any, image_id: str, hypervisor: Hypervisor, pool_workdir: Path
) -> Iterator[Finished]:
    name = f"rp-daemon-{int(time.time())}"
    run = DaemonRun(pool, moto_ec2, image_id, pool_workdir / name, RunSettings(pool_name=name, **SETTINGS))
    written = run.write_workflow(bundled_trace_path(), label="montage")
    run.write_config()
    predictions: dict[str, tuple[float, int]] = {}
    run.start()
    try:
        pool.submit_dag(written.dag)
        _watch(run, predictions, until=lambda: _done_tasks(run) >= 20)
        live_before = _live(ec2, name)
        assert run.stop() == 0  # SIGTERM mid-run: the instances stay up
        run.start()  # re-reads the workflow, adopts its instances
        time.sleep(2 * SETTINGS["interval_s"])
        launched_at_restart = _launched_since(run, len(_first_life(run)))
        status = wait_for_dag(written.dag, timeout_s=900)
        _watch(run, predictions, until=lambda: not _live(ec2, name), timeout_s=600)
    finally:
        run.stop()
    history = cloud_history(ec2, hypervisor, pool_name=name)
    prio = _job_prio(pool, written)
    yield Finished(
        run,
        written,
        status,
        history,
        job_times(written.path / f"{written.label}-0.log"),
        run.decisions(),
        live_before,
        launched_at_restart,
        predictions,
        prio,
        time.time(),
    )


def test_the_workflow_completes_and_the_pool_grows_then_drains(finished: Finished) -> None:
    assert finished.dag_status == 0
    assert finished.history.peak >= 2, "the pool never grew"
    assert finished.history.live == [], f"instances left running: {finished.history.live}"
    assert set(finished.history.ended) == set(finished.history.launched), "an instance ended without the hypervisor"


def test_max_instances_is_never_exceeded_and_nothing_is_duplicated(finished: Finished) -> None:
    assert finished.history.peak <= SETTINGS["max_instances"]
    logged = [i for d in finished.decisions for i in d.get("launched", [])]
    assert sorted(logged) == sorted(set(logged)), "an instance was logged as launched twice"
    assert set(logged) == set(finished.history.launched), "moto's instances are exactly those the log launched"


def test_a_restart_adopts_the_pool_and_launches_no_duplicate(finished: Finished) -> None:
    assert finished.live_before_restart, "the restart should happen with instances up"
    # Right after the restart the pool is what it was: whatever it launched then was for new load, not a copy.
    assert len(finished.launched_at_restart) <= SETTINGS["max_instances"] - len(finished.live_before_restart)
    terminated = [i for d in finished.decisions for i in d.get("terminated", [])]
    assert sorted(terminated) == sorted(set(terminated)), "an instance was terminated twice"


def test_the_first_ready_jobs_of_each_stage_are_boosted_on_the_real_schedd(finished: Finished) -> None:
    wf = load_trace(bundled_trace_path())
    node_stage = {job.node: wf.stages[wf.stage_of[job.task]].name for job in finished.written.jobs}
    own = {job.node: job.priority for job in finished.written.jobs}  # Pegasus's: 10 per level
    boosted: dict[str, list[str]] = defaultdict(list)
    for node, prio in finished.job_prio.items():
        if node in node_stage:
            assert prio in (own[node], own[node] + BOOST_PRIORITY), f"{node}: JobPrio {prio}, its own {own[node]}"
            if prio == own[node] + BOOST_PRIORITY:
                boosted[node_stage[node]].append(node)
    assert boosted, "no job carried the raised JobPrio"
    assert all(len(nodes) <= 5 for nodes in boosted.values()), "a stage was boosted more than five times"
    # A boosted job may not start after a sibling that sat idle beside it once the boost was surely applied
    # (the loop boosts idle tasks once per interval); siblings that became ready later are not its rivals.
    started = _first_start_by_node(finished.times)
    submitted = {
        finished.times.node_of[j]: t for j, t in finished.times.submitted.items() if j in finished.times.node_of
    }
    slack = 2 * 2.0  # two negotiation cycles of the test pool
    for stage, nodes in boosted.items():
        rivals = [n for n, s in node_stage.items() if s == stage and n not in nodes and n in started and n in submitted]
        for node in (n for n in nodes if n in started and n in submitted):
            boosted_by = submitted[node] + SETTINGS["interval_s"]
            late = [
                r for r in rivals if submitted[r] <= boosted_by <= started[r] and started[r] + slack < started[node]
            ]
            assert not late, f"{stage}: {node} started after its idle siblings {late}"


def test_predictions_come_from_the_real_event_logs(finished: Finished, capsys: pytest.CaptureFixture[str]) -> None:
    used = {int(k) for d in finished.decisions for k in (d.get("prediction_policies") or {})}
    assert used & {3, 4, 5}, f"only policies {sorted(used)} were used"
    true = _true_stage_means(finished)
    errors = {s: (p, true[s]) for s, (p, _) in finished.predictions.items() if s in true}
    assert errors, "no stage had a prediction to compare"
    with capsys.disabled():
        for stage, (predicted, actual) in sorted(errors.items()):
            print(f"\n  prediction {stage}: {predicted:.1f} s against {actual:.1f} s true", end="")
        print()


def test_cost_is_billed_per_started_unit(finished: Finished) -> None:
    measures = measure(finished.times, finished.history, Billing(SETTINGS["charging_unit_s"]), finished.ended_at)
    last = [d for d in finished.decisions if "cost_units" in d][-1]
    assert measures.cost_units >= len(finished.history.launched)
    assert abs(last["cost_units"] - measures.cost_units) <= 1  # the daemon's own bill agrees


# -- helpers ------------------------------------------------------------------------------------


def _watch(run: DaemonRun, predictions: dict[str, tuple[float, int]], until: Any, timeout_s: float = 600) -> None:
    """Poll `wire-daemon status --json` until ``until()``; keep each stage's last prediction."""
    deadline = time.monotonic() + timeout_s
    while not until():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s:.0f} s; decisions: {run.decisions()[-2:]}")
        for stage in _status(run).get("stages", []):
            if stage.get("predicted_occupancy_s") is not None and stage.get("prediction_policy") in (3, 4, 5):
                predictions[stage["stage"]] = (stage["predicted_occupancy_s"], stage["prediction_policy"])
        time.sleep(3)


def _status(run: DaemonRun) -> dict[str, Any]:
    command = [sys.executable, "-m", "wire_daemon.cli.main", "status", "--config", str(run.config_path), "--json"]
    done = subprocess.run(command, capture_output=True, text=True, timeout=60)
    return json.loads(done.stdout) if done.returncode == 0 and done.stdout.strip() else {}


def _done_tasks(run: DaemonRun) -> int:
    decisions = run.decisions()
    return int(decisions[-1].get("done", 0)) if decisions else 0


def _live(ec2: Any, pool_name: str) -> list[str]:
    reply = ec2.describe_instances(
        Filters=[
            {"Name": "tag:wire:pool", "Values": [pool_name]},
            {"Name": "instance-state-name", "Values": ["pending", "running"]},
        ]
    )
    return [i["InstanceId"] for r in reply["Reservations"] for i in r["Instances"]]


def _first_life(run: DaemonRun) -> list[dict[str, Any]]:
    """The decisions of the first daemon, up to its shutdown record."""
    out = []
    for decision in run.decisions():
        out.append(decision)
        if decision.get("event") == "shutdown":
            break
    return out


def _launched_since(run: DaemonRun, first: int) -> list[str]:
    return [i for d in run.decisions()[first:] for i in d.get("launched", [])]


def _job_prio(pool: PersonalPool, written: WrittenSubmitDir) -> dict[str, int]:
    pool.use_bindings("user")
    constraint = f'pegasus_wf_uuid == "{written.wf_uuid}"'
    ads = pool.schedd().history(constraint, ["DAGNodeName", "JobPrio"], match=-1)
    return {str(ad["DAGNodeName"]): int(ad.get("JobPrio", 0)) for ad in ads if "DAGNodeName" in ad}


def _first_start_by_node(times: JobTimes) -> dict[str, float]:
    return {times.node_of[j]: min(starts) for j, starts in times.started.items() if j in times.node_of}


def _true_stage_means(finished: Finished) -> dict[str, float]:
    """Each stage's true mean sleep (trace runtime x K), under the name the daemon shows (``<workflow>/<stage>``)."""
    wf = load_trace(bundled_trace_path())
    by_stage: dict[str, list[float]] = defaultdict(list)
    for job in finished.written.jobs:
        by_stage[wf.stages[wf.stage_of[job.task]].name].append(float(wf.runtime_s[job.task]) * TIME_SCALE)
    shown = {name: name.split("/", 1)[-1] for name in finished.predictions}
    return {name: sum(by_stage[s]) / len(by_stage[s]) for name, s in shown.items() if by_stage.get(s)}
