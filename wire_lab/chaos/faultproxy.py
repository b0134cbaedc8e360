"""An HTTP proxy in front of a cloud endpoint (moto's server) that injects faults and holds launches.

The daemon's ``cloud.ec2.endpoint_url`` points here; the proxy forwards each
request to the real endpoint, except that a drawn share of them fails:

* ``throttle``: HTTP 400 ``RequestLimitExceeded``, not forwarded;
* ``unavailable``: HTTP 503 ``Unavailable``, not forwarded;
* ``error``: HTTP 500 ``InternalError``, not forwarded;
* ``lost``: forwarded (the action takes effect), then the connection is closed
  without a reply, as when a reply is lost on the way back.

Like EC2 (and unlike moto), it can answer a ``RunInstances`` that repeats a
client token with the first call's reply, without running it again
(``idempotent``): a retry after a lost reply is then what it is on EC2.

It can also hold every ``RunInstances`` call for ``hold_s`` seconds, before
forwarding it or after (the instances exist, the caller does not know them
yet), so that a kill lands while a launch request is open. The request is
forwarded even if the caller died while it was held: a request in flight
still reaches the cloud.
"""

from __future__ import annotations

import http.client
import random
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

FAULT_KINDS = ("throttle", "unavailable", "error", "lost")
_REPLIES = {
    "throttle": (400, "RequestLimitExceeded", "Request limit exceeded."),
    "unavailable": (503, "Unavailable", "The service is unavailable. Please try again shortly."),
    "error": (500, "InternalError", "An internal error has occurred."),
}
LAUNCH_ACTION = "RunInstances"
BLOCK = 20  # faults are dealt per block of this many requests


@dataclass(frozen=True)
class FaultPlan:
    """What share of requests fails, how (an equal share of each kind), and how launches are held."""

    rate: float = 0.0  # share of requests that get a fault
    kinds: tuple[str, ...] = FAULT_KINDS
    hold_s: float = 0.0  # hold every RunInstances this long
    hold_after: str = "alternate"  # "before" / "after" forwarding / "alternate"
    seed: int = 0

    def validate(self) -> FaultPlan:
        if not 0.0 <= self.rate <= 1.0:
            raise ValueError(f"fault rate must be in [0, 1] (got {self.rate})")
        unknown = set(self.kinds) - set(FAULT_KINDS)
        if unknown or not self.kinds:
            raise ValueError(f"fault kinds must be among {FAULT_KINDS} (got {self.kinds})")
        if self.hold_after not in ("before", "after", "alternate"):
            raise ValueError(f"hold_after must be before, after or alternate (got {self.hold_after})")
        return self


@dataclass
class ProxyStats:
    """What the proxy saw and did, per action."""

    requests: Counter[str] = field(default_factory=Counter)
    faults: Counter[tuple[str, str]] = field(default_factory=Counter)  # (action, kind)
    launches_forwarded: int = 0
    launches_held: int = 0
    token_replays: int = 0  # RunInstances answered from an earlier call with the same client token

    def total_faults(self) -> int:
        return sum(self.faults.values())

    def as_dict(self) -> dict[str, object]:
        by_kind: Counter[str] = Counter()
        for (_, kind), n in self.faults.items():
            by_kind[kind] += n
        return {
            "requests": sum(self.requests.values()),
            "faults": self.total_faults(),
            "faults_by_kind": dict(by_kind),
            "run_instances": self.requests[LAUNCH_ACTION],
            "run_instances_faulted": sum(n for (a, _), n in self.faults.items() if a == LAUNCH_ACTION),
            "run_instances_lost_replies": self.faults[(LAUNCH_ACTION, "lost")],
            "launches_forwarded": self.launches_forwarded,
            "launches_held": self.launches_held,
            "token_replays": self.token_replays,
        }


class FaultProxy:
    """A threaded HTTP proxy to ``target`` (``http://host:port``) under a ``FaultPlan``."""

    def __init__(self, target: str, plan: FaultPlan | None = None, idempotent: bool = True) -> None:
        parts = urlsplit(target)
        self.target_host = parts.hostname or "127.0.0.1"
        self.target_port = parts.port or 80
        self.plan = (plan or FaultPlan()).validate()
        self.stats = ProxyStats()
        self._rng = random.Random(self.plan.seed)
        self._block: list[bool] = []  # the fates left in the current block (True: a fault)
        self._lock = threading.Lock()
        self.idempotent = idempotent
        self._open: dict[int, float] = {}  # open RunInstances calls -> when each arrived
        self._holds = 0
        self._tokens: dict[str, threading.Lock] = {}  # client token -> held while its first call runs
        self._replies: dict[str, tuple[int, list, bytes]] = {}  # client token -> the first call's reply
        self._server = _QuietServer(("127.0.0.1", 0), _handler_for(self))
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def start(self) -> FaultProxy:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def set_plan(self, plan: FaultPlan) -> None:
        with self._lock:
            self.plan = plan.validate()
            self._rng = random.Random(plan.seed)
            self._block = []

    def launch_open(self, since: float = float("-inf")) -> bool:
        """Is a RunInstances call that arrived at or after ``since`` (wall clock) still unanswered?"""
        with self._lock:
            return any(t >= since for t in self._open.values())

    # -- per request ---------------------------------------------------------------

    def draw(self, action: str) -> str:
        """The fate of one request: "pass" or a fault kind.

        Faults are dealt in shuffled blocks of ``BLOCK`` requests holding
        ``rate * BLOCK`` faults each, so the share is the rate over any run
        longer than a block, not a sample of it.
        """
        with self._lock:
            self.stats.requests[action] += 1
            if not self._block:
                faults = round(self.plan.rate * BLOCK)
                self._block = [True] * faults + [False] * (BLOCK - faults)
                self._rng.shuffle(self._block)
            if not self._block.pop():
                return "pass"
            kind = self._rng.choice(self.plan.kinds)
            self.stats.faults[(action, kind)] += 1
            return kind

    def hold_position(self) -> str:
        """Where the next RunInstances is held: "before" or "after" forwarding, or "" (not held)."""
        with self._lock:
            if self.plan.hold_s <= 0:
                return ""
            self._holds += 1
            self.stats.launches_held += 1
            if self.plan.hold_after == "alternate":
                return "after" if self._holds % 2 else "before"
            return self.plan.hold_after

    def open_launch(self) -> int:
        with self._lock:
            key = max(self._open, default=0) + 1
            self._open[key] = time.time()
            return key

    def close_launch(self, key: int, forwarded: bool) -> None:
        with self._lock:
            del self._open[key]
            self.stats.launches_forwarded += forwarded

    def run_once(self, token: str, run: Callable[[], tuple[int, list, bytes]]) -> tuple[int, list, bytes]:
        """``run`` for the first call with ``token``; the first successful reply for any later one."""
        if not (self.idempotent and token):
            return run()
        with self._lock:
            gate = self._tokens.setdefault(token, threading.Lock())
        with gate:
            if token in self._replies:
                with self._lock:
                    self.stats.token_replays += 1
                return self._replies[token]
            reply = run()
            if reply[0] == 200:
                self._replies[token] = reply
            return reply

    def forward(self, method: str, path: str, headers: dict[str, str], body: bytes) -> tuple[int, list, bytes]:
        conn = http.client.HTTPConnection(self.target_host, self.target_port, timeout=60)
        try:
            conn.request(method, path, body=body, headers=headers)
            reply = conn.getresponse()
            return reply.status, reply.getheaders(), reply.read()
        finally:
            conn.close()


class _QuietServer(ThreadingHTTPServer):
    """A caller killed mid-request resets its connection: expected here, not worth a traceback."""

    def handle_error(self, request: object, client_address: object) -> None:
        pass


def action_of(path: str, body: bytes) -> str:
    """The EC2 query API's Action, from the form body or the query string."""
    for text in (body.decode("latin-1"), urlsplit(path).query):
        values = parse_qs(text).get("Action")
        if values:
            return values[0]
    return "?"


def client_token(body: bytes) -> str:
    values = parse_qs(body.decode("latin-1")).get("ClientToken")
    return values[0] if values else ""


def error_body(code: str, message: str) -> bytes:
    return (
        '<?xml version="1.0" encoding="UTF-8"?>\n'
        f"<Response><Errors><Error><Code>{code}</Code><Message>{message}</Message></Error></Errors>"
        f"<RequestID>{uuid.uuid4()}</RequestID></Response>"
    ).encode()


def _handler_for(proxy: FaultProxy) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_POST(self) -> None:  # noqa: N802 (the stdlib's name)
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            action = action_of(self.path, body)
            fate = proxy.draw(action)
            if fate in _REPLIES:
                self._reply(*_error_reply(fate))
                return
            headers = {k: v for k, v in self.headers.items() if k.lower() not in ("connection", "keep-alive")}
            if action == LAUNCH_ACTION:
                status, reply_headers, data = self._launch(headers, body)
            else:
                status, reply_headers, data = proxy.forward(self.command, self.path, headers, body)
            if fate == "lost":
                self.close_connection = True  # the action took effect; the caller gets no reply
                return
            self._reply(status, reply_headers, data)

        do_GET = do_POST

        def _launch(self, headers: dict[str, str], body: bytes) -> tuple[int, list, bytes]:
            """A RunInstances call: held before or after it is forwarded, run once per client token."""
            held = proxy.hold_position()
            key = proxy.open_launch()
            forwarded = False

            def run() -> tuple[int, list, bytes]:
                nonlocal forwarded
                forwarded = True
                return proxy.forward(self.command, self.path, headers, body)

            try:
                if held == "before":
                    time.sleep(proxy.plan.hold_s)
                reply = proxy.run_once(client_token(body), run)
                if held == "after":
                    time.sleep(proxy.plan.hold_s)
                return reply
            finally:
                proxy.close_launch(key, forwarded)

        def _reply(self, status: int, headers: list, data: bytes) -> None:
            try:
                self.send_response(status)
                for name, value in headers:
                    if name.lower() not in ("content-length", "connection", "transfer-encoding", "date", "server"):
                        self.send_header(name, value)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)
            except OSError:
                self.close_connection = True  # the caller is gone (killed while held)

        def log_message(self, *args: object) -> None:
            pass

    return Handler


def _error_reply(fate: str) -> tuple[int, list, bytes]:
    status, code, message = _REPLIES[fate]
    return status, [("Content-Type", "text/xml")], error_body(code, message)
