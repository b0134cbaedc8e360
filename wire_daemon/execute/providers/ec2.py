"""EC2 worker pool through boto3.

Instances are tagged at launch (TagSpecifications) with our pool name, daemon
id, request id and slot count; listing filters on the pool's tag server-side.
Workers power themselves off when idle (see condor_config/), so instances are
launched with InstanceInitiatedShutdownBehavior=terminate: a worker's own
poweroff ends its billing instead of leaving a stopped instance behind.

Credentials come from boto3's usual chain (the submit host's instance role,
the environment, a profile); this module never reads or logs them.
"""

from __future__ import annotations

import hashlib
import logging
import re
from collections.abc import Callable, Sequence
from dataclasses import field
from datetime import UTC, datetime
from typing import Annotated, Any
from urllib.parse import urlparse

from pydantic import Field

from wire_daemon.core.config import SLOTS_PER_INSTANCE
from wire_daemon.core.errors import CloudError, ConfigError
from wire_daemon.core.instances import CloudState, Instance
from wire_daemon.core.pricing import Market, SpotPriceReader
from wire_daemon.core.secrets import shown
from wire_daemon.core.sections import check, one_of, section
from wire_daemon.execute.providers import base
from wire_daemon.execute.providers.base import TAG_POOL, TAG_REQUEST, CloudDriver
from wire_daemon.execute.providers.retry import Retrier

log = logging.getLogger(__name__)

USER_DATA_LIMIT = 16384  # bytes before base64, EC2's limit

# EC2 state name -> Instance.state
_STATES = {
    "pending": CloudState.PENDING,
    "running": CloudState.RUNNING,
    "stopping": CloudState.STOPPED,
    "stopped": CloudState.STOPPED,
    "shutting-down": CloudState.TERMINATED,
    "terminated": CloudState.TERMINATED,
}
# Instance.state -> the EC2 state names to ask for
_EC2_STATES = {
    CloudState.PENDING: ["pending"],
    CloudState.RUNNING: ["running"],
    CloudState.STOPPED: ["stopping", "stopped"],
    CloudState.FAILED: [],
    CloudState.TERMINATED: ["shutting-down", "terminated"],
}


@section("cloud.ec2")
class Ec2Config:
    """``cloud.ec2``; the slots per worker are steering.slots_per_instance (an instance type does not say)."""

    region: Annotated[str, Field(min_length=1)]
    image_id: Annotated[str, Field(min_length=1)]
    instance_type: Annotated[str, Field(min_length=1)]
    subnet_id: str = ""
    security_group_ids: tuple[str, ...] = ()
    key_name: str = ""
    instance_profile: str = ""  # the workers' IAM instance profile: a name or an ARN
    endpoint_url: str = ""  # a VPC endpoint, or a test server
    extra_tags: dict[str, str] = field(default_factory=dict)  # e.g. cost allocation
    # Where spot prices come from: "config" (steering.instance_types' spot_price, else spot_price_ratio x the
    # on-demand price) or "cloud" (DescribeSpotPriceHistory, read again every spot_price_refresh_s; the prices
    # are USD per hour, so steering.currency must be USD).
    spot_prices: Annotated[str, one_of("config", "cloud")] = "config"
    spot_price_refresh_s: Annotated[float, Field(ge=60.0)] = 3600.0

    def __post_init__(self) -> None:
        check_endpoint(self.endpoint_url)
        check_region(self.region, custom_endpoint=bool(self.endpoint_url))
        check_ids(self)
        check(
            not any(k.startswith("wire:") or k.startswith("aws:") for k in self.extra_tags),
            "cloud.ec2.extra_tags must not use the reserved prefixes 'wire:' or 'aws:'",
        )


_LINUX = ["Linux/UNIX", "Linux/UNIX (Amazon VPC)"]  # the spot prices of the workers' product
_REGION = re.compile(r"^[a-z]{2}(-[a-z]+)+-\d+$")
# What each id looks like; each would fail only at the first launch otherwise. An image may also be
# named by an SSM parameter that EC2 resolves at launch (resolve:ssm:/aws/service/...).
_IMAGE = re.compile(r"^(ami-[0-9a-f]+|resolve:ssm:\S+)$")
_INSTANCE_TYPE = re.compile(r"^[a-z][a-z0-9-]*\.[a-z0-9-]+$")
_SUBNET = re.compile(r"^subnet-[0-9a-f]+$")
_GROUP = re.compile(r"^sg-[0-9a-f]+$")


def check_ids(config: Ec2Config) -> None:
    """The image, instance type, subnet and security groups have the shape EC2 gives them (no call made)."""
    checks = [
        ("image_id", config.image_id, _IMAGE, "an AMI id like ami-0123456789abcdef0"),
        ("instance_type", config.instance_type, _INSTANCE_TYPE, "an instance type like c5.xlarge"),
    ]
    if config.subnet_id:
        checks.append(("subnet_id", config.subnet_id, _SUBNET, "a subnet id like subnet-0123456789abcdef0"))
    checks += [
        ("security_group_ids", group, _GROUP, "security group ids like sg-0123456789abcdef0 (not names)")
        for group in config.security_group_ids
    ]
    for key, value, form, what in checks:
        if not form.match(value):
            raise ConfigError(f"cloud.ec2.{key} must be {what} (got {shown(value)})")


def check_endpoint(url: str) -> None:
    """``cloud.ec2.endpoint_url``: an http(s) URL with a host, or nothing (found at the first call otherwise)."""
    if not url:
        return
    parsed = urlparse(url)
    if parsed.username is not None or parsed.password is not None:
        # Credentials in the URL would be printed with it: refuse it without showing it.
        raise ConfigError(
            "cloud.ec2.endpoint_url must not hold credentials (user:password@): boto3 finds them itself; "
            "the value is not shown"
        )
    if parsed.scheme not in ("http", "https") or not parsed.hostname:
        raise ConfigError(f"cloud.ec2.endpoint_url must be an http:// or https:// URL with a host (got {shown(url)})")
    try:
        parsed.port  # noqa: B018 - raises on a bad port
    except ValueError:
        raise ConfigError(f"cloud.ec2.endpoint_url has a bad port (got {shown(url)})") from None


def check_region(region: str, custom_endpoint: bool = False) -> None:
    """``cloud.ec2.region``: a region name, and one botocore knows unless an endpoint is given.

    A wrong region fails only at the first call, in the middle of a run;
    here it fails at ``check-config``. Without botocore (a core install)
    only the form is checked.
    """
    if not _REGION.match(region):
        raise ConfigError(f"cloud.ec2.region is not an AWS region name like us-east-1 (got {shown(region)})")
    if custom_endpoint:
        return
    known = known_regions()
    if known and region not in known:
        raise ConfigError(
            f"cloud.ec2.region {region!r} is not an EC2 region botocore knows "
            "(a region newer than this botocore needs an upgrade: pip install -U boto3)"
        )


def known_regions() -> set[str]:
    """Every EC2 region of every partition botocore knows; empty without botocore."""
    try:
        import botocore.session
    except ImportError:
        return set()
    session = botocore.session.get_session()
    return {
        region
        for partition in session.get_available_partitions()
        for region in session.get_available_regions("ec2", partition_name=partition)
    }


def make_client(config: Ec2Config) -> Any:
    """A boto3 EC2 client with botocore's own retries off: ours look for the request id first."""
    import boto3
    from botocore.config import Config

    return boto3.session.Session().client(
        "ec2",
        region_name=config.region,
        endpoint_url=config.endpoint_url or None,
        config=Config(
            retries={"mode": "standard", "total_max_attempts": 1},
            connect_timeout=10,
            read_timeout=60,
            user_agent_extra="wire-daemon",
        ),
    )


class Ec2Driver(CloudDriver):
    provider = "ec2"
    # Spot through RunInstances' market option: a one-time request that ends the instance when reclaimed.
    markets = frozenset({Market.ON_DEMAND, Market.SPOT})

    def __init__(
        self,
        config: Ec2Config,
        ownership: base.Ownership,
        user_data: str,
        client: Any | None = None,
        retrier: Retrier | None = None,
        slots_per_instance: int = SLOTS_PER_INSTANCE,
    ) -> None:
        self.config = config
        super().__init__(ownership, user_data, retrier, slots_per_instance)
        self.client = client if client is not None else make_client(config)
        self._zone: str | None = None  # the configured subnet's zone, once asked

    # -- one try of each call -----------------------------------------------

    def _list_owned(self, states: frozenset[CloudState], ids: Sequence[str] | None) -> list[Instance]:
        names = sorted({name for state in states for name in _EC2_STATES[state]})
        return self._describe([("instance-state-name", names)], ids, "list")

    def _find_request(self, request_id: str) -> list[Instance]:
        found = self._describe([(f"tag:{TAG_REQUEST}", [request_id])], None, "launch")
        return sorted(found, key=lambda i: i.instance_id)

    def _launch_missing(self, order: base.LaunchOrder, existing: list[Instance]) -> list[Instance]:
        if existing:
            # run_instances is all or nothing (MinCount = MaxCount): the request ran.
            if len(existing) != order.count:
                log.warning("ec2: request %s holds %d instances, not %d", order.request_id, len(existing), order.count)
            return existing
        self._check_user_data(order.user_data, USER_DATA_LIMIT)
        with self._errors("launch"):
            reply = self.client.run_instances(**self._run_args(order))
        return [self._instance(raw) for raw in reply.get("Instances", [])]

    def _terminate(self, instance_ids: list[str]) -> None:
        with self._errors("terminate"):
            self.client.terminate_instances(InstanceIds=instance_ids)

    def _tag(self, instance_ids: list[str], tags: dict[str, str]) -> None:
        with self._errors("lease"):
            for start in range(0, len(instance_ids), 1000):  # CreateTags takes at most 1000 resources
                self.client.create_tags(
                    Resources=instance_ids[start : start + 1000], Tags=[{"Key": k, "Value": v} for k, v in tags.items()]
                )

    # -- spot prices ------------------------------------------------------------

    def spot_price_source(self) -> tuple[SpotPriceReader, float] | None:
        """How this pool's spot prices are read from EC2, and how often; None: they come from the config."""
        if self.config.spot_prices != "cloud":
            return None
        return self.read_spot_prices, self.config.spot_price_refresh_s

    def read_spot_prices(self, instance_types: Sequence[str]) -> dict[str, float]:
        """Each type's current Linux spot price per hour (USD), where the launches go.

        With a subnet, launches go to its zone: its price. Without, EC2 picks the zone at each launch: the
        dearest zone's price, so that the bill and the budget never count less than a launch may cost.
        """
        names = [t or self.config.instance_type for t in instance_types]
        zone = self._launch_zone()
        latest: dict[tuple[str, str], tuple[float, float]] = {}  # (type, zone) -> (quoted at, price)
        for quote in filter(None, map(_quote, self._spot_quotes(names, zone))):
            kind, where, at, price = quote
            if zone and where and where != zone:
                continue  # a quote of another zone, should the filter not have been applied
            if (kind, where) not in latest or at > latest[(kind, where)][0]:
                latest[(kind, where)] = (at, price)
        prices: dict[str, float] = {}
        for (kind, _), (_, price) in latest.items():
            prices[kind] = max(prices.get(kind, 0.0), price)
        return {t: prices[name] for t, name in zip(instance_types, names) if name in prices}

    def _spot_quotes(self, names: list[str], zone: str) -> list[dict[str, Any]]:
        # StartTime now: EC2 answers the price in effect now for each type and zone (the latest change).
        args: dict[str, Any] = {
            "InstanceTypes": names,
            "ProductDescriptions": _LINUX,
            "StartTime": datetime.now(UTC),
        }
        if zone:
            args["AvailabilityZone"] = zone
        quotes: list[dict[str, Any]] = []
        with self._errors("spot prices"):
            while True:
                reply = self.client.describe_spot_price_history(**args)
                quotes.extend(reply.get("SpotPriceHistory", []))
                token = reply.get("NextToken")
                if not token:
                    return quotes
                args["NextToken"] = token

    def _launch_zone(self) -> str:
        """The zone of the configured subnet ("" without one: any zone of the region); asked once."""
        if not self.config.subnet_id:
            return ""
        if self._zone is None:
            with self._errors("spot prices"):
                subnets = self.client.describe_subnets(SubnetIds=[self.config.subnet_id]).get("Subnets", [])
            self._zone = subnets[0].get("AvailabilityZone", "") if subnets else ""
        return self._zone

    # -- helpers --------------------------------------------------------------

    def _run_args(self, order: base.LaunchOrder) -> dict[str, Any]:
        count, request_id, instance_type = order.count, order.request_id, order.instance_type
        cfg = self.config
        tags = {**cfg.extra_tags, **self.ownership.tags(request_id, self.slots_for(instance_type))}
        tags["Name"] = f"{self.ownership.pool}-{request_id}"
        tag_list = [{"Key": k, "Value": v} for k, v in tags.items()]
        args: dict[str, Any] = {
            "ImageId": cfg.image_id,
            "InstanceType": instance_type or cfg.instance_type,
            "MinCount": count,
            "MaxCount": count,
            "UserData": order.user_data,  # boto3 base64-encodes it
            "ClientToken": self._client_token(request_id),
            "InstanceInitiatedShutdownBehavior": "terminate",
            "TagSpecifications": [
                {"ResourceType": "instance", "Tags": tag_list},
                {"ResourceType": "volume", "Tags": tag_list},
            ],
        }
        if order.market is Market.SPOT:
            spot = {"SpotInstanceType": "one-time", "InstanceInterruptionBehavior": "terminate"}
            args["InstanceMarketOptions"] = {"MarketType": "spot", "SpotOptions": spot}
        if cfg.subnet_id:
            args["SubnetId"] = cfg.subnet_id
        if cfg.security_group_ids:
            args["SecurityGroupIds"] = list(cfg.security_group_ids)
        if cfg.key_name:
            args["KeyName"] = cfg.key_name
        if cfg.instance_profile:
            key = "Arn" if cfg.instance_profile.startswith("arn:") else "Name"
            args["IamInstanceProfile"] = {key: cfg.instance_profile}
        return args

    def _client_token(self, request_id: str) -> str:
        # EC2's idempotency token (at most 64 ASCII characters), unique per pool, daemon and request. Request ids
        # are random (new_request_id, StateStore.open_request): a daemon restarted without its state file
        # never repeats an earlier token, so it can neither collide with nor replay an earlier launch.
        own = self.ownership
        return hashlib.sha256(f"{own.pool}/{own.daemon_id}/{request_id}".encode()).hexdigest()

    def _describe(
        self, filters: list[tuple[str, list[str]]], ids: Sequence[str] | None, operation: str
    ) -> list[Instance]:
        own = self.ownership
        all_filters = [(f"tag:{TAG_POOL}", [own.pool]), *filters]
        args: dict[str, Any] = {"Filters": [{"Name": name, "Values": values} for name, values in all_filters]}
        if ids:
            # Filter on ids rather than InstanceIds=: an unknown id must not fail the whole call.
            args["Filters"].append({"Name": "instance-id", "Values": list(ids)})
        found: list[Instance] = []
        with self._errors(operation):
            while True:
                reply = self.client.describe_instances(**args)
                for reservation in reply.get("Reservations", []):
                    found.extend(self._instance(raw) for raw in reservation.get("Instances", []))
                token = reply.get("NextToken")
                if not token:
                    return found
                args["NextToken"] = token

    def _instance(self, raw: dict[str, Any]) -> Instance:
        tags = {t["Key"]: t["Value"] for t in raw.get("Tags", [])}
        self._saw_lease(raw["InstanceId"], tags)
        launched = raw.get("LaunchTime")
        return Instance(
            instance_id=raw["InstanceId"],
            launch_time=launched.timestamp() if isinstance(launched, datetime) else 0.0,
            slots=base.slots_from(tags, self.slots_per_instance),
            state=_STATES.get(raw.get("State", {}).get("Name", ""), CloudState.PENDING),
            address=raw.get("PrivateIpAddress", ""),
            instance_type=raw.get("InstanceType", ""),
            request_id=tags.get(TAG_REQUEST, ""),
            market=Market.SPOT if raw.get("InstanceLifecycle") == "spot" else Market.ON_DEMAND,
            zone=raw.get("Placement", {}).get("AvailabilityZone", ""),
        )

    def _map_error(self, exc: Exception, operation: str) -> CloudError:
        return map_error(exc, operation)


# -- error mapping ------------------------------------------------------------

_THROTTLED = {
    "RequestLimitExceeded",
    "Throttling",
    "ThrottlingException",
    "RequestThrottled",
    "RequestThrottledException",
    "TooManyRequestsException",
    "EC2ThrottledException",
    "PriorRequestNotComplete",
}
_AUTH = {
    "AuthFailure",
    "UnauthorizedOperation",
    "InvalidClientTokenId",
    "SignatureDoesNotMatch",
    "IncompleteSignature",
    "MissingAuthenticationToken",
    "ExpiredToken",
    "RequestExpired",
    "AccessDenied",
    "AccessDeniedException",
    "OptInRequired",
    "Blocked",
}
_QUOTA = {
    "InstanceLimitExceeded",
    "VcpuLimitExceeded",
    "MaxSpotInstanceCountExceeded",
    "ResourceLimitExceeded",
    "VolumeLimitExceeded",
    "AddressLimitExceeded",
}
_CAPACITY = {
    "InsufficientInstanceCapacity",
    "InsufficientHostCapacity",
    "InsufficientReservedInstanceCapacity",
    "InsufficientCapacity",
    "InsufficientAddressCapacity",
    "InsufficientFreeAddressesInSubnet",
}
_TRANSIENT = {
    "InternalError",
    "InternalFailure",
    "ServiceUnavailable",
    "Unavailable",
    "RequestTimeout",
    "RequestTimeoutException",
}
_CONFIG = {"MissingParameter", "Unsupported", "UnsupportedOperation", "IdempotentParameterMismatch", "NoSuchEntity"}


def kind_of_code(code: str, status: int) -> str:
    """The CloudError kind for an EC2 error code (and HTTP status, for codes we do not know)."""
    if code in _THROTTLED:
        return "throttled"
    if code in _AUTH:
        return "auth"
    if code in _QUOTA:
        return "quota"
    if code in _CAPACITY:
        return "capacity"
    if code in _TRANSIENT:
        return "transient"
    if code.startswith("InvalidInstanceID"):
        return "not_found"
    if code in _CONFIG or code.startswith("Invalid"):
        return "invalid_config"
    if status == 429:
        return "throttled"
    if status >= 500:
        return "transient"
    if status in (401, 403):
        return "auth"
    return "unknown"


def map_error(exc: Exception, operation: str) -> CloudError:
    """Turn a boto3/botocore exception into a CloudError of the right kind."""
    from botocore import exceptions as bx

    if isinstance(exc, bx.ClientError):
        error = exc.response.get("Error", {})
        code = str(error.get("Code", "Unknown"))
        status = int(exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0) or 0)
        kind = kind_of_code(code, status)
        return CloudError.of_kind(kind)("ec2", operation, str(error.get("Message", "")) or code, code)
    if isinstance(exc, bx.SSLError):
        kind = "invalid_config"  # a CA bundle or endpoint problem: retrying will not fix it
    elif isinstance(exc, (bx.ConnectionError, bx.HTTPClientError)):
        kind = "transient"
    elif isinstance(exc, (bx.NoCredentialsError, bx.PartialCredentialsError, bx.CredentialRetrievalError)):
        kind = "auth"
    elif isinstance(exc, (bx.NoRegionError, bx.ParamValidationError)):
        kind = "invalid_config"
    else:
        kind = "unknown"
    return CloudError.of_kind(kind)("ec2", operation, f"{type(exc).__name__}: {exc}")


# -- the probe ------------------------------------------------------------------


def probe(
    config: Ec2Config,
    ownership: base.Ownership,
    token: base.TokenReference | None = None,
    client: Any | None = None,
    ssm: Any | None = None,
) -> list[base.ProbeCheck]:
    """Read-only calls with the configured credentials: one ``ProbeCheck`` each.

    DescribeInstances (this pool's tag), DescribeRegions (is the region
    enabled, which endpoint), DescribeImages (and is it available),
    DescribeInstanceTypes (does the type exist here, can it run the image's
    architecture), DescribeSubnets, DescribeSecurityGroups and
    DescribeKeyPairs for what the config names,
    RunInstances with DryRun (it launches nothing, and checks the launch
    permission with this pool's tags), and the pool token's metadata
    (SSM DescribeParameters or Secrets Manager DescribeSecret: never its value).
    """
    try:
        ec2 = client if client is not None else make_client(config)
    except Exception as exc:  # noqa: BLE001 - e.g. no region: one line, not a traceback
        return [base.ProbeCheck("ec2", "client", base.PROBE_FAILED, str(map_error(exc, "probe")))]
    image: dict[str, Any] = {}  # what DescribeImages said, for the instance type's architecture
    checks = [
        _check(
            "ec2 DescribeInstances",
            f"instances tagged {TAG_POOL}={ownership.pool}",
            lambda: ec2.describe_instances(
                Filters=[{"Name": f"tag:{TAG_POOL}", "Values": [ownership.pool]}], MaxResults=5
            ),
            lambda r: f"{sum(len(x.get('Instances', [])) for x in r.get('Reservations', []))} found",
        ),
        _check(
            "ec2 DescribeRegions",
            f"region {config.region}",
            lambda: ec2.describe_regions(RegionNames=[config.region], AllRegions=True),
            lambda r: _region_summary(r, config),
            needed_by="this probe",
        ),
    ]
    if not config.image_id.startswith("resolve:ssm:"):  # EC2 resolves the parameter only at launch
        checks.append(
            _check(
                "ec2 DescribeImages",
                f"image {config.image_id}",
                lambda: ec2.describe_images(ImageIds=[config.image_id]),
                lambda r: _image_summary(r, image),
                needed_by="this probe",
            )
        )
    checks.append(
        _check(
            "ec2 DescribeInstanceTypes",
            f"instance type {config.instance_type}",
            lambda: ec2.describe_instance_types(InstanceTypes=[config.instance_type]),
            lambda r: _type_summary(r, image),
            needed_by="this probe",
        )
    )
    if config.subnet_id:
        checks.append(
            _check(
                "ec2 DescribeSubnets",
                f"subnet {config.subnet_id}",
                lambda: ec2.describe_subnets(SubnetIds=[config.subnet_id]),
                lambda r: ", ".join(
                    f"{s.get('AvailabilityZone', '?')}, VPC {s.get('VpcId', '?')}" for s in r["Subnets"]
                ),
                needed_by="this probe",
            )
        )
    if config.security_group_ids:
        checks.append(
            _check(
                "ec2 DescribeSecurityGroups",
                f"security group(s) {', '.join(config.security_group_ids)}",
                lambda: ec2.describe_security_groups(GroupIds=list(config.security_group_ids)),
                lambda r: f"{len(r.get('SecurityGroups', []))} found",
                needed_by="this probe",
            )
        )
    if config.key_name:
        checks.append(
            _check(
                "ec2 DescribeKeyPairs",
                f"key pair {config.key_name}",
                lambda: ec2.describe_key_pairs(KeyNames=[config.key_name]),
                lambda r: "found",
                needed_by="this probe",
            )
        )
    driver = Ec2Driver(config, ownership, "", client=ec2)
    if config.spot_prices == "cloud":
        checks.append(
            _check(
                "ec2 DescribeSpotPriceHistory",
                f"spot price of {config.instance_type} (spot_prices: cloud)",
                lambda: ec2.describe_spot_price_history(
                    InstanceTypes=[config.instance_type], ProductDescriptions=_LINUX, StartTime=datetime.now(UTC)
                ),
                _spot_summary,
            )
        )
    args = driver._run_args(base.LaunchOrder(1, "probe-dry-run", ""))
    del args["ClientToken"], args["UserData"]
    checks.append(
        _check(
            "ec2 RunInstances",
            f"dry run of one {config.instance_type} tagged for pool {ownership.pool}",
            lambda: ec2.run_instances(DryRun=True, **args),
            lambda r: "allowed (nothing launched)",
        )
    )
    if token is not None:
        checks.extend(_probe_token(config, token, ssm))
    return checks


def _probe_token(config: Ec2Config, token: base.TokenReference, ssm: Any | None) -> list[base.ProbeCheck]:
    if token.delivery not in ("ssm", "secretsmanager"):
        return []
    import boto3
    from botocore.config import Config

    service = token.delivery
    try:
        client = ssm or boto3.session.Session().client(
            service,
            region_name=token.region or config.region,
            endpoint_url=config.endpoint_url or None,
            config=Config(retries={"mode": "standard", "total_max_attempts": 1}, connect_timeout=10, read_timeout=30),
        )
    except Exception as exc:  # noqa: BLE001
        return [base.ProbeCheck(service, "client", base.PROBE_FAILED, str(map_error(exc, "probe")))]
    if service == "secretsmanager":
        return [
            _check(
                "secretsmanager DescribeSecret",
                f"pool token secret {token.source} (metadata only)",
                lambda: client.describe_secret(SecretId=token.source),
                lambda r: f"found: {r.get('Name', token.source)}",
                needed_by="the workers (their instance role)",
            )
        ]
    name = _parameter_name(token.source)

    def describe() -> Any:
        reply = client.describe_parameters(ParameterFilters=[{"Key": "Name", "Option": "Equals", "Values": [name]}])
        if not reply.get("Parameters"):
            raise base.NotFound(f"no SSM parameter named {name}")
        return reply

    return [
        _check(
            "ssm DescribeParameters",
            f"pool token parameter {name} (metadata only)",
            describe,
            lambda r: f"found: {r['Parameters'][0].get('Type', '?')}, version {r['Parameters'][0].get('Version', '?')}",
            needed_by="the workers (their instance role)",
        )
    ]


def _parameter_name(source: str) -> str:
    """An SSM parameter's name from a name or an ARN (``arn:aws:ssm:...:parameter/wire/x`` is ``/wire/x``)."""
    if source.startswith("arn:"):
        tail = source.split(":parameter", 1)[-1]
        return tail if tail.startswith("/") and tail.count("/") > 1 else tail.lstrip("/")
    return source


def _image_summary(reply: dict[str, Any], seen: dict[str, Any]) -> str:
    images = reply.get("Images", [])
    if not images:
        raise base.NotFound("no such image visible to this account")
    image = images[0]
    seen.update(image)
    if image.get("State", "available") != "available":
        raise base.Unusable(f"{image.get('Name', '?')} is {image.get('State')}, not available: launches would fail")
    return f"{image.get('Name', '?')} ({image.get('State', '?')}, {image.get('Architecture', '?')})"


def _type_summary(reply: dict[str, Any], image: dict[str, Any]) -> str:
    types = reply.get("InstanceTypes", [])
    if not types:
        raise base.NotFound("no such instance type in this region")
    found = types[0]
    arches = found.get("ProcessorInfo", {}).get("SupportedArchitectures", [])
    wanted = image.get("Architecture")
    if wanted and arches and wanted not in arches:
        raise base.Unusable(f"it runs {', '.join(arches)}; the image is {wanted}")
    vcpus = found.get("VCpuInfo", {}).get("DefaultVCpus", "?")
    return f"{vcpus} vCPU, {found.get('MemoryInfo', {}).get('SizeInMiB', '?')} MiB, {', '.join(arches) or '?'}"


def _quote(raw: Any) -> tuple[str, str, float, float] | None:
    """One DescribeSpotPriceHistory entry as (type, zone, quoted at, price per hour); None if it is not one."""
    try:
        stamp = raw.get("Timestamp")
        at = stamp.timestamp() if isinstance(stamp, datetime) else 0.0
        price = float(raw["SpotPrice"])
        return str(raw["InstanceType"]), str(raw.get("AvailabilityZone", "")), at, price
    except (AttributeError, KeyError, TypeError, ValueError):
        return None


def _spot_summary(reply: dict[str, Any]) -> str:
    prices = sorted(float(q["SpotPrice"]) for q in reply.get("SpotPriceHistory", []))
    if not prices:
        raise base.NotFound("EC2 quotes no Linux spot price for this type here: the configured price would be kept")
    return f"{prices[0]:g} to {prices[-1]:g} USD an hour over {len(prices)} quote(s)"


def _region_summary(reply: dict[str, Any], config: Ec2Config) -> str:
    regions = reply.get("Regions", [])
    if not regions:
        raise base.NotFound(f"this account sees no region {config.region}")
    region = regions[0]
    status = region.get("OptInStatus", "")
    if status == "not-opted-in":
        raise base.Unusable(f"{config.region} is not enabled for this account (an opt-in region)")
    endpoint = config.endpoint_url or region.get("Endpoint", "?")
    return f"endpoint {endpoint}" + (f" ({status})" if status else "")


def _check(
    call: str, subject: str, fn: Callable[[], Any], summary: Callable[[Any], str], needed_by: str = "the daemon"
) -> base.ProbeCheck:
    return base.check(call, subject, fn, summary, _outcome, needed_by)


def _outcome(exc: Exception) -> tuple[str, str]:
    from botocore import exceptions as bx

    if isinstance(exc, bx.ClientError):
        error = exc.response.get("Error", {})
        code = str(error.get("Code", "Unknown"))
        status = int(exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0) or 0)
        message = _short(str(error.get("Message", "")) or code)
        if code == "DryRunOperation":
            return base.WORKS, "allowed (nothing launched)"
        kind = kind_of_code(code, status)
        if kind == "auth" or status == 403:
            return base.DENIED, f"{code}: {message}" if code != str(status) else f"HTTP {status}"
        if "NotFound" in code or kind == "not_found" or code in _MISSING:
            return base.NOT_FOUND, f"{code}: {message}"
        return base.PROBE_FAILED, f"{code}: {message}"
    error = map_error(exc, "probe")
    if error.kind == "auth":
        return base.DENIED, _short(str(error))
    if error.kind == "transient":
        return base.PROBE_FAILED, "unreachable: " + _short(str(error))
    return base.PROBE_FAILED, _short(str(error))


_MISSING = {"InvalidInstanceType", "InvalidAMIID.Unavailable", "InvalidParameterValue.InvalidRegion"}


def _short(text: str) -> str:
    """One line: the first line of a message, XML wrappers dropped."""
    found = re.search(r"<Message>(.*?)</Message>", text, re.S)
    return CloudError.clean(found.group(1) if found else text)


PROVIDER = base.Provider(
    name="ec2",
    config=Ec2Config,
    driver=Ec2Driver,
    probe=probe,
    extra="ec2",
    sdk="boto3",
    deliveries=("ssm", "secretsmanager", "file", "inline"),
    loggers=("botocore", "boto3", "urllib3"),
    quoted_currency=lambda section: "USD" if section.get("spot_prices") == "cloud" else None,
)
