"""The daemon's configuration file: YAML, validated at start and on reload.

YAML because Pegasus operators already write YAML (sites.yml, workflow.yml)
and it carries comments. Every error names the file and the key. Secrets are
never written here: the cloud SDKs read them from the environment, a cloud
profile (AWS_PROFILE, OS_CLOUD) or the systemd credentials file.

See ``docs/config.example.yaml`` for an annotated example.
"""

from __future__ import annotations

import dataclasses
import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar, get_args, get_origin, get_type_hints

from wire_daemon.core.config import EmulationConfig, MemoryConfig, PFAConfig, PredictionConfig, SteeringConfig
from wire_daemon.core.errors import ConfigError, WireError
from wire_daemon.core.secrets import shown
from wire_daemon.execute.guarded_cloud import SafetyConfig
from wire_daemon.runtime.policies import DEFAULT_POLICY, POLICY_NAMES, policy_entry

T = TypeVar("T")


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
class SafeStateSettings:
    """When a failing daemon stops changing the pool, and when it starts again (docs/decisions.md, "Safe state")."""

    failed_iterations: int = 3  # this many iterations failing in a row enter the safe state; 0: never
    unclean_starts: int = 3  # a start after this many unclean ends within window_s enters it; 0: never
    window_s: float = 900.0  # longer than systemd's restart limit window (StartLimitIntervalSec=600)
    recover_iterations: int = 3  # this many iterations succeeding in a row leave it

    def validate(self) -> SafeStateSettings:
        for key in ("failed_iterations", "unclean_starts"):
            if getattr(self, key) < 0:
                raise ConfigError(f"safe_state.{key} must be >= 0 (got {getattr(self, key)!r}; 0 turns it off)")
        if not self.window_s > 0:
            raise ConfigError(f"safe_state.window_s must be > 0 (got {self.window_s!r})")
        if self.recover_iterations < 1:
            raise ConfigError(f"safe_state.recover_iterations must be >= 1 (got {self.recover_iterations!r})")
        return self


@dataclass(frozen=True)
class Settings:
    site: SiteSettings = field(default_factory=SiteSettings)
    cloud: CloudSettings = field(default_factory=CloudSettings)
    condor: CondorSettings = field(default_factory=CondorSettings)
    prediction: PredictionConfig = field(default_factory=PredictionConfig)
    steering: SteeringConfig = field(default_factory=SteeringConfig)
    emulation: EmulationConfig = field(default_factory=EmulationConfig)
    safety: SafetyConfig = field(default_factory=SafetyConfig)
    policy: str = DEFAULT_POLICY  # the scaling policy (runtime/policies.py); the oracle only on the emulated site
    pfa: PFAConfig = field(default_factory=PFAConfig)
    memory: MemoryConfig = field(default_factory=MemoryConfig)  # request_memory right-sizing (off by default)
    state_path: str = "wire-daemon.sqlite"
    log: LogSettings = field(default_factory=LogSettings)
    metrics: MetricsSettings = field(default_factory=MetricsSettings)
    safe_state: SafeStateSettings = field(default_factory=SafeStateSettings)
    scale_to_zero_on_exit: bool = False
    source: str = "<defaults>"

    def validate(self) -> Settings:
        try:
            self.prediction.validate()
            self.steering.validate()
            self.emulation.validate()
            self.safety.validate()
            self.pfa.validate()
            self.safe_state.validate()
            self.memory.validate()
            if self.memory.rightsizing and self.site.kind == "condor" and not self.memory.max_request_mib:
                raise ConfigError("memory.rightsizing on a condor site needs memory.max_request_mib (the largest slot)")
            _check_choice("policy", self.policy, POLICY_NAMES)
            if policy_entry(self.policy).needs_truth and self.site.kind != "emulated":
                raise ConfigError(f"policy {self.policy} needs the true task times: only the emulated site has them")
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


def check_paths(settings: Settings) -> None:
    """What only the filesystem can tell, checked by ``check-config`` and at ``run``.

    A condor site's submit root must be a directory this user can read: a
    missing or wrong one would leave the daemon watching nothing. An emulated
    site's trace must be a readable file.
    """
    source = settings.source
    if settings.site.kind == "condor":
        root = Path(settings.site.submit_root)
        where = f"{source}: site.submit_root {settings.site.submit_root!r}"
        if not root.exists():
            raise ConfigError(f"{where} does not exist: it must be the Pegasus submit root to watch")
        if not root.is_dir():
            raise ConfigError(f"{where} is not a directory: it must be the Pegasus submit root to watch")
        if not os.access(root, os.R_OK | os.X_OK):
            raise ConfigError(
                f"{where} is not readable by this user (uid {os.geteuid()}): add the user to the group "
                "that owns the submit directories"
            )
    elif settings.site.trace:
        trace = Path(settings.site.trace)
        if not trace.is_file() or not os.access(trace, os.R_OK):
            raise ConfigError(f"{source}: site.trace {settings.site.trace!r} is not a readable file")


def load_settings(path: str | Path) -> Settings:
    """Read and validate a config file; every error names the file and the key."""
    import yaml

    source = str(path)
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"{source}: cannot read the config file ({exc.strerror})") from None
    except UnicodeDecodeError as exc:
        raise ConfigError(
            f"{source}: not UTF-8 text (byte 0x{exc.object[exc.start]:02x} at offset {exc.start})"
        ) from None
    try:
        raw = yaml.safe_load(text) or {}
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f":{mark.line + 1}" if mark is not None else ""
        raise ConfigError(f"{source}{where}: not valid YAML ({getattr(exc, 'problem', exc)})") from None
    except Exception as exc:  # a value the YAML constructors refuse (a date like 2024-13-45, 5,000 digits), or nesting
        raise ConfigError(f"{source}: not a usable YAML file ({_why(exc)})") from None
    if not isinstance(raw, dict):
        raise ConfigError(f"{source}: the top level must be a mapping of keys")
    try:
        settings = build_section(Settings, raw, source, key="")
        return dataclasses.replace(settings, source=source).validate()
    except WireError:
        raise
    except Exception as exc:  # whatever slipped past the checks: still one line naming the file, never a traceback
        raise ConfigError(f"{source}: cannot use the settings ({_why(exc)})") from None


def _why(exc: BaseException) -> str:
    """An exception in a few words, without its text: that may quote the file, and the file may hold a token."""
    if isinstance(exc, RecursionError):
        return "nested too deeply"
    if isinstance(exc, ValueError) and "integer string conversion" in str(exc):
        return "a number with too many digits"
    return type(exc).__name__


def build_section(cls: type[T], raw: Any, source: str, key: str, fixed: dict[str, Any] | None = None) -> T:
    """``cls`` from a config mapping: the one place a config dict becomes a dataclass.

    Unknown, missing and mistyped keys are named with the file; keys in
    ``fixed`` are set by another setting and may not be given here.
    """
    fixed = fixed or {}
    where = f"{key}." if key else ""
    if not isinstance(raw, dict):
        raise ConfigError(f"{source}: {key} must be a mapping")
    hints = get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls) if f.name != "source"}  # type: ignore[arg-type]
    for name in raw:
        if name in fixed:
            raise ConfigError(f"{source}: {where}{name} cannot be set here: {FIXED_BY.get(name, 'it is derived')}")
    unknown = sorted(set(raw) - set(fields))
    if unknown:
        raise ConfigError(f"{source}: {_unknown_key(where + str(unknown[0]), sorted(set(fields) - set(fixed)))}")
    missing = [n for n, f in fields.items() if _required(f) and n not in raw and n not in fixed]
    if missing:
        raise ConfigError(f"{source}: {key} is missing required key(s): {', '.join(missing)}")
    values = {name: _converted(hints[name], value, source, f"{where}{name}") for name, value in raw.items()}
    return cls(**(values | fixed))


def _converted(kind: Any, value: Any, source: str, key: str) -> Any:
    """``_convert``, with whatever it did not foresee named by the file and the key."""
    try:
        return _convert(kind, value, source, key)
    except WireError:
        raise
    except Exception as exc:
        raise ConfigError(f"{source}: {key} has a value that cannot be used ({_why(exc)})") from None


# Keys that one setting owns, and where it lives (one place for each).
FIXED_BY = {
    "slots_per_instance": "the slot count is steering.slots_per_instance",
    "slots": "the slot count is steering.slots_per_instance",
    "cloud": "it is cloud.kind",
    "pool": "it is cloud.pool",
}
# Keys that moved, and where to.
MOVED = {
    "safety.charging_unit_s": "steering.charging_unit_s (the one charging unit)",
}


def _unknown_key(key: str, known: list[str]) -> str:
    if key in MOVED:
        return f"{key} is no longer a setting: use {MOVED[key]}"
    return f"unknown key {key} (known: {', '.join(known)})"


def _required(f: dataclasses.Field[Any]) -> bool:
    return f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING


def _convert(kind: Any, value: Any, source: str, key: str) -> Any:
    if dataclasses.is_dataclass(kind):
        return build_section(kind, value, source, key)  # type: ignore[arg-type]
    args = get_args(kind)
    if type(None) in args:  # Optional[X]: null is allowed
        return None if value is None else _convert(next(a for a in args if a is not type(None)), value, source, key)
    origin = get_origin(kind)
    if origin is dict:
        if not isinstance(value, dict):
            raise ConfigError(f"{source}: {key} must be a mapping")
        if get_args(kind) == (str, str) and not all(isinstance(v, str) for v in [*value, *value.values()]):
            raise ConfigError(f"{source}: {key} must map strings to strings (e.g. tags)")
        return value
    if origin is tuple and dataclasses.is_dataclass(args[0]):  # a list of mappings (steering.instance_types)
        if not isinstance(value, list):
            raise ConfigError(f"{source}: {key} must be a list of mappings (got {value!r})")
        return tuple(build_section(args[0], v, source, f"{key}[{n}]") for n, v in enumerate(value))  # type: ignore[arg-type]
    if origin is tuple:
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise ConfigError(f"{source}: {key} must be a list of strings (got {shown(value)})")
        return tuple(value)
    if kind is bool:
        if not isinstance(value, bool):
            raise ConfigError(f"{source}: {key} must be true or false (got {shown(value)})")
        return value
    if kind in (int, float):
        return _number(kind, value, source, key)
    if kind is str:
        if not isinstance(value, str):
            raise ConfigError(f"{source}: {key} must be a string (got {shown(value)})")
        return value
    raise ConfigError(f"{source}: {key} has an unsupported value {shown(value)}")


def _number(kind: type, value: Any, source: str, key: str) -> Any:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ConfigError(f"{source}: {key} must be a number (got {shown(value)})")
    if isinstance(value, float) and not math.isfinite(value):  # YAML's .nan and .inf: every comparison misleads
        raise ConfigError(f"{source}: {key} must be a finite number (got {value!r})")
    if abs(value) > _LARGEST:
        raise ConfigError(f"{source}: {key} is too large (more than {_LARGEST:.0e})")
    if kind is int and not float(value).is_integer():
        raise ConfigError(f"{source}: {key} must be a whole number (got {value!r})")
    if key.endswith("_s") and value < 0:  # every *_s setting is a duration in seconds
        raise ConfigError(f"{source}: {key} is a duration: it must be >= 0 (got {value!r})")
    return kind(value)


_LARGEST = 10**18  # beyond any count or duration a setting holds, and still exact as a float's order of magnitude


def _check_choice(key: str, value: str, choices: tuple[str, ...]) -> None:
    if value not in choices:
        raise ConfigError(f"{key} must be one of {', '.join(choices)} (got {value!r})")


__all__ = [
    "Settings",
    "SiteSettings",
    "CloudSettings",
    "CondorSettings",
    "LogSettings",
    "MetricsSettings",
    "SafeStateSettings",
    "load_settings",
    "check_paths",
    "WireError",
]
