"""File sizes from a Pegasus 5 abstract workflow (``workflow.yml``) and replica catalogs.

Only what the daemon needs is read: each abstract job's ``id``, ``name``
(transformation), ``type`` (job, pegasusWorkflow, condorWorkflow) and the
``lfn``/``type`` of its ``uses``; and every size the files can tell.

Where a file's size comes from (ours; the first one found wins):

1. a ``uses`` entry's ``size`` (schema 5.0 has it as a string), or its
   ``metadata.size`` -- any job's entry, so a size declared by the producer of
   an intermediate file also serves its consumers;
2. the workflow's inline ``replicaCatalog.replicas[].metadata.size``;
3. the replica catalog files given (``catalogs/replicas.yml`` in a submit dir).

A task's input bytes are the sum over its distinct ``input`` and ``inout``
files whose size is known; files of unknown size count 0 (kickstart gives real
sizes once the task has run). A negative size is unknown; one beyond an
exbibyte is a corrupt value: it gives one warning (file and place) and the size
stays unknown. A workflow nested too deeply or a YAML alias bomb is an ``InputError``
(``yamlio``).
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from wire_daemon.core.errors import InputError
from wire_daemon.monitor.problems import Problems
from wire_daemon.monitor.yamlio import load_yaml

_INPUT_TYPES = frozenset({"input", "inout"})
_OUTPUT_TYPES = frozenset({"output", "inout"})
_MAX_BYTES = 1 << 60  # sizes beyond an exbibyte are corrupt values


@dataclass(frozen=True)
class AbstractJob:
    id: str
    name: str  # transformation name (job) or the sub-workflow file (pegasusWorkflow / condorWorkflow)
    kind: str  # job | pegasusWorkflow | condorWorkflow
    inputs: tuple[str, ...] = ()
    outputs: tuple[str, ...] = ()


@dataclass
class AbstractWorkflow:
    path: str
    name: str
    jobs: dict[str, AbstractJob] = field(default_factory=dict)
    file_sizes: dict[str, int] = field(default_factory=dict)

    def input_bytes(self, job_id: str) -> int:
        job = self.jobs.get(job_id)
        if job is None:
            return 0
        return sum(self.file_sizes.get(lfn, 0) for lfn in set(job.inputs))

    def output_bytes(self, job_id: str) -> int:
        job = self.jobs.get(job_id)
        if job is None:
            return 0
        return sum(self.file_sizes.get(lfn, 0) for lfn in set(job.outputs))


def read_abstract_workflow(
    path: str | os.PathLike[str],
    replica_catalogs: Iterable[str | os.PathLike[str]] = (),
    problems: Problems | None = None,
) -> AbstractWorkflow:
    """Raise ``InputError`` (file and, for YAML errors, line) when the workflow cannot be used."""
    source = os.fspath(path)
    sizes = _Sizes(problems or Problems())
    data = load_yaml(source)
    if not isinstance(data, dict) or not isinstance(data.get("jobs"), list):
        raise InputError(source, "not a Pegasus 5 abstract workflow (no 'jobs' list)")
    workflow = AbstractWorkflow(source, _name(data.get("name")))
    sizes.found = workflow.file_sizes
    for position, record in enumerate(data["jobs"]):
        job = _job(source, position, record, sizes)
        workflow.jobs[job.id] = job
    _replica_sizes(data.get("replicaCatalog"), sizes, source, "replicaCatalog")
    for catalog in replica_catalogs:
        catalog_data = load_yaml(catalog)
        _replica_sizes(catalog_data, sizes, os.fspath(catalog), "replicas")
    return workflow


class _Sizes:
    """File sizes found so far (the first one wins); corrupt ones are reported, not kept."""

    def __init__(self, problems: Problems) -> None:
        self.problems = problems
        self.found: dict[str, int] = {}

    def add(self, lfn: str, value: Any, source: str, where: str) -> None:
        size = _size(value)
        if size is None or size < 0:  # -1 is how some tools write "unknown"
            return
        if size > _MAX_BYTES:
            self.problems.warn(source, f"size of {lfn!r} is not a file size ({_show(value)}); taken as unknown", where)
            return
        self.found.setdefault(lfn, size)


def _job(source: str, position: int, record: Any, sizes: _Sizes) -> AbstractJob:
    where = f"jobs[{position}]"
    if not isinstance(record, dict) or not _scalar(record.get("id")):
        raise InputError(source, "a job entry without an 'id'", where)
    job_id = str(record["id"])
    kind = _name(record.get("type")) or "job"
    name = _name(record.get("name")) or _name(record.get("file")) or job_id
    inputs: list[str] = []
    outputs: list[str] = []
    uses = record.get("uses") or []
    if not isinstance(uses, list):
        raise InputError(source, f"job {job_id}: 'uses' is not a list", where)
    for use in uses:
        if not isinstance(use, dict) or not _scalar(use.get("lfn")):
            raise InputError(source, f"job {job_id}: a 'uses' entry without 'lfn'", where)
        lfn = str(use["lfn"])
        link = _name(use.get("type")).lower()
        if link in _INPUT_TYPES:
            inputs.append(lfn)
        if link in _OUTPUT_TYPES:
            outputs.append(lfn)
        value = use.get("size")
        if _size(value) is None and isinstance(use.get("metadata"), dict):
            value = use["metadata"].get("size")
        sizes.add(lfn, value, source, where)
    return AbstractJob(job_id, name, kind, tuple(inputs), tuple(outputs))


def _replica_sizes(catalog: Any, sizes: _Sizes, source: str, where: str) -> None:
    replicas = catalog.get("replicas") if isinstance(catalog, dict) else None
    if not isinstance(replicas, list):
        return
    for position, replica in enumerate(replicas):
        if not isinstance(replica, dict) or not _scalar(replica.get("lfn")):
            continue
        metadata = replica.get("metadata")
        if isinstance(metadata, dict):
            sizes.add(str(replica["lfn"]), metadata.get("size"), source, f"{where}[{position}]")


def _size(value: Any) -> int | None:
    """An integer size as written (schema 5.0 writes strings); None when it is not one."""
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        return None
    try:
        return int(value.strip()) if isinstance(value, str) else value
    except ValueError:  # includes an integer of more than 4,300 digits
        return None


def _scalar(value: Any) -> bool:
    return isinstance(value, (str, int, float)) and not isinstance(value, bool) and value != ""


def _name(value: Any) -> str:
    return str(value) if _scalar(value) else ""


def _show(value: Any) -> str:
    text = value if isinstance(value, str) else str(value)
    return text if len(text) <= 40 else f"{text[:20]}...({len(text)} characters)"
