"""Shared helpers for the submit-directory reader tests (fixtures: tests/data/fixtures, see tests/data/SOURCES.md)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

FIXTURES = Path(__file__).resolve().parents[1] / "data" / "fixtures"
SUBMIT = FIXTURES / "pegasus-submit"
EVENTLOG = FIXTURES / "eventlog"
LSST = FIXTURES / "dagman" / "ctrl_bps_htcondor"
KICKSTART = FIXTURES / "kickstart"


def fixture(relative: str) -> Path:
    path = FIXTURES / relative
    assert path.exists(), f"missing fixture {relative}"
    return path


@pytest.fixture
def copy_fixture(tmp_path: Path):
    """Copy a fixture file or directory into tmp_path (writable) and return the copy."""

    def _copy(relative: str) -> Path:
        source = fixture(relative)
        target = tmp_path / source.name
        if source.is_dir():
            shutil.copytree(source, target)
        else:
            shutil.copyfile(source, target)
        return target

    return _copy
