"""Workers booted by the hypervisor from the daemon's own rendered user-data, on moto instances."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest

from wire_lab.realpool.worker import render_user_data

from .conftest import BOOT_LAG_S
from .jobs import COMPLETED, IDLE, RUNNING, instance_of, submit_script, wait_job

JOIN_S = 40.0
IDLE_SHUTDOWN_S = 60  # the renderer refuses less


def user_data(pool, wire_pool: str, delivery: str = "file", **fields) -> str:
    if delivery == "inline":
        fields |= {"token": pool.pool_token}
    else:
        fields.setdefault("token_source", "/etc/wire-worker/pool-token")
    return render_user_data(
        cloud="ec2", pool=wire_pool, condor_host=pool.collector_address, token_delivery=delivery, **fields
    )


def booted(hypervisor, pool, instance_id: str, launched_at: float):
    event = hypervisor.wait_event("boot", instance_id, timeout=BOOT_LAG_S + JOIN_S)
    assert event.at - launched_at >= BOOT_LAG_S - 1.0  # moto's LaunchTime has whole seconds
    worker = hypervisor.workers[instance_id]
    worker.wait_joined(pool.collector(), timeout=JOIN_S)
    return worker


def test_job_runs_on_a_worker_booted_from_user_data(pool, hypervisor, launch, wire_pool_name) -> None:
    launched_at = time.time()
    # A token file where the image keeps it, outside the usual places: the harness follows the user-data.
    [iid] = launch(user_data(pool, wire_pool_name, "file", token_source="/opt/wire/pool-token"))
    worker = booted(hypervisor, pool, iid, launched_at)
    assert (worker.root / "opt/wire/pool-token").read_text().strip() == pool.pool_token

    slots = worker.wait_joined(pool.collector())
    assert len({ad["Name"] for ad in slots}) == 4  # NUM_SLOTS from the user-data
    assert {(ad["WireInstanceId"], ad["WirePool"]) for ad in slots} == {(iid, wire_pool_name)}
    recorded = worker.root / "var/lib/wire-harness"
    assert "restart condor" in (recorded / "systemctl.log").read_text()
    assert "169.254.169.254" in (recorded / "iptables.log").read_text()  # the metadata block was asked for

    cluster, job_dir = submit_script(pool, f"hello-{wire_pool_name}", "echo hello from $(id -un)", wire_pool_name)
    ad = wait_job(pool, cluster, COMPLETED, timeout=60)
    assert ad["ExitCode"] == 0 and instance_of(ad["LastRemoteHost"]) == iid
    assert (job_dir / "out").read_text().startswith("hello from ")


def test_dag_runs_through_dagman_on_a_worker(pool, hypervisor, launch, wire_pool_name) -> None:
    launched_at = time.time()
    [iid] = launch(user_data(pool, wire_pool_name, "inline"))
    booted(hypervisor, pool, iid, launched_at)

    dag_dir = pool.user_dir(f"dag-{wire_pool_name}")  # not under /tmp: DAGMan refuses node logs there
    (dag_dir / "node.sh").write_text('#!/bin/sh\n[ -z "$2" ] || cat "$2"\necho "$1 ran"\n')
    (dag_dir / "node.sh").chmod(0o755)
    for node, inputs in (("A", ""), ("B", "A.out")):
        (dag_dir / f"{node}.sub").write_text(NODE_SUBMIT.format(node=node, inputs=inputs, pool=wire_pool_name))
    (dag_dir / "diamond.dag").write_text("JOB A A.sub\nJOB B B.sub\nPARENT A CHILD B\n")

    cluster = pool.submit_dag(dag_dir / "diamond.dag")
    ad = wait_job(pool, cluster, COMPLETED, timeout=120)  # the DAGMan job itself
    assert ad["ExitCode"] == 0
    assert (dag_dir / "B.out").read_text() == "A ran\nB ran\n"  # B got A's output through file transfer


NODE_SUBMIT = """\
universe = vanilla
executable = node.sh
arguments = {node} {inputs}
transfer_input_files = {inputs}
output = {node}.out
error = {node}.err
should_transfer_files = YES
requirements = WirePool == "{pool}"
request_cpus = 1
request_memory = 64
request_disk = 1024
queue
"""


def test_killed_worker_loses_its_job_which_reruns_elsewhere(pool, hypervisor, launch, ec2, wire_pool_name) -> None:
    launched_at = time.time()
    [a] = launch(user_data(pool, wire_pool_name, "file"))
    [b] = launch(user_data(pool, wire_pool_name, "inline"))  # the unsafe opt-in works too
    for iid in (a, b):
        booted(hypervisor, pool, iid, launched_at)

    cluster, _ = submit_script(pool, f"long-{wire_pool_name}", "sleep 600", wire_pool_name)
    first = wait_job(pool, cluster, RUNNING, timeout=60)
    victim = instance_of(first["RemoteHost"])
    survivor = b if victim == a else a
    assert victim in (a, b)

    ec2.terminate_instances(InstanceIds=[victim])  # what the daemon does to release an instance
    killed = hypervisor.wait_event("kill", victim, timeout=10)
    assert hypervisor.workers[victim].state == "killed"

    # The shadow waits for the vanished starter until the job lease expires, then the job is idle again.
    idle = wait_job(pool, cluster, IDLE, timeout=pool.options.lease_s + 40)
    idle_after_s = time.time() - killed.at
    assert idle["JobRunCount"] == 1 and instance_of(idle["LastRemoteHost"]) == victim
    again = wait_job(pool, cluster, RUNNING, timeout=60, host_of=survivor)
    assert again["JobRunCount"] == 2  # rerun from the start: the restart cost the daemon accounts for
    print(f"job idle {idle_after_s:.1f} s after the kill; rerunning on {survivor}")

    import htcondor2

    pool.schedd().act(htcondor2.JobAction.Remove, f"ClusterId == {cluster}")


def test_dead_man_switch_powers_off_an_unclaimed_worker(pool, hypervisor, launch, ec2, wire_pool_name) -> None:
    # The rendered switch as is, at the shortest idle time the renderer accepts. On HTCondor 23.9 the
    # startd itself asks its master to shut down ("No resources have been claimed for 60 seconds"),
    # and the master runs the user-data's power-off script as it exits.
    launched_at = time.time()
    [iid] = launch(user_data(pool, wire_pool_name, "file", idle_shutdown_s=IDLE_SHUTDOWN_S))
    worker = booted(hypervisor, pool, iid, launched_at)

    off = hypervisor.wait_event("poweroff", iid, timeout=IDLE_SHUTDOWN_S + 60)
    assert off.at - worker.booted_at >= IDLE_SHUTDOWN_S
    assert worker.state == "powered-off" and worker.powered_off_at() is not None
    state = ec2.describe_instances(InstanceIds=[iid])["Reservations"][0]["Instances"][0]["State"]["Name"]
    assert state in ("shutting-down", "terminated")  # as EC2 does with InstanceInitiatedShutdownBehavior=terminate
    print(f"powered off {off.at - worker.booted_at:.1f} s after boot")


def test_a_worker_that_cannot_fetch_its_token_fails_its_boot_and_powers_off(
    pool, hypervisor, launch, ec2, wire_pool_name
) -> None:
    # SSM does not exist here (the aws stub refuses): the boot script fails the way it does on a VM.
    [iid] = launch(
        render_user_data(
            cloud="ec2",
            pool=wire_pool_name,
            condor_host=pool.collector_address,
            token_delivery="ssm",
            token_source="/wire/pool-token",
        )
    )
    failed = hypervisor.wait_event("boot-failed", iid, timeout=BOOT_LAG_S + 20)
    assert "cannot fetch the pool token (ssm)" in failed.detail  # the boot script's own message
    state = ec2.describe_instances(InstanceIds=[iid])["Reservations"][0]["Instances"][0]["State"]["Name"]
    assert state in ("shutting-down", "terminated")


DRAIN = """
import htcondor2
collector = htcondor2.Collector({collector!r})
constraint = 'WireInstanceId == "{iid}" && WirePool == "{pool}"'
ads = collector.query(htcondor2.AdType.Startd, constraint=constraint, projection=["Machine", "MyAddress", "Name"])
htcondor2.Startd(ads[0]).drainJobs(htcondor2.DrainType.Graceful, reason="wire-daemon releases {iid}")
print("drained")
"""


DRAIN_BUG = (
    "wire_daemon bug: a worker accepts IDTOKENS only and holds no signing key, so it cannot verify "
    "the daemon's token: HTCondorControl.retire_instance cannot drain it"
)


@pytest.mark.xfail(strict=True, raises=AssertionError, reason=DRAIN_BUG)
def test_the_daemon_identity_drains_a_worker(pool, hypervisor, launch, wire_pool_name) -> None:
    # What HTCondorControl.retire_instance does, with the token submit-host.conf tells the operator to make.
    launched_at = time.time()
    [iid] = launch(user_data(pool, wire_pool_name, "inline"))
    booted(hypervisor, pool, iid, launched_at)
    code = DRAIN.format(collector=pool.collector_address, iid=iid, pool=wire_pool_name)
    done = subprocess.run(
        [sys.executable, "-c", code],
        env=pool.client_env("daemon"),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, (done.stderr.strip().splitlines() or ["?"])[-1]
