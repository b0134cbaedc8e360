"""The central manager + schedd alone: it starts, and the daemon's JobPrio edit reads back."""

from __future__ import annotations

import re
import subprocess
import sys
import textwrap

from .jobs import HELD, job_ad, submit_script


def test_pool_starts_on_loopback_with_a_free_port(pool) -> None:
    import htcondor2

    everything = pool.collector().query(htcondor2.AdType.Any, projection=["MyType", "MyAddress", "Name"])
    assert all(ad["MyAddress"].startswith("<127.") for ad in everything if "MyAddress" in ad)  # loopback only
    # The central manager's own ads: workers of other tests (named after their instance) may still be there.
    ads = [ad for ad in everything if not re.search(r"\bi-[0-9a-f]+", ad.get("Name", ""))]
    types = {ad["MyType"] for ad in ads}
    assert {"Scheduler", "Negotiator"} <= types
    assert "Machine" not in types  # no startd of its own: workers bring the slots
    assert pool.collector_address.startswith("127.0.0.1:")
    assert all(ad["MyAddress"].startswith("<127.0.0.1:") for ad in ads if "MyAddress" in ad)
    assert pool.pool_token.count(".") == 2  # a JWT
    assert pool.started_in_s < 30


def test_jobprio_edit_by_the_daemon_identity_reads_back(pool, wire_pool_name) -> None:
    cluster, _ = submit_script(pool, f"prio-{wire_pool_name}", "true", wire_pool_name, hold="True")
    job = f"{cluster}.0"
    # The autoscaler runs as its own process and identity (condor: a queue super user), and edits the
    # user's job the way HTCondorControl does: a non-durable Schedd.edit.
    edit = textwrap.dedent(f"""
        import htcondor2
        ad = htcondor2.Collector({pool.collector_address!r}).locate(htcondor2.DaemonType.Schedd)
        htcondor2.Schedd(ad).edit([{job!r}], "JobPrio", "7", flags=htcondor2.TransactionFlag.NonDurable)
        print("edited")
    """)
    done = subprocess.run(
        [sys.executable, "-c", edit],
        env=pool.client_env("daemon"),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr.strip().splitlines()[-1:]
    assert done.stdout.strip() == "edited"
    ad = job_ad(pool, cluster)
    assert ad["JobPrio"] == 7 and ad["Owner"] == pool.user.name and ad["JobStatus"] == HELD

    import htcondor2  # the owner may raise its own job's priority too

    pool.schedd().edit([job], "JobPrio", "9", flags=htcondor2.TransactionFlag.NonDurable)
    assert job_ad(pool, cluster)["JobPrio"] == 9
    pool.schedd().act(htcondor2.JobAction.Remove, [job])
