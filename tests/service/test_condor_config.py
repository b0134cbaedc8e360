"""condor_config/submit-host.conf and wire-daemon-master.conf parse as HTCondor configuration.

Two checks:

* HTCondor's own parser, through the htcondor2 bindings: a subprocess imports
  htcondor2 with CONDOR_CONFIG pointing at a temporary top-level config (a
  central manager + submit host with the recommended security) that includes
  both snippets, calls ``htcondor2.reload_config()`` and prints ``param``
  values. The bindings parse the configuration on import and exit non-zero,
  naming the file and line, on a syntax error. Skipped when htcondor2 is not
  installed.
* A strict local check that always runs: every statement is ``NAME = value``,
  ``use CATEGORY : TEMPLATE`` or ``include : path``, ``$(...)`` and double
  quotes are balanced, no name is set twice, and every block that sets a
  knob carries a comment.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SUBMIT_HOST = ROOT / "condor_config" / "submit-host.conf"
MASTER = ROOT / "condor_config" / "wire-daemon-master.conf"
SNIPPETS = (SUBMIT_HOST, MASTER)

_PARAMS = """
import json, sys
import htcondor2
htcondor2.reload_config()
print(json.dumps({k: htcondor2.param.get(k) for k in json.loads(sys.argv[1])}))
"""


def _condor_params(tmp_path: Path, includes: list[Path], keys: list[str]) -> subprocess.CompletedProcess:
    top = tmp_path / "condor_config"
    lines = [
        "CONDOR_HOST = submit.example.org",
        "use SECURITY : recommended_v9_0",
        "use ROLE : CentralManager",
        "use ROLE : Submit",
        f"LOCAL_DIR = {tmp_path / 'local'}",
        *(f"include : {path}" for path in includes),
    ]
    top.write_text("\n".join(lines) + "\n")
    env = {**os.environ, "CONDOR_CONFIG": str(top)}
    env.pop("_CONDOR_LOCAL_CONFIG_FILE", None)
    return subprocess.run(
        [sys.executable, "-c", _PARAMS, json.dumps(keys)],
        capture_output=True,
        text=True,
        env=env,
        check=False,
        timeout=120,
    )


@pytest.fixture(scope="module")
def htcondor2_available() -> None:
    pytest.importorskip("htcondor2", reason="htcondor2 bindings not installed: only the strict local check runs")


@pytest.mark.slow
def test_htcondor_parses_both_snippets(htcondor2_available, tmp_path: Path) -> None:
    keys = [
        "DAEMON_LIST",
        "WIRE",
        "WIRE_ARGS",
        "WIRE_USERID",
        "WIRE_ENVIRONMENT",
        "WIRE_LOG",
        "MASTER_WIRE_BACKOFF_CEILING",
        "MAX_JOBS_RUNNING",
        "ALLOW_ADVERTISE_STARTD",
        "ALLOW_ADVERTISE_MASTER",
        "SEC_DEFAULT_AUTHENTICATION_METHODS",
        "JOB_DEFAULT_LEASE_DURATION",
        "NEGOTIATOR_INTERVAL",
        "DAGMAN_MAX_JOBS_SUBMITTED",
        "DAGMAN_MAX_SUBMITS_PER_INTERVAL",
        "TRUST_DOMAIN",
        "DC_DAEMON_LIST",
    ]
    run = _condor_params(tmp_path, list(SNIPPETS), keys)
    assert run.returncode == 0, run.stderr
    p = json.loads(run.stdout.strip().splitlines()[-1])
    daemons = re.split(r"[,\s]+", p["DAEMON_LIST"].strip())
    assert {"MASTER", "SCHEDD", "COLLECTOR", "NEGOTIATOR", "WIRE"} <= set(daemons)
    assert p["WIRE"] == "/opt/wire-daemon/bin/wire-daemon"
    assert p["WIRE_ARGS"] == "run --config /etc/wire-daemon/config.yaml"
    assert p["WIRE_USERID"] == "wire"
    assert "WIRE" not in (p["DC_DAEMON_LIST"] or "")
    assert p["WIRE_ENVIRONMENT"].startswith('"') and "_CONDOR_SEC_TOKEN_DIRECTORY=" in p["WIRE_ENVIRONMENT"]
    assert p["WIRE_LOG"].startswith("/var/log/wire-daemon/")
    assert int(p["MASTER_WIRE_BACKOFF_CEILING"]) == 600
    assert int(p["MAX_JOBS_RUNNING"]) >= 10000
    worker = f"condor@{p['TRUST_DOMAIN']}"
    assert p["ALLOW_ADVERTISE_STARTD"].split() == [worker]
    assert p["ALLOW_ADVERTISE_MASTER"].split() == [worker]
    assert "IDTOKENS" in p["SEC_DEFAULT_AUTHENTICATION_METHODS"]
    assert int(p["JOB_DEFAULT_LEASE_DURATION"]) == 360
    assert int(p["NEGOTIATOR_INTERVAL"]) == 20
    assert int(p["DAGMAN_MAX_JOBS_SUBMITTED"]) == 0
    assert int(p["DAGMAN_MAX_SUBMITS_PER_INTERVAL"]) == 500


@pytest.mark.slow
def test_htcondor_refuses_a_broken_snippet(htcondor2_available, tmp_path: Path) -> None:
    """The check above can fail: HTCondor names the file of a bad line."""
    broken = tmp_path / "broken.conf"
    broken.write_text(MASTER.read_text() + "this line is not a knob\n")
    run = _condor_params(tmp_path, [SUBMIT_HOST, broken], ["WIRE"])
    assert run.returncode != 0
    assert str(broken) in run.stderr


# -- strict local check ----------------------------------------------------------------------

_NAME = r"[A-Za-z_][A-Za-z0-9_.]*"
_ASSIGN = re.compile(rf"^({_NAME})\s*=(.*)$")
_USE = re.compile(r"^use\s+[A-Za-z]+\s*:\s*[A-Za-z0-9_]+(\s*,\s*[A-Za-z0-9_]+)*$", re.IGNORECASE)
_INCLUDE = re.compile(r"^include\s*:\s*\S+$", re.IGNORECASE)


def _statements(path: Path) -> list[tuple[int, str]]:
    """(line number, statement) with comments dropped and backslash continuations joined."""
    out: list[tuple[int, str]] = []
    pending, start = "", 0
    for number, raw in enumerate(path.read_text().splitlines(), 1):
        line = raw.strip()
        if not pending and (not line or line.startswith("#")):
            continue
        start = start or number
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        out.append((start, pending + line))
        pending, start = "", 0
    assert not pending, f"{path}: file ends inside a continued line"
    return out


def _check_value(where: str, value: str) -> None:
    depth = 0
    for i, ch in enumerate(value):
        if value.startswith("$(", i):
            depth += 1
        elif ch == ")" and depth:
            depth -= 1
    assert depth == 0, f"{where}: unbalanced $( )"
    assert value.count('"') % 2 == 0, f"{where}: unbalanced double quote"


def _check_strict(path: Path) -> dict[str, str]:
    names: dict[str, str] = {}
    for number, statement in _statements(path):
        where = f"{path.name}:{number}"
        if _USE.match(statement) or _INCLUDE.match(statement):
            continue
        match = _ASSIGN.match(statement)
        assert match, f"{where}: not NAME = value: {statement!r}"
        name, value = match.group(1), match.group(2).strip()
        assert name.upper() not in names, f"{where}: {name} set twice"
        _check_value(where, value)
        names[name.upper()] = value
    return names


def _undocumented_blocks(path: Path) -> list[str]:
    blocks = re.split(r"\n\s*\n", path.read_text())
    return [
        b.strip().splitlines()[0]
        for b in blocks
        if any(_ASSIGN.match(line.strip()) for line in b.splitlines())
        and not any(line.strip().startswith("#") for line in b.splitlines())
    ]


@pytest.mark.parametrize("path", SNIPPETS, ids=lambda p: p.name)
def test_strict_local_syntax_and_comments(path: Path) -> None:
    names = _check_strict(path)
    assert names, f"{path.name} sets nothing"
    assert _undocumented_blocks(path) == []


def test_strict_check_catches_errors(tmp_path: Path) -> None:
    bad = tmp_path / "bad.conf"
    for text, message in (
        ("FOO bar\n", "not NAME = value"),
        ("# c\nA = $(B\n", r"unbalanced \$"),
        ('# c\nA = "x\n', "double quote"),
        ("# c\nA = 1\nA = 2\n", "set twice"),
    ):
        bad.write_text(text)
        with pytest.raises(AssertionError, match=message):
            _check_strict(bad)
    bad.write_text("A = 1\n")
    assert _undocumented_blocks(bad) == ["A = 1"]


def test_master_snippet_keeps_secrets_out() -> None:
    names = _check_strict(MASTER)
    assert names["WIRE_USERID"] == "wire"
    environment = names["WIRE_ENVIRONMENT"].strip('"').split()
    for item in environment:
        key, _, value = item.partition("=")
        assert value, item
        assert not re.search(r"(?i)secret|password|AKIA|ASIA|^eyJ", value), item
        assert not key.endswith(("_SECRET", "_PASSWORD", "_KEY", "_TOKEN")), item
