"""The paper's experiments on a directory of WfFormat traces: grid, runs, cache.

One *job* is one trace under one setting, charging unit, runtime scale and
seed; it replays the trace under every policy on the same emulated world and
gives one ``Run`` (a CSV row) per policy, plus WIRE's per-task prediction
errors (the samples of the paper's Fig. 4).

Settings:

* ``paper``: the paper's setting, a 3-minute MAPE interval equal to the boot
  lag, u = 1, 15, 30 and 60 min;
* ``modern``: a modern cloud, 60 s interval and boot lag, per-minute billing.

Both use 12 instances x 4 slots, one instance up at submit, and every other
setting at its default. Relative time is against the full-site makespan of
the same job; the cost ratio is against the full-site cost of the same job.
Runs are grouped by how many intervals the full-site makespan spans
(< 1, 1-10, >= 10): a workflow shorter than the boot lag cannot gain from an
elastic pool (DESIGN.md, Measures).

Results are deterministic per seed; only the timing columns vary between
runs. Finished jobs are appended to a cache (JSON lines) keyed by the job and
a fingerprint of the package's source, so an interrupted evaluation resumes
where it stopped and a code change invalidates old results.
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import sys
import time
import tracemalloc
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field, fields, replace
from functools import lru_cache
from pathlib import Path

import numpy as np

from wire_daemon.core.config import EmulationConfig, PredictionConfig, ReplayConfig, SteeringConfig
from wire_daemon.core.workflow import Workflow
from wire_daemon.emulated.traces import load_trace
from wire_daemon.runtime.policies import POLICY_NAMES
from wire_daemon.runtime.replay import STAGE_CLASSES, ReplayResult, replay

SLOTS = 4
MAX_INSTANCES = 12
GROUPS = ("< 1 interval", "1-10 intervals", ">= 10 intervals")
MEMORY_POLICIES = ("full-site", "wire", "pfa")  # full-site: the emulated world with a trivial policy
MAX_WORKERS = 2


@dataclass(frozen=True)
class Setting:
    name: str
    interval_s: float  # MAPE interval, which the policies also take as the launch lag
    boot_lag_s: float  # launch -> usable, in the emulated world
    units_min: tuple[float, ...]
    label: str


SETTINGS = {
    "paper": Setting("paper", 180.0, 180.0, (1.0, 15.0, 30.0, 60.0), "paper: 3-min interval and boot lag"),
    "modern": Setting("modern", 60.0, 60.0, (1.0,), "modern cloud: 60 s interval and boot lag, per-minute billing"),
}


@dataclass(frozen=True)
class Job:
    trace: str  # name relative to the traces directory, POSIX style
    path: str
    setting: str
    u_min: float
    time_scale: float
    seed: int

    @property
    def key(self) -> str:
        return f"{self.setting}|{self.trace}|u={self.u_min:g}|k={self.time_scale:g}|s={self.seed}"


@dataclass(frozen=True)
class Run:
    """One policy on one job: a row of runs.csv (measures are None when the run timed out)."""

    setting: str
    trace: str
    tasks: int
    time_scale: float
    seed: int
    u_min: float
    policy: str
    status: str  # ok | timeout
    fullsite_makespan_s: float
    intervals: float  # full-site makespan / interval
    group: str
    aggregate_task_s: float  # total slot occupancy of the tasks (what the paper calls aggregate task time)
    cost_units: int | None = None
    cost_ratio: float | None = None  # over full-site's cost
    makespan_s: float | None = None
    relative_time: float | None = None
    utilization: float | None = None
    restarts: int | None = None
    peak_instances: int | None = None
    iterations: int | None = None
    decision_total_s: float | None = None
    decision_share_pct: float | None = None  # decision time / aggregate task time, in %
    decision_max_ms: float | None = None
    wall_s: float | None = None

    @property
    def ok(self) -> bool:
        return self.status == "ok"


@dataclass
class JobResult:
    job: Job
    runs: list[Run]
    errors: dict[str, list[float]] = field(default_factory=dict)  # WIRE's per-task errors by stage class
    cpu_s: float = 0.0

    def to_json(self) -> dict:
        return {
            "job": asdict(self.job),
            "runs": [asdict(r) for r in self.runs],
            "errors": self.errors,
            "cpu_s": self.cpu_s,
        }

    @staticmethod
    def from_json(data: dict) -> JobResult:
        return JobResult(Job(**data["job"]), [Run(**r) for r in data["runs"]], data["errors"], data["cpu_s"])


@dataclass(frozen=True)
class MemoryRun:
    """Peak Python heap (tracemalloc) of one trace: its model, its loading, and one replay."""

    trace: str
    tasks: int
    policy: str
    replay_peak_mb: float  # a replay with the model already loaded: the world, the run state, the policy
    model_mb: float  # the workflow model kept after loading (arrays, ids, stages)
    load_peak_mb: float  # peak while loading: the parsed JSON document is the bulk of it


# --- the grid --------------------------------------------------------------------


def find_traces(paths: Sequence[Path]) -> list[tuple[str, Path]]:
    """(display name, path) of every .json / .json.gz trace under ``paths`` (files or directories)."""
    found: list[tuple[str, Path]] = []
    for root in paths:
        if root.is_file():
            found.append((root.name, root))
            continue
        for p in sorted(root.rglob("*")):
            if p.is_file() and p.name.endswith((".json", ".json.gz")):
                found.append((p.relative_to(root).as_posix(), p))
    return found


def traces_in(folder: Path) -> list[tuple[str, Path]]:
    """``find_traces`` of one folder; none there is said in one line on stderr (the caller exits with 2)."""
    found = find_traces([folder])
    if not found:
        print(f"{folder}: no .json or .json.gz trace there", file=sys.stderr)
    return found


def make_jobs(
    traces: Sequence[tuple[str, Path]],
    settings: Sequence[str],
    units: Sequence[float],
    scales: Sequence[float],
    seeds: Sequence[int],
    seeds_at_scale: dict[float, Sequence[int]] | None = None,
) -> list[Job]:
    """Every combination; a setting keeps only its own units; the largest jobs first."""
    jobs = []
    for name, path in traces:
        for s in settings:
            for u in (u for u in SETTINGS[s].units_min if u in units):
                for k in scales:
                    for seed in (seeds_at_scale or {}).get(k, seeds):
                        jobs.append(Job(name, str(path), s, u, k, seed))
    # long runs first, so that the workers finish together
    return sorted(
        jobs, key=lambda j: (-j.time_scale, SETTINGS[j.setting].interval_s, -_json_bytes(Path(j.path)), j.key)
    )


def _json_bytes(path: Path) -> int:
    """Size of the JSON text: a gzip file records it (mod 2**32) in its last four bytes."""
    if not path.name.endswith(".gz"):
        return path.stat().st_size
    with path.open("rb") as f:
        f.seek(-4, os.SEEK_END)
        return int.from_bytes(f.read(4), "little")


def replay_config(setting: Setting, u_min: float, time_scale: float, seed: int) -> ReplayConfig:
    steering = SteeringConfig(
        charging_unit_s=u_min * 60.0,
        interval_s=setting.interval_s,
        slots_per_instance=SLOTS,
        max_instances=MAX_INSTANCES,
    )
    emulation = EmulationConfig(boot_lag_s=setting.boot_lag_s, time_scale=time_scale, seed=seed)
    return ReplayConfig(PredictionConfig(), steering, emulation)


def group_of(intervals: float) -> str:
    if intervals < 1:
        return GROUPS[0]
    return GROUPS[1] if intervals < 10 else GROUPS[2]


# --- one job ---------------------------------------------------------------------


class ReplayTimeout(Exception):
    """A policy replay used up its CPU-time limit."""


@contextmanager
def cpu_limit(seconds: float) -> Iterator[None]:
    """Raise ReplayTimeout after ``seconds`` of this process's CPU time; 0 = no limit.

    CPU rather than wall time, so that a busy machine does not cut a run short.
    """
    if seconds <= 0:
        yield
        return

    def expire(signum: int, frame: object) -> None:
        raise ReplayTimeout()

    previous = signal.signal(signal.SIGPROF, expire)
    # repeat every half second: numpy may swallow an exception raised inside one of its calls
    signal.setitimer(signal.ITIMER_PROF, seconds, 0.5)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_PROF, 0)
        signal.signal(signal.SIGPROF, previous)


@lru_cache(maxsize=2)
def _workflow(path: str) -> Workflow:
    return load_trace(path)


def aggregate_task_s(workflow: Workflow, config: ReplayConfig) -> float:
    """Total slot occupancy of the pool tasks (runtime plus transfers), as the emulated world plays it."""
    transfer = (workflow.input_bytes + workflow.output_bytes) / config.emulation.bandwidth_bytes_per_s
    occupancy = (np.nan_to_num(workflow.runtime_s, nan=0.0) + transfer) * config.emulation.time_scale
    return float(occupancy[workflow.on_pool].sum())


def run_job(job: Job, policies: Sequence[str] = POLICY_NAMES, limit_s: float = 0.0) -> JobResult:
    """Every policy on one job; full-site first, since the others are measured against it."""
    started = time.process_time()
    workflow = _workflow(job.path)
    setting = SETTINGS[job.setting]
    config = replay_config(setting, job.u_min, job.time_scale, job.seed)
    full = replay(workflow, "full-site", config)
    base = Run(
        setting=job.setting,
        trace=job.trace,
        tasks=workflow.n_tasks,
        time_scale=job.time_scale,
        seed=job.seed,
        u_min=job.u_min,
        policy="",
        status="timeout",
        fullsite_makespan_s=round(full.makespan_s, 3),
        intervals=round(full.makespan_s / setting.interval_s, 4),
        group=group_of(full.makespan_s / setting.interval_s),
        aggregate_task_s=round(aggregate_task_s(workflow, config), 3),
    )
    runs, errors = [], {}
    for name in policies:
        result = full if name == "full-site" else _limited(lambda name=name: replay(workflow, name, config), limit_s)
        runs.append(_run(base, name, result, full))
        if name == "wire" and result is not None:
            errors = {c: [float(f"{x:.6g}") for x in result.error_samples.get(c, ())] for c, _ in STAGE_CLASSES}
    return JobResult(job, runs, errors, time.process_time() - started)


def _limited(call: Callable[[], ReplayResult], limit_s: float) -> ReplayResult | None:
    try:
        with cpu_limit(limit_s):
            return call()
    except ReplayTimeout:
        return None


def _run(base: Run, policy: str, r: ReplayResult | None, full: ReplayResult) -> Run:
    if r is None:
        return replace(base, policy=policy)
    decision_total = r.decision_mean_s * r.iterations
    return replace(
        base,
        policy=policy,
        status="ok",
        cost_units=r.cost_units,
        cost_ratio=round(r.cost_units / full.cost_units, 4),
        makespan_s=round(r.makespan_s, 3),
        relative_time=round(r.makespan_s / full.makespan_s, 4) if full.makespan_s > 0 else 1.0,
        utilization=round(r.utilization, 4),
        restarts=r.restarts,
        peak_instances=r.peak_instances,
        iterations=r.iterations,
        decision_total_s=round(decision_total, 5),
        decision_share_pct=round(100.0 * decision_total / base.aggregate_task_s, 6)
        if base.aggregate_task_s > 0
        else None,
        decision_max_ms=round(r.decision_max_s * 1e3, 3),
        wall_s=round(r.wall_s, 3),
    )


def measure_memory(trace: str, path: str, policies: Sequence[str] = MEMORY_POLICIES) -> list[MemoryRun]:
    """Peak traced heap of loading a trace and of one replay per policy (paper setting, u = 60 min, K = 1, seed 0)."""
    tracemalloc.start()
    try:
        workflow = load_trace(path)
        model, load_peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    config = replay_config(SETTINGS["paper"], 60.0, 1.0, 0)
    for name in policies:  # warm-up: lazy imports and module caches are no run's state
        replay(workflow, name, config)
    out = []
    for name in policies:
        tracemalloc.start()
        try:
            replay(workflow, name, config)
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
        out.append(MemoryRun(trace, workflow.n_tasks, name, _mb(peak), _mb(model), _mb(load_peak)))
    return out


def _mb(n_bytes: float) -> float:
    return round(n_bytes / 2**20, 2)


# --- cache -----------------------------------------------------------------------


def source_fingerprint() -> str:
    """A hash of the package's Python sources: results from other code are not reused.

    The report module is left out: changing a table does not change a run.
    """
    package = Path(__file__).resolve().parent
    digest = hashlib.sha256()
    for p in sorted(package.rglob("*.py")):
        if p.name == "evaluate_report.py":
            continue
        digest.update(p.relative_to(package).as_posix().encode())
        digest.update(p.read_bytes())
    return digest.hexdigest()[:16]


class ResultCache:
    """Finished jobs, one JSON object per line, for one source fingerprint."""

    def __init__(self, path: Path | None, fingerprint: str) -> None:
        self.path = path
        self.fingerprint = fingerprint

    def load(self) -> dict[str, dict]:
        """Cached entries of this fingerprint, by key ("job:..." or "memory:...")."""
        if self.path is None or not self.path.exists():
            return {}
        out = {}
        for line in self.path.read_text().splitlines():
            try:
                entry = json.loads(line)
            except json.JSONDecodeError:
                continue  # a line cut short by an interruption
            if entry.get("fingerprint") == self.fingerprint:
                out[entry["key"]] = entry["data"]
        return out

    def add(self, key: str, data: dict | list) -> None:
        if self.path is None:
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self.path.open("a") as f:
            f.write(json.dumps({"key": key, "fingerprint": self.fingerprint, "data": data}) + "\n")


# --- running the grid ------------------------------------------------------------


@dataclass
class Outcome:
    results: list[JobResult]
    memory: list[MemoryRun]
    computed_cpu_s: float  # CPU time of the jobs run now (not those taken from the cache)
    reused: int


def run_grid(
    jobs: Sequence[Job],
    memory_traces: Sequence[tuple[str, Path]],
    cache: ResultCache,
    workers: int = MAX_WORKERS,
    limit_s: float = 0.0,
    progress: Callable[[str], None] = print,
) -> Outcome:
    """Run what the cache does not hold, with at most ``MAX_WORKERS`` processes."""
    cached = cache.load()
    results = [JobResult.from_json(cached["job:" + j.key]) for j in jobs if "job:" + j.key in cached]
    memory = [
        MemoryRun(**m) for name, _ in memory_traces if "memory:" + name in cached for m in cached["memory:" + name]
    ]
    todo = [j for j in jobs if "job:" + j.key not in cached]
    mem_todo = [(n, p) for n, p in memory_traces if "memory:" + n not in cached]
    progress(
        f"{len(jobs)} jobs ({len(jobs) - len(todo)} cached), "
        f"{len(memory_traces)} memory runs ({len(memory_traces) - len(mem_todo)} cached)"
    )
    cpu = 0.0
    started = time.perf_counter()
    with ProcessPoolExecutor(max_workers=max(1, min(workers, MAX_WORKERS))) as pool:
        futures = {pool.submit(run_job, job, POLICY_NAMES, limit_s): ("job", job) for job in todo}
        futures |= {pool.submit(measure_memory, n, str(p)): ("memory", n) for n, p in mem_todo}
        for done, future in enumerate(as_completed(futures), 1):
            kind, what = futures[future]
            if kind == "job":
                result = future.result()
                results.append(result)
                cache.add("job:" + what.key, result.to_json())
                cpu += result.cpu_s
                late = [r.policy for r in result.runs if not r.ok]
                note = f"  TIMEOUT: {', '.join(late)}" if late else ""
                progress(
                    f"[{done}/{len(futures)}] {time.perf_counter() - started:7.1f}s {what.key}: "
                    f"{result.cpu_s:.2f} CPU s{note}"
                )
            else:
                rows = future.result()
                memory += rows
                cache.add("memory:" + what, [asdict(m) for m in rows])
                progress(f"[{done}/{len(futures)}] {time.perf_counter() - started:7.1f}s memory {what}")
    return Outcome(results, memory, cpu, len(jobs) - len(todo))


# --- outputs shared by the report ---------------------------------------------------


def all_runs(results: Iterable[JobResult]) -> list[Run]:
    order = {p: i for i, p in enumerate(POLICY_NAMES)}
    runs = [r for res in results for r in res.runs]
    return sorted(
        runs, key=lambda r: (r.setting, r.time_scale, r.u_min, r.seed, r.intervals, r.trace, order.get(r.policy, 99))
    )


def write_runs_csv(runs: Sequence[Run], path: Path) -> None:
    import csv

    with path.open("w", newline="") as out:
        writer = csv.DictWriter(out, fieldnames=[f.name for f in fields(Run)])
        writer.writeheader()
        for run in runs:
            writer.writerow({k: _csv_value(v) for k, v in asdict(run).items()})


def _csv_value(value: object) -> object:
    if value is None:
        return ""
    return f"{value:g}" if isinstance(value, float) and value.is_integer() else value


def pooled_errors(results: Iterable[JobResult]) -> dict[tuple[str, float, str], np.ndarray]:
    """WIRE's per-task prediction errors, pooled over traces, units and seeds: (setting, scale, class) -> errors."""
    pooled: dict[tuple[str, float, str], list[float]] = {}
    for res in results:
        for cls, errs in res.errors.items():
            pooled.setdefault((res.job.setting, res.job.time_scale, cls), []).extend(errs)
    return {k: np.asarray(v, dtype=float) for k, v in pooled.items()}
