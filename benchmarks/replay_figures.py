"""Fingerprint the policy figures of `wire-daemon replay --compare --json`, to show a change kept them.

Runs the installed `wire-daemon` on the bundled trace and on the given traces,
for each seed and setting, drops the wall-clock fields (decision times, wall
seconds) and writes the rest as one canonical JSON file. Two runs, before and
after a refactoring, are identical byte for byte when the figures are:

    python3 benchmarks/replay_figures.py TRACE... --out before.json   # on the old commit
    python3 benchmarks/replay_figures.py TRACE... --out after.json    # on the new one
    cmp before.json after.json

Each case prints one line: the trace, the seed, the setting, and a short hash.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

TIMING_KEYS = {"decision_mean_ms", "decision_max_ms", "wall_s"}
SETTINGS = {"paper": [], "scaled": ["--time-scale", "20", "--charging-unit", "15"]}


def strip_timing(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: strip_timing(v) for k, v in value.items() if k not in TIMING_KEYS}
    if isinstance(value, list):
        return [strip_timing(v) for v in value]
    return value


def figures(exe: str, trace: str | None, seed: int, extra: list[str]) -> dict[str, Any]:
    args = [exe, "replay", "--compare", "--json", "--seed", str(seed), *extra] + ([trace] if trace else [])
    done = subprocess.run(args, capture_output=True, text=True, check=True)
    return strip_timing(json.loads(done.stdout))  # type: ignore[no-any-return]


def _default_exe() -> str:
    beside = Path(sys.executable).parent / "wire-daemon"
    return str(beside) if beside.exists() else shutil.which("wire-daemon") or "wire-daemon"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("traces", nargs="*", help="WfFormat traces besides the bundled one")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1])
    parser.add_argument("--out", required=True, help="the canonical JSON file to write")
    parser.add_argument("--exe", default=_default_exe(), help="the wire-daemon to run (default: this Python's)")
    args = parser.parse_args()
    results: dict[str, Any] = {}
    for trace in [None, *args.traces]:
        for seed in args.seeds:
            for name, extra in SETTINGS.items():
                key = f"{Path(trace).name if trace else 'bundled'} seed={seed} {name}"
                results[key] = figures(args.exe, trace, seed, extra)
                digest = hashlib.sha256(json.dumps(results[key], sort_keys=True).encode()).hexdigest()[:16]
                print(f"{key:60s} {digest}", flush=True)
    Path(args.out).write_text(json.dumps(results, indent=1, sort_keys=True) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
