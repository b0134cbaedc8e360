"""The daemon's configuration file: YAML, validated at start and on reload.

YAML because Pegasus operators already write YAML (sites.yml, workflow.yml)
and it carries comments. Every error names the file and the key. Secrets are
never written here: the cloud SDKs read them from the environment, a cloud
profile (AWS_PROFILE, OS_CLOUD) or the systemd credentials file.

See ``docs/config.example.yaml`` for an annotated example.
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import field
from pathlib import Path
from typing import Annotated, Any

from pydantic import field_validator

from wire_daemon.core.config import ReplayConfig
from wire_daemon.core.errors import ConfigError, WireError
from wire_daemon.core.sections import AtLeastOne, AtLeastZero, Positive, check, one_of, parse, section
from wire_daemon.execute.guarded_cloud import SafetyConfig
from wire_daemon.execute.providers import PROVIDERS
from wire_daemon.execute.providers.retry import RetryPolicy
from wire_daemon.runtime.policies import DEFAULT_POLICY, POLICIES, option_sections, parsed_options, policy_entry

CLOUD_KINDS = ("emulated", *PROVIDERS)


@section("site")
class SiteSettings:
    kind: Annotated[str, one_of("emulated", "condor")] = "emulated"
    submit_root: str = ""  # condor: the Pegasus submit root to watch
    trace: str = ""  # emulated: WfFormat trace to replay ("" = the bundled one)
    speedup: Annotated[float, Positive] = 60.0  # emulated: virtual seconds per wall second


@section("cloud")
class CloudSettings:
    """Which cloud, and its section: ``cloud.<kind>`` holds the options of the provider of that name, which
    validates them itself (``execute/providers``); ``cloud.worker`` the workers' user-data options."""

    kind: Annotated[str, one_of(*CLOUD_KINDS)] = "emulated"
    pool: str = "wire-pool"
    worker: dict[str, Any] = field(default_factory=dict)  # WorkerConfig fields (user-data)
    retry: RetryPolicy = field(default_factory=RetryPolicy)  # how the provider's calls are retried
    # Each provider's section, by the provider's name, as the file gives it (``cloud.<name>`` in YAML).
    providers: dict[str, Any] = field(default_factory=dict)

    __config_hidden__ = ("providers",)
    __config_more__ = tuple(PROVIDERS)

    def provider_section(self) -> dict[str, Any]:
        """The raw options of the configured provider (empty for the emulated cloud or an absent section)."""
        return self.providers.get(self.kind, {})


@section("condor")
class CondorSettings:
    """How the daemon reaches HTCondor on a real submit host (site.kind condor)."""

    # htcondor: boost JobPrio, drain and check workers; off: log what it would do
    control: Annotated[str, one_of("htcondor", "off")] = "htcondor"
    collector: str = ""  # host[:port]; "" = COLLECTOR_HOST from the HTCondor configuration
    schedd: str = ""  # schedd name; "" = the local schedd
    settle_s: float = 5.0  # a .dag unchanged this long (and no DAGMan file yet) is read as complete


@section("log")
class LogSettings:
    decisions_path: str = "/var/log/wire-daemon/decisions.jsonl"  # the systemd unit's LogsDirectory
    max_bytes: int = 10_000_000
    backups: int = 5


@section("metrics")
class MetricsSettings:
    enabled: bool = False
    address: str = "127.0.0.1"
    port: int = 9464


@section("safe_state")
class SafeStateSettings:
    """When a failing daemon stops changing the pool, and when it starts again (docs/decisions.md, "Safe state")."""

    # this many iterations failing in a row enter the safe state; 0: never
    failed_iterations: Annotated[int, AtLeastZero] = 3
    # a start after this many unclean ends within window_s enters it; 0: never
    unclean_starts: Annotated[int, AtLeastZero] = 3
    window_s: Annotated[float, Positive] = (
        900.0  # longer than systemd's restart limit window (StartLimitIntervalSec=600)
    )
    recover_iterations: Annotated[int, AtLeastOne] = 3  # this many iterations succeeding in a row leave it


@section("")
class Settings(ReplayConfig):
    """The whole file: the sections a replay decides with (``ReplayConfig``), and those of a real site."""

    site: SiteSettings = field(default_factory=SiteSettings)
    cloud: CloudSettings = field(default_factory=CloudSettings)
    condor: CondorSettings = field(default_factory=CondorSettings)
    safety: SafetyConfig = field(default_factory=SafetyConfig)
    # the scaling policy (runtime/policies.py); the oracle only on the emulated site
    policy: str = DEFAULT_POLICY
    state_path: str = "/var/lib/wire-daemon/state.sqlite"  # the systemd unit's StateDirectory
    log: LogSettings = field(default_factory=LogSettings)
    metrics: MetricsSettings = field(default_factory=MetricsSettings)
    safe_state: SafeStateSettings = field(default_factory=SafeStateSettings)
    scale_to_zero_on_exit: bool = False
    source: str = "<defaults>"

    __config_hidden__ = ("source", "policy_options")
    __config_more__ = staticmethod(lambda: tuple(option_sections()))

    @field_validator("policy_options", mode="after")
    @classmethod
    def _options(cls, given: dict[str, Any]) -> dict[str, Any]:
        """Each policy's options section (``pfa``, ...) validated by the model its policy declares."""
        return parsed_options(given)

    def __post_init__(self) -> None:
        """The checks across sections; each section checked its own keys already."""
        site, cloud = self.site.kind, self.cloud.kind
        check(self.policy in POLICIES, f"policy must be one of {', '.join(POLICIES)} (got {self.policy!r})")
        check(
            not (self.memory.rightsizing and site == "condor" and not self.memory.max_request_mib),
            "memory.rightsizing on a condor site needs memory.max_request_mib (the largest slot)",
        )
        check(
            self.policy not in POLICIES or not policy_entry(self.policy).needs_truth or site == "emulated",
            f"policy {self.policy} needs the true task times: only the emulated site has them",
        )
        real = " or ".join(PROVIDERS)
        check(site != "condor" or cloud != "emulated", f"site.kind condor needs a real cloud: set cloud.kind to {real}")
        check(site != "condor" or bool(self.site.submit_root), "site.submit_root is required when site.kind is condor")
        check(
            site != "emulated" or cloud == "emulated",
            "site.kind emulated runs its own cloud: set cloud.kind to emulated",
        )
        wanted, cap = self.steering.max_instances, self.safety.max_instances
        check(
            cap >= wanted,
            f"steering.max_instances {wanted} is above safety.max_instances {cap}, the guard's hard cap: "
            f"raise safety.max_instances to {wanted} or more too",
        )
        section = self.cloud.provider_section()
        quoted = PROVIDERS[cloud].quoted_currency(section) if cloud in PROVIDERS and isinstance(section, dict) else None
        check(
            quoted is None or self.steering.currency == quoted,
            f"cloud.{cloud} reads its prices from the cloud, in {quoted} per hour: set steering.currency to {quoted} "
            f"(got {self.steering.currency!r}) and give the on-demand prices in {quoted}",
        )


def as_file(settings: Settings) -> dict[str, Any]:
    """The effective settings laid out as the file gives them: ``cloud.<kind>`` and each policy's section."""
    data = dataclasses.asdict(settings)
    data["cloud"] |= data["cloud"].pop("providers")
    return data | data.pop("policy_options")


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
        return parse(Settings, _as_given(raw, source) | {"source": source}, source)
    except WireError:
        raise
    except Exception as exc:  # whatever slipped past the checks: still one line naming the file, never a traceback
        raise ConfigError(f"{source}: cannot use the settings ({_why(exc)})") from None


def _as_given(raw: dict[Any, Any], source: str) -> dict[Any, Any]:
    """The file's mapping with each provider's ``cloud.<name>`` section gathered under ``cloud.providers``,
    and each policy's options section (``pfa``) under ``policy_options``: their owners validate them."""
    given = dict(raw)
    cloud = given.get("cloud")
    for inner in ("source", "policy_options"):  # fields of the settings, not keys of the file
        if inner in given:
            raise ConfigError(f"{source}: unknown key {inner}")
    if isinstance(cloud, dict) and "providers" in cloud:
        raise ConfigError(f"{source}: unknown key cloud.providers")
    if isinstance(cloud, dict):
        rest = {key: value for key, value in cloud.items() if key not in PROVIDERS}
        given["cloud"] = rest | {"providers": {key: value for key, value in cloud.items() if key in PROVIDERS}}
    sections = option_sections()
    given["policy_options"] = {key: given.pop(key) for key in list(given) if key in sections}
    return given


def _why(exc: BaseException) -> str:
    """An exception in a few words, without its text: that may quote the file, and the file may hold a token."""
    if isinstance(exc, RecursionError):
        return "nested too deeply"
    if isinstance(exc, ValueError) and "integer string conversion" in str(exc):
        return "a number with too many digits"
    return type(exc).__name__


__all__ = [
    "Settings",
    "SiteSettings",
    "CloudSettings",
    "CondorSettings",
    "LogSettings",
    "MetricsSettings",
    "SafeStateSettings",
    "load_settings",
    "as_file",
    "check_paths",
    "WireError",
]
