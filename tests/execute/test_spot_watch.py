"""The spot worker's watch: on the cloud's interruption notice it stops new jobs, then leaves the pool.

The script runs as it does on a worker, against a metadata service this test
serves on loopback (the notice appears after a few polls), with ``pkill`` and
``logger`` replaced by stubs that record what they were asked.
"""

import http.server
import json
import os
import subprocess
import threading
import time
from datetime import UTC, datetime
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "condor_config" / "wire-spot-watch.sh"
pytestmark = pytest.mark.slow  # runs the script for several seconds


class _Metadata(http.server.BaseHTTPRequestHandler):
    polls = 0
    notice_after = 3  # polls before the notice appears
    reclaim_at = 0.0
    tokens: list[str] = []

    def do_PUT(self):  # IMDSv2 session token
        self._answer(200, "token-1")

    def do_GET(self):
        if self.path != "/latest/meta-data/spot/instance-action":
            return self._answer(404, "")
        type(self).tokens.append(self.headers.get("X-aws-ec2-metadata-token", ""))
        type(self).polls += 1
        if type(self).polls <= type(self).notice_after:
            return self._answer(404, "")
        when = datetime.fromtimestamp(type(self).reclaim_at, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        self._answer(200, json.dumps({"action": "terminate", "time": when}))

    def _answer(self, code: int, body: str) -> None:
        self.send_response(code)
        self.end_headers()
        self.wfile.write(body.encode())

    def log_message(self, *args):
        pass


def _stub(bin_dir: Path, name: str, log: Path) -> None:
    path = bin_dir / name
    path.write_text(f'#!/bin/sh\necho "$(date +%s) {name} $*" >> {log}\n')
    path.chmod(0o755)


def test_a_notice_stops_new_jobs_at_once_and_shuts_condor_down_before_the_reclaim(tmp_path):
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Metadata)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    _Metadata.reclaim_at = time.time() + 26  # the notice's time; the grace below is 20 s
    bin_dir, calls, config = tmp_path / "bin", tmp_path / "calls.log", tmp_path / "99-wire-spot-notice.conf"
    bin_dir.mkdir()
    for name in ("pkill", "logger"):
        _stub(bin_dir, name, calls)
    env = os.environ | {
        "PATH": f"{bin_dir}:{os.environ['PATH']}",
        "WIRE_METADATA_URL": f"http://127.0.0.1:{server.server_address[1]}",
        "WIRE_SPOT_POLL_S": "0.2",
        "WIRE_SPOT_GRACE_S": "20",
        "WIRE_SPOT_NOTICE_CONFIG": str(config),
    }
    try:
        started = time.time()
        subprocess.run(["sh", str(SCRIPT)], env=env, timeout=60, check=True)
        took = time.time() - started
    finally:
        server.shutdown()
    lines = [line.split(" ", 1)[1] for line in calls.read_text().splitlines()]
    signals = [line for line in lines if line.startswith("pkill")]
    # HUP: START = False now; QUIT: a fast shutdown, so running jobs are vacated before the reclaim, not
    # left to retire past it (a graceful one, TERM, honours MAXJOBRETIREMENTTIME).
    assert signals == ["pkill -HUP -x condor_master", "pkill -QUIT -x condor_master"]
    assert config.read_text() == "START = False\n"
    assert _Metadata.polls == _Metadata.notice_after + 1 and set(_Metadata.tokens) == {"token-1"}
    assert 4 <= took <= 15  # it waited for the reclaim less the grace, not the whole notice
    assert any("interruption notice" in line for line in lines if line.startswith("logger"))
