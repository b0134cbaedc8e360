"""Build the Execute side of a real site from the config: a cloud driver and Condor control.

The config keeps each driver's options as a mapping (``cloud.ec2``,
``cloud.openstack``, ``cloud.worker``); here they become the drivers' own
dataclasses, with errors that name the file and the key.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable

from wire_daemon.core.errors import ConfigError
from wire_daemon.execute.providers.base import CloudDriver, Ownership
from wire_daemon.execute.condor_control import HTCondorControl
from wire_daemon.execute.providers.ec2 import Ec2Config, Ec2Driver
from wire_daemon.execute.providers.openstack import OpenStackConfig, OpenStackDriver
from wire_daemon.execute.userdata import WorkerConfig, render_user_data
from wire_daemon.runtime.settings import Settings


def section(cls: type, raw: dict[str, Any], key: str, source: str, **fixed: Any) -> Any:
    """``cls`` from a config mapping; lists become tuples; unknown or missing keys are named."""
    names = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(raw) - names)
    if unknown:
        raise ConfigError(f"{source}: unknown key {key}.{unknown[0]} (known: {', '.join(sorted(names - set(fixed)))})")
    values = {k: tuple(v) if isinstance(v, list) else v for k, v in raw.items()} | fixed
    try:
        made = cls(**values)
        return made.validate() if hasattr(made, "validate") else made
    except TypeError as exc:  # a required key is missing
        raise ConfigError(f"{source}: {key}: {exc}") from None
    except ConfigError as exc:
        raise ConfigError(f"{source}: {exc}") from None


def driver_config(settings: Settings) -> Ec2Config | OpenStackConfig:
    """The validated ``cloud.ec2`` / ``cloud.openstack`` section (``check-config`` runs it too)."""
    cloud, slots = settings.cloud, settings.steering.slots_per_instance
    if cloud.kind == "ec2":
        return section(Ec2Config, cloud.ec2, "cloud.ec2", settings.source, slots_per_instance=slots)
    if cloud.kind == "openstack":
        return section(OpenStackConfig, cloud.openstack, "cloud.openstack", settings.source, slots_per_instance=slots)
    raise ConfigError(f"{settings.source}: cloud.kind {cloud.kind!r} has no driver on a real site")


def user_data(settings: Settings) -> str:
    """The workers' cloud-init; without ``cloud.worker`` the image must join the pool on its own."""
    if not settings.cloud.worker:
        return ""
    worker = section(
        WorkerConfig, settings.cloud.worker, "cloud.worker", settings.source,
        cloud=settings.cloud.kind, pool=settings.cloud.pool, slots=settings.steering.slots_per_instance,
    )
    return render_user_data(worker)


def build_driver(settings: Settings, daemon_id: str) -> CloudDriver:
    config = driver_config(settings)
    ownership = Ownership(settings.cloud.pool, daemon_id)
    if isinstance(config, Ec2Config):
        return Ec2Driver(config, ownership, user_data(settings))
    return OpenStackDriver(config, ownership, user_data(settings))


class LoggedCondorControl:
    """Condor control when ``condor.control`` is off: says what it would do, touches nothing.

    For a submit host whose schedd the daemon may not edit, and for rehearsals
    against an emulated submit directory, where no schedd exists.
    """

    def __init__(self) -> None:
        self.notes: list[str] = []

    def set_job_priority(self, task_id: str, priority: int) -> None:
        self.notes.append(f"condor control off: would set JobPrio {priority} on {task_id}")

    def retire_instance(self, instance_id: str) -> None:
        self.notes.append(f"condor control off: would drain {instance_id}")

    def take_notes(self) -> list[str]:
        notes, self.notes = self.notes, []
        return notes


def build_condor_control(settings: Settings, job_id_of: Callable[[str], str | None]) -> HTCondorControl:
    import htcondor2

    condor = settings.condor
    collector = htcondor2.Collector(condor.collector) if condor.collector else htcondor2.Collector()
    if condor.schedd:
        schedd = htcondor2.Schedd(collector.locate(htcondor2.DaemonType.Schedd, condor.schedd))
    else:
        schedd = htcondor2.Schedd()
    return HTCondorControl(schedd, collector, job_id_of, settings.cloud.pool)
