"""Where the benchmarks find real workflow traces.

The repository bundles a small copy of the public traces, the smallest of
each kind (tests/data/traces, provenance in tests/data/SOURCES.md): every
benchmark defaults to it, so a fresh clone runs them. The full public set
(16 traces, 10.5 MB) is the ``shared/traces`` folder beside the repository
where a checkout has one; the committed results in docs/results were made on
it, and their commands say so (``--traces ../shared/traces``).
"""

from __future__ import annotations

from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
BUNDLED_TRACES = REPO / "tests" / "data" / "traces"
PUBLIC_TRACES = REPO.parent / "shared" / "traces"


def find_traces(folder: Path) -> list[Path]:
    """Every ``*.json`` / ``*.json.gz`` file under ``folder``, sorted."""
    return sorted(p for p in folder.rglob("*") if p.is_file() and p.name.endswith((".json", ".json.gz")))
