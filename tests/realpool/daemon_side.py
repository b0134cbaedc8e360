"""The daemon's side of the real pool: ``HTCondorControl`` run in a process of its own, as the daemon's identity.

The htcondor2 bindings hold one configuration (and one token directory) per
process, and the test process is the pool user. So the daemon's calls run in a
child process with the daemon's client config, the way the daemon itself runs
beside the schedd.
"""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

from wire_lab.realpool.pool import PersonalPool

CONTROL = """
import json, sys, time
import htcondor2
from wire_daemon.execute.condor_control import HTCondorControl

collector_address, pool_name, instance, action, timeout = sys.argv[1:6]
collector = htcondor2.Collector(collector_address)
control = HTCondorControl(None, collector, lambda task: None, pool_name)
if action == "retire":
    control.retire_instance(instance)
    result = None
elif action == "joined":
    result = control.has_joined(instance)
elif action == "holds_claims":
    result = control.holds_claims(instance)
elif action == "released":  # poll until no slot holds a claim, as the daemon asks before terminating
    deadline = time.monotonic() + float(timeout)
    while (held := control.holds_claims(instance)) and time.monotonic() < deadline:
        time.sleep(0.5)
    result = not held
else:
    raise SystemExit(f"unknown action {action}")
print(json.dumps({"result": result, "errors": control.errors}))
"""


def control(
    pool: PersonalPool, wire_pool: str, instance: str, action: str, timeout: float = 0.0, identity: str = "daemon"
) -> tuple[Any, int]:
    """``HTCondorControl.<action>(instance)`` as ``identity``: its result and its error count."""
    done = subprocess.run(
        [sys.executable, "-c", CONTROL, pool.collector_address, wire_pool, instance, action, str(timeout)],
        env=pool.client_env(identity),
        capture_output=True,
        text=True,
        timeout=timeout + 60,
        check=False,
    )
    assert done.returncode == 0, (done.stderr.strip().splitlines() or ["?"])[-1]
    reply = json.loads(done.stdout.strip().splitlines()[-1])
    return reply["result"], reply["errors"]


def client_query(pool: PersonalPool, identity: str) -> subprocess.CompletedProcess[str]:
    """A schedd query as ``identity``: does the central manager let it in?"""
    code = (
        "import htcondor2\n"
        f"ad = htcondor2.Collector({pool.collector_address!r}).locate(htcondor2.DaemonType.Schedd)\n"
        "print(len(htcondor2.Schedd(ad).query(constraint='true', projection=['ClusterId'])))\n"
    )
    return subprocess.run(
        [sys.executable, "-c", code],
        env=pool.client_env(identity),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
