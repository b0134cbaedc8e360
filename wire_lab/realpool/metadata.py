"""A test instance metadata service: what EC2's 169.254.169.254 tells each worker, from moto's instances.

Every worker's ``curl`` (``worker.py``) sends its metadata calls here under
``/<instance id>``, so one server answers them all, each as its own instance:

* ``PUT /latest/api/token``: an IMDSv2 session token;
* ``GET /latest/meta-data/instance-id``; ``placement/region``;
* ``GET /latest/meta-data/instance-life-cycle``: ``spot`` or ``on-demand``,
  as moto says the instance was bought (RunInstances' market option);
* ``GET /latest/meta-data/spot/instance-action``: 404 until the test posts
  an interruption notice for the instance (``notice``), then EC2's JSON
  (``{"action": "terminate", "time": "..."}``).

Anything else is a 404, as on EC2. Each notice is served once it is posted and
every poll is counted, so a test can tell when the worker heard it.
"""

from __future__ import annotations

import http.server
import json
import threading
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Self

from wire_lab.realpool.hypervisor import ec2_client

TOKEN = "realpool-imds-token"


@dataclass
class Notice:
    action: str
    at: float  # when the cloud reclaims the instance (epoch s)
    posted: float
    heard: float | None = None  # the first poll that got it


@dataclass
class MetadataService:
    """Serve ``start()`` on 127.0.0.1 (a free port); ``url`` is what workers get as ``metadata_url``."""

    ec2_endpoint: str
    region: str = "us-east-1"
    notices: dict[str, Notice] = field(default_factory=dict)
    polls: dict[str, int] = field(default_factory=dict)  # instance -> spot/instance-action polls

    def __post_init__(self) -> None:
        self._lock = threading.Lock()
        self._server: http.server.ThreadingHTTPServer | None = None
        self._client: Any = None

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def url(self) -> str:
        assert self._server is not None, "the metadata service is not started"
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}"

    def start(self) -> Self:
        self._client = ec2_client(self.ec2_endpoint, self.region)
        service = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_PUT(self) -> None:  # noqa: N802 (http.server's name)
                service._answer(self, "PUT")

            def do_GET(self) -> None:  # noqa: N802
                service._answer(self, "GET")

            def log_message(self, *args: object) -> None:
                pass

        self._server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self._server.serve_forever, name="realpool-metadata", daemon=True).start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def notice(self, instance_id: str, in_s: float, action: str = "terminate") -> Notice:
        """Post EC2's interruption notice for ``instance_id``: reclaimed ``in_s`` seconds from now."""
        now = time.time()
        with self._lock:
            self.notices[instance_id] = Notice(action, now + in_s, now)
            return self.notices[instance_id]

    # -- answering ---------------------------------------------------------------------

    def _answer(self, handler: http.server.BaseHTTPRequestHandler, method: str) -> None:
        instance_id, _, path = handler.path.lstrip("/").partition("/")
        code, body = self._reply(instance_id, "/" + path, method)
        handler.send_response(code)
        handler.send_header("Content-Length", str(len(body)))
        handler.end_headers()
        handler.wfile.write(body.encode())

    def _reply(self, instance_id: str, path: str, method: str) -> tuple[int, str]:
        if method == "PUT":
            return (200, TOKEN) if path == "/latest/api/token" else (404, "")
        meta = "/latest/meta-data/"
        if not path.startswith(meta):
            return 404, ""
        what = path[len(meta) :]
        if what == "instance-id":
            return 200, instance_id
        if what == "placement/region":
            return 200, self.region
        if what == "instance-life-cycle":
            return 200, self._life_cycle(instance_id)
        if what == "spot/instance-action":
            return self._instance_action(instance_id)
        return 404, ""

    def _life_cycle(self, instance_id: str) -> str:
        reply = self._client.describe_instances(InstanceIds=[instance_id])
        found = [i for r in reply["Reservations"] for i in r["Instances"]]
        return "spot" if found and found[0].get("InstanceLifecycle") == "spot" else "on-demand"

    def _instance_action(self, instance_id: str) -> tuple[int, str]:
        with self._lock:
            self.polls[instance_id] = self.polls.get(instance_id, 0) + 1
            notice = self.notices.get(instance_id)
            if notice is None:
                return 404, ""
            if notice.heard is None:
                notice.heard = time.time()
        when = datetime.fromtimestamp(notice.at, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        return 200, json.dumps({"action": notice.action, "time": when})
