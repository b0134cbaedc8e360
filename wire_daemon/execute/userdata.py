"""Render a worker's cloud-init user-data from the templates in ``condor_config/``.

The user-data configures an HTCondor execute node that joins the pool by
itself (IDTOKENS), advertises its cloud instance id and pool name, and powers
itself off when unclaimed (the dead-man switch). It names where the pool token
is kept, never the token itself: the worker fetches it at boot with the
instance's own identity (SSM Parameter Store or Secrets Manager through the
instance role on EC2, a Barbican secret on OpenStack, or a file the image or a
config drive provides). Embedding the token in user-data (``inline``) is an
explicit, unsafe opt-in: anyone who can read the instance's user-data, and any
job on it that reaches the metadata service, can then join machines to the pool.

A second, optional secret travels the same way: the workers' administration
key (``admin_key_source``, or ``admin_key`` inline). Workers verify the
daemon's drain request with it; it is not the pool signing key and is never on
the central manager (docs/cloud.md, "Retiring a worker").

Templates use ``@NAME@`` placeholders, which clash with neither shell, HTCondor
``$(MACRO)`` nor YAML syntax. A placeholder alone on its line takes a
multi-line value, indented like the placeholder.
"""

from __future__ import annotations

import re
import sys
from dataclasses import field
from functools import partial
from pathlib import Path
from typing import Annotated

import yaml
from pydantic import Field

from wire_daemon.core.config import SLOTS_PER_INSTANCE
from wire_daemon.core.errors import ConfigError
from wire_daemon.core.secrets import looks_like_secret, shown
from wire_daemon.core.sections import AtLeastOne, AtLeastZero, check, one_of, section
from wire_daemon.execute.providers import PROVIDERS, provider
from wire_daemon.execute.providers.base import check_name

EXECUTE_TEMPLATE = "wire-execute.conf.in"
BOOT_TEMPLATE = "wire-worker-boot.sh.in"
SPOT_WATCH_SCRIPT = "wire-spot-watch.sh"  # no placeholders: the same on every worker
IDLE_SHUTDOWN_S = 1800  # the least a worker left without a claim waits before it powers itself off
CLOUD_INIT_TEMPLATE = "worker-cloud-init.yaml.in"
TOKEN_PATH = "/etc/condor/tokens.d/wire-pool"
# The workers' administration key: the only IDTOKENS signing key a worker holds. Tokens signed with it are
# accepted by workers only (never by the central manager), and only for the daemon's identity below.
ADMIN_KEY_NAME = "WIRE_WORKERS"
ADMIN_KEY_PATH = f"/etc/condor/passwords.d/{ADMIN_KEY_NAME}"
ADMIN_IDENTITY = "wire-daemon"  # the daemon's identity on workers: wire-daemon@<TRUST_DOMAIN>

# Every value that reaches the boot script sits between single quotes there, so
# none may hold a quote, a newline or a shell-active character beyond these.
_SOURCE_FORMS = {
    "ssm": re.compile(r"^[A-Za-z0-9_.:/-]{1,2048}$"),  # a parameter name or ARN
    "secretsmanager": re.compile(r"^[A-Za-z0-9_.:/+=@-]{1,2048}$"),  # a secret name or ARN
    "barbican": re.compile(r"^https://[A-Za-z0-9.-]+(:[0-9]{1,5})?/[A-Za-z0-9._~/%-]*$"),  # a secret href
    "file": re.compile(r"^/[A-Za-z0-9._/-]+$"),  # a path on the worker
}
_HOST = re.compile(r"^[A-Za-z0-9.-]+(:[0-9]{1,5})?$")
_PATH = re.compile(r"^/[A-Za-z0-9._/-]+$")
_REGION = re.compile(r"^[a-z0-9-]*$")
_TOKEN = re.compile(r"^[A-Za-z0-9._-]+$")  # an IDTOKEN is a JWT
_BASE64 = re.compile(r"^[A-Za-z0-9+/]{16,}={0,2}$")  # a signing key file, base64-encoded
_TRUST_DOMAIN = re.compile(r"^[A-Za-z0-9._:-]{0,253}$")  # also inside a ClassAd string: no quotes
_PLACEHOLDER = re.compile(r"@([A-Z][A-Z0-9_]*)@")

_INLINE_TOKEN_ENTRY = """\
  # token_delivery: inline (unsafe opt-in): the pool token travels in user-data.
  - path: {path}
    owner: root:root
    permissions: '0600'
    content: |
      {token}"""

_INLINE_ADMIN_KEY_ENTRY = """\
  # token_delivery: inline (unsafe opt-in): the workers' administration key travels in user-data.
  - path: {path}
    owner: root:root
    permissions: '0600'
    encoding: b64
    content: {key}"""


@section("cloud.worker")
class WorkerConfig:
    """``cloud.worker``; its cloud, pool and slots are cloud.kind, cloud.pool and the instance type's slots."""

    cloud: Annotated[str, one_of(*PROVIDERS)]  # the provider (cloud.kind)
    pool: str  # advertised as WirePool; the same as the driver's Ownership.pool
    condor_host: str  # the central manager, host[:port]
    slots: Annotated[int, AtLeastOne] = SLOTS_PER_INSTANCE  # slots per worker (the daemon plans with this many)
    slot_mode: Annotated[str, one_of("static", "partitionable")] = "static"
    token_delivery: str = ""  # empty: the cloud's default (its provider's first delivery)
    token_source: str = ""  # SSM parameter / Secrets Manager secret / Barbican secret href / path on the worker
    token: str = field(default="", repr=False)  # the IDTOKEN itself: only with token_delivery "inline"
    # The workers' administration key (WIRE_WORKERS), base64, fetched like the token from this source; empty: the
    # daemon cannot drain the workers (see docs/cloud.md, "Retiring a worker").
    admin_key_source: str = ""
    admin_key: str = field(default="", repr=False)  # the key itself (base64): only with token_delivery "inline"
    trust_domain: str = ""  # the pool's TRUST_DOMAIN (its tokens' issuer); empty: HTCondor's default, condor_host
    # MAXJOBRETIREMENTTIME: how long a drain lets a running job finish
    max_job_retirement_s: Annotated[int, AtLeastZero] = 86400
    aws_region: str = ""  # for the token fetch; empty: the worker's own region
    # In the image, for barbican: the application credential's file; empty: the cloud's default.
    os_credentials_file: str = ""
    block_metadata_for_jobs: bool = True  # iptables: only root may reach 169.254.169.254 after boot
    # STARTD_NOCLAIM_SHUTDOWN; keep it >= the charging unit (the daemon's default: idle_shutdown_for)
    idle_shutdown_s: Annotated[int, Field(ge=60)] = IDLE_SHUTDOWN_S
    failure_poweroff_min: Annotated[int, AtLeastOne] = 10  # a worker whose boot script failed powers off after this
    extra_config: tuple[str, ...] = ()  # more HTCondor config lines, appended

    @property
    def delivery(self) -> str:
        return self.token_delivery or provider(self.cloud).default_delivery

    @property
    def credentials_file(self) -> str:
        return self.os_credentials_file or provider(self.cloud).worker_defaults.get("os_credentials_file", "")

    def __post_init__(self) -> None:
        check_name("cloud.worker.pool", self.pool)
        check(
            bool(_HOST.match(self.condor_host)),
            "cloud.worker.condor_host must be a host name or address with an optional :port "
            f"(got {self.condor_host!r})",
        )
        check(
            bool(_REGION.match(self.aws_region)),
            f"cloud.worker.aws_region is not a region name (got {self.aws_region!r})",
        )
        check(
            not self.os_credentials_file or bool(_PATH.match(self.os_credentials_file)),
            "cloud.worker.os_credentials_file must be an absolute path of letters, digits and ._/-",
        )
        check(
            not any("\n" in line for line in self.extra_config),
            "cloud.worker.extra_config takes one HTCondor config line per item",
        )
        check(
            bool(_TRUST_DOMAIN.match(self.trust_domain)),
            f"cloud.worker.trust_domain must be letters, digits and ._:- (got {self.trust_domain!r})",
        )
        self._check_token()

    def _check_token(self) -> None:
        delivery = self.delivery
        deliveries = provider(self.cloud).deliveries
        for name in ("token_source", "admin_key_source"):
            # Pasted by mistake, it would be rendered into user-data and printed: refuse it, and never echo it.
            check(
                not looks_like_secret(getattr(self, name)),
                f"cloud.worker.{name} looks like a secret itself, not a reference to where one is kept "
                "(an SSM parameter or Secrets Manager name or ARN, a Barbican href, a path on the worker); "
                "the value is not shown",
            )
        check(
            delivery in deliveries,
            f"cloud.worker.token_delivery {delivery!r} does not work on {self.cloud}; "
            f"use one of {', '.join(deliveries)}",
        )
        if delivery == "inline":
            check(
                bool(_TOKEN.match(self.token)),
                "cloud.worker.token must hold the pool's IDTOKEN when token_delivery is 'inline'",
            )
            check(
                not self.admin_key or bool(_BASE64.match(self.admin_key)),
                "cloud.worker.admin_key must be the workers' administration key file, base64-encoded",
            )
            check(
                not self.admin_key_source,
                "cloud.worker.admin_key_source is not used with token_delivery 'inline': set cloud.worker.admin_key",
            )
            return
        # Never let a secret slip into user-data without the explicit opt-in.
        name, source = ("token", "token_source") if self.token else ("admin_key", "admin_key_source")
        check(
            not (self.token or self.admin_key),
            f"cloud.worker.{name} is only used with token_delivery 'inline' (unsafe); "
            f"with {delivery!r} set cloud.worker.{source} instead",
        )
        check(
            bool(_SOURCE_FORMS[delivery].match(self.token_source)),
            f"cloud.worker.token_source is not a valid {delivery} reference (got {shown(self.token_source)})",
        )
        check(
            not self.admin_key_source or bool(_SOURCE_FORMS[delivery].match(self.admin_key_source)),
            f"cloud.worker.admin_key_source is not a valid {delivery} reference (got {shown(self.admin_key_source)})",
        )


def default_template_dir() -> Path:
    """condor_config/ beside the package in a source tree; else where setup.cfg installs it."""
    candidates = (
        Path(__file__).resolve().parents[2] / "condor_config",
        Path(sys.prefix) / "share" / "wire-daemon" / "condor_config",
    )
    for candidate in candidates:
        if (candidate / CLOUD_INIT_TEMPLATE).is_file():
            return candidate
    raise ConfigError(
        f"cannot find the worker templates ({CLOUD_INIT_TEMPLATE}) in {' or '.join(map(str, candidates))}"
    )


def fill(template: str, values: dict[str, str], source: str) -> str:
    """Replace ``@NAME@`` placeholders; one alone on its line takes a multi-line value, indented like it
    (or vanishes with an empty one)."""
    out: list[str] = []
    for lineno, line in enumerate(template.splitlines(), 1):
        where = f"{source}:{lineno}"
        alone = _PLACEHOLDER.fullmatch(line.strip())
        if alone:
            indent = line[: len(line) - len(line.lstrip())]
            value = _value(values, alone.group(1), where)
            out.extend((indent + part).rstrip() if part else "" for part in value.splitlines())  # "" drops the line
        else:
            out.append(_PLACEHOLDER.sub(partial(_inline_value, values, where), line))
    return "\n".join(out) + "\n"


def _inline_value(values: dict[str, str], where: str, match: re.Match[str]) -> str:
    name = match.group(1)
    value = _value(values, name, where)
    if "\n" in value:
        raise ConfigError(f"{where}: @{name}@ needs a line of its own for a multi-line value")
    return value


def _value(values: dict[str, str], name: str, where: str) -> str:
    if name not in values:
        raise ConfigError(f"{where}: unknown placeholder @{name}@")
    return values[name]


def _template(name: str, template_dir: Path | None) -> str:
    path = (template_dir or default_template_dir()) / name
    try:
        return path.read_text()
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read worker template: {exc.strerror}") from exc


def slot_config(config: WorkerConfig) -> str:
    """The slot layout: ``slots`` static one-core slots, or one partitionable slot of ``slots`` cores.

    NUM_CPUS pins the node to the cores the daemon plans with, whatever the
    instance type has. NUM_SLOTS alone is not enough: since HTCondor 23 every
    slot it makes is partitionable (jobs land in dynamic slots ``slot1_1@``),
    so static slots need an explicit, non-partitionable slot type.
    """
    if config.slot_mode == "static":
        return "\n".join(
            (
                f"NUM_CPUS = {config.slots}",
                f"NUM_SLOTS_TYPE_1 = {config.slots}",
                "SLOT_TYPE_1 = cpus=1",
                "SLOT_TYPE_1_PARTITIONABLE = False",
            )
        )
    return f"NUM_CPUS = {config.slots}\nuse feature : PartitionableSlot"


def render_execute_config(config: WorkerConfig, template_dir: Path | None = None) -> str:
    """The HTCondor config snippet for /etc/condor/config.d/."""
    values = {
        "CONDOR_HOST": config.condor_host,
        "SLOT_CONFIG": slot_config(config),
        "TRUST_DOMAIN_CONFIG": f"TRUST_DOMAIN = {config.trust_domain}" if config.trust_domain else "",
        "ADMIN_IDENTITY": ADMIN_IDENTITY,
        "ADMIN_KEY_NAME": ADMIN_KEY_NAME,
        "MAX_JOB_RETIREMENT_S": str(config.max_job_retirement_s),
        "POOL": config.pool,
        "IDLE_SHUTDOWN_S": str(config.idle_shutdown_s),
        "EXTRA_CONFIG": "\n".join(config.extra_config),
    }
    return fill(_template(EXECUTE_TEMPLATE, template_dir), values, EXECUTE_TEMPLATE)


def render_boot_script(config: WorkerConfig, template_dir: Path | None = None) -> str:
    values = {
        "CLOUD": config.cloud,
        "TOKEN_DELIVERY": config.delivery,
        "TOKEN_SOURCE": config.token_source,
        "ADMIN_KEY_SOURCE": config.admin_key_source,
        "ADMIN_KEY_PATH": ADMIN_KEY_PATH,
        "AWS_REGION": config.aws_region,
        "OS_CREDENTIALS_FILE": config.credentials_file,
        "BLOCK_METADATA": "yes" if config.block_metadata_for_jobs else "no",
        "FAILURE_POWEROFF_MIN": str(config.failure_poweroff_min),
    }
    return fill(_template(BOOT_TEMPLATE, template_dir), values, BOOT_TEMPLATE)


def render_user_data(config: WorkerConfig, template_dir: Path | None = None) -> str:
    """The whole ``#cloud-config`` user-data for one worker (the same for every worker of the pool)."""
    inline = inline_key = ""
    if config.delivery == "inline":
        inline = _INLINE_TOKEN_ENTRY.format(path=TOKEN_PATH, token=config.token)
        if config.admin_key:
            inline_key = _INLINE_ADMIN_KEY_ENTRY.format(path=ADMIN_KEY_PATH, key=config.admin_key)
    values = {
        "POOL": config.pool,
        "CONDOR_HOST": config.condor_host,
        "EXECUTE_CONFIG": render_execute_config(config, template_dir),
        "BOOT_SCRIPT": render_boot_script(config, template_dir),
        "SPOT_WATCH_SCRIPT": _template(SPOT_WATCH_SCRIPT, template_dir),
        "INLINE_TOKEN_FILE": inline,
        "INLINE_ADMIN_KEY_FILE": inline_key,
    }
    text = fill(_template(CLOUD_INIT_TEMPLATE, template_dir), values, CLOUD_INIT_TEMPLATE)
    _check_cloud_config(text)
    return text


def _check_cloud_config(text: str) -> None:
    """cloud-init ignores user-data it cannot parse, and the worker then never joins: fail here instead."""
    if not text.startswith("#cloud-config\n"):
        raise ConfigError(f"{CLOUD_INIT_TEMPLATE}: must start with '#cloud-config'")
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        # Name the place only: the parser's own message quotes the text around it.
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}" if mark is not None else "somewhere"
        raise ConfigError(f"{CLOUD_INIT_TEMPLATE}: rendered user-data is not valid YAML at {where}") from None
    if not isinstance(data, dict) or not isinstance(data.get("write_files"), list):
        raise ConfigError(f"{CLOUD_INIT_TEMPLATE}: rendered user-data has no write_files list")
