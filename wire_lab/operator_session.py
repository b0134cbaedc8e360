"""Record a terminal session of an operator using wire-daemon: docs/operator-session.txt.

Usage: python3 wire_lab/operator_session.py [--out docs/operator-session.txt] [--dir DIR]
                                             [--python PYTHON] [--no-install]

Every command of the session runs for real, in a fresh directory, and the
transcript shows exactly what it printed:

1. install into a new virtualenv, with the bindings pinned to an HTCondor
   series through a constraints file (as README, "Install as a service");
2. ``check-config --probe`` against moto's EC2 server (a VPC, subnet,
   security group, key pair, instance profile and the pool token's SSM
   parameter made in it first);
3. ``run`` in dry-run on a submit root where a live-writing emulated submit
   host writes a Pegasus submit directory as the bundled Montage workflow
   runs on a static pool (wire_lab/live_writer.py);
4. ``pause`` before the first start (kept for the first run), then
   ``resume``, ``status``, ``decisions --since 5m``, ``plan`` (of a submit
   dir, and of the running daemon's workflows with ``--config`` alone),
   ``pause``, ``hold 3``, ``status``, ``resume``, ``drain-all``,
   ``terminate-all --yes``, ``decisions`` (one line each, then
   ``--verbose``), ``status --json``, ``report``, and the stop; all in
   dry-run, so every launch and termination reads "would ...".

The session fails (exit 1, naming the command) on any traceback in any
output, the daemon's log included, and on a decision line longer than
``DECISION_LINE_MAX`` characters.

The daemon is also started before HTCondor (``condor.control: htcondor``
with no schedd running): it waits, in one line, and ``status`` says so.
This host runs no HTCondor, so HTCondor coming back (and a
``condor_restart``) are shown by the real-pool tests instead.

The only edit to the output: the session directory's absolute path is
shown as ``$SESSION`` (the commands run inside it with relative paths).
Without ``--no-install`` it needs the network (pip) and about two minutes.
"""

from __future__ import annotations

import argparse
import os
import shlex
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from wire_daemon.core.config import EmulationConfig  # noqa: E402
from wire_daemon.emulated.traces import bundled_trace_path, load_trace  # noqa: E402
from wire_lab.live_writer import LiveEmulation, WriterOptions, build_live  # noqa: E402

HTCONDOR_SERIES = "24.0"  # the series of the HTCondor the session's submit host is said to run
INTERVAL_S = 10
CHARGING_UNIT_S = 120
PLAN_AFTER_TASKS = 8  # `plan` runs once this many tasks have finished: measured stages give P50 and P90
DECISION_LINE_MAX = 160  # one decision, its time included, in at most this many characters
TRACEBACK = "Traceback (most recent call last)"
WORLD = EmulationConfig(
    boot_lag_s=5.0, negotiation_interval_s=1.0, submit_delay_s=0.5, time_scale=4.0, initial_instances=4
)
AWS = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing", "AWS_DEFAULT_REGION": "us-east-1"}

CONFIG = """\
# The session's config: docs/submit-host.example.yaml, with moto's endpoint and a short interval.
site:
  kind: condor
  submit_root: submit
condor:
  control: "off"            # no schedd here: boosts and drains are logged, not made
  settle_s: 1
cloud:
  kind: ec2
  pool: wire-pool
  ec2:
    region: us-east-1
    image_id: {image_id}
    instance_type: c5.xlarge
    subnet_id: {subnet_id}
    security_group_ids: [{group_id}]
    key_name: wire-ops
    instance_profile: wire-worker
    endpoint_url: "{endpoint}"
  worker:
    condor_host: cm.example.org:9618
    token_delivery: ssm
    token_source: /wire/wire-pool/condor-token
    idle_shutdown_s: 3600
steering:
  charging_unit_s: {unit}
  interval_s: {interval}
  slots_per_instance: 4
  max_instances: 6
  min_instances: 0
safety:
  max_instances: 6
  dry_run: true
state_path: state.sqlite
log:
  decisions_path: decisions.jsonl
"""


class Session:
    """Runs commands in the session directory and keeps the transcript."""

    def __init__(self, directory: Path, env: dict[str, str], out: Path) -> None:
        self.dir = directory
        self.env = env
        self.out = out
        self.lines: list[str] = []
        self.daemons: list[subprocess.Popen[bytes]] = []  # stopped at the end, whatever ended the session

    def start_daemon(self, config: str, log: str) -> subprocess.Popen[bytes]:
        """``wire-daemon run --config CONFIG 2> LOG &``, recorded in the transcript."""
        daemon = subprocess.Popen(
            ["wire-daemon", "run", "--config", config], cwd=self.dir, env=self.env, stderr=(self.dir / log).open("w")
        )
        self.daemons.append(daemon)
        self.lines.append(f"$ wire-daemon run --config {config} 2> {log} &")
        return daemon

    def stop_daemon(self, daemon: subprocess.Popen[bytes], log: str, show: str, what: str) -> None:
        """``kill -TERM`` a daemon this session started, then run ``show`` (the end of its ``log``) and fail the
        session on a traceback anywhere in that log."""
        daemon.send_signal(signal.SIGTERM)
        daemon.wait(timeout=120)
        self.lines.append(f"$ kill -TERM {daemon.pid}")
        self.run(show)
        self.no_traceback(what, (self.dir / log).read_text())

    def stop_daemons(self) -> None:
        """A session that failed half-way must not leave a daemon running."""
        for daemon in self.daemons:
            if daemon.poll() is None:
                daemon.terminate()
                try:
                    daemon.wait(timeout=60)
                except subprocess.TimeoutExpired:
                    daemon.kill()

    def note(self, text: str) -> None:
        self.lines += ["", *(f"# {line}" if line else "#" for line in text.splitlines())]

    def run(self, command: str, show: str | None = None, timeout: float = 600, check: bool = True) -> str:
        """Run ``command`` with bash in the session directory; record ``$ show`` and its output."""
        done = subprocess.run(
            ["bash", "-c", command],
            cwd=self.dir,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        output = (done.stdout + done.stderr).rstrip("\n")
        self.lines.append(f"$ {show or command}")
        if output:
            self.lines.append(self._clean(output))
        if check and done.returncode != 0:
            raise SystemExit(f"session: {command!r} failed ({done.returncode}):\n{output}")
        self.no_traceback(command, output)
        return output

    def no_traceback(self, what: str, output: str) -> None:
        """Every output is read by a person: a traceback in any of them fails the session."""
        if TRACEBACK in output:
            self.write()
            raise SystemExit(f"session: a traceback in the output of {what!r}:\n{output}")

    def decisions(self, command: str) -> str:
        """Run a ``decisions`` command; each decision it prints must be one line of at most DECISION_LINE_MAX."""
        output = self.run(command)
        # as the transcript shows them: a run's header names its config by path, which here is a temporary dir
        long = [line for line in self._clean(output).splitlines() if len(line) > DECISION_LINE_MAX]
        if long:
            self.write()
            raise SystemExit(
                f"session: {command!r} printed lines over {DECISION_LINE_MAX} characters:\n" + "\n".join(long)
            )
        return output

    def _clean(self, text: str) -> str:
        return text.replace(str(self.dir), "$SESSION")

    def write(self) -> None:
        header = [
            "# wire-daemon: an operator's terminal session, recorded by wire_lab/operator_session.py",
            f"# on {time.strftime('%Y-%m-%d %H:%M:%S', time.gmtime())} UTC. Every output is the command's own;",
            "# only the session directory's path is shown as $SESSION.",
        ]
        self.out.write_text("\n".join(header + self.lines) + "\n")


def moto_cloud() -> tuple[object, str, dict[str, str]]:
    """moto's EC2/IAM/SSM server on 127.0.0.1, with what the config names made in it."""
    import boto3
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    endpoint = f"http://{host}:{port}"
    session = boto3.session.Session(
        aws_access_key_id="testing", aws_secret_access_key="testing", region_name="us-east-1"
    )
    ec2 = session.client("ec2", endpoint_url=endpoint)
    image_id = ec2.describe_images(Owners=["amazon"])["Images"][0]["ImageId"]
    vpc = ec2.create_vpc(CidrBlock="10.20.0.0/16")["Vpc"]["VpcId"]
    subnet = ec2.create_subnet(VpcId=vpc, CidrBlock="10.20.1.0/24")["Subnet"]["SubnetId"]
    group = ec2.create_security_group(GroupName="wire-workers", Description="workers", VpcId=vpc)["GroupId"]
    ec2.create_key_pair(KeyName="wire-ops")
    session.client("iam", endpoint_url=endpoint).create_instance_profile(InstanceProfileName="wire-worker")
    session.client("ssm", endpoint_url=endpoint).put_parameter(
        Name="/wire/wire-pool/condor-token", Type="SecureString", Value="not-a-real-token"
    )
    return server, endpoint, {"image_id": image_id, "subnet_id": subnet, "group_id": group}


def start_world(root: Path) -> tuple[threading.Thread, LiveEmulation]:
    """The live-writing submit host: the bundled Montage on a static pool of 4, paced on the wall clock."""
    live = build_live(
        load_trace(bundled_trace_path()),
        root / "montage-run0001",
        replace(WORLD),
        4,
        float(CHARGING_UNIT_S),
        WriterOptions(epoch=time.time(), subsecond_times=True, label="montage"),
    )
    thread = threading.Thread(target=live.run, kwargs={"speedup": 1.0, "step_s": 0.5}, daemon=True)
    thread.start()
    return thread, live


def wait_for(done: Callable[[], bool], timeout: float) -> None:
    """Poll ``done`` every half second, at most ``timeout`` seconds."""
    until = time.monotonic() + timeout
    while not done() and time.monotonic() < until:
        time.sleep(0.5)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", type=Path, default=REPO / "docs" / "operator-session.txt", help="the transcript")
    p.add_argument("--dir", type=Path, help="the session directory (default: a new temporary one)")
    p.add_argument("--python", default="python3", help="the Python that makes the virtualenv (default python3)")
    p.add_argument("--no-install", action="store_true", help="use this interpreter's wire-daemon, do not install")
    args = p.parse_args(argv)

    directory = (args.dir or Path(tempfile.mkdtemp(prefix="wire-session-"))).resolve()
    directory.mkdir(parents=True, exist_ok=True)
    env = os.environ | AWS | {"PYTHONUNBUFFERED": "1", "COLUMNS": "120"}
    s = Session(directory, env, args.out)
    server, endpoint, ids = moto_cloud()
    try:
        record(s, args, endpoint, ids)
    finally:
        s.stop_daemons()
        server.stop()
    s.write()
    print(f"wrote {args.out} (session in {directory})")
    return 0


def record(s: Session, args: argparse.Namespace, endpoint: str, ids: dict[str, str]) -> None:
    s.note("1. Install, with the HTCondor bindings pinned to the host's series (README, 'Install as a service').")
    if args.no_install:
        bindir = Path(sys.executable).parent
        s.note(f"(--no-install: the wire-daemon of {bindir} stands in for a fresh install)")
        s.env["PATH"] = f"{bindir}{os.pathsep}{s.env['PATH']}"
    else:
        s.run(f"echo 'htcondor=={HTCONDOR_SERIES}.*' > constraints.txt")
        s.run(f"{shlex.quote(args.python)} -m venv venv")
        source = shlex.quote(str(REPO)) + "'[ec2,plots]'"
        s.run(
            f"venv/bin/pip install -q --disable-pip-version-check -c constraints.txt {source}"
            " 2>&1 | grep -v 'is ignored: it is neither a file nor a directory' || true",
            show="venv/bin/pip install -q -c constraints.txt '/path/to/wire-daemon[ec2,plots]'",
        )
        s.run("venv/bin/pip list 2>/dev/null | grep -E '^(wire-daemon|htcondor|boto3|matplotlib) '")
        s.env["PATH"] = f"{s.dir / 'venv' / 'bin'}{os.pathsep}{s.env['PATH']}"
        s.env["VIRTUAL_ENV"] = str(s.dir / "venv")
    s.run("wire-daemon --version")

    s.note(
        "2. The config: docs/submit-host.example.yaml with a test cloud (moto's EC2 server on 127.0.0.1),\n"
        "   a 10 s interval and a 2-minute charging unit so that the session is short. Dry-run is on."
    )
    (s.dir / "submit").mkdir(exist_ok=True)
    (s.dir / "config.yaml").write_text(
        CONFIG.format(endpoint=endpoint, unit=CHARGING_UNIT_S, interval=INTERVAL_S, **ids)
    )
    s.run("wire-daemon check-config --probe config.yaml | sed -n '1p;/^probe/,$p'", check=False)
    s.note(
        "The same config with HTCondor control on, as on a real submit host: no schedd runs here, which\n"
        "check-config says as a warning (Condor may start after the daemon)."
    )
    (s.dir / "config-condor.yaml").write_text(
        CONFIG.format(endpoint=endpoint, unit=CHARGING_UNIT_S, interval=INTERVAL_S, **ids)
        .replace(
            'control: "off"            # no schedd here: boosts and drains are logged, not made',
            "control: htcondor",
        )
        .replace("state_path: state.sqlite", "state_path: state-condor.sqlite")
        .replace("decisions_path: decisions.jsonl", "decisions_path: decisions-condor.jsonl")
    )
    s.run("wire-daemon check-config config-condor.yaml 2>&1 >/dev/null | cut -c1-160")
    s.note(
        "The daemon started before HTCondor (a boot-order race): it says so in one line, holds the pool\n"
        "and asks again with back-off; status says so at the top. (It goes on when HTCondor answers:\n"
        "tests/realpool/test_weather_on_pool.py shows that, and a condor_restart, on a real pool.)"
    )
    waiting = s.start_daemon("config-condor.yaml", "run-condor.log")
    wait_for(lambda: "HTCondor unreachable" in (s.dir / "run-condor.log").read_text(), timeout=60)
    s.run("wire-daemon status --config config-condor.yaml | head -n 3 | cut -c1-160")
    s.stop_daemon(waiting, "run-condor.log", "cut -c1-200 run-condor.log", "wire-daemon run (HTCondor away)")
    s.note("Paused before the first start: the command waits in the state file for the first run.")
    s.run("wire-daemon pause --config config.yaml  # before the daemon's first start")

    s.note(
        "3. A workflow starts under the submit root (a live-writing emulated Pegasus submit host runs\n"
        "   the bundled Montage on a static pool of 4 workers), and the daemon starts, in dry-run."
    )
    _, live = start_world(s.dir / "submit")
    time.sleep(3)
    daemon = s.start_daemon("config.yaml", "run.log")
    time.sleep(2.5 * INTERVAL_S)
    s.run("cat run.log")

    s.note(
        "The WARNING lines: the workflow runs on a static pool the daemon did not launch, and the monitor\n"
        "says so once per worker. (No HTCondor is installed where this was recorded: hence the bindings'\n"
        "warning about CONDOR_CONFIG, which a submit host has.) It started paused, as asked.\n"
        "4. Let the policy decide, and watch it."
    )
    s.run("wire-daemon resume --config config.yaml")
    time.sleep(2 * INTERVAL_S)
    s.run("wire-daemon status --config config.yaml")
    s.decisions("wire-daemon decisions --config config.yaml --since 5m")
    wait_for(lambda: live.site.n_done >= PLAN_AFTER_TASKS, timeout=180)
    s.note(
        f"Once {PLAN_AFTER_TASKS} tasks have finished: what would each pool size take from now, and cost?\n"
        "(the level-based model on the online predictions; --wall-clock: the submit dir is live;\n"
        "the bindings' CONDOR_CONFIG warning again: plan reads the job event log with them)"
    )
    s.run("wire-daemon plan --config config.yaml --wall-clock submit/montage-run0001")
    s.note("With --config alone, plan takes the workflows the running daemon follows (from its state file).")
    s.run("wire-daemon plan --config config.yaml | head -n 3")

    s.note("5. Steer it by hand: every command goes through the state file and the running daemon.")
    s.run("wire-daemon pause --config config.yaml")
    time.sleep(INTERVAL_S + 1)
    s.run("wire-daemon hold 3 --config config.yaml")
    time.sleep(2)
    s.run("wire-daemon status --config config.yaml | head -n 13")
    time.sleep(INTERVAL_S)
    s.run("wire-daemon resume --config config.yaml")
    time.sleep(INTERVAL_S + 1)
    s.run("wire-daemon drain-all --config config.yaml")
    time.sleep(3)
    s.run("wire-daemon terminate-all --yes --config config.yaml")
    time.sleep(3)
    s.decisions("wire-daemon decisions --config config.yaml --since 2m")
    s.note("Every figure of the last decision: tasks, predicted load, the policy's rule and estimates, notes.")
    s.run("wire-daemon decisions --config config.yaml --verbose | tail -n 1 | fold -s -w 120")
    s.run("wire-daemon status --config config.yaml | head -n 12")
    s.run("wire-daemon status --config config.yaml --json | grep -E '\"(dry_run|words)\"'")

    s.note("6. The timeline, on a UTC axis; then stop the daemon (the instances would stay up).")
    s.run("wire-daemon report --config config.yaml --out report.png")
    s.stop_daemon(daemon, "run.log", "tail -n 3 run.log", "wire-daemon run (its whole log)")
    s.run("wire-daemon status --config config.yaml | head -n 4")


if __name__ == "__main__":
    sys.exit(main())
