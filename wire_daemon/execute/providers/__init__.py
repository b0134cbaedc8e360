"""Cloud providers behind the one ``Cloud`` interface: a module each, and a registry line each.

A provider's SDK is an optional extra (``pip install 'wire-daemon[ec2]'``):
its module imports the SDK only when it talks to the cloud, so its config can
be checked without it, and a missing extra is one clear line, not a traceback.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any

from wire_daemon.core.errors import ConfigError
from wire_daemon.core.extras import require


@dataclass(frozen=True)
class ProviderSpec:
    name: str
    module: str  # holds the driver and its config dataclass
    driver: str
    config: str
    extra: str  # the pip extra that installs its SDK
    sdk: str  # the SDK's top-level module

    def _load(self, attr: str) -> Any:
        return getattr(importlib.import_module(self.module), attr)

    def config_class(self) -> type:
        return self._load(self.config)

    def driver_class(self) -> type:
        self.require_sdk()
        return self._load(self.driver)

    def probe_function(self) -> Any:
        """``probe(config, ownership, token)``: read-only calls, one ``ProbeCheck`` each."""
        self.require_sdk()
        return self._load("probe")

    def require_sdk(self) -> None:
        require(self.sdk, self.extra, f"cloud.kind {self.name}")


PROVIDERS = {
    "ec2": ProviderSpec("ec2", "wire_daemon.execute.providers.ec2", "Ec2Driver", "Ec2Config", "ec2", "boto3"),
    "openstack": ProviderSpec(
        "openstack",
        "wire_daemon.execute.providers.openstack",
        "OpenStackDriver",
        "OpenStackConfig",
        "openstack",
        "openstack",
    ),
}


def provider(name: str) -> ProviderSpec:
    spec = PROVIDERS.get(name)
    if spec is None:
        raise ConfigError(f"cloud.kind {name!r} has no driver; known: {', '.join(PROVIDERS)}")
    return spec
