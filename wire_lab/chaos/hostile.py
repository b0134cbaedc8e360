"""Hostile submit roots for the chaos suite: what an unlucky production host holds.

Each builder writes, under a submit root, what the monitor must survive
without blocking, dying or growing: FIFOs and device nodes under the names it
reads, a directory whose name is not UTF-8, an oversized kickstart record, a
DAG of many nodes with a cycle, thousands of finished workflows.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from wire_daemon.core.config import EmulationConfig
from wire_daemon.emulated.traces import bundled_trace_path, load_trace
from wire_lab.live_writer import LiveEmulation, WriterOptions, build_live

EPOCH = 1_700_000_000.0
SMALL_TRACE = Path(__file__).resolve().parents[2] / "tests" / "data" / "srasearch-chameleon-30a-001.json"


def live_workflow(directory: Path, label: str = "wf", trace: Path | None = None) -> LiveEmulation:
    """A live-written Pegasus submit dir of a small traced workflow (30 tasks), not started."""
    return build_live(
        load_trace(trace or (SMALL_TRACE if SMALL_TRACE.exists() else bundled_trace_path())),
        directory,
        EmulationConfig(initial_instances=2),
        4,
        3600.0,
        WriterOptions(epoch=EPOCH, label=label),
    )


def finished_workflow(directory: Path, label: str = "done") -> Path:
    """A submit dir whose workflow ran to the end and whose DAGMan finished (status 0)."""
    live = live_workflow(directory, label)
    live.run(speedup=None)
    live.writer.close(live.site.last_finish)
    return directory


def many_finished(root: Path, count: int, template: Path | None = None) -> list[Path]:
    """``count`` copies of one finished workflow under ``root`` (hard links: cheap to make, read like files).

    The braindump names the template's directory as its ``submit_dir``; the
    monitor takes paths relative to where it finds each copy, as on a host
    whose submit dirs were moved.
    """
    template = template or finished_workflow(root.parent / (root.name + "-template"))
    made = []
    for i in range(count):
        target = root / f"run{i:05d}"
        shutil.copytree(template, target, copy_function=os.link)
        made.append(target)
    return made


def fifo_names(submit_dir: Path, dag_name: str) -> list[Path]:
    """The names in a submit dir the monitor reads, for FIFOs and devices to take."""
    return [
        submit_dir / f"{dag_name}.dagman.out",
        submit_dir / "jobstate.log",
        submit_dir / f"{dag_name}.nodes.log",
    ]


def undecodable_dir(root: Path, template: Path) -> Path:
    """A copy of ``template`` under a name that is not UTF-8 (``wf-\\xff``); returned as the file system gives it."""
    target = os.path.join(os.fsencode(root), b"wf-\xff")
    shutil.copytree(os.fsencode(template), target)
    return Path(os.fsdecode(target))
