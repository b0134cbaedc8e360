"""Map where a task runs (an execute host address, a kickstart hostaddr) to a worker instance.

The job event log names the execute slot by its HTCondor *sinful string*,
``<10.0.0.33:9618?addrs=10.0.0.33-9618+[2601-248-8500-b50--d234]-9618&alias=test02&...>``:
the primary address, the other addresses it listens on (IPv6 ones in brackets
with ``:`` written as ``-``) and the machine's name (``alias``). Kickstart gives
``hostaddr`` (an IP) and ``hostname``. A cloud instance has a private address
(IP, or a DNS name).

``HostMap`` matches any of these against the instances' addresses (ours):
IPs compare as addresses (so IPv6 spellings agree), names compare without
case, by full name and by short name (before the first dot), and an EC2-style
private name ``ip-10-0-0-5[.region.compute.internal]`` also stands for the
address 10.0.0.5. Ports are ignored: all slots of a worker are one instance.
"""

from __future__ import annotations

import contextlib
import ipaddress
import re
from collections.abc import Iterable
from dataclasses import dataclass, replace

from wire_daemon.core.events import EventKind, TaskEvent
from wire_daemon.core.instances import Instance
from wire_daemon.monitor.problems import Problems

_EC2_NAME = re.compile(r"^ip-(\d{1,3})-(\d{1,3})-(\d{1,3})-(\d{1,3})$")


@dataclass(frozen=True)
class Sinful:
    host: str  # the primary address or name
    port: int | None
    addrs: tuple[str, ...] = ()  # every other address it listens on
    alias: str | None = None  # the machine's name


def parse_sinful(text: str) -> Sinful | None:
    """``<host:port?params>`` -> ``Sinful``; None if it is not one."""
    text = text.strip()
    if not (text.startswith("<") and text.endswith(">")):
        return None
    hostport, _, query = text[1:-1].partition("?")
    host, port = _split_host_port(hostport)
    if not host:
        return None
    params = dict(p.partition("=")[::2] for p in query.split("&") if p)
    addrs = tuple(a for a in (_addr_host(x) for x in params.get("addrs", "").split("+") if x) if a)
    return Sinful(host, port, addrs, params.get("alias") or None)


def address_keys(text: str | None) -> set[str]:
    """Every normalised key an address, name, sinful string or ``slot@host`` stands for."""
    if not text:
        return set()
    sinful = parse_sinful(text)
    if sinful is not None:
        parts = [sinful.host, *sinful.addrs] + ([sinful.alias] if sinful.alias else [])
    else:
        parts = [text.strip().rsplit("@", 1)[-1]]
    keys: set[str] = set()
    for part in parts:
        keys |= _keys_of(part)
    return keys


class HostMap:
    """Instance id of the worker an address belongs to."""

    def __init__(self, instances: Iterable[Instance] = (), problems: Problems | None = None) -> None:
        self.problems = problems or Problems()
        self._by_key: dict[str, str] = {}
        self._unresolved: set[str] = set()
        for instance in instances:
            self.add(instance.instance_id, instance.address)

    def add(self, instance_id: str, *addresses: str) -> None:
        for address in addresses:
            for key in address_keys(address):
                self._by_key[key] = instance_id

    def resolve(self, address: str | None) -> str | None:
        for key in sorted(address_keys(address)):
            found = self._by_key.get(key)
            if found is not None:
                return found
        return None

    def resolve_event(self, event: TaskEvent) -> TaskEvent:
        """A STARTED event with ``host`` turned into the instance id.

        An address of no known instance (a static worker, or an instance we
        have not listed yet) is kept as it is, with one warning per address.
        """
        if event.kind != EventKind.STARTED or not event.host:
            return event
        instance = self.resolve(event.host)
        if instance is not None:
            return replace(event, host=instance)
        if event.host not in self._unresolved:
            self._unresolved.add(event.host)
            self.problems.warn("hosts", f"task {event.task_id} runs on {event.host}, which is none of our instances")
        return event


def _split_host_port(text: str) -> tuple[str, int | None]:
    if text.startswith("["):
        host, _, rest = text[1:].partition("]")
        port = rest[1:] if rest.startswith(":") else ""
    elif text.count(":") == 1:
        host, port = text.split(":")
    else:
        host, port = text, ""
    return host, int(port) if port.isdigit() else None


def _addr_host(item: str) -> str | None:
    """``10.0.0.33-9618`` -> 10.0.0.33; ``[2601-248--d234]-9618`` -> 2601:248::d234."""
    if item.startswith("["):
        inner = item[1:].partition("]")[0]
        return inner.replace("-", ":") or None
    host, _, _ = item.rpartition("-")
    return host or None


def _keys_of(part: str) -> set[str]:
    part = part.strip().lower().rstrip(".")
    if not part:
        return set()
    try:
        return {"ip:" + ipaddress.ip_address(part.strip("[]")).compressed}
    except ValueError:
        pass
    short = part.split(".", 1)[0]
    keys = {"name:" + part, "name:" + short}
    match = _EC2_NAME.match(short)
    if match:
        with contextlib.suppress(ValueError):
            keys.add("ip:" + ipaddress.ip_address(".".join(match.groups())).compressed)
    return keys
