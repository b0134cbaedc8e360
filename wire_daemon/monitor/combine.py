"""Several workflows seen as one DAG, for a submit host that runs many at once.

The pool is shared, so the plan must see every workflow's wavefront together:
one simulation over all their tasks, one upcoming load, one pool size. The
combined DAG is the disjoint union of the parts. Stages are never merged
across workflows (two runs of the same pipeline are measured apart, as the
paper's per-workflow stages are), and every task id and stage name gets its
workflow's label as a prefix (``label/id``) so they stay unique.

Built from the parts' arrays (no per-task Python objects beyond the id list),
and valid with no part at all: an idle submit host is an empty DAG.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

import numpy as np

from wire_daemon.core.workflow import Stage, Workflow

SEPARATOR = "/"


def combined_task_id(label: str, task_id: str) -> str:
    return f"{label}{SEPARATOR}{task_id}"


def split_task_id(combined: str) -> tuple[str, str]:
    """(label, task id) of a combined id; labels never contain the separator."""
    label, _, task_id = combined.partition(SEPARATOR)
    return label, task_id


def combine_workflows(parts: Sequence[tuple[str, Workflow]], name: str = "submit-host") -> Workflow:
    """The disjoint union of ``parts`` (label, workflow), in the given order."""
    for label, _ in parts:
        if not label or SEPARATOR in label:
            raise ValueError(f"workflow label {label!r} must be non-empty and free of {SEPARATOR!r}")
    task_offsets = np.cumsum([0] + [wf.n_tasks for _, wf in parts])
    stage_offsets = np.cumsum([0] + [len(wf.stages) for _, wf in parts])
    task_ids = [combined_task_id(label, t) for label, wf in parts for t in wf.task_ids]
    parent_ptr, parent_idx = _union_csr([(wf.parent_ptr, wf.parent_idx) for _, wf in parts], task_offsets)
    child_ptr, child_idx = _union_csr([(wf.child_ptr, wf.child_idx) for _, wf in parts], task_offsets)
    return Workflow(
        name=name,
        source=", ".join(wf.source for _, wf in parts) or name,
        task_ids=task_ids,
        transformation=[t for _, wf in parts for t in wf.transformation],
        runtime_s=_concat([wf.runtime_s for _, wf in parts], np.float64),
        input_bytes=_concat([wf.input_bytes for _, wf in parts], np.int64),
        output_bytes=_concat([wf.output_bytes for _, wf in parts], np.int64),
        peak_memory_bytes=_concat([wf.peak_memory_bytes for _, wf in parts], np.int64),
        on_pool=_concat([wf.on_pool for _, wf in parts], bool),
        parent_ptr=parent_ptr,
        parent_idx=parent_idx,
        child_ptr=child_ptr,
        child_idx=child_idx,
        stage_of=_concat([wf.stage_of + off for (_, wf), off in zip(parts, stage_offsets)], np.int32),
        stages=[
            _shifted(stage, label, int(off)) for (label, wf), off in zip(parts, stage_offsets) for stage in wf.stages
        ],
        _index={t: i for i, t in enumerate(task_ids)},
    )


def _shifted(stage: Stage, label: str, offset: int) -> Stage:
    return replace(
        stage,
        stage_id=stage.stage_id + offset,
        predecessor_stages=frozenset(p + offset for p in stage.predecessor_stages),
        name=combined_task_id(label, stage.name),
    )


def _union_csr(parts: list[tuple[np.ndarray, np.ndarray]], offsets: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    ptr = [np.zeros(1, dtype=np.int64)]
    idx = []
    edges = 0
    for (part_ptr, part_idx), offset in zip(parts, offsets):
        ptr.append(part_ptr[1:] + edges)
        idx.append(part_idx + int(offset))
        edges += int(part_ptr[-1])
    return np.concatenate(ptr).astype(np.int64), _concat(idx, np.int32)


def _concat(arrays: list[np.ndarray], dtype: type) -> np.ndarray:
    return np.concatenate(arrays).astype(dtype, copy=False) if arrays else np.zeros(0, dtype=dtype)
