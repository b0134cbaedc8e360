"""Cloud providers behind the one ``Cloud`` interface: a module each, and a registry line each.

Each module declares its ``PROVIDER`` (``base.Provider``): its config section,
driver, probe, pip extra, token deliveries and libraries' loggers. Nothing
outside this package names a cloud; it asks this registry.
"""

from __future__ import annotations

from wire_daemon.core.errors import ConfigError
from wire_daemon.execute.providers import ec2, openstack
from wire_daemon.execute.providers.base import Provider

PROVIDERS: dict[str, Provider] = {
    ec2.PROVIDER.name: ec2.PROVIDER,
    openstack.PROVIDER.name: openstack.PROVIDER,
}


def provider(name: str) -> Provider:
    spec = PROVIDERS.get(name)
    if spec is None:
        raise ConfigError(f"cloud.kind {name!r} has no driver; known: {', '.join(PROVIDERS)}")
    return spec


def quieted_loggers() -> tuple[str, ...]:
    """Every provider's libraries' loggers, each once."""
    return tuple(dict.fromkeys(name for spec in PROVIDERS.values() for name in spec.loggers))
