"""systemd/wire-daemon.service passes `systemd-analyze verify` with no warning.

`systemd-analyze verify` also checks that ExecStart= names an executable file.
The unit's /opt/wire-daemon/bin/wire-daemon exists only on an installed host,
so the test verifies a temporary copy whose ExecStart= points at the
wire-daemon of the running Python environment (or /bin/true when there is
none); every other line is the committed unit's. The submit-root drop-in is
verified the same way, placed in the copy's `wire-daemon.service.d/`.

When systemd-analyze is missing, the session fixture installs Debian's
systemd package if it can (root and apt-get), else the test is skipped with
the reason.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
UNIT = ROOT / "systemd" / "wire-daemon.service"
DROP_IN = ROOT / "systemd" / "submit-root.conf.example"
ENV_EXAMPLE = ROOT / "systemd" / "wire-daemon.env.example"
EXEC_START = "/opt/wire-daemon/bin/wire-daemon run --config /etc/wire-daemon/config.yaml"
APT_TIMEOUT_S = 900


def _install_systemd() -> str | None:
    """apt-get update once, then install systemd; None (with the reason skipped) when it cannot."""
    if os.geteuid() != 0 or not shutil.which("apt-get"):
        pytest.skip("systemd-analyze is missing and cannot be installed here (needs root and apt-get)")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    for command in (["apt-get", "update"], ["apt-get", "install", "-y", "--no-install-recommends", "systemd"]):
        run = subprocess.run(command, env=env, capture_output=True, text=True, check=False, timeout=APT_TIMEOUT_S)
        if run.returncode != 0:
            tail = (run.stderr or run.stdout).strip().splitlines()[-1:] or ["no output"]
            pytest.skip(f"could not install systemd for systemd-analyze: {' '.join(command)} failed: {tail[0]}")
    return shutil.which("systemd-analyze")


@pytest.fixture(scope="session")
def systemd_analyze() -> str:
    path = shutil.which("systemd-analyze") or _install_systemd()
    if not path:
        pytest.skip("systemd-analyze is still missing after installing systemd")
    return path


def _runnable_wire_daemon() -> str:
    candidates = [Path(sys.executable).parent / "wire-daemon", shutil.which("wire-daemon"), "/bin/true"]
    for candidate in candidates:
        if candidate and os.access(candidate, os.X_OK) and not re.search(r"\s", str(candidate)):
            return str(candidate)
    pytest.skip("no executable to stand in for ExecStart")


def _verify(systemd_analyze: str, unit_dir: Path) -> subprocess.CompletedProcess:
    text = UNIT.read_text()
    assert text.count(f"ExecStart={EXEC_START}\n") == 1
    stand_in = text.replace("ExecStart=/opt/wire-daemon/bin/wire-daemon ", f"ExecStart={_runnable_wire_daemon()} ")
    copy = unit_dir / "wire-daemon.service"
    copy.write_text(stand_in)
    env = {**os.environ, "SYSTEMD_COLORS": "0", "SYSTEMD_PAGER": ""}
    return subprocess.run(
        [systemd_analyze, "verify", str(copy)], capture_output=True, text=True, env=env, check=False, timeout=120
    )


@pytest.mark.slow
def test_unit_verifies_without_warnings(systemd_analyze: str, tmp_path: Path) -> None:
    run = _verify(systemd_analyze, tmp_path)
    assert run.returncode == 0, run.stdout + run.stderr
    assert (run.stdout + run.stderr).strip() == "", run.stdout + run.stderr


@pytest.mark.slow
def test_unit_with_submit_root_drop_in_verifies(systemd_analyze: str, tmp_path: Path) -> None:
    (tmp_path / "wire-daemon.service.d").mkdir()
    (tmp_path / "wire-daemon.service.d" / "submit-root.conf").write_text(DROP_IN.read_text())
    run = _verify(systemd_analyze, tmp_path)
    assert run.returncode == 0, run.stdout + run.stderr
    assert (run.stdout + run.stderr).strip() == "", run.stdout + run.stderr


@pytest.mark.slow
def test_verify_catches_a_bad_unit(systemd_analyze: str, tmp_path: Path) -> None:
    """The check above can fail: an unknown key is reported."""
    (tmp_path / "wire-daemon.service.d").mkdir()
    (tmp_path / "wire-daemon.service.d" / "typo.conf").write_text("[Service]\nProtectSytem=strict\n")
    run = _verify(systemd_analyze, tmp_path)
    assert "ProtectSytem" in run.stdout + run.stderr


def _settings(path: Path) -> dict[str, list[str]]:
    """KEY -> values in file order (systemd allows repeated keys); comments and sections dropped."""
    settings: dict[str, list[str]] = {}
    for line in path.read_text().splitlines():
        if line and not line.startswith(("#", ";", "[")):
            key, _, value = line.partition("=")
            settings.setdefault(key.strip(), []).append(value.strip())
    return settings


def test_unit_settings() -> None:
    s = _settings(UNIT)
    expected = {
        "User": "wire",
        "Group": "wire",
        "ExecStart": EXEC_START,
        "ExecReload": "/bin/kill -HUP $MAINPID",
        "Restart": "on-failure",
        "KillSignal": "SIGTERM",
        "EnvironmentFile": "-/etc/wire-daemon/env",
        "StateDirectory": "wire-daemon",
        "LogsDirectory": "wire-daemon",
        "ProtectSystem": "strict",
        "ProtectHome": "true",
        "PrivateTmp": "true",
        "NoNewPrivileges": "true",
        "PrivateDevices": "true",
        "ProtectKernelTunables": "true",
        "ProtectKernelModules": "true",
        "ProtectKernelLogs": "true",
        "ProtectControlGroups": "true",
        "RestrictSUIDSGID": "true",
        "LockPersonality": "true",
        "RestrictRealtime": "true",
        "RestrictNamespaces": "true",
        "SystemCallArchitectures": "native",
        "CapabilityBoundingSet": "",
    }
    for key, value in expected.items():
        assert s.get(key) == [value], key
    assert int(s["TimeoutStopSec"][0]) >= 300  # long enough to finish an iteration
    assert 5 <= int(s["RestartSec"][0]) <= 300
    assert int(s["StartLimitBurst"][0]) >= 1 and int(s["StartLimitIntervalSec"][0]) >= 60


def test_drop_in_binds_the_submit_root_read_only() -> None:
    s = _settings(DROP_IN)
    assert s["ProtectHome"] == ["tmpfs"]
    assert s["BindReadOnlyPaths"] == ["/home/pegasus/submit"]


def test_env_example_holds_no_secret() -> None:
    allowed = {
        "AWS_CONFIG_FILE",
        "AWS_SHARED_CREDENTIALS_FILE",
        "AWS_PROFILE",
        "AWS_DEFAULT_REGION",
        "OS_CLIENT_CONFIG_FILE",
        "OS_CLOUD",
        "_CONDOR_SEC_TOKEN_DIRECTORY",
        "CONDOR_CONFIG",
    }
    assignments = [
        line.lstrip("#") for line in ENV_EXAMPLE.read_text().splitlines() if re.match(r"^#?[A-Z_][A-Z0-9_]*=", line)
    ]
    assert assignments, "the example documents no variable"
    for line in assignments:
        name, _, value = line.partition("=")
        assert name in allowed, line
        assert not re.search(r"(?i)secret|password|token=|AKIA|ASIA", name + "=" + value), line
    assert not any(re.match(r"^[A-Z_]+=", line) for line in ENV_EXAMPLE.read_text().splitlines()), (
        "every value stays commented out"
    )
