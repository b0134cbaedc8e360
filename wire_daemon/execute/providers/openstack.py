"""OpenStack worker pool through openstacksdk (Nova).

Servers carry metadata naming our pool, daemon id, request id, slot count and
their index within the request; that metadata is how we tell our servers from
the rest of the project. Nova cannot filter on metadata, so listing fetches
the project's servers and filters here: a dedicated project keeps that cheap.

A request creates its servers one by one, named ``<pool>-<request id>-<n>``.
A retry (or a restarted daemon repeating the request) looks the request up
first and creates only the indices still missing, so a request never holds
more than its count; the name is a second guard for a server whose metadata
was lost.

Credentials come from clouds.yaml or the OS_* environment, the way every
OpenStack tool finds them; this module never reads or logs them.
"""

from __future__ import annotations

import base64
import json
import logging
import re
import time
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Annotated, Any

from pydantic import Field

from wire_daemon.core.config import SLOTS_PER_INSTANCE
from wire_daemon.core.errors import CloudError, ConfigError
from wire_daemon.core.instances import CloudState, Instance
from wire_daemon.core.secrets import looks_like_secret, shown
from wire_daemon.core.sections import section
from wire_daemon.execute.providers import base
from wire_daemon.execute.providers.base import TAG_INDEX, TAG_POOL, TAG_REQUEST, CloudDriver
from wire_daemon.execute.providers.retry import Retrier

log = logging.getLogger(__name__)

USER_DATA_LIMIT = 65535  # bytes after base64, Nova's limit

# Nova status -> Instance.state; any other status is a live server in some transition
# (REBOOT, RESIZE, MIGRATING, ...), counted as running.
_STATES = {
    "BUILD": CloudState.PENDING,
    "ACTIVE": CloudState.RUNNING,
    "ERROR": CloudState.FAILED,
    "UNKNOWN": CloudState.FAILED,
    "SHUTOFF": CloudState.STOPPED,
    "STOPPED": CloudState.STOPPED,
    "SUSPENDED": CloudState.STOPPED,
    "PAUSED": CloudState.STOPPED,
    "SHELVED": CloudState.STOPPED,
    "SHELVED_OFFLOADED": CloudState.STOPPED,
    "DELETED": CloudState.TERMINATED,
    "SOFT_DELETED": CloudState.TERMINATED,
}


@section("cloud.openstack")
class OpenStackConfig:
    """``cloud.openstack``; the slots per worker are steering.slots_per_instance (a flavor does not say)."""

    flavor: Annotated[str, Field(min_length=1)]  # name or id
    image_id: Annotated[str, Field(min_length=1)]
    network_id: Annotated[str, Field(min_length=1)]
    cloud: str = ""  # a clouds.yaml entry; empty: the OS_* environment
    region_name: str = ""
    key_name: str = ""
    security_groups: tuple[str, ...] = ()
    config_drive: bool = False  # deliver user-data on a config drive instead of the metadata service

    def __post_init__(self) -> None:
        for key in ("image_id", "network_id"):  # Nova takes these by id only; a name fails at the first launch
            if not _UUID.match(getattr(self, key)):
                raise ConfigError(
                    f"cloud.openstack.{key} must be an id like 5c4f1d2e-0000-4000-8000-0000000000a1, not a name "
                    f"(got {shown(getattr(self, key))}; 'openstack image list' / 'network list' show the ids)"
                )
        check_cloud_entry(self.cloud, self.region_name)


_UUID = re.compile(r"^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$")


def check_cloud_entry(cloud: str, region_name: str) -> None:
    """``cloud.openstack.cloud`` names a clouds.yaml entry that exists, and ``region_name`` one of its regions.

    Both would fail only at the first call otherwise. Without openstacksdk
    (a core install) nothing is checked here.
    """
    if not cloud:
        return
    if looks_like_secret(cloud):
        raise ConfigError(
            "cloud.openstack.cloud looks like a secret itself, not the name of a clouds.yaml entry: "
            "credentials stay in clouds.yaml or the OS_* environment; the value is not shown"
        )
    try:
        from openstack import config as os_config
        from openstack import exceptions as sdk
    except ImportError:
        return
    try:
        loader = os_config.OpenStackConfig()
        entry = loader.get_one(cloud=cloud)
    except (sdk.ConfigException, KeyError) as exc:
        raise ConfigError(
            f"cloud.openstack.cloud {cloud!r} is not an entry of clouds.yaml "
            f"(looked in: {', '.join(getattr(loader, '_config_files', []) or ['the default places'])}): "
            f"{CloudError.clean(str(exc))}"
        ) from None
    if not region_name or entry is None:
        return
    try:
        loader.get_one(cloud=cloud, region_name=region_name)
    except sdk.ConfigException as exc:
        raise ConfigError(
            f"cloud.openstack.region_name {shown(region_name)} is not a region of cloud {cloud!r}: "
            f"{CloudError.clean(str(exc))}"
        ) from None


def make_connection(config: OpenStackConfig) -> Any:
    import openstack

    return openstack.connect(cloud=config.cloud or None, region_name=config.region_name or None)


class OpenStackDriver(CloudDriver):
    provider = "openstack"

    def __init__(
        self,
        config: OpenStackConfig,
        ownership: base.Ownership,
        user_data: str,
        connection: Any | None = None,
        retrier: Retrier | None = None,
        clock: Callable[[], float] = time.time,
        slots_per_instance: int = SLOTS_PER_INSTANCE,
    ) -> None:
        self.config = config
        super().__init__(ownership, user_data, retrier, slots_per_instance)
        self._conn = connection
        self.clock = clock
        self._flavor_ids: dict[str, str] = {}  # flavor name -> id, looked up once each
        self._index_of: dict[str, int] = {}  # server id -> its index within its request

    @property
    def conn(self) -> Any:
        if self._conn is None:
            with self._errors("connect"):
                self._conn = make_connection(self.config)
        return self._conn

    # -- one try of each call -----------------------------------------------

    def _list_owned(self, states: frozenset[CloudState], ids: Sequence[str] | None) -> list[Instance]:
        wanted = set(ids) if ids else None
        found = []
        for server in self._servers("list"):
            if not self.ownership.owns(dict(server.metadata or {})):
                continue
            if wanted is not None and server.id not in wanted:
                continue
            instance = self._instance(server)
            if instance.state in states:
                found.append(instance)
        return found

    def _find_request(self, request_id: str) -> list[Instance]:
        prefix = f"{self.ownership.pool}-{request_id}-"
        found = []
        for server in self._servers("launch"):
            metadata = dict(server.metadata or {})
            mine = self.ownership.owns(metadata) and metadata.get(TAG_REQUEST) == request_id
            if not mine and (server.name or "").startswith(prefix):
                log.warning(
                    "openstack: server %s (%s) is named for request %s but lacks our metadata",
                    server.id,
                    server.name,
                    request_id,
                )
                mine = True
            if mine:
                found.append(self._instance(server, request_id))
        return sorted(found, key=lambda i: (self._index_of.get(i.instance_id, 0), i.instance_id))

    def _launch_missing(self, order: base.LaunchOrder, existing: list[Instance]) -> list[Instance]:
        count, request_id, instance_type = order.count, order.request_id, order.instance_type
        encoded = base64.b64encode(order.user_data.encode()).decode()
        if len(encoded) > USER_DATA_LIMIT:
            raise CloudError.of_kind("invalid_config")(
                self.provider, "launch", f"user-data is {len(encoded)} bytes in base64; the limit is {USER_DATA_LIMIT}"
            )
        taken = {self._index_of.get(i.instance_id) for i in existing}
        missing = [n for n in range(count) if n not in taken][: max(0, count - len(existing))]
        created: list[Instance] = []
        for index in missing:
            try:
                created.append(self._create(index, request_id, encoded, instance_type or self.config.flavor))
            except CloudError as err:
                # Whatever was created stays tagged; the caller can still record it.
                raise type(err)(err.provider, err.operation, err.detail, err.code, (*existing, *created)) from err
        return [*existing, *created]

    def _terminate(self, instance_ids: list[str]) -> None:
        with self._errors("terminate"):
            for server_id in instance_ids:
                self.conn.compute.delete_server(server_id, ignore_missing=True)

    def _tag(self, instance_ids: list[str], tags: dict[str, str]) -> None:
        with self._errors("lease"):
            for server_id in instance_ids:  # sets these keys, keeps the others
                self.conn.compute.set_server_metadata(server_id, **tags)

    # -- helpers --------------------------------------------------------------

    def _create(self, index: int, request_id: str, user_data_b64: str, flavor: str) -> Instance:
        cfg = self.config
        slots = self.slots_for(flavor)
        metadata = {**self.ownership.tags(request_id, slots), TAG_INDEX: str(index)}
        attrs: dict[str, Any] = {
            "name": f"{self.ownership.pool}-{request_id}-{index}",
            "flavor_id": self._flavor(flavor),
            "image_id": cfg.image_id,
            "networks": [{"uuid": cfg.network_id}],
            "metadata": metadata,
            "user_data": user_data_b64,
        }
        if cfg.key_name:
            attrs["key_name"] = cfg.key_name
        if cfg.security_groups:
            attrs["security_groups"] = [{"name": group} for group in cfg.security_groups]
        if cfg.config_drive:
            attrs["config_drive"] = True
        with self._errors("launch"):
            server = self.conn.compute.create_server(**attrs)
        self._index_of[server.id] = index
        # Nova's create reply holds little more than the id; the next list gives the cloud's times.
        return Instance(server.id, self.clock(), slots, CloudState.PENDING, "", flavor, request_id)

    def _flavor(self, name: str) -> str:
        if name not in self._flavor_ids:
            from openstack.exceptions import NotFoundException

            with self._errors("launch"):
                try:
                    flavor = self.conn.compute.find_flavor(name, ignore_missing=False)
                except NotFoundException:
                    raise CloudError.of_kind("invalid_config")(
                        self.provider, "launch", f"no flavor named {name!r}"
                    ) from None
            self._flavor_ids[name] = str(flavor.id)
        return self._flavor_ids[name]

    def _servers(self, operation: str) -> list[Any]:
        with self._errors(operation):
            return list(self.conn.compute.servers(details=True))

    def _instance(self, server: Any, request_id: str = "") -> Instance:
        metadata = dict(server.metadata or {})
        self._saw_lease(server.id, metadata)
        index = _index(metadata.get(TAG_INDEX), server.name)
        if index is not None:
            self._index_of[server.id] = index
        return Instance(
            instance_id=server.id,
            launch_time=_timestamp(server.created_at) or self.clock(),
            slots=base.slots_from(metadata, self.slots_per_instance),
            state=_state(server),
            address=_fixed_ipv4(server.addresses),
            instance_type=_flavor_name(server.flavor) or self.config.flavor,
            request_id=metadata.get(TAG_REQUEST, request_id),
        )

    def _map_error(self, exc: Exception, operation: str) -> CloudError:
        return map_error(exc, operation)


def _state(server: Any) -> CloudState:
    if (getattr(server, "task_state", None) or "") == "deleting":
        return CloudState.TERMINATED  # a delete was accepted: do not count it in the pool
    return _STATES.get((server.status or "BUILD").upper(), CloudState.RUNNING)


def _index(value: Any, name: str | None) -> int | None:
    for candidate in (value, (name or "").rsplit("-", 1)[-1]):
        try:
            return int(candidate)
        except (TypeError, ValueError):
            continue
    return None


def _timestamp(value: Any) -> float:
    if not value:
        return 0.0
    try:
        return datetime.fromisoformat(str(value).replace("Z", "+00:00")).timestamp()
    except ValueError:
        return 0.0


def _fixed_ipv4(addresses: Any) -> str:
    """The server's private address: its first fixed IPv4 (floating ones are for outside access)."""
    for entries in (addresses or {}).values():
        for entry in entries or []:
            if entry.get("version") == 4 and entry.get("OS-EXT-IPS:type", "fixed") == "fixed":
                return str(entry.get("addr", ""))
    return ""


def _flavor_name(flavor: Any) -> str:
    if flavor is None:
        return ""
    if isinstance(flavor, dict):
        return str(flavor.get("original_name") or flavor.get("name") or flavor.get("id") or "")
    return str(getattr(flavor, "name", None) or getattr(flavor, "id", None) or "")


# -- error mapping ------------------------------------------------------------


def kind_of_status(status: int, message: str) -> str:
    """The CloudError kind for an HTTP status from Keystone or Nova."""
    quota = "quota" in message.lower()
    if status == 401:
        return "auth"
    if status == 403:
        return "quota" if quota else "auth"  # Nova answers 403 to quota exceeded
    if status == 413:
        return "quota" if quota else "throttled"  # older Nova: 413 overLimit for both
    if status == 429:
        return "throttled"
    if status == 404:
        return "not_found"
    if status == 409:
        return "transient"  # the server is busy in another task state; it passes
    if status >= 500:
        return "capacity" if "no valid host" in message.lower() else "transient"
    if 400 <= status < 500:
        return "invalid_config"
    return "unknown"


def map_error(exc: Exception, operation: str) -> CloudError:
    """Turn an openstacksdk / keystoneauth exception into a CloudError of the right kind."""
    from keystoneauth1 import exceptions as ka
    from openstack import exceptions as sdk

    status = getattr(exc, "status_code", None) or getattr(exc, "http_status", None)
    if isinstance(exc, (sdk.HttpException, ka.HttpError)) and status:
        message = _message(exc)
        kind = kind_of_status(int(status), message)
        return CloudError.of_kind(kind)("openstack", operation, f"HTTP {status}: {message}", str(status))
    if isinstance(exc, ka.SSLError):
        kind = "invalid_config"  # a CA bundle problem: retrying will not fix it
    elif isinstance(exc, (ka.ConnectionError, ka.DiscoveryFailure)):
        kind = "transient"
    elif isinstance(
        exc, (ka.EndpointNotFound, sdk.EndpointNotFound, ka.AuthPluginException, ka.OptionError, sdk.ConfigException)
    ):
        kind = "invalid_config"  # no compute endpoint in the catalog, or an incomplete clouds.yaml
    else:
        kind = "unknown"
    return CloudError.of_kind(kind)("openstack", operation, f"{type(exc).__name__}: {exc}")


def _message(exc: Exception) -> str:
    """The service's own message ("Quota exceeded for instances: ..."), not the whole JSON body."""
    details = getattr(exc, "details", None) or getattr(exc, "message", None) or str(exc)
    try:
        body = json.loads(details)
    except (TypeError, ValueError):
        return str(details)
    return _find_message(body) or str(details)


def _find_message(body: Any) -> str:
    if isinstance(body, dict):
        if isinstance(body.get("message"), str):
            return body["message"]
        for value in body.values():
            found = _find_message(value)
            if found:
                return found
    return ""


# -- the probe ------------------------------------------------------------------


def probe(
    config: OpenStackConfig,
    ownership: base.Ownership,
    token: base.TokenReference | None = None,
    connection: Any | None = None,
) -> list[base.ProbeCheck]:
    """Read-only calls with the configured credentials: the region's compute endpoint, servers list,
    image (active?), flavor, network, and the key pair and security groups the config names.

    The pool token (a Barbican secret) is read by the workers with their own
    application credential, not the daemon's: it is not probed.
    """
    try:
        conn = connection if connection is not None else make_connection(config)
    except Exception as exc:  # noqa: BLE001 - an incomplete clouds.yaml: one line
        return [base.ProbeCheck("openstack", "connection", base.PROBE_FAILED, str(map_error(exc, "probe")))]

    def endpoint() -> str:
        url = conn.compute.get_endpoint()  # authenticates, then picks the region's entry from the catalog
        return f"compute endpoint {url}" + (f" in {config.region_name}" if config.region_name else "")

    def servers() -> str:
        ours = [s for s in conn.compute.servers(details=True) if ownership.owns(dict(s.metadata or {}))]
        return f"{len(ours)} of this pool ({TAG_POOL}={ownership.pool})"

    def image() -> str:
        found = conn.image.get_image(config.image_id)
        if (found.status or "active") != "active":
            raise base.Unusable(f"{found.name or found.id} is {found.status}, not active: launches would fail")
        return f"{found.name or found.id} ({found.status})"

    def flavor() -> str:
        from openstack.exceptions import NotFoundException

        try:
            found = conn.compute.find_flavor(config.flavor, ignore_missing=False)
        except NotFoundException:
            raise base.NotFound(f"no flavor named or with id {config.flavor!r}") from None
        return f"{found.name}: {found.vcpus} vCPU, {found.ram} MB"

    def network() -> str:
        found = conn.network.get_network(config.network_id)
        return f"{found.name or found.id} ({found.status})"

    def keypair() -> str:
        from openstack.exceptions import NotFoundException

        try:
            conn.compute.find_keypair(config.key_name, ignore_missing=False)
        except NotFoundException:
            raise base.NotFound(f"no key pair named {config.key_name!r} for these credentials") from None
        return "found"

    def groups() -> str:
        from openstack.exceptions import NotFoundException

        for name in config.security_groups:
            try:
                conn.network.find_security_group(name, ignore_missing=False)
            except NotFoundException:
                raise base.NotFound(f"no security group {name!r} in this project") from None
        return f"{len(config.security_groups)} found"

    checks = [
        _check("keystone catalog", "the region's compute endpoint", endpoint),
        _check("nova GET /servers/detail", "list the project's servers", servers),
        _check("glance GET /v2/images/{id}", f"image {config.image_id}", image, "this probe"),
        _check("nova GET /flavors", f"flavor {config.flavor}", flavor),
        _check("neutron GET /v2.0/networks/{id}", f"network {config.network_id}", network, "this probe"),
    ]
    if config.key_name:
        checks.append(_check("nova GET /os-keypairs/{name}", f"key pair {config.key_name}", keypair, "this probe"))
    if config.security_groups:
        subject = f"security group(s) {', '.join(config.security_groups)}"
        checks.append(_check("neutron GET /v2.0/security-groups", subject, groups, "this probe"))
    if token is not None and token.delivery == "barbican":
        checks.append(
            base.ProbeCheck(
                "barbican",
                f"pool token secret {token.source}",
                "not probed",
                "the workers read it with their own application credential",
                "the workers",
            )
        )
    return checks


def _check(call: str, subject: str, fn: Callable[[], str], needed_by: str = "the daemon") -> base.ProbeCheck:
    return base.check(call, subject, fn, str, lambda exc: base.mapped_outcome(map_error(exc, "probe")), needed_by)


PROVIDER = base.Provider(
    name="openstack",
    config=OpenStackConfig,
    driver=OpenStackDriver,
    probe=probe,
    extra="openstack",
    sdk="openstack",
    deliveries=("barbican", "file", "inline"),
    loggers=("openstack", "keystoneauth", "stevedore", "urllib3"),
    # Where the images keep the application credential the workers read the Barbican secret with.
    worker_defaults={"os_credentials_file": "/etc/wire-worker/openstack.env"},
)
