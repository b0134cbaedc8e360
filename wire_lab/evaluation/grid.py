"""What the grid benchmarks share: jobs cached by the code they ran, their CSV, their page's wording.

A grid (``benchmarks/target_slowdown.py``, ``benchmarks/markets.py``) is a
list of jobs, each with a ``key``, run by a module-level function in at most
``workers`` processes. Finished jobs are appended to a JSON-lines cache with
a fingerprint of ``wire_daemon``'s sources (and whatever else the grid says
defines a job): a code change reruns everything, an interrupted grid resumes.
"""

from __future__ import annotations

import csv
import hashlib
import json
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path
from typing import Any, Protocol

from wire_lab.traces import traces_flag

PACKAGE = Path(__file__).resolve().parents[2] / "wire_daemon"


class Keyed(Protocol):
    @property
    def key(self) -> str: ...


def source_fingerprint(*defining: object) -> str:
    """A hash of every source file of ``wire_daemon`` and of ``defining`` (a grid's own settings)."""
    digest = hashlib.sha256()
    for p in sorted(PACKAGE.rglob("*.py")):
        digest.update(p.relative_to(PACKAGE).as_posix().encode())
        digest.update(p.read_bytes())
    if defining:
        digest.update(repr(defining).encode())
    return digest.hexdigest()[:16]


def cached_grid(
    jobs: Sequence[Keyed], run: Callable[[Any], dict], cache: Path, workers: int, fingerprint: str, every: int = 24
) -> tuple[list[dict], int]:
    """Every job's data in the order of ``jobs``, and how many came from the cache."""
    done: dict[str, dict] = {}
    if cache.exists():
        for line in cache.read_text().splitlines():
            try:
                entry = json.loads(line)
            except json.JSONDecodeError:
                continue
            if entry.get("fingerprint") == fingerprint:
                done[entry["key"]] = entry["data"]
    todo = [j for j in jobs if j.key not in done]
    print(f"{len(jobs)} jobs, {len(jobs) - len(todo)} cached", flush=True)
    started = time.perf_counter()
    cache.parent.mkdir(parents=True, exist_ok=True)
    with ProcessPoolExecutor(max_workers=max(1, workers)) as pool, cache.open("a") as out:
        futures = {pool.submit(run, job): job for job in todo}
        for n, future in enumerate(as_completed(futures), 1):
            job = futures[future]
            done[job.key] = data = future.result()
            out.write(json.dumps({"key": job.key, "fingerprint": fingerprint, "data": data}) + "\n")
            out.flush()
            if n % every == 0 or n == len(todo):
                print(f"[{n}/{len(todo)}] {time.perf_counter() - started:7.1f} s", flush=True)
    return [done[j.key] for j in jobs], len(jobs) - len(todo)


def write_rows(rows: Sequence[dict], path: Path, columns: Sequence[str]) -> None:
    """The grid's CSV: one row per run, None as an empty cell."""
    with path.open("w", newline="") as out:
        writer = csv.DictWriter(out, fieldnames=list(columns))
        writer.writeheader()
        for r in rows:
            writer.writerow({k: ("" if v is None else v) for k, v in r.items()})


def how_it_ran(wall_s: float, cached: int, n_jobs: int, workers: int) -> str:
    """How a page says what its command took: its wall time, or that every job came from an earlier run's cache."""
    if n_jobs and cached >= n_jobs:
        return f"every one of the {n_jobs} jobs read from the cache of an earlier run of the same code"
    took = f"{wall_s:.0f} s wall time with at most {workers} processes"
    return f"{took} ({cached} of the {n_jobs} jobs read from the cache)" if cached else took


def yes_or_no(ok: bool) -> str:
    """How a page says whether a target is met."""
    return "yes" if ok else "**no**"


def shown_arguments(argv: Sequence[str], traces: Path) -> list[str]:
    """The command line as a page shows it: the traces folder as ``traces_flag`` names it."""
    shown, skip = [], False
    for arg in argv:
        if skip:
            skip = False
        elif arg == "--traces":
            skip = True
        elif not arg.startswith("--traces="):
            shown.append(arg)
    flag = traces_flag(traces).strip()
    return [flag, *shown] if flag else shown
