"""The workflow as the daemon sees it: tasks, dependencies and stages.

A workflow is stored column-wise (numpy arrays indexed by task number) and its
edges in CSR form, so that a DAG of a million tasks costs a few arrays rather
than a million Python objects. Loaders build it from a list of ``TaskSpec``
through ``build_workflow``, which validates the DAG and computes the stages.

Stage definition (DESIGN.md): tasks with the same transformation and the same
*set of predecessor stages*. The definition is recursive, so stages are
assigned in topological order: a task's stage key is its transformation plus
the frozen set of the stage ids of its parents.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

import numpy as np

from wire_daemon.errors import WorkflowError


@dataclass(frozen=True)
class TaskSpec:
    """One task as a loader reads it, before the DAG is validated."""

    task_id: str
    transformation: str
    parents: tuple[str, ...] = ()
    runtime_s: float = float("nan")  # measured execution time, when a trace gives it
    input_bytes: int = 0
    output_bytes: int = 0
    on_pool: bool = True  # False for jobs that run on the submit host (local universe)
    peak_memory_bytes: int = 0


@dataclass(frozen=True)
class Stage:
    """A group of peer tasks whose times predict each other."""

    stage_id: int
    transformation: str
    predecessor_stages: frozenset[int]
    name: str  # transformation, suffixed when one transformation forms several stages


@dataclass
class Workflow:
    """A validated DAG in topological order (task i's parents all have index < i)."""

    name: str
    source: str
    task_ids: list[str]
    transformation: list[str]
    runtime_s: np.ndarray  # float64, NaN where unknown
    input_bytes: np.ndarray  # int64
    output_bytes: np.ndarray  # int64
    peak_memory_bytes: np.ndarray  # int64
    on_pool: np.ndarray  # bool
    parent_ptr: np.ndarray  # int64, CSR over parent_idx
    parent_idx: np.ndarray  # int32
    child_ptr: np.ndarray  # int64, CSR over child_idx
    child_idx: np.ndarray  # int32
    stage_of: np.ndarray  # int32
    stages: list[Stage]
    _index: dict[str, int] = field(default_factory=dict, repr=False)

    @property
    def n_tasks(self) -> int:
        return len(self.task_ids)

    @property
    def n_edges(self) -> int:
        return int(self.parent_idx.size)

    def index_of(self, task_id: str) -> int:
        return self._index[task_id]

    def parents(self, i: int) -> np.ndarray:
        return self.parent_idx[self.parent_ptr[i] : self.parent_ptr[i + 1]]

    def children(self, i: int) -> np.ndarray:
        return self.child_idx[self.child_ptr[i] : self.child_ptr[i + 1]]

    def n_parents(self) -> np.ndarray:
        return np.diff(self.parent_ptr)

    def stage_members(self) -> list[np.ndarray]:
        order = np.argsort(self.stage_of, kind="stable")
        bounds = np.searchsorted(self.stage_of[order], np.arange(len(self.stages) + 1))
        return [order[bounds[s] : bounds[s + 1]] for s in range(len(self.stages))]

    def scaled(self, factor: float) -> "Workflow":
        """The same DAG with every runtime multiplied by ``factor`` (time-scale studies)."""
        copy = Workflow(**{k: getattr(self, k) for k in self.__dataclass_fields__})
        copy.runtime_s = self.runtime_s * factor
        return copy


def build_workflow(name: str, source: str, specs: Sequence[TaskSpec]) -> Workflow:
    """Validate ``specs`` into a ``Workflow``; raise ``WorkflowError`` naming file and task."""
    position = _index_unique(source, specs)
    parents_of = _resolve_parents(source, specs, position)
    order = _topological_order(source, specs, parents_of)
    rank = np.empty(len(order), dtype=np.int64)
    rank[order] = np.arange(len(order))

    specs_sorted = [specs[i] for i in order]
    parent_lists = [sorted(int(rank[p]) for p in parents_of[i]) for i in order]
    parent_ptr, parent_idx = _csr(parent_lists)
    child_lists: list[list[int]] = [[] for _ in order]
    for child, plist in enumerate(parent_lists):
        for p in plist:
            child_lists[p].append(child)
    child_ptr, child_idx = _csr(child_lists)
    stage_of, stages = _assign_stages(specs_sorted, parent_lists)

    return Workflow(
        name=name,
        source=source,
        task_ids=[s.task_id for s in specs_sorted],
        transformation=[s.transformation for s in specs_sorted],
        runtime_s=np.array([s.runtime_s for s in specs_sorted], dtype=np.float64),
        input_bytes=np.array([s.input_bytes for s in specs_sorted], dtype=np.int64),
        output_bytes=np.array([s.output_bytes for s in specs_sorted], dtype=np.int64),
        peak_memory_bytes=np.array([s.peak_memory_bytes for s in specs_sorted], dtype=np.int64),
        on_pool=np.array([s.on_pool for s in specs_sorted], dtype=bool),
        parent_ptr=parent_ptr,
        parent_idx=parent_idx,
        child_ptr=child_ptr,
        child_idx=child_idx,
        stage_of=stage_of,
        stages=stages,
        _index={s.task_id: i for i, s in enumerate(specs_sorted)},
    )


def _index_unique(source: str, specs: Sequence[TaskSpec]) -> dict[str, int]:
    position: dict[str, int] = {}
    for i, spec in enumerate(specs):
        if spec.task_id in position:
            raise WorkflowError(source, f"task {spec.task_id!r} is defined twice")
        position[spec.task_id] = i
    if not position:
        raise WorkflowError(source, "the workflow has no tasks")
    return position


def _resolve_parents(
    source: str, specs: Sequence[TaskSpec], position: dict[str, int]
) -> list[set[int]]:
    parents_of: list[set[int]] = []
    for spec in specs:
        resolved: set[int] = set()
        for parent in spec.parents:
            if parent not in position:
                raise WorkflowError(source, f"task {spec.task_id!r} names unknown parent {parent!r}")
            resolved.add(position[parent])
        parents_of.append(resolved)
    return parents_of


def _topological_order(
    source: str, specs: Sequence[TaskSpec], parents_of: list[set[int]]
) -> list[int]:
    """Kahn's algorithm, stable in file order so that equal DAGs number tasks equally."""
    children: list[list[int]] = [[] for _ in specs]
    waiting = [len(p) for p in parents_of]
    for child, plist in enumerate(parents_of):
        for p in plist:
            children[p].append(child)
    ready = [i for i, w in enumerate(waiting) if w == 0]
    order: list[int] = []
    head = 0
    while head < len(ready):
        node = ready[head]
        head += 1
        order.append(node)
        for child in children[node]:
            waiting[child] -= 1
            if waiting[child] == 0:
                ready.append(child)
    if len(order) != len(specs):
        stuck = next(i for i, w in enumerate(waiting) if w > 0)
        raise WorkflowError(source, f"the DAG has a cycle through task {specs[stuck].task_id!r}")
    return order


def _csr(lists: list[list[int]]) -> tuple[np.ndarray, np.ndarray]:
    ptr = np.zeros(len(lists) + 1, dtype=np.int64)
    ptr[1:] = np.cumsum([len(x) for x in lists])
    idx = np.fromiter((v for x in lists for v in x), dtype=np.int32, count=int(ptr[-1]))
    return ptr, idx


def _assign_stages(
    specs: Sequence[TaskSpec], parent_lists: list[list[int]]
) -> tuple[np.ndarray, list[Stage]]:
    stage_of = np.empty(len(specs), dtype=np.int32)
    keys: dict[tuple[str, frozenset[int]], int] = {}
    for i, spec in enumerate(specs):
        key = (spec.transformation, frozenset(int(stage_of[p]) for p in parent_lists[i]))
        stage_of[i] = keys.setdefault(key, len(keys))
    per_transformation: dict[str, int] = {}
    for transformation, _ in keys:
        per_transformation[transformation] = per_transformation.get(transformation, 0) + 1
    seen: dict[str, int] = {}
    stages: list[Stage] = []
    for (transformation, preds), sid in keys.items():
        seen[transformation] = seen.get(transformation, 0) + 1
        name = transformation
        if per_transformation[transformation] > 1:
            name = f"{transformation}#{seen[transformation]}"
        stages.append(Stage(sid, transformation, preds, name))
    return stage_of, stages
