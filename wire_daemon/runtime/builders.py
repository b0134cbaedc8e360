"""Build the Execute side of a real site from the settings: a cloud provider, Condor control.

The config keeps the configured provider's options as the mapping
``cloud.<kind>`` and the workers' as ``cloud.worker``; here they become the
provider's and the renderer's own sections, validated by them, with errors
that name the file and the key. The provider is looked up by name in the
registry: nothing here knows a particular cloud.
"""

from __future__ import annotations

import hashlib
import math
import re
import socket
from collections.abc import Callable
from pathlib import Path
from typing import Any

from wire_daemon.core.config import SteeringConfig
from wire_daemon.core.errors import ConfigError
from wire_daemon.core.sections import ELSEWHERE, parse
from wire_daemon.execute.condor_control import HTCondorControl
from wire_daemon.execute.providers import provider
from wire_daemon.execute.providers.base import CloudDriver, Ownership
from wire_daemon.execute.providers.retry import Retrier
from wire_daemon.execute.userdata import IDLE_SHUTDOWN_S, WorkerConfig, render_user_data
from wire_daemon.runtime.settings import Settings


def driver_config(settings: Settings) -> Any:
    """The validated ``cloud.<kind>`` section (``check-config`` runs it too)."""
    kind = settings.cloud.kind
    return parse(provider(kind).config, settings.cloud.provider_section(), settings.source, f"cloud.{kind}")


def user_data(settings: Settings, slots: int | None = None) -> str:
    """The workers' cloud-init (with ``slots``: for an instance type of that many); without ``cloud.worker``
    the image must join the pool on its own."""
    raw = settings.cloud.worker
    if not raw:
        return ""
    for name in ("cloud", "pool", "slots"):  # set by cloud.kind, cloud.pool and the slot count
        if name in raw:
            raise ConfigError(f"{settings.source}: cloud.worker.{name} cannot be set here: {ELSEWHERE[name]}")
    slots = settings.steering.slots_per_instance if slots is None else slots
    given = {"idle_shutdown_s": idle_shutdown_for(settings.steering)} | raw
    given |= {"cloud": settings.cloud.kind, "pool": settings.cloud.pool, "slots": slots}
    return render_user_data(parse(WorkerConfig, given, settings.source))


def idle_shutdown_for(steering: SteeringConfig) -> int:
    """How long a worker without a claim waits before it powers itself off, unless ``cloud.worker`` says.

    Longer than the daemon keeps an idle worker on purpose (to the end of the unit it paid, decided an
    interval ahead): a worker that left sooner would throw away paid time and read as lost capacity (on
    spot, as a reclaim). Never less than ``IDLE_SHUTDOWN_S``: the switch is for a daemon that is gone.
    """
    return max(IDLE_SHUTDOWN_S, math.ceil(steering.planning_unit_s + steering.interval_s))


def build_driver(settings: Settings, daemon_id: str) -> CloudDriver:
    config = driver_config(settings)
    driver_class = provider(settings.cloud.kind).driver_class()
    driver = driver_class(
        config,
        Ownership(settings.cloud.pool, daemon_id, lease_holder(settings)),
        user_data(settings),
        retrier=Retrier(settings.cloud.retry),
        slots_per_instance=settings.steering.slots_per_instance,
    )
    types = settings.steering.instance_types
    driver.type_slots = {t.name: t.cores for t in types}  # each type's workers advertise its own cores
    driver.type_user_data = {t.name: user_data(settings, t.cores) for t in types}
    return driver


def lease_holder(settings: Settings) -> str:
    """This daemon's name in the pool's lease: its host and state file, never what the file holds.

    A daemon restarted on the same host and state path, with the file lost or
    emptied, is the same holder and keeps its own lease; another host, or
    another state file on this one, is another holder.
    """
    host = socket.gethostname()
    where = f"{host}:{Path(settings.state_path).resolve()}"
    readable = re.sub(r"[^A-Za-z0-9_-]", "-", host).strip("-_")[:40] or "host"
    return f"{readable}-{hashlib.sha256(where.encode()).hexdigest()[:12]}"


def build_condor_control(settings: Settings, job_id_of: Callable[[str], str | None]) -> HTCondorControl:
    import htcondor2

    condor = settings.condor
    collector = htcondor2.Collector(condor.collector) if condor.collector else htcondor2.Collector()

    def locate_schedd() -> Any:
        # Located when first asked, not here: a schedd that is not up yet must not stop the start.
        if condor.schedd:
            return htcondor2.Schedd(collector.locate(htcondor2.DaemonType.Schedd, condor.schedd))
        return htcondor2.Schedd()

    return HTCondorControl(None, collector, job_id_of, settings.cloud.pool, locate_schedd=locate_schedd)
