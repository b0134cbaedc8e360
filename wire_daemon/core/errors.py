"""Errors that name the file and the place, so an operator can act on one line."""

from __future__ import annotations

from wire_daemon.core.secrets import scrub


class WireError(Exception):
    """Base for every error the daemon reports to a user instead of a traceback."""


class InputError(WireError):
    """Bad input: a file, and where in it, and what is wrong."""

    def __init__(self, source: str, message: str, where: str | None = None) -> None:
        self.source = source
        self.where = where
        self.detail = message
        place = f"{source}:{where}" if where else source
        super().__init__(f"{place}: {message}")


class WorkflowError(InputError):
    """A workflow description (trace, DAG) that cannot be used."""


class ConfigError(WireError):
    """A configuration value that is missing or out of range."""


class CondorUnreachable(WireError):
    """The schedd or the collector does not answer: weather, not a fault. The daemon holds the pool as it
    is and asks again with back-off; the message is one line naming which daemon and why."""


class CloudError(WireError):
    """A cloud call that failed, reported in one line that never holds a secret.

    ``kind`` tells the caller what to do next: retry later (``transient``,
    ``throttled``), fix credentials (``auth``), wait for or raise a quota
    (``quota``), try another instance type or zone (``capacity``), ignore
    (``not_found`` on a terminate), fix the configuration (``invalid_config``).
    None of them should stop the MAPE loop. ``partial`` holds what a launch
    created before it failed, so the caller can still record it.
    """

    kind = "unknown"
    retryable = False

    _MAX_DETAIL = 300

    def __init__(
        self,
        provider: str,
        operation: str,
        detail: str,
        code: str | None = None,
        partial: tuple = (),
    ) -> None:
        self.provider = provider
        self.operation = operation
        self.code = code
        self.detail = self.clean(detail)
        self.partial = tuple(partial)
        label = f"{self.kind} ({code})" if code else self.kind
        super().__init__(f"{provider} {operation}: {label}: {self.detail}")

    @classmethod
    def clean(cls, text: str) -> str:
        """One line, no secret, bounded length: safe for logs and the decisions log."""
        line = " ".join(str(text)[: 8 * cls._MAX_DETAIL].split())
        line = scrub(line)  # an SDK's message may quote a request's body or headers
        if len(line) > cls._MAX_DETAIL:
            line = line[: cls._MAX_DETAIL - 3] + "..."
        return line or "no detail given"

    @classmethod
    def of_kind(cls, kind: str) -> type[CloudError]:
        """The CloudError subclass for a kind name (the base class for an unknown kind)."""
        for sub in CloudError.__subclasses__():
            if sub.kind == kind:
                return sub
        return CloudError

    def again(self, detail: str) -> CloudError:
        """The same error with a new detail (e.g. after retries ran out)."""
        return type(self)(self.provider, self.operation, detail, self.code, self.partial)


class CloudTransientError(CloudError):
    """A 5xx answer, a dropped connection or a timeout: the same call may work later."""

    kind = "transient"
    retryable = True


class CloudThrottledError(CloudError):
    """The cloud asked us to slow down (RequestLimitExceeded, HTTP 429)."""

    kind = "throttled"
    retryable = True


class CloudAuthError(CloudError):
    """Missing, wrong or expired credentials, or a policy that forbids the call."""

    kind = "auth"


class CloudQuotaError(CloudError):
    """An account or project limit (instances, vCPUs) stops the launch."""

    kind = "quota"


class CloudCapacityError(CloudError):
    """The cloud has no room for this instance type here right now."""

    kind = "capacity"


class CloudNotFoundError(CloudError):
    """The instance (or other resource) does not exist."""

    kind = "not_found"


class CloudConfigError(CloudError):
    """The cloud rejected a value from our configuration (image, subnet, flavor, ...)."""

    kind = "invalid_config"
