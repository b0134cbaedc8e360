"""Small job helpers for the realpool tests: plain jobs submitted through the htcondor2 bindings."""

from __future__ import annotations

import re
import time
from pathlib import Path
from typing import Any

from wire_lab.realpool.errors import RealPoolError
from wire_lab.realpool.pool import PersonalPool

IDLE, RUNNING, REMOVED, COMPLETED, HELD = 1, 2, 3, 4, 5
AD = ["ClusterId", "ProcId", "JobStatus", "RemoteHost", "LastRemoteHost", "JobRunCount", "JobPrio", "Owner", "ExitCode"]


def submit_script(pool: PersonalPool, name: str, script: str, wire_pool: str, **extra: str) -> tuple[int, Path]:
    """Submit one job running ``script`` (sh) on a worker of ``wire_pool``; its cluster id and directory."""
    import htcondor2

    job_dir = pool.user_dir(name)
    exe = job_dir / "job.sh"
    exe.write_text("#!/bin/sh\n" + script + "\n")
    exe.chmod(0o755)
    description = {
        "executable": str(exe),
        "initialdir": str(job_dir),
        "output": "out",
        "error": "err",
        "log": "job.log",
        "should_transfer_files": "YES",
        "requirements": f'WirePool == "{wire_pool}"',
        "request_cpus": "1",
        "request_memory": "64",
        "request_disk": "1024",
        **extra,
    }
    result = pool.schedd().submit(htcondor2.Submit(description))
    return int(result.cluster()), job_dir


def job_ad(pool: PersonalPool, cluster: int) -> Any:
    """The job's ad from the queue, else from the history; None if neither knows it."""
    schedd = pool.schedd()
    ads = list(schedd.query(constraint=f"ClusterId == {cluster}", projection=AD))
    if ads:
        return ads[0]
    done = list(schedd.history(constraint=f"ClusterId == {cluster}", projection=AD, match=1))
    return done[0] if done else None


def wait_job(pool: PersonalPool, cluster: int, status: int, timeout: float, host_of: str | None = None) -> Any:
    """Poll until the job has ``status`` (and runs on instance ``host_of``, if given); its ad."""
    deadline = time.monotonic() + timeout
    ad = None
    while time.monotonic() < deadline:
        ad = job_ad(pool, cluster)
        on_host = ad is not None and (host_of is None or instance_of(ad.get("RemoteHost", "")) == host_of)
        if on_host and ad.get("JobStatus") == status:
            return ad
        time.sleep(0.5)
    raise RealPoolError(f"job {cluster}: not in status {status} after {timeout:.0f} s (last ad: {ad})")


def instance_of(slot_name: str) -> str:
    """``slot1_1@i-0abc@vm`` -> ``i-0abc`` (workers are named after their instance)."""
    match = re.search(r"@(i-[0-9a-f]+)@", slot_name)
    return match.group(1) if match else ""
