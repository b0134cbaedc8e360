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

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from wire_daemon.core.errors import WorkflowError


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


class TaskIndex(Mapping[str, int]):
    """Task id -> task number, in 12 bytes a task rather than a dict's 80 or so.

    A dict of a million ids costs about 42 bytes an entry plus a 32-byte int
    object per value, a quarter of the daemon's whole per-task memory. This
    keeps the ids' hashes sorted (int64) with the task number of each (int32):
    a lookup is a binary search plus one string comparison, and
    ``numbers_of`` resolves a batch of ids in one vectorised search. Equal
    hashes (different ids) sit side by side and are told apart by comparing
    the ids themselves.
    """

    def __init__(self, task_ids: Sequence[str]) -> None:
        self._ids = task_ids
        hashes = np.fromiter(map(hash, task_ids), dtype=np.int64, count=len(task_ids))
        self._task = np.argsort(hashes, kind="stable").astype(np.int32 if len(task_ids) < 2**31 else np.int64)
        hashes.sort()  # in place: the same order, without another copy
        self._hash = hashes

    def __getitem__(self, task_id: str) -> int:
        h = hash(task_id)
        k = int(self._hash.searchsorted(h))
        while k < self._hash.size and self._hash.item(k) == h:
            i = self._task.item(k)
            if self._ids[i] == task_id:
                return i
            k += 1
        raise KeyError(task_id)

    def __iter__(self) -> Iterator[str]:
        return iter(self._ids)

    def __len__(self) -> int:
        return len(self._ids)

    def numbers_of(self, task_ids: Sequence[str]) -> list[int]:
        """The task number of each id, -1 for an unknown id."""
        hashes = np.fromiter(map(hash, task_ids), dtype=np.int64, count=len(task_ids))
        # Searching in sorted order walks the table once instead of jumping around it.
        order = np.argsort(hashes)
        at = np.empty(hashes.size, dtype=np.int64)
        at[order] = self._hash.searchsorted(hashes[order])
        np.minimum(at, max(self._hash.size - 1, 0), out=at)
        found = self._task[at].tolist() if self._hash.size else [0] * len(task_ids)
        ids = self._ids
        # The first candidate is right unless two ids share a hash (or the id is unknown).
        return [i if ids and ids[i] == t else self.get(t, -1) for i, t in zip(found, task_ids)]


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
    _index: Mapping[str, int] = field(default_factory=dict, repr=False)  # a TaskIndex or a dict

    @property
    def n_tasks(self) -> int:
        return len(self.task_ids)

    @property
    def n_edges(self) -> int:
        return int(self.parent_idx.size)

    def index_of(self, task_id: str) -> int:
        return self._index[task_id]

    def indices_of(self, task_ids: Sequence[str]) -> list[int]:
        """``index_of`` for many ids at once, -1 for an unknown id."""
        if len(task_ids) > 1 and isinstance(self._index, TaskIndex):  # batching pays from two ids on
            return self._index.numbers_of(task_ids)
        return [self._index.get(t, -1) for t in task_ids]

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

    def scaled(self, factor: float) -> Workflow:
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
    task_ids = [s.task_id for s in specs_sorted]

    return Workflow(
        name=name,
        source=source,
        task_ids=task_ids,
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
        _index=TaskIndex(task_ids),
    )


def workflow_from_arrays(
    name: str,
    source: str,
    task_ids: list[str],
    transformation_of_stage: Sequence[str],
    stage_of: np.ndarray,
    runtime_s: np.ndarray,
    input_bytes: np.ndarray,
    output_bytes: np.ndarray,
    parent_ptr: np.ndarray,
    parent_idx: np.ndarray,
) -> Workflow:
    """A ``Workflow`` from arrays already in topological order, without a Python object per edge.

    For generators that know their stages (``synthetic.py``): ``stage_of`` must
    follow the stage definition above, numbered in order of first appearance;
    only the DAG's order is checked here. Each task's parents must be listed in
    ascending order, as ``build_workflow`` lists them.
    """
    n = len(task_ids)
    # int32 throughout: these edge-long temporaries are the peak of the build,
    # and what the allocator keeps of them after they are freed stays resident.
    child_of_edge = np.repeat(np.arange(n, dtype=np.int32), np.diff(parent_ptr))
    parent_idx = parent_idx.astype(np.int32, copy=False)
    if parent_idx.size and not np.all(parent_idx < child_of_edge):
        bad = int(child_of_edge[np.argmax(parent_idx >= child_of_edge)])
        raise WorkflowError(source, f"task {task_ids[bad]!r} is not after all its parents")
    child_ptr = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(np.bincount(parent_idx, minlength=n), out=child_ptr[1:])
    n_stages = len(transformation_of_stage)
    follows = np.zeros((n_stages, n_stages), dtype=bool)  # [stage, predecessor stage]
    follows[stage_of[child_of_edge], stage_of[parent_idx]] = True
    keys = [(t, frozenset(np.flatnonzero(row).tolist())) for t, row in zip(transformation_of_stage, follows)]
    # Edges are by child: a stable sort by parent keeps each parent's children ascending.
    child_idx = child_of_edge[np.argsort(parent_idx, kind="stable")]
    del child_of_edge
    return Workflow(
        name=name,
        source=source,
        task_ids=task_ids,
        transformation=[transformation_of_stage[s] for s in stage_of.tolist()],
        runtime_s=np.asarray(runtime_s, dtype=np.float64),
        input_bytes=np.asarray(input_bytes, dtype=np.int64),
        output_bytes=np.asarray(output_bytes, dtype=np.int64),
        peak_memory_bytes=np.zeros(n, dtype=np.int64),
        on_pool=np.ones(n, dtype=bool),
        parent_ptr=parent_ptr.astype(np.int64, copy=False),
        parent_idx=parent_idx,
        child_ptr=child_ptr,
        child_idx=child_idx,
        stage_of=stage_of.astype(np.int32, copy=False),
        stages=_named_stages(keys),
        _index=TaskIndex(task_ids),
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


def _resolve_parents(source: str, specs: Sequence[TaskSpec], position: dict[str, int]) -> list[set[int]]:
    parents_of: list[set[int]] = []
    for spec in specs:
        resolved: set[int] = set()
        for parent in spec.parents:
            if parent not in position:
                raise WorkflowError(source, f"task {spec.task_id!r} names unknown parent {parent!r}")
            resolved.add(position[parent])
        parents_of.append(resolved)
    return parents_of


def _topological_order(source: str, specs: Sequence[TaskSpec], parents_of: list[set[int]]) -> list[int]:
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


def _assign_stages(specs: Sequence[TaskSpec], parent_lists: list[list[int]]) -> tuple[np.ndarray, list[Stage]]:
    stage_of = np.empty(len(specs), dtype=np.int32)
    keys: dict[tuple[str, frozenset[int]], int] = {}
    for i, spec in enumerate(specs):
        key = (spec.transformation, frozenset(int(stage_of[p]) for p in parent_lists[i]))
        stage_of[i] = keys.setdefault(key, len(keys))
    return stage_of, _named_stages(list(keys))


def _named_stages(keys: list[tuple[str, frozenset[int]]]) -> list[Stage]:
    """Stages from their (transformation, predecessor stages) keys, in stage-id order."""
    per_transformation: dict[str, int] = {}
    for transformation, _ in keys:
        per_transformation[transformation] = per_transformation.get(transformation, 0) + 1
    seen: dict[str, int] = {}
    stages: list[Stage] = []
    for sid, (transformation, preds) in enumerate(keys):
        seen[transformation] = seen.get(transformation, 0) + 1
        name = transformation
        if per_transformation[transformation] > 1:
            name = f"{transformation}#{seen[transformation]}"
        stages.append(Stage(sid, transformation, preds, name))
    return stages
