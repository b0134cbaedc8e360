"""EC2 worker pool through boto3.

Instances are tagged at launch (TagSpecifications) with our pool name, daemon
id, request id and slot count; listing filters on those tags server-side.
Workers power themselves off when idle (see condor_config/), so instances are
launched with InstanceInitiatedShutdownBehavior=terminate: a worker's own
poweroff ends its billing instead of leaving a stopped instance behind.

Credentials come from boto3's usual chain (the submit host's instance role,
the environment, a profile); this module never reads or logs them.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from wire_daemon.core.errors import CloudError, ConfigError
from wire_daemon.core.instances import FAILED, PENDING, RUNNING, STOPPED, TERMINATED, Instance
from wire_daemon.execute.providers.base import (
    TAG_DAEMON,
    TAG_POOL,
    TAG_REQUEST,
    CloudDriver,
    Ownership,
    slots_from,
)
from wire_daemon.execute.providers.retry import Retrier

log = logging.getLogger(__name__)

USER_DATA_LIMIT = 16384  # bytes before base64, EC2's limit

# EC2 state name -> Instance.state
_STATES = {
    "pending": PENDING,
    "running": RUNNING,
    "stopping": STOPPED,
    "stopped": STOPPED,
    "shutting-down": TERMINATED,
    "terminated": TERMINATED,
}
# Instance.state -> the EC2 state names to ask for
_EC2_STATES = {
    PENDING: ["pending"],
    RUNNING: ["running"],
    STOPPED: ["stopping", "stopped"],
    FAILED: [],
    TERMINATED: ["shutting-down", "terminated"],
}


@dataclass(frozen=True)
class Ec2Config:
    region: str
    image_id: str
    instance_type: str
    subnet_id: str = ""
    security_group_ids: tuple[str, ...] = ()
    key_name: str = ""
    instance_profile: str = ""  # the workers' IAM instance profile: a name or an ARN
    slots_per_instance: int = 4  # Condor slots per worker: an instance type does not say
    endpoint_url: str = ""  # a VPC endpoint, or a test server
    extra_tags: dict[str, str] = field(default_factory=dict)  # e.g. cost allocation

    def validate(self) -> Ec2Config:
        for key in ("region", "image_id", "instance_type"):
            if not getattr(self, key):
                raise ConfigError(f"cloud.ec2.{key} is required")
        if self.slots_per_instance < 1:
            raise ConfigError(f"cloud.ec2.slots_per_instance must be >= 1 (got {self.slots_per_instance!r})")
        if any(k.startswith("wire:") or k.startswith("aws:") for k in self.extra_tags):
            raise ConfigError("cloud.ec2.extra_tags must not use the reserved prefixes 'wire:' or 'aws:'")
        return self


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

    def __init__(
        self,
        config: Ec2Config,
        ownership: Ownership,
        user_data: str,
        client: Any | None = None,
        retrier: Retrier | None = None,
    ) -> None:
        self.config = config.validate()
        super().__init__(ownership, config.slots_per_instance, user_data, retrier)
        self.client = client if client is not None else make_client(config)

    # -- one try of each call -----------------------------------------------

    def _list_owned(self, states: frozenset[str], ids: Sequence[str] | None) -> list[Instance]:
        names = sorted({name for state in states for name in _EC2_STATES[state]})
        return self._describe([("instance-state-name", names)], ids, "list")

    def _find_request(self, request_id: str) -> list[Instance]:
        found = self._describe([(f"tag:{TAG_REQUEST}", [request_id])], None, "launch")
        return sorted(found, key=lambda i: i.instance_id)

    def _launch_missing(self, count: int, request_id: str, user_data: str, existing: list[Instance]) -> list[Instance]:
        if existing:
            # run_instances is all or nothing (MinCount = MaxCount): the request ran.
            if len(existing) != count:
                log.warning("ec2: request %s holds %d instances, not %d", request_id, len(existing), count)
            return existing
        self._check_user_data(user_data, USER_DATA_LIMIT)
        with self._errors("launch"):
            reply = self.client.run_instances(**self._run_args(count, request_id, user_data))
        return [self._instance(raw) for raw in reply.get("Instances", [])]

    def _terminate(self, instance_ids: list[str]) -> None:
        with self._errors("terminate"):
            self.client.terminate_instances(InstanceIds=instance_ids)

    # -- helpers --------------------------------------------------------------

    def _run_args(self, count: int, request_id: str, user_data: str) -> dict[str, Any]:
        cfg = self.config
        tags = {**cfg.extra_tags, **self.ownership.tags(request_id, self.slots_per_instance)}
        tags["Name"] = f"{self.ownership.pool}-{request_id}"
        tag_list = [{"Key": k, "Value": v} for k, v in tags.items()]
        args: dict[str, Any] = {
            "ImageId": cfg.image_id,
            "InstanceType": cfg.instance_type,
            "MinCount": count,
            "MaxCount": count,
            "UserData": user_data,  # boto3 base64-encodes it
            "ClientToken": self._client_token(request_id),
            "InstanceInitiatedShutdownBehavior": "terminate",
            "TagSpecifications": [
                {"ResourceType": "instance", "Tags": tag_list},
                {"ResourceType": "volume", "Tags": tag_list},
            ],
        }
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
        # EC2's idempotency token (at most 64 ASCII characters), unique per pool, daemon and request.
        own = self.ownership
        return hashlib.sha256(f"{own.pool}/{own.daemon_id}/{request_id}".encode()).hexdigest()

    def _describe(
        self, filters: list[tuple[str, list[str]]], ids: Sequence[str] | None, operation: str
    ) -> list[Instance]:
        own = self.ownership
        all_filters = [(f"tag:{TAG_POOL}", [own.pool]), (f"tag:{TAG_DAEMON}", [own.daemon_id]), *filters]
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
        launched = raw.get("LaunchTime")
        return Instance(
            instance_id=raw["InstanceId"],
            launch_time=launched.timestamp() if isinstance(launched, datetime) else 0.0,
            slots=slots_from(tags, self.slots_per_instance),
            state=_STATES.get(raw.get("State", {}).get("Name", ""), PENDING),
            address=raw.get("PrivateIpAddress", ""),
            instance_type=raw.get("InstanceType", ""),
            request_id=tags.get(TAG_REQUEST, ""),
        )

    @contextmanager
    def _errors(self, operation: str) -> Iterator[None]:
        try:
            yield
        except CloudError:
            raise
        except Exception as exc:  # noqa: BLE001 - every SDK failure becomes a CloudError
            raise map_error(exc, operation) from exc


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
