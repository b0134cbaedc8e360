"""Execute host addresses and kickstart host addresses to instance ids."""

from __future__ import annotations

from wire_daemon.core.events import EventKind, TaskEvent
from wire_daemon.core.instances import Instance
from wire_daemon.monitor.hosts import HostMap, address_keys, parse_sinful
from wire_daemon.monitor.kickstart import read_kickstart
from wire_daemon.monitor.problems import Problems

from .conftest import SUBMIT

LSST_SLOT = (
    "<10.0.0.33:9618?addrs=10.0.0.33-9618+[2601-248-8500-b50--d234]-9618&alias=test02&noUDP&sock=startd_1499_c48e>"
)


def test_parse_sinful() -> None:
    sinful = parse_sinful(LSST_SLOT)
    assert sinful is not None
    assert (sinful.host, sinful.port, sinful.addrs, sinful.alias) == (
        "10.0.0.33",
        9618,
        ("10.0.0.33", "2601:248:8500:b50::d234"),
        "test02",
    )
    assert parse_sinful("<[2001:db8::1]:9618>").host == "2001:db8::1"  # type: ignore[union-attr]
    assert parse_sinful("10.0.0.1") is None


def test_address_keys() -> None:
    assert address_keys("<10.128.10.69:56487?addrs=10.128.10.69-56487>") == {"ip:10.128.10.69"}
    assert address_keys("slot1_9@n-43.icecube.wisc.edu") == {"name:n-43.icecube.wisc.edu", "name:n-43"}
    assert "ip:10.0.0.7" in address_keys("ip-10-0-0-7.ec2.internal")


def test_host_map_resolves_every_spelling() -> None:
    hosts = HostMap(
        [
            Instance("i-a", 0.0, 4, address="10.0.0.33"),
            Instance("i-b", 0.0, 4, address="ip-10-0-0-7.us-west-2.compute.internal"),
            Instance("i-c", 0.0, 4, address="2001:db8::5"),
        ]
    )
    assert hosts.resolve(LSST_SLOT) == "i-a"
    assert hosts.resolve("<10.0.0.7:9618?addrs=10.0.0.7-9618&alias=ip-10-0-0-7.us-west-2.compute.internal>") == "i-b"
    assert hosts.resolve("10.0.0.7") == "i-b" and hosts.resolve("slot1@ip-10-0-0-7") == "i-b"
    assert hosts.resolve("<[2001:0db8:0:0::5]:9618>") == "i-c"
    assert hosts.resolve("<192.168.1.1:9618>") is None and hosts.resolve(None) is None


def test_kickstart_hostaddr_resolves() -> None:
    record = read_kickstart(SUBMIT / "process_wf_success" / "00" / "00" / "ls_ID0000001.out.000").records[0]  # type: ignore[union-attr]
    hosts = HostMap([Instance("i-w", 0.0, 8, address="128.9.46.53")])
    assert hosts.resolve(record.hostaddr) == "i-w" and hosts.resolve(record.hostname) is None


def test_resolve_event_keeps_unknown_hosts_with_one_warning() -> None:
    problems = Problems()
    hosts = HostMap([Instance("i-a", 0.0, 4, address="10.0.0.33")], problems)
    started = TaskEvent(1.0, EventKind.STARTED, "t", host=LSST_SLOT)
    assert hosts.resolve_event(started).host == "i-a"
    stranger = TaskEvent(2.0, EventKind.STARTED, "u", host="<10.9.9.9:9618>")
    assert hosts.resolve_event(stranger) == stranger and hosts.resolve_event(stranger) == stranger
    assert len(problems.messages) == 1 and "10.9.9.9" in problems.messages[0]
    finished = TaskEvent(3.0, EventKind.FINISHED, "t")
    assert hosts.resolve_event(finished) is finished
