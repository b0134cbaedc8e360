"""Optional Prometheus endpoint: what the daemon decided, refreshed every iteration.

``Metrics`` is an observer of the journal: decision records set the gauges,
launches and releases count as they happen, and the typed notices count
cloud errors by kind and limit hits by limit. ``Metrics.serve()`` exposes
them at ``http://ADDRESS:PORT/metrics``.

Each ``Metrics`` owns its registry, so several can live in one process
(tests) and nothing else from the process leaks into the page. The endpoint
binds to 127.0.0.1 unless told otherwise: it has no authentication, so expose
it beyond the host only behind a proxy or firewall you trust.
"""

from __future__ import annotations

import threading
from typing import Self
from wsgiref.simple_server import WSGIServer

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    start_http_server,
)

from wire_daemon.core.errors import CloudError
from wire_daemon.core.journal import (
    CloudErrorNotice,
    InstanceReclaimed,
    InstanceReleased,
    InstancesLaunched,
    LimitHit,
    ReleasePostponed,
)
from wire_daemon.loop.mape import DecisionRecord

DEFAULT_ADDRESS = "127.0.0.1"
DEFAULT_PORT = 9464  # the metrics.port default of docs/config.example.yaml
# Decision latency: a plan takes milliseconds on small DAGs, seconds on huge ones.
LATENCY_BUCKETS_S = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
KNOWN_LIMITS = ("max_instances", "max_launches_per_interval", "budget_units_per_hour", "budget_per_hour", "back_off")


def cloud_error_kinds() -> list[str]:
    """Every kind a CloudError can have: the label values of the error counter."""
    return sorted({CloudError.kind, *(sub.kind for sub in CloudError.__subclasses__())})


class Metrics:
    """Gauges, counters and a latency histogram for one daemon, in their own registry."""

    def __init__(self, namespace: str = "wire") -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self.dry_run = False  # a dry run's launches and releases did not happen: they are not counted
        self._server: WSGIServer | None = None
        self._thread: threading.Thread | None = None
        self._reclaimed: set[str] = set()
        self._backed_off: set[str] = set()  # types with a back-off series
        self._gauges(namespace)
        self._counters(namespace)

    def _gauges(self, ns: str) -> None:
        def gauge(name: str, doc: str) -> Gauge:
            return Gauge(name, doc, namespace=ns, registry=self.registry)

        self.pool = gauge("pool_instances", "Worker instances in the pool at the last decision")
        self.target = gauge("target_instances", "Pool size the last decision aimed for")
        self.busy_slots = gauge("busy_slots", "Slots running a task at the last decision")
        self.idle_tasks = gauge("idle_tasks", "Tasks waiting in the queue at the last decision")
        self.upcoming_tasks = gauge("upcoming_load_tasks", "Predicted tasks active at the start of the next interval")
        self.upcoming_load = gauge("upcoming_load_seconds", "Predicted remaining slot occupancy of the upcoming load")
        self.cost_units = gauge("cost_units", "Charging units paid so far (instance-units)")
        self.cost_money = gauge("cost_money", "Money paid so far, spent and committed (steering.currency)")
        self.interrupted_work = gauge(
            "interrupted_slot_seconds", "Work spot reclaims threw away since the start: slot-seconds to run again"
        )
        self.spot_back_off = Gauge(
            "spot_back_off_seconds",
            "Seconds a type's spot launches still go on-demand (a capacity error, or reclaims in a row); 0: none",
            ("type",),
            namespace=ns,
            registry=self.registry,
        )
        self.last_decision = gauge("last_decision_time_seconds", "Time of the last decision (the loop's clock)")
        self.decision_latency = Histogram(
            "decision_seconds",
            "Wall time of one MAPE decision",
            namespace=ns,
            registry=self.registry,
            buckets=LATENCY_BUCKETS_S,
        )

    def _counters(self, ns: str) -> None:
        def counter(name: str, doc: str, labels: tuple[str, ...] = ()) -> Counter:
            return Counter(name, doc, labels, namespace=ns, registry=self.registry)

        self.decisions = counter("decisions", "MAPE iterations decided")
        self.launched = counter("instances_launched", "Instances launched")
        self.released = counter("instances_released", "Instances released")
        self.postponed = counter(
            "releases_postponed", "Terminations of released instances moved later: a task on them was running late"
        )
        self.cloud_errors = counter("cloud_errors", "Cloud calls that failed, by error kind", ("kind",))
        self.limits_hit = counter("limits_hit", "Launches cut short by a safety limit, by limit", ("limit",))
        self.interruptions = counter(
            "interruptions", "Spot instances the cloud reclaimed (interruptions, not failures)", ("type", "zone")
        )
        for kind in cloud_error_kinds():  # every series exists from the start, at 0
            self.cloud_errors.labels(kind=kind)
        for limit in KNOWN_LIMITS:
            self.limits_hit.labels(limit=limit)

    # -- updating ---------------------------------------------------------------------------

    def notify(self, event: object) -> None:
        if isinstance(event, DecisionRecord):
            self._decided(event)
        elif isinstance(event, InstancesLaunched):
            if not self.dry_run:
                self.launched.inc(len(event.instance_ids))
        elif isinstance(event, InstanceReleased):
            if not self.dry_run:
                self.released.inc()
        elif isinstance(event, ReleasePostponed):
            if not self.dry_run:
                self.postponed.inc()
        elif isinstance(event, CloudErrorNotice):
            kind = event.kind if event.kind in cloud_error_kinds() else CloudError.kind
            self.cloud_errors.labels(kind=kind).inc()
        elif isinstance(event, LimitHit):
            self.limits_hit.labels(limit=event.limit).inc()
        elif isinstance(event, InstanceReclaimed) and event.instance_id not in self._reclaimed:
            self._reclaimed.add(event.instance_id)  # counted once, whoever tells of it
            self.interruptions.labels(type=event.instance_type, zone=event.zone).inc()

    def back_offs(self, now: float, until: dict[str, float]) -> None:
        """The spot back-offs in force (type -> until when); a type backed off before and no longer reads 0."""
        for kind in self._backed_off - until.keys():
            self.spot_back_off.labels(type=kind).set(0.0)
        for kind, end in until.items():
            self.spot_back_off.labels(type=kind).set(max(end - now, 0.0))
        self._backed_off |= until.keys()

    def _decided(self, record: DecisionRecord) -> None:
        self.pool.set(record.pool)
        self.target.set(record.target)
        self.busy_slots.set(record.running)
        self.idle_tasks.set(record.idle)
        self.upcoming_tasks.set(record.upcoming_tasks)
        self.upcoming_load.set(record.upcoming_load_s)
        if record.cost_units is not None:
            self.cost_units.set(record.cost_units)
        if record.cost_money is not None:
            self.cost_money.set(record.cost_money)
        self.last_decision.set(record.time)
        self.decision_latency.observe(record.decision_s)
        self.decisions.inc()

    # -- serving ------------------------------------------------------------------------------

    def serve(self, address: str = DEFAULT_ADDRESS, port: int = DEFAULT_PORT) -> int:
        """Start the HTTP endpoint in a daemon thread; return the bound port (useful with port 0)."""
        if self._server is not None:
            raise RuntimeError("the metrics endpoint is already serving")
        self._server, self._thread = start_http_server(port, addr=address, registry=self.registry)
        return int(self._server.server_address[1])

    def stop(self) -> None:
        """Stop the endpoint and free its port."""
        if self._server is None:
            return
        self._server.shutdown()
        self._server.server_close()  # shutdown() alone keeps the socket bound
        if self._thread is not None:
            self._thread.join(timeout=5)
        self._server = self._thread = None

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
