"""The README's install recipe resolves for every HTCondor series it names, and for no series it excludes.

The series come from the README itself: the table of constraints lines in
"Install as a service" and the ``awk`` line that picks one from a host's
``condor_version``. Each table line is resolved by pip (``install --dry-run``,
so nothing is installed) together with the project's own install_requires,
in a fresh venv: the operator's ``pip install -c constraints.txt .``, without
the download of the wheels. Needs the package index (CI has it).
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.version import Version

from wire_lab.realpool.chroot import bindings_requirement

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
README = REPO / "README.md"
SECTION = "## Install as a service"
# One host version per table row, and one below the supported range.
HOST_VERSIONS = ("23.9.6", "24.0.11", "24.12.5", "25.0.2", "25.14.1")
UNSUPPORTED_HOST = "23.0.28"


def install_section() -> str:
    text = README.read_text()
    start = text.index(SECTION)
    end = text.find("\n## ", start + len(SECTION))
    return text[start : end if end >= 0 else len(text)]


def table_lines() -> list[str]:
    """The constraints lines of the README's table: its rows' last cells."""
    rows = [line.strip() for line in install_section().splitlines() if line.strip().startswith("|")]
    found = []
    for row in rows:
        cells = [cell.strip() for cell in row.strip("|").split("|")]
        match = re.fullmatch(r"`(htcondor[^`]+)`", cells[-1])
        if match:
            found.append(match.group(1))
    return found


def awk_program() -> list[str]:
    """The README's ``condor_version | awk ...`` step, as an argv that reads condor_version's output."""
    for line in install_section().splitlines():
        if "condor_version | awk" in line:
            pipeline = line.strip().split(" | ", 1)[1]
            return shlex.split(pipeline.split(" > ", 1)[0])
    raise AssertionError("the README's install recipe has no `condor_version | awk` line")


def awk_line(host_version: str) -> str:
    # condor_version prints two lines; the recipe reads the first.
    output = f"$CondorVersion: {host_version} 2025-01-01 BuildID: 1 $\n$CondorPlatform: x86_64_Debian $\n"
    done = subprocess.run(awk_program(), input=output, capture_output=True, text=True, check=True, timeout=30)
    return done.stdout.strip()


def test_the_table_names_at_least_two_major_series():
    lines = table_lines()
    majors = {re.findall(r"\d+", line)[0] for line in lines}
    assert len(lines) >= 2 and len(majors) >= 2, lines


@pytest.mark.parametrize("host", HOST_VERSIONS)
def test_the_awk_line_writes_the_tables_line_for_each_host(host):
    written = awk_line(host)
    assert written in table_lines()
    assert written == bindings_requirement(f"$CondorVersion: {host} $")  # the real-pool benchmark's rule


def test_every_table_line_comes_from_some_host():
    assert sorted(table_lines()) == sorted({awk_line(host) for host in HOST_VERSIONS})


@pytest.fixture(scope="module")
def fresh_pip(tmp_path_factory) -> list[str]:
    venv = tmp_path_factory.mktemp("recipe") / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
    return [str(venv / "bin" / "python"), "-m", "pip"]


def resolve(pip: list[str], constraint: str, workdir: Path) -> subprocess.CompletedProcess[str]:
    """The recipe's install with a constraints file holding ``constraint``, resolved but not installed."""
    constraints = workdir / "constraints.txt"
    constraints.write_text(constraint + "\n")
    report = workdir / "report.json"
    argv = [*pip, "install", "--dry-run", "--quiet", "--report", str(report), "-c", str(constraints), str(REPO)]
    # The venv is throwaway: its pip need not look for a newer pip.
    env = os.environ | {"PIP_DISABLE_PIP_VERSION_CHECK": "1"}
    return subprocess.run(argv, capture_output=True, text=True, timeout=900, env=env, cwd=workdir)


def resolved_htcondor(report: Path) -> Version:
    installs = json.loads(report.read_text())["install"]
    versions = [item["metadata"]["version"] for item in installs if item["metadata"]["name"].lower() == "htcondor"]
    assert len(versions) == 1, installs
    return Version(versions[0])


def setup_cfg_htcondor() -> Requirement:
    text = (REPO / "setup.cfg").read_text()
    match = re.search(r"^\s+(htcondor\b[^\n]*)$", text, re.MULTILINE)
    assert match, "setup.cfg's install_requires names no htcondor"
    return Requirement(match.group(1).strip())


@pytest.mark.parametrize("constraint", table_lines())
def test_the_recipe_resolves_for_each_named_series(fresh_pip, tmp_path, constraint):
    done = resolve(fresh_pip, constraint, tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    version = resolved_htcondor(tmp_path / "report.json")
    assert Requirement(constraint).specifier.contains(version)
    assert setup_cfg_htcondor().specifier.contains(version)


def test_the_recipe_refuses_a_series_below_the_range(fresh_pip, tmp_path):
    # 23.0's bindings have no htcondor2: the README says pip refuses the pin, and it must.
    constraint = awk_line(UNSUPPORTED_HOST)
    assert constraint == "htcondor==23.0.*"
    done = resolve(fresh_pip, constraint, tmp_path)
    assert done.returncode != 0
    assert "ResolutionImpossible" in done.stderr or "conflict" in done.stderr.lower(), done.stderr[-2000:]
