"""Stage-structured synthetic workflows of any size, for scale benchmarks and tests.

Two shapes, after the Pegasus workflows they imitate:

* ``epigenomics``: ``L`` lanes; each lane is ``fastqSplit`` fanning out to
  chunks that each run ``filterContams -> sol2sanger -> fast2bfq -> map``,
  fanning back in to the lane's ``mapMerge``; then one ``mapMerge`` over all
  lanes, ``maqIndex`` and ``pileup``.
* ``montage``: ``P`` tiles on a square grid. A wide ``mProject`` stage, a
  pairwise ``mDiffFit`` stage (one task per overlapping pair of tiles:
  horizontal and vertical neighbours first, then diagonal ones), ``mConcatFit``,
  ``mBgModel``, a wide ``mBackground`` stage (each on its tile's projection
  and the model), then ``mImgtbl -> mAdd -> mShrink -> mJPEG``.

Both produce exactly the number of tasks asked for: leftovers become extra
``pileup`` tasks, or extra diagonal pairs in ``mDiffFit``. Runtimes and input
sizes are drawn per task from a seeded generator (same seed, same workflow);
within a stage a task's runtime grows with its input size, with noise, so the
predictor has something to learn.

The workflow is built straight into arrays (``workflow_from_arrays``) in
topological order, stage after stage, with the stage ids the definition in
``model.py`` gives (the tests check that against ``build_workflow``). Going
through ``TaskSpec`` objects and ``build_workflow`` instead costs Python
objects per task and per edge: for a million-task Montage, 10 s and a 1.2 GB
peak against under a second and 0.3 GB (docs/results/performance.md).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
from numpy.typing import ArrayLike

from wire_daemon.core.workflow import Workflow, workflow_from_arrays

MB = 1_000_000


@dataclass(frozen=True)
class _StageKind:
    """How a stage's tasks look: median runtime (s) and median input size (bytes)."""

    transformation: str
    runtime_s: float
    input_bytes: float
    output_bytes: float


@dataclass
class _Builder:
    """Appends stages of contiguous task ranges; parents always come from earlier stages."""

    rng: np.random.Generator
    n_tasks: int = 0
    stage_of: list[np.ndarray] = field(default_factory=list)
    transformations: list[str] = field(default_factory=list)  # per stage
    runtime: list[np.ndarray] = field(default_factory=list)
    input_bytes: list[np.ndarray] = field(default_factory=list)
    output_bytes: list[np.ndarray] = field(default_factory=list)
    edge_child: list[np.ndarray] = field(default_factory=list)
    edge_parent: list[np.ndarray] = field(default_factory=list)

    def stage(
        self, kind: _StageKind, count: int, child: ArrayLike | None = None, parent: ArrayLike | None = None
    ) -> np.ndarray:
        """Add ``count`` tasks of one stage; edge k links local task ``child[k]`` to global ``parent[k]``."""
        first = self.n_tasks
        tasks = np.arange(first, first + count, dtype=np.int64)
        self.stage_of.append(np.full(count, len(self.transformations), dtype=np.int32))
        self.transformations.append(kind.transformation)
        # Size spread +-50 % around the median; runtime proportional to size, with 10 % noise.
        scale = self.rng.uniform(0.5, 1.5, count)
        self.input_bytes.append(np.round(kind.input_bytes * scale).astype(np.int64))
        self.output_bytes.append(np.full(count, int(kind.output_bytes), dtype=np.int64))
        self.runtime.append(np.round(kind.runtime_s * scale * self.rng.lognormal(0.0, 0.1, count), 3))
        if child is not None and parent is not None:
            self.edge_child.append((np.asarray(child, dtype=np.int64) + first).astype(np.int32))
            self.edge_parent.append(np.asarray(parent, dtype=np.int32))
        self.n_tasks += count
        return tasks

    def build(self, name: str) -> Workflow:
        child = np.concatenate(self.edge_child) if self.edge_child else np.empty(0, dtype=np.int32)
        parent = np.concatenate(self.edge_parent) if self.edge_parent else np.empty(0, dtype=np.int32)
        # CSR wants edges by child, each child's parents ascending. The shapes
        # below add them in that order already; sort only if one does not.
        if child.size > 1 and not _sorted_pairs(child, parent):
            order = np.lexsort((parent, child))
            child, parent = child[order], parent[order]
        parent_ptr = np.zeros(self.n_tasks + 1, dtype=np.int64)
        np.cumsum(np.bincount(child, minlength=self.n_tasks), out=parent_ptr[1:])
        del child
        stage_of = np.concatenate(self.stage_of)
        return workflow_from_arrays(
            name=name,
            source=f"synthetic:{name}",
            task_ids=[f"ID{i:07d}" for i in range(self.n_tasks)],
            transformation_of_stage=self.transformations,
            stage_of=stage_of,
            runtime_s=np.concatenate(self.runtime),
            input_bytes=np.concatenate(self.input_bytes),
            output_bytes=np.concatenate(self.output_bytes),
            parent_ptr=parent_ptr,
            parent_idx=parent,
        )


def _sorted_pairs(child: np.ndarray, parent: np.ndarray) -> bool:
    """Whether (child, parent) pairs are in ascending lexicographic order."""
    step = np.diff(child)
    return bool(np.all(step >= 0) and np.all(parent[1:][step == 0] > parent[:-1][step == 0]))


# -- epigenomics ----------------------------------------------------------------

_EPI = {
    "fastqSplit": _StageKind("fastqSplit", 60.0, 500 * MB, 500 * MB),
    "filterContams": _StageKind("filterContams", 10.0, 10 * MB, 10 * MB),
    "sol2sanger": _StageKind("sol2sanger", 5.0, 10 * MB, 8 * MB),
    "fast2bfq": _StageKind("fast2bfq", 10.0, 8 * MB, 2 * MB),
    "map": _StageKind("map", 100.0, 2 * MB, 1 * MB),
    "mapMerge": _StageKind("mapMerge", 40.0, 20 * MB, 20 * MB),
    "mapMergeAll": _StageKind("mapMerge", 120.0, 100 * MB, 100 * MB),
    "maqIndex": _StageKind("maqIndex", 60.0, 100 * MB, 100 * MB),
    "pileup": _StageKind("pileup", 120.0, 100 * MB, 10 * MB),
}
EPIGENOMICS_MIN_TASKS = 9
TASKS_PER_LANE = 20_000


def epigenomics(n_tasks: int, seed: int = 0) -> Workflow:
    """An Epigenomics-shaped workflow of exactly ``n_tasks`` tasks."""
    if n_tasks < EPIGENOMICS_MIN_TASKS:
        raise ValueError(f"an epigenomics workflow needs at least {EPIGENOMICS_MIN_TASKS} tasks, not {n_tasks}")
    lanes = max(1, min(round(n_tasks / TASKS_PER_LANE), (n_tasks - 3) // 6))
    chunks, extra = divmod(n_tasks - 3 - 2 * lanes, 4)
    lane_of_chunk = np.arange(chunks) * lanes // chunks  # lanes get chunks in contiguous, near-equal runs
    b = _Builder(np.random.default_rng(seed))
    split = b.stage(_EPI["fastqSplit"], lanes)
    prev = b.stage(_EPI["filterContams"], chunks, np.arange(chunks), split[lane_of_chunk])
    for kind in ("sol2sanger", "fast2bfq", "map"):
        prev = b.stage(_EPI[kind], chunks, np.arange(chunks), prev)
    merges = b.stage(_EPI["mapMerge"], lanes, lane_of_chunk, prev)
    merge_all = b.stage(_EPI["mapMergeAll"], 1, np.zeros(lanes), merges)
    index = b.stage(_EPI["maqIndex"], 1, [0], merge_all)
    b.stage(_EPI["pileup"], 1 + extra, np.arange(1 + extra), np.repeat(index, 1 + extra))
    return b.build(f"epigenomics-{n_tasks}")


# -- montage --------------------------------------------------------------------

_MONTAGE = {
    "mProject": _StageKind("mProject", 40.0, 4 * MB, 16 * MB),
    "mDiffFit": _StageKind("mDiffFit", 8.0, 32 * MB, 1 * MB),
    "mConcatFit": _StageKind("mConcatFit", 60.0, 10 * MB, 1 * MB),
    "mBgModel": _StageKind("mBgModel", 90.0, 1 * MB, 1 * MB),
    "mBackground": _StageKind("mBackground", 15.0, 16 * MB, 16 * MB),
    "mImgtbl": _StageKind("mImgtbl", 10.0, 1 * MB, 1 * MB),
    "mAdd": _StageKind("mAdd", 120.0, 200 * MB, 200 * MB),
    "mShrink": _StageKind("mShrink", 20.0, 200 * MB, 20 * MB),
    "mJPEG": _StageKind("mJPEG", 10.0, 20 * MB, 5 * MB),
}
MONTAGE_MIN_TASKS = 100


def montage(n_tasks: int, seed: int = 0) -> Workflow:
    """A Montage-shaped workflow of exactly ``n_tasks`` tasks."""
    if n_tasks < MONTAGE_MIN_TASKS:
        raise ValueError(f"a montage workflow needs at least {MONTAGE_MIN_TASKS} tasks, not {n_tasks}")
    tiles = (n_tasks - 6) // 4
    pairs = _overlapping_pairs(tiles, n_tasks - 6 - 2 * tiles)
    n_diff = pairs.shape[0]
    b = _Builder(np.random.default_rng(seed))
    project = b.stage(_MONTAGE["mProject"], tiles)
    diff = b.stage(_MONTAGE["mDiffFit"], n_diff, np.repeat(np.arange(n_diff), 2), project[pairs.ravel()])
    concat = b.stage(_MONTAGE["mConcatFit"], 1, np.zeros(n_diff), diff)
    model = b.stage(_MONTAGE["mBgModel"], 1, [0], concat)
    background = b.stage(
        _MONTAGE["mBackground"],
        tiles,
        np.repeat(np.arange(tiles), 2),
        np.stack([project, np.repeat(model, tiles)], axis=1).ravel(),  # its tile, then the model
    )
    prev = b.stage(_MONTAGE["mImgtbl"], 1, np.zeros(tiles), background)
    for kind in ("mAdd", "mShrink", "mJPEG"):
        prev = b.stage(_MONTAGE[kind], 1, [0], prev)
    return b.build(f"montage-{n_tasks}")


def _overlapping_pairs(tiles: int, wanted: int) -> np.ndarray:
    """``wanted`` pairs of neighbouring tiles of a square grid, shape (wanted, 2)."""
    width = math.ceil(math.sqrt(tiles))
    t = np.arange(tiles)
    col = t % width
    candidates = []
    for step, ok in ((1, col < width - 1), (width, True), (width + 1, col < width - 1), (width - 1, col > 0)):
        mine = t[ok & (t + step < tiles)]
        candidates.append(np.stack([mine, mine + step], axis=1))
    pairs = np.concatenate(candidates)
    if pairs.shape[0] < wanted:
        raise ValueError(f"{tiles} tiles have only {pairs.shape[0]} overlapping pairs, {wanted} wanted")
    return pairs[:wanted]


SHAPES: dict[str, Callable[[int, int], Workflow]] = {"epigenomics": epigenomics, "montage": montage}


def synthetic_workflow(shape: str, n_tasks: int, seed: int = 0) -> Workflow:
    """Build a workflow of ``shape`` (one of ``SHAPES``) with exactly ``n_tasks`` tasks."""
    try:
        make = SHAPES[shape]
    except KeyError:
        raise ValueError(f"unknown synthetic shape {shape!r}; choose one of {', '.join(SHAPES)}") from None
    return make(n_tasks, seed)
