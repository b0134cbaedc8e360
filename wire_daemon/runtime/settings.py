"""The daemon's configuration file: YAML, validated at start and on reload.

YAML because Pegasus operators already write YAML (sites.yml, workflow.yml)
and it carries comments. Every error names the file and the key. Secrets are
never written here: the cloud SDKs read them from the environment, a cloud
profile (AWS_PROFILE, OS_CLOUD) or the systemd credentials file.

See ``docs/config.example.yaml`` for an annotated example.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, get_type_hints

from wire_daemon.core.config import EmulationConfig, PredictionConfig, SteeringConfig
from wire_daemon.core.errors import ConfigError, WireError
from wire_daemon.execute.guarded_cloud import SafetyConfig


@dataclass(frozen=True)
class SiteSettings:
    kind: str = "emulated"  # emulated | condor
    submit_root: str = ""  # condor: the Pegasus submit root to watch
    trace: str = ""  # emulated: WfFormat trace to replay ("" = the bundled one)
    speedup: float = 60.0  # emulated: virtual seconds per wall second


@dataclass(frozen=True)
class CloudSettings:
    kind: str = "emulated"  # emulated | ec2 | openstack
    pool: str = "wire-pool"
    ec2: dict[str, Any] = field(default_factory=dict)  # Ec2Config fields
    openstack: dict[str, Any] = field(default_factory=dict)  # OpenStackConfig fields
    worker: dict[str, Any] = field(default_factory=dict)  # WorkerConfig fields (user-data)


@dataclass(frozen=True)
class CondorSettings:
    """How the daemon reaches HTCondor on a real submit host (site.kind condor)."""

    control: str = "htcondor"  # htcondor: boost JobPrio, drain and check workers; off: log what it would do
    collector: str = ""  # host[:port]; "" = COLLECTOR_HOST from the HTCondor configuration
    schedd: str = ""  # schedd name; "" = the local schedd
    settle_s: float = 5.0  # a .dag unchanged this long (and no DAGMan file yet) is read as complete


@dataclass(frozen=True)
class LogSettings:
    decisions_path: str = "decisions.jsonl"
    max_bytes: int = 10_000_000
    backups: int = 5


@dataclass(frozen=True)
class MetricsSettings:
    enabled: bool = False
    address: str = "127.0.0.1"
    port: int = 9464


@dataclass(frozen=True)
class Settings:
    site: SiteSettings = field(default_factory=SiteSettings)
    cloud: CloudSettings = field(default_factory=CloudSettings)
    condor: CondorSettings = field(default_factory=CondorSettings)
    prediction: PredictionConfig = field(default_factory=PredictionConfig)
    steering: SteeringConfig = field(default_factory=SteeringConfig)
    emulation: EmulationConfig = field(default_factory=EmulationConfig)
    safety: SafetyConfig = field(default_factory=SafetyConfig)
    state_path: str = "wire-daemon.sqlite"
    log: LogSettings = field(default_factory=LogSettings)
    metrics: MetricsSettings = field(default_factory=MetricsSettings)
    scale_to_zero_on_exit: bool = False
    source: str = "<defaults>"

    def validate(self) -> "Settings":
        try:
            self.prediction.validate()
            self.steering.validate()
            self.emulation.validate()
            self.safety.validate()
            _check_choice("site.kind", self.site.kind, ("emulated", "condor"))
            _check_choice("cloud.kind", self.cloud.kind, ("emulated", "ec2", "openstack"))
            _check_choice("condor.control", self.condor.control, ("htcondor", "off"))
            if self.site.kind == "condor" and self.cloud.kind == "emulated":
                raise ConfigError("site.kind condor needs a real cloud: set cloud.kind to ec2 or openstack")
            if self.site.kind == "condor" and not self.site.submit_root:
                raise ConfigError("site.submit_root is required when site.kind is condor")
            if self.site.kind == "emulated" and self.cloud.kind != "emulated":
                raise ConfigError("site.kind emulated runs its own cloud: set cloud.kind to emulated")
            if self.site.speedup <= 0:
                raise ConfigError(f"site.speedup must be > 0 (got {self.site.speedup!r})")
            if self.safety.max_instances < self.steering.max_instances:
                raise ConfigError("safety.max_instances must be >= steering.max_instances (the guard is the hard cap)")
        except ConfigError as exc:
            raise ConfigError(f"{self.source}: {exc}") from None
        return self


def load_settings(path: str | Path) -> Settings:
    """Read and validate a config file; every error names the file and the key."""
    import yaml

    source = str(path)
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"{source}: cannot read the config file ({exc.strerror})") from None
    try:
        raw = yaml.safe_load(text) or {}
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f":{mark.line + 1}" if mark is not None else ""
        raise ConfigError(f"{source}{where}: not valid YAML ({getattr(exc, 'problem', exc)})") from None
    if not isinstance(raw, dict):
        raise ConfigError(f"{source}: the top level must be a mapping of keys")
    settings = _build(Settings, raw, source, prefix="")
    return dataclasses.replace(settings, source=source).validate()


def _build(cls: type, raw: dict[str, Any], source: str, prefix: str) -> Any:
    hints = get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls) if f.name != "source"}
    unknown = sorted(set(raw) - set(fields))
    if unknown:
        raise ConfigError(f"{source}: unknown key {prefix}{unknown[0]} (known: {', '.join(sorted(fields))})")
    values = {}
    for name, value in raw.items():
        values[name] = _convert(hints[name], value, source, f"{prefix}{name}")
    return cls(**values)


def _convert(kind: Any, value: Any, source: str, key: str) -> Any:
    if dataclasses.is_dataclass(kind):
        if not isinstance(value, dict):
            raise ConfigError(f"{source}: {key} must be a mapping")
        return _build(kind, value, source, prefix=f"{key}.")
    origin = getattr(kind, "__origin__", None)
    if origin is dict:
        if not isinstance(value, dict):
            raise ConfigError(f"{source}: {key} must be a mapping")
        return value
    if kind is bool:
        if not isinstance(value, bool):
            raise ConfigError(f"{source}: {key} must be true or false (got {value!r})")
        return value
    if kind in (int, float):
        if isinstance(value, bool) or not isinstance(value, (int, float)) or (kind is int and not float(value).is_integer()):
            raise ConfigError(f"{source}: {key} must be a number (got {value!r})")
        return kind(value)
    if kind is str:
        if not isinstance(value, str):
            raise ConfigError(f"{source}: {key} must be a string (got {value!r})")
        return value
    if value is None or isinstance(value, (int, float)):  # Optional[float] and friends
        return value
    raise ConfigError(f"{source}: {key} has an unsupported value {value!r}")


def _check_choice(key: str, value: str, choices: tuple[str, ...]) -> None:
    if value not in choices:
        raise ConfigError(f"{key} must be one of {', '.join(choices)} (got {value!r})")


__all__ = ["Settings", "SiteSettings", "CloudSettings", "CondorSettings", "LogSettings", "MetricsSettings", "load_settings", "WireError"]
