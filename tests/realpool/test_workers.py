"""Workers booted by the hypervisor from the daemon's own rendered user-data, on moto instances."""

from __future__ import annotations

import re
import time

from wire_lab.realpool.daemon_files import worker_admin_key_name
from wire_lab.realpool.proc import wait_for
from wire_lab.realpool.worker import render_user_data

from .conftest import BOOT_LAG_S
from .daemon_side import client_query, control
from .jobs import COMPLETED, IDLE, RUNNING, instance_of, job_ad, submit_script, wait_job

JOIN_S = 40.0
IDLE_SHUTDOWN_S = 60  # the renderer refuses less


def user_data(pool, wire_pool: str, delivery: str = "file", **fields) -> str:
    """The daemon's user-data as docs/cloud.md tells the operator to configure it: the pool token, the
    workers' administration key (delivered the same way) and the pool's trust domain."""
    if delivery == "inline":
        fields |= {"token": pool.pool_token}
        fields.setdefault("admin_key", pool.worker_admin_key_b64)
    else:
        fields.setdefault("token_source", "/etc/wire-worker/pool-token")
        fields.setdefault("admin_key_source", "/etc/wire-worker/admin-key")
    fields.setdefault("trust_domain", pool.options.domain)
    return render_user_data(
        cloud="ec2", pool=wire_pool, condor_host=pool.collector_address, token_delivery=delivery, **fields
    )


def slot_ads(pool, instance_id: str, projection: list[str], count: int = 1, timeout: float = 20.0) -> list:
    """The instance's slot ads in the collector, once there are at least ``count``."""
    import htcondor2

    def ads() -> list:
        found = list(
            pool.collector().query(
                htcondor2.AdType.Startd, constraint=f'WireInstanceId == "{instance_id}"', projection=projection
            )
        )
        return found if len(found) >= count else []

    return wait_for(ads, f"{instance_id}: {count} slot ads", timeout)


def on_instance(wire_pool: str, instance_id: str) -> str:
    return f'WirePool == "{wire_pool}" && WireInstanceId == "{instance_id}"'


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
    key = worker.root / "etc/condor/passwords.d" / worker_admin_key_name()  # decoded by the boot script
    assert oct(key.stat().st_mode & 0o777) == "0o600"
    assert key.read_bytes() == (pool.worker_admin_dir / worker_admin_key_name()).read_bytes()

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


def test_static_slots_are_static_and_partitionable_is_one_slot(pool, hypervisor, launch, wire_pool_name) -> None:
    launched_at = time.time()
    [static] = launch(user_data(pool, wire_pool_name, "file"))
    [partitionable] = launch(user_data(pool, wire_pool_name, "inline", slot_mode="partitionable", slots=3))
    for iid in (static, partitionable):
        booted(hypervisor, pool, iid, launched_at)

    slots = slot_ads(pool, static, ["Name", "SlotType", "Cpus"], count=4)
    assert len(slots) == 4 and {ad["SlotType"] for ad in slots} == {"Static"}
    assert {ad["Cpus"] for ad in slots} == {1}
    [one] = slot_ads(pool, partitionable, ["Name", "SlotType", "Cpus"])
    assert one["SlotType"] == "Partitionable" and one["Cpus"] == 3  # the cores the daemon plans with

    # A job runs in a static slot itself, not in a dynamic slot carved out of one (slot1_1@...).
    cluster, _ = submit_script(
        pool, f"static-{wire_pool_name}", "true", wire_pool_name, requirements=on_instance(wire_pool_name, static)
    )
    ad = wait_job(pool, cluster, COMPLETED, timeout=60)
    assert re.match(rf"slot[1-4]@{static}@", ad["LastRemoteHost"]), ad["LastRemoteHost"]


def test_each_worker_has_its_own_loopback_address(pool, hypervisor, launch, wire_pool_name) -> None:
    launched_at = time.time()
    instances = launch(user_data(pool, wire_pool_name, "file"), count=2)
    workers = {iid: booted(hypervisor, pool, iid, launched_at) for iid in instances}
    addresses = {w.address for w in workers.values()}
    assert len(addresses) == 2 and "127.0.0.1" not in addresses  # 127.0.0.1 is the central manager's
    assert all(a.startswith("127.") for a in addresses)

    for iid, worker in workers.items():
        ads = slot_ads(pool, iid, ["Name", "MyAddress"], count=4)
        assert len({ad["MyAddress"] for ad in ads}) == 1  # one startd
        assert ads[0]["MyAddress"].startswith(f"<{worker.address}:")
        cluster, job_dir = submit_script(
            pool, f"where-{iid}", "true", wire_pool_name, requirements=on_instance(wire_pool_name, iid)
        )
        wait_job(pool, cluster, COMPLETED, timeout=60)
        # The job's event log names the worker by its address.
        executed = re.findall(r"Job executing on host: <([0-9.]+):", (job_dir / "job.log").read_text())
        assert executed == [worker.address]


def test_the_daemon_retires_a_worker_gracefully(pool, hypervisor, launch, wire_pool_name) -> None:
    # The daemon's own HTCondorControl, as the daemon's identity, with the tokens docs/cloud.md says to make.
    launched_at = time.time()
    [retired] = launch(user_data(pool, wire_pool_name, "file"))
    booted(hypervisor, pool, retired, launched_at)
    assert control(pool, wire_pool_name, retired, "joined") == (True, 0)

    long_job, long_dir = submit_script(pool, f"long-{wire_pool_name}", "sleep 15; echo done", wire_pool_name)
    wait_job(pool, long_job, RUNNING, timeout=60, host_of=retired)
    assert control(pool, wire_pool_name, retired, "retire") == (None, 0)
    wait_for(
        lambda: all(ad.get("Draining") for ad in slot_ads(pool, retired, ["Name", "Draining"], count=4)),
        f"{retired}: draining",
        20,
    )
    assert control(pool, wire_pool_name, retired, "holds_claims") == (True, 0)  # the long job runs on

    # Submitted once the worker is retired: three slots are free there, yet it must wait.
    later_job, later_dir = submit_script(pool, f"later-{wire_pool_name}", "echo later", wire_pool_name)
    done = wait_job(pool, long_job, COMPLETED, timeout=60)
    assert done["ExitCode"] == 0 and done["JobRunCount"] == 1  # ran to its end, once
    log = (long_dir / "job.log").read_text()
    assert "Job was evicted" not in log and (long_dir / "out").read_text() == "done\n"

    # Its claim is not reused for the waiting job; then the worker holds no claim: the daemon may terminate it.
    assert control(pool, wire_pool_name, retired, "released", timeout=30) == (True, 0)
    later = job_ad(pool, later_job)
    assert later["JobStatus"] == IDLE and later.get("JobRunCount", 0) == 0
    assert "Job executing" not in (later_dir / "job.log").read_text()
    assert {ad["State"] for ad in slot_ads(pool, retired, ["Name", "State"], count=4)} == {"Drained"}

    # It starts on another worker.
    [other] = launch(user_data(pool, wire_pool_name, "inline"))
    booted(hypervisor, pool, other, time.time() - BOOT_LAG_S)
    ran = wait_job(pool, later_job, COMPLETED, timeout=60)
    assert instance_of(ran["LastRemoteHost"]) == other and ran["JobRunCount"] == 1


def test_the_workers_key_admits_only_the_daemon_and_only_on_workers(pool, hypervisor, launch, wire_pool_name) -> None:
    # The key is not on the central manager, which therefore refuses the daemon's worker token.
    assert sorted(p.name for p in (pool.cm_dir / "passwords.d").iterdir()) == ["POOL"]
    daemon_tokens = pool.token_dir("daemon")
    pool.add_client("worker-token-only", {"w": (daemon_tokens / "wire-workers").read_text()})
    refused = client_query(pool, "worker-token-only")
    assert refused.returncode != 0
    assert client_query(pool, "daemon").returncode == 0  # it picks its pool-signed token there

    launched_at = time.time()
    [iid] = launch(user_data(pool, wire_pool_name, "inline"))
    booted(hypervisor, pool, iid, launched_at)
    # Whoever took the key from a worker (and its pool token) mints a token for another identity: refused.
    forged = pool.create_token(f"condor@{pool.options.domain}", ("ADMINISTRATOR",), key=worker_admin_key_name())
    pool.add_client("thief", {"pool": pool.pool_token, "forged": forged})
    assert control(pool, wire_pool_name, iid, "retire", identity="thief") == (None, 1)
    ads = slot_ads(pool, iid, ["Name", "State", "Draining"], count=4)
    assert not any(ad.get("Draining") for ad in ads) and {ad["State"] for ad in ads} == {"Unclaimed"}
