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
sizes once the task has run).
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from wire_daemon.core.errors import InputError
from wire_daemon.monitor.yamlio import load_yaml

_INPUT_TYPES = frozenset({"input", "inout"})
_OUTPUT_TYPES = frozenset({"output", "inout"})


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
    path: str | os.PathLike[str], replica_catalogs: Iterable[str | os.PathLike[str]] = ()
) -> AbstractWorkflow:
    """Raise ``InputError`` (file and, for YAML errors, line) when the workflow cannot be used."""
    source = os.fspath(path)
    data = load_yaml(source)
    if not isinstance(data, dict) or not isinstance(data.get("jobs"), list):
        raise InputError(source, "not a Pegasus 5 abstract workflow (no 'jobs' list)")
    workflow = AbstractWorkflow(source, str(data.get("name", "")))
    for position, record in enumerate(data["jobs"]):
        job = _job(source, position, record, workflow.file_sizes)
        workflow.jobs[job.id] = job
    _replica_sizes(data.get("replicaCatalog"), workflow.file_sizes)
    for catalog in replica_catalogs:
        catalog_data = load_yaml(catalog)
        _replica_sizes(catalog_data, workflow.file_sizes)
    return workflow


def _job(source: str, position: int, record: Any, sizes: dict[str, int]) -> AbstractJob:
    if not isinstance(record, dict) or not record.get("id"):
        raise InputError(source, "a job entry without an 'id'", f"jobs[{position}]")
    job_id = str(record["id"])
    kind = str(record.get("type", "job"))
    name = str(record.get("name") or record.get("file") or job_id)
    inputs: list[str] = []
    outputs: list[str] = []
    for use in record.get("uses") or []:
        if not isinstance(use, dict) or "lfn" not in use:
            raise InputError(source, f"job {job_id}: a 'uses' entry without 'lfn'", f"jobs[{position}]")
        lfn = str(use["lfn"])
        link = str(use.get("type", "")).lower()
        if link in _INPUT_TYPES:
            inputs.append(lfn)
        if link in _OUTPUT_TYPES:
            outputs.append(lfn)
        size = _size(use.get("size"))
        if size is None and isinstance(use.get("metadata"), dict):
            size = _size(use["metadata"].get("size"))
        if size is not None:
            sizes.setdefault(lfn, size)
    return AbstractJob(job_id, name, kind, tuple(inputs), tuple(outputs))


def _replica_sizes(catalog: Any, sizes: dict[str, int]) -> None:
    replicas = catalog.get("replicas") if isinstance(catalog, dict) else None
    for replica in replicas or []:
        if not isinstance(replica, dict) or "lfn" not in replica:
            continue
        metadata = replica.get("metadata")
        size = _size(metadata.get("size")) if isinstance(metadata, dict) else None
        if size is not None:
            sizes.setdefault(str(replica["lfn"]), size)


def _size(value: Any) -> int | None:
    if isinstance(value, bool):
        return None
    try:
        size = int(str(value).strip())
    except (TypeError, ValueError):
        return None
    return size if size >= 0 else None
