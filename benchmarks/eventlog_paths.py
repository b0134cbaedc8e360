"""What the job event log reader makes of every real log and of the fuzz corpus.

Usage: python3 benchmarks/eventlog_paths.py [--examples N] [--corpus FILE] [--per-input FILE] [--ingest JOBS]

For each real event log under ``tests/data/fixtures`` (every ``*.log`` holding a
``...`` event end, ``jobstate.log`` aside) it prints the number of job events and
task events read and a SHA-256 over both (every field of every event, in order),
so two versions of the reader can be compared log by log: the same hash, the
same events. Times are read with ``year_reference`` fixed to the file's own
modification time, as the reader does by default.

Then the fuzz corpus: the byte-mutation strategy the reader fuzzers share
(``wire_lab.chaos.mutations.mangled_bytes``, derandomized and drawn before any
read) over four real logs, each input read in one go. Hypothesis does not draw
the same inputs in two processes: ``--corpus FILE`` keeps them (drawn and
written on the first run, read on the next), and ``--per-input FILE`` writes
each input's figures, to compare two versions of the reader input by input.
Printed: inputs, inputs where an exception escaped the reader, events read,
warnings, a hash of all events read, and the wall and CPU time. A native crash
of a parser would end this process: the last line would then be missing.

``--ingest N`` adds one ``EventLogFollower`` pass over a generated log of N
jobs (``monitor_ingest``'s generator), with the CPU time of the process and of
its children (a reader that parses in a worker process pays there too).
"""

from __future__ import annotations

import argparse
import hashlib
import logging
import sys
import tempfile
import time
from dataclasses import astuple
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(1, str(Path(__file__).resolve().parent))  # monitor_ingest's log generator

from wire_daemon.monitor.eventlog import EventLogReader  # noqa: E402 -- after the path is set
from wire_daemon.monitor.eventmap import EventLogFollower  # noqa: E402
from wire_daemon.monitor.problems import Problems  # noqa: E402
from wire_lab.chaos.mutations import mangled_bytes  # noqa: E402

FIXTURES = Path(__file__).resolve().parents[1] / "tests" / "data" / "fixtures"
JUNK = [b"Junk here\n", b"...\n", b"\x00\xff\xfe", b"000 (", b"\n\n", b"\x00" * 4096]  # inserted by the mutations


def real_logs() -> list[Path]:
    logs = [p for p in FIXTURES.rglob("*.log") if p.name != "jobstate.log" and b"\n...\n" in p.read_bytes()]
    return sorted(logs)


def digest(events: list[Any]) -> str:
    h = hashlib.sha256()
    for event in events:
        h.update(repr(astuple(event)).encode())
    return h.hexdigest()[:16]


def read_log(path: Path) -> tuple[int, int, int, str]:
    problems = Problems()
    reader = EventLogReader(path, problems=problems, read_budget_s=None)
    events = reader.read()
    ids = "dag-node" if path.name.endswith(".nodes.log") else "cluster-proc"
    tasks = EventLogFollower(path, problems=Problems(), job_ids=ids).poll()
    return len(events), len(tasks), len(problems.messages), digest(events) + digest(tasks)


def fuzz_corpus(examples: int) -> list[bytes]:
    """The mutated logs, drawn before any is read (so every version of the reader gets the same)."""
    seeds = [
        (FIXTURES / "eventlog" / "lsst_tiny_problems.nodes.log").read_bytes(),
        (FIXTURES / "eventlog" / "htcondor_test_condor.log").read_bytes()[:6200],
        (FIXTURES / "eventlog" / "icecube_held_aborted_job.log").read_bytes(),
        (FIXTURES / "eventlog" / "naudzyk_filetransfer_job.log").read_bytes(),
    ]
    corpus: list[bytes] = []

    @settings(
        max_examples=examples,
        deadline=None,
        derandomize=True,
        database=None,
        suppress_health_check=list(HealthCheck),
    )
    @given(mangled_bytes(seeds, JUNK))
    def draw(data: bytes) -> None:
        corpus.append(data)

    draw()
    return corpus


def load_or_draw(path: Path | None, examples: int) -> list[bytes]:
    """Hypothesis draws are not the same from one process to the next: to compare two versions of
    the reader on the same inputs, draw them once into ``path`` (length-prefixed) and read that."""
    if path is None or not path.exists():
        corpus = fuzz_corpus(examples)
        if path is not None:
            path.write_bytes(b"".join(len(d).to_bytes(8, "big") + d for d in corpus))
        return corpus
    raw, corpus, at = path.read_bytes(), [], 0
    while at < len(raw):
        size = int.from_bytes(raw[at : at + 8], "big")
        corpus.append(raw[at + 8 : at + 8 + size])
        at += 8 + size
    return corpus


def fuzz(corpus: list[bytes]) -> list[tuple[int, int, str]]:
    """Read every input in one go; print the totals. Returns (events, warnings, hash) per input."""
    scratch = Path(tempfile.mkdtemp(prefix="wire-eventlog-bench-"))
    escaped = 0
    per_input = []
    h = hashlib.sha256()
    wall, cpu = time.perf_counter(), time.process_time()
    for i, data in enumerate(corpus):
        path = scratch / f"in{i}.log"
        path.write_bytes(data)
        problems = Problems()
        try:
            events = EventLogReader(path, problems=problems, read_budget_s=None).read()
        except Exception as exc:  # noqa: BLE001 -- an escaped exception is what we count
            escaped += 1
            print(f"  input {i}: escaped: {type(exc).__name__}: {exc}"[:200])
            continue
        finally:
            path.unlink()
        per_input.append((len(events), len(problems.messages), digest(events)))
        h.update(per_input[-1][2].encode())
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    scratch.rmdir()
    print(
        f"fuzz: {len(corpus)} inputs, {escaped} escaped, {sum(n for n, _, _ in per_input)} events, "
        f"{sum(w for _, w, _ in per_input)} warnings, hash {h.hexdigest()[:16]}, wall {wall:.1f} s, cpu {cpu:.1f} s"
    )
    return per_input


def ingest(jobs: int) -> None:
    """One ``EventLogFollower`` pass over a generated log (``monitor_ingest``'s generator), with the CPU
    time of this process and of its children (a reader that parses in a worker process pays there)."""
    import resource

    from monitor_ingest import write_event_log

    from wire_daemon.monitor.eventmap import EventLogFollower

    def cpu() -> float:
        own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
        return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime

    with tempfile.TemporaryDirectory(prefix="wire-eventlog-bench-") as tmp:
        path = Path(tmp) / "bench-0.dag.nodes.log"
        events = write_event_log(path, jobs)
        start, wall = cpu(), time.perf_counter()
        follower, tasks = EventLogFollower(path), 0
        while got := follower.poll():  # a poll reads one 64 MiB chunk at most, and stops at its time budget
            tasks += len(got)
        for module in list(sys.modules.values()):  # a worker process is counted once it has ended
            closer = getattr(module, "_close_shared", None) if module else None
            if callable(closer) and getattr(module, "__name__", "").startswith("wire_daemon."):
                closer()
        print(
            f"ingest: {jobs} jobs, {events} events, {tasks} task events, CPU {cpu() - start:.2f} s "
            f"(with children), wall {time.perf_counter() - wall:.2f} s"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--examples", type=int, default=300)
    parser.add_argument("--corpus", type=Path, help="read the fuzz inputs from this file; draw and write it if absent")
    parser.add_argument("--ingest", type=int, default=0, help="also time one pass over a generated log of N jobs")
    parser.add_argument("--per-input", type=Path, help="write events, warnings and hash of each fuzz input here")
    args = parser.parse_args()
    logging.getLogger("wire_daemon").setLevel(logging.CRITICAL)  # the warnings are counted, not shown
    start = time.perf_counter()
    for path in real_logs():
        events, tasks, warnings, hashed = read_log(path)
        name = path.relative_to(FIXTURES)
        print(f"{name}: {events} events, {tasks} task events, {warnings} warnings, hash {hashed}")
    print(f"real logs read in {time.perf_counter() - start:.2f} s")
    per_input = fuzz(load_or_draw(args.corpus, args.examples))
    if args.ingest:
        ingest(args.ingest)
    if args.per_input:
        args.per_input.write_text("".join(f"{i} {n} {w} {d}\n" for i, (n, w, d) in enumerate(per_input)))


if __name__ == "__main__":
    main()
