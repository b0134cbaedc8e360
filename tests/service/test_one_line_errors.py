"""Issue 13, item 6: one line naming the file, key or flag, never a traceback.

Each case runs the real command in a subprocess and reads its stderr: exit
status 2 and a single ``wire-daemon: error:`` line.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

# The slow tier (-m slow): every test starts the CLI as a process.
pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]


def _cli(*args: str) -> tuple[int, list[str]]:
    done = subprocess.run(
        [sys.executable, "-m", "wire_daemon.cli.main", *args], capture_output=True, text=True, timeout=120
    )
    return done.returncode, done.stderr.strip().splitlines()


@pytest.fixture(scope="module")
def decisions_log(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("replay") / "decisions.jsonl"
    code, err = _cli("replay", "--decisions-out", str(out))
    assert code == 0, err
    return out


@pytest.mark.parametrize(
    "content, what",
    [("", "empty"), ("\n\n", "blank lines"), ('{"a": 1}\n{"b": 2}\n', "unrelated JSON"), ("not json\n", "text")],
)
def test_report_on_a_log_without_decisions(tmp_path, content, what):
    pytest.importorskip("matplotlib", reason="the [plots] extra is not installed")
    log = tmp_path / "x.jsonl"
    log.write_text(content)
    code, err = _cli("report", str(log), "--out", str(tmp_path / "r.png"))
    assert code == 2 and err[-1].startswith(f"wire-daemon: error: {log}: no decision record to draw"), (what, err)
    assert not any("Traceback" in line for line in err)


def test_report_out_in_a_place_that_cannot_be_made(tmp_path, decisions_log):
    pytest.importorskip("matplotlib", reason="the [plots] extra is not installed")
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    out = blocker / "sub" / "r.png"
    code, err = _cli("report", str(decisions_log), "--out", str(out))
    assert (code, len(err)) == (2, 1) and err[0].startswith(f"wire-daemon: error: {out}: cannot write the report")


def test_report_out_in_a_missing_directory_is_made(tmp_path, decisions_log):
    pytest.importorskip("matplotlib", reason="the [plots] extra is not installed")
    out = tmp_path / "new" / "dir" / "r.png"
    code, err = _cli("report", str(decisions_log), "--out", str(out))
    assert code == 0 and out.read_bytes()[:4] == b"\x89PNG", err


def test_report_out_that_is_not_a_png(tmp_path, decisions_log):
    code, err = _cli("report", str(decisions_log), "--out", str(tmp_path / "x.txt"))
    assert (code, len(err)) == (2, 1)
    assert (
        err[0]
        == f"wire-daemon: error: --out {tmp_path / 'x.txt'}: the report is a PNG image; give a file name ending in .png"
    )


@pytest.mark.parametrize(
    "flag, value",
    [("--time-scale", "0"), ("--interval", "-1"), ("--charging-unit", "0"), ("--bandwidth", "0"), ("--slots", "0")],
)
def test_replay_names_the_flag_not_the_config_key(flag, value):
    code, err = _cli("replay", flag, value)
    assert (code, len(err)) == (2, 1) and err[0].startswith(f"wire-daemon: error: {flag} must be > 0"), err
    assert "emulation." not in err[0] and "steering." not in err[0]


def test_decisions_without_a_log_yet(tmp_path):
    config = tmp_path / "c.yaml"
    config.write_text(f"log: {{decisions_path: {tmp_path / 'none.jsonl'}}}\nstate_path: {tmp_path / 's.sqlite'}\n")
    code, err = _cli("decisions", "--config", str(config))
    assert (code, len(err)) == (2, 1) and "no decisions log yet (log.decisions_path)" in err[0]
