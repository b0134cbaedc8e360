"""The harness's own pure parts, without root or HTCondor: mirror lookup, suite choice, path remapping, user-data."""

from __future__ import annotations

import json
import threading
from pathlib import Path

import pytest

from wire_lab.realpool.chroot import DEFAULT_MIRROR, ChrootSpec, bindings_requirement, host_mirror
from wire_lab.realpool.errors import RealPoolError
from wire_lab.realpool.hypervisor import Hypervisor
from wire_lab.realpool.metadata import MetadataService
from wire_lab.realpool.worker import REMAPPED, boot_settings, parse_cloud_config, remap, render_user_data


def _apt(tmp_path: Path, files: dict[str, str]) -> Path:
    (tmp_path / "sources.list.d").mkdir()
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    return tmp_path


def test_mirror_from_deb822_sources_skips_security(tmp_path: Path) -> None:
    apt = _apt(
        tmp_path,
        {
            "sources.list.d/debian.sources": (
                "Types: deb\nURIs: http://mirror.example/debian-security\n"
                "Suites: bookworm-security\nComponents: main\n\n"
                "Types: deb\n# a comment\nURIs: http://mirror.example/debian/\nSuites: bookworm bookworm-updates\n"
            )
        },
    )
    assert host_mirror(apt) == "http://mirror.example/debian"


def test_the_suite_comes_from_the_environment_and_has_its_own_chroot(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WIRE_REALPOOL_CACHE", "/cache")
    monkeypatch.delenv("WIRE_REALPOOL_SUITE", raising=False)
    assert ChrootSpec.from_env().root == Path("/cache/trixie-condor")
    monkeypatch.setenv("WIRE_REALPOOL_SUITE", "sid")
    assert ChrootSpec.from_env().root == Path("/cache/sid-condor")
    monkeypatch.setenv("WIRE_REALPOOL_SUITE", "../etc")
    with pytest.raises(RealPoolError, match="WIRE_REALPOOL_SUITE"):
        ChrootSpec.from_env()


@pytest.mark.parametrize(
    ("condor_version", "requirement"),
    [
        ("$CondorVersion: 23.9.6 2026-07-12 PackageID: 23.9.6+dfsg-2.1+b10 $", "htcondor>=23.1,<24"),
        ("$CondorVersion: 24.0.11 2025-01-01 BuildID: 1 $", "htcondor==24.0.*"),
        ("$CondorVersion: 25.14.1 2026-10-16 PackageID: 25.14.1+dfsg-1 $", "htcondor>=25.1,<26"),
    ],
)
def test_bindings_of_the_servers_series(condor_version: str, requirement: str) -> None:
    assert bindings_requirement(condor_version) == requirement


def test_bindings_of_no_version_is_an_error() -> None:
    with pytest.raises(RealPoolError, match="no HTCondor version"):
        bindings_requirement("condor_version: not found")


def test_mirror_from_one_line_sources_with_options(tmp_path: Path) -> None:
    lines = "# deb http://old/debian bookworm main\ndeb [signed-by=/k.gpg] http://one.example/debian bookworm main\n"
    apt = _apt(tmp_path, {"sources.list": lines})
    assert host_mirror(apt) == "http://one.example/debian"


def test_mirror_falls_back_to_deb_debian_org(tmp_path: Path) -> None:
    apt = _apt(tmp_path, {"sources.list.d/other.list": "deb https://packages.example/apt stable main\n"})
    assert host_mirror(apt) == DEFAULT_MIRROR


def test_remap_moves_whole_paths_only() -> None:
    root = Path("/w/root")
    text = (
        "SEC_TOKEN_DIRECTORY = /etc/condor/tokens.d\nexec /sbin/poweroff\nTOKEN_SOURCE='/etc/wire-worker/t'\n"
        "MD=http://169.254.169.254\n/etc/condorx stays\nx/etc/condor stays\n#!/bin/sh\n"
        'C="${WIRE_C:-/etc/condor/config.d/99.conf}"\nD=${WIRE_D:-/etc/condor}\n--x/etc/condor stays\n'
    )
    assert remap(text, root, REMAPPED).splitlines() == [
        "SEC_TOKEN_DIRECTORY = /w/root/etc/condor/tokens.d",
        "exec /w/root/sbin/poweroff",
        "TOKEN_SOURCE='/w/root/etc/wire-worker/t'",
        "MD=http://169.254.169.254",
        "/etc/condorx stays",
        "x/etc/condor stays",
        "#!/bin/sh",
        'C="${WIRE_C:-/w/root/etc/condor/config.d/99.conf}"',  # a shell default is a path of its own
        "D=${WIRE_D:-/w/root/etc/condor}",
        "--x/etc/condor stays",
    ]


def test_rendered_user_data_parses_and_names_its_token_delivery() -> None:
    text = render_user_data(
        cloud="ec2",
        pool="p-1",
        condor_host="127.0.0.1:9618",
        token_delivery="file",
        token_source="/etc/wire-worker/pool-token",
    )
    data = parse_cloud_config(text, "i-1")
    paths = [entry["path"] for entry in data["write_files"]]
    assert "/etc/condor/config.d/50-wire-execute.conf" in paths
    assert boot_settings(data)["TOKEN_DELIVERY"] == "file"
    assert boot_settings(data)["TOKEN_SOURCE"] == "/etc/wire-worker/pool-token"
    with pytest.raises(RealPoolError, match="not #cloud-config"):
        parse_cloud_config("#!/bin/sh\n", "i-1")


def test_ends_once_seen_waits_for_an_end_the_hypervisor_records_late() -> None:
    hypervisor = Hypervisor("http://127.0.0.1:1", boot=lambda iid, data: None)  # type: ignore[arg-type,return-value]
    hypervisor._record("kill", "i-early", "terminated")
    hypervisor._record("boot", "i-late", "master pid 1")
    late = threading.Timer(0.3, hypervisor._record, ("kill", "i-late", "terminated"))
    late.start()
    ended = hypervisor.ends_once_seen(["i-early", "i-late"], timeout=10.0)
    assert set(ended) == {"i-early", "i-late"}
    # An instance whose end never comes is left out at the deadline rather than waited on for ever.
    assert set(hypervisor.ends_once_seen(["i-early", "i-never"], timeout=0.2)) == {"i-early"}


class _FakeEc2:
    def describe_instances(self, InstanceIds: list[str]) -> dict[str, object]:  # noqa: N803 (boto3's name)
        life = {"i-spot": {"InstanceLifecycle": "spot"}, "i-od": {}}
        return {"Reservations": [{"Instances": [life[i] for i in InstanceIds if i in life]}]}


def test_the_metadata_service_answers_each_instance_as_its_own_and_serves_a_notice_once_posted() -> None:
    service = MetadataService("http://127.0.0.1:1")
    service._client = _FakeEc2()
    meta = "/latest/meta-data/"
    assert service._reply("i-spot", "/latest/api/token", "PUT")[0] == 200
    assert service._reply("i-spot", meta + "instance-id", "GET") == (200, "i-spot")
    assert service._reply("i-spot", meta + "instance-life-cycle", "GET") == (200, "spot")
    assert service._reply("i-od", meta + "instance-life-cycle", "GET") == (200, "on-demand")
    assert service._reply("i-spot", meta + "spot/instance-action", "GET")[0] == 404
    notice = service.notice("i-spot", 30.0)
    code, body = service._reply("i-spot", meta + "spot/instance-action", "GET")
    assert code == 200 and json.loads(body)["action"] == "terminate" and notice.heard is not None
    assert service._reply("i-od", meta + "spot/instance-action", "GET")[0] == 404  # only the one it was posted for
    assert service.polls == {"i-spot": 2, "i-od": 1}
