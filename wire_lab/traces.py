"""Where the benchmarks find real workflow traces.

The repository bundles a small copy of the public traces, the smallest of
each kind (tests/data/traces, provenance in tests/data/SOURCES.md): every
benchmark defaults to it, so a fresh clone runs them. The full public set
(16 traces, 10.5 MB; tests/data/SOURCES.md says where it comes from) is given
with ``--traces <traces dir>``; the committed results in docs/results were
made on it, and their commands say so.
"""

from __future__ import annotations

from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
BUNDLED_TRACES = REPO / "tests" / "data" / "traces"


def find_traces(folder: Path) -> list[Path]:
    """Every ``*.json`` / ``*.json.gz`` file under ``folder``, sorted."""
    return sorted(p for p in folder.rglob("*") if p.is_file() and p.name.endswith((".json", ".json.gz")))


def traces_flag(folder: Path) -> str:
    """How a results page names ``--traces``: nothing for the bundled copies, a path inside the
    repository as it is, and ``<traces dir>`` for a folder elsewhere (it differs per checkout)."""
    if folder.resolve() == BUNDLED_TRACES.resolve():
        return ""
    try:
        return f" --traces {folder.resolve().relative_to(REPO).as_posix()}"
    except ValueError:
        return " --traces <traces dir>"
