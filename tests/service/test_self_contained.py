"""Issue 13, item 10: tests and tools that need nothing beside the repository.

The trace loader's tests read copies bundled in tests/data/traces (the
smallest trace of each kind), each checked here against the upstream blob
tests/data/SOURCES.md names; the benchmarks default to the same folder.
"""

from __future__ import annotations

import gzip
import hashlib
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
TRACES = ROOT / "tests" / "data" / "traces"
SOURCES = (ROOT / "tests" / "data" / "SOURCES.md").read_text()


def _blob(data: bytes) -> str:
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


@pytest.mark.parametrize("path", sorted(TRACES.rglob("*.json*")), ids=lambda p: p.name)
def test_each_bundled_trace_is_the_upstream_file_its_provenance_line_names(path):
    raw = path.read_bytes()
    data = gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw
    name = path.relative_to(TRACES).as_posix()
    assert f"traces/{name}" in SOURCES or name in SOURCES, f"no provenance line for {name}"
    if name.startswith("legacy/"):
        assert hashlib.sha256(data).hexdigest() in SOURCES
    else:
        assert _blob(data)[:12] in SOURCES, f"{name}: blob {_blob(data)[:12]} is not the one SOURCES.md names"


def test_no_test_or_benchmark_reads_the_repositorys_neighbours():
    pattern = re.compile(r'(parents\[2\]|REPO\.parent|\.\.)\s*/\s*"shared"')
    offenders = [
        str(path.relative_to(ROOT))
        for folder in ("tests", "benchmarks")
        for path in (ROOT / folder).rglob("*.py")
        if pattern.search(path.read_text())
    ]
    assert offenders == []


@pytest.mark.slow
def test_compare_traces_runs_in_a_fresh_clone_on_the_bundled_traces(tmp_path):
    done = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "compare_traces.py"), "--units", "60", "--out-dir", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    table = (tmp_path / "traces_compare.md").read_text()
    command = next(line for line in table.splitlines() if line.startswith("python3 benchmarks/compare_traces.py"))
    assert "--units 60" in command and "--traces" not in command  # the default: the bundled traces
    assert "Setting: 8 traces" in table
    assert all(p.name in table for p in TRACES.glob("*.json*"))


@pytest.mark.slow
@pytest.mark.parametrize(
    "script", ["evaluate.py", "boost_effect.py", "replay_speed.py", "compare_traces.py", "plan_accuracy.py"]
)
def test_every_trace_benchmark_takes_a_traces_folder_defaulting_to_the_bundled_one(script):
    done = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / script), "--help"], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert "--traces" in done.stdout and "tests/data/traces" in " ".join(done.stdout.split())


def test_the_committed_operator_session_shows_every_command_with_its_output():
    session = (ROOT / "docs" / "operator-session.txt").read_text()
    assert "recorded by wire_lab/operator_session.py" in session
    blocks = {}
    for chunk in session.split("\n$ ")[1:]:
        command, _, output = chunk.partition("\n")
        blocks.setdefault(command, output)
    wanted = {
        "pip install -q -c constraints.txt": "",
        "wire-daemon check-config --probe config.yaml": "probe: every call works",
        "wire-daemon run --config config.yaml 2> run.log &": "",
        "wire-daemon status --config config.yaml": "workflows (1):",
        # One line a decision; the session runs in dry-run, so each says so.
        "wire-daemon decisions --config config.yaml --since 5m": "would launch ",
        "wire-daemon plan --config config.yaml": "instances  makespan  units",
        "wire-daemon pause --config config.yaml": "pause: applied by the daemon",
        "wire-daemon hold 3 --config config.yaml": "hold 3: applied by the daemon",
        "wire-daemon resume --config config.yaml": "resume: applied by the daemon",
        "wire-daemon drain-all --config config.yaml": "drain-all: done by the daemon",
        "wire-daemon report --config config.yaml --out report.png": "wrote report.png (",
    }
    for command, output in wanted.items():
        found = [out for cmd, out in blocks.items() if command in cmd]
        assert found, f"the session does not run {command!r}"
        assert any(output in out for out in found), f"{command!r} does not show {output!r}"
    commands = list(blocks)
    first = [next(i for i, c in enumerate(commands) if f"wire-daemon {name} " in c) for name in ("decisions", "plan")]
    assert first[0] < first[1] < commands.index("wire-daemon pause --config config.yaml")
    # Every control command, in dry-run; a pause before the first start is kept for it; no traceback anywhere.
    for name in ("pause", "resume", "hold 3", "drain-all", "terminate-all"):
        assert any(c.startswith(f"wire-daemon {name} ") for c in commands), name
    assert (
        "its first run applies it"
        in blocks["wire-daemon pause --config config.yaml  # before the daemon's first start"]
    )
    assert "Traceback" not in session and "DRY-RUN" in session and "would launch" in session
    decisions = [
        out for cmd, out in blocks.items() if cmd.startswith("wire-daemon decisions") and "--verbose" not in cmd
    ]
    assert decisions and all(len(line) <= 160 for out in decisions for line in out.splitlines())
