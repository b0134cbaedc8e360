"""Synthetic stage-structured workflows: exact size, shape, stages, order, determinism."""

from __future__ import annotations

import numpy as np
import pytest

from wire_daemon.core.workflow import TaskSpec, Workflow, build_workflow
from wire_lab.synthetic import (
    SHAPES,
    epigenomics,
    montage,
    synthetic_workflow,
)

EPI_STAGES = [
    "fastqSplit",
    "filterContams",
    "sol2sanger",
    "fast2bfq",
    "map",
    "mapMerge#1",
    "mapMerge#2",
    "maqIndex",
    "pileup",
]
MONTAGE_STAGES = [
    "mProject",
    "mDiffFit",
    "mConcatFit",
    "mBgModel",
    "mBackground",
    "mImgtbl",
    "mAdd",
    "mShrink",
    "mJPEG",
]


def _specs(wf: Workflow) -> list[TaskSpec]:
    return [
        TaskSpec(
            wf.task_ids[i],
            wf.transformation[i],
            tuple(wf.task_ids[p] for p in wf.parents(i)),
            float(wf.runtime_s[i]),
            int(wf.input_bytes[i]),
            int(wf.output_bytes[i]),
        )
        for i in range(wf.n_tasks)
    ]


@pytest.mark.parametrize("shape", sorted(SHAPES))
@pytest.mark.parametrize("n", [100, 101, 102, 103, 1000, 4321, 50_000])
def test_exact_size_and_topological_order(shape: str, n: int) -> None:
    wf = synthetic_workflow(shape, n, seed=1)
    assert wf.n_tasks == n == len(set(wf.task_ids))
    child = np.repeat(np.arange(n), np.diff(wf.parent_ptr))
    assert np.all(wf.parent_idx < child)  # every edge points backwards: acyclic
    assert np.all(wf.runtime_s > 0) and np.all(wf.input_bytes > 0)
    assert wf.child_idx.size == wf.parent_idx.size


def test_epigenomics_shape() -> None:
    wf = epigenomics(50_000, seed=0)
    assert [s.name for s in wf.stages] == EPI_STAGES
    members = {wf.stages[s].name: m for s, m in enumerate(wf.stage_members())}
    lanes = members["fastqSplit"].size
    assert lanes == 2  # one lane per 20,000 tasks
    chunks = members["map"].size
    assert all(members[s].size == chunks for s in ("filterContams", "sol2sanger", "fast2bfq"))
    assert members["mapMerge#1"].size == lanes
    merge_all = members["mapMerge#2"][0]
    assert wf.parents(merge_all).size == lanes  # fan-in over the lanes
    assert sum(wf.children(int(t)).size for t in members["fastqSplit"]) == chunks  # fan-out to the chunks
    assert wf.stages[6].predecessor_stages == frozenset({5})  # the global merge follows the lane merges


def test_montage_shape() -> None:
    wf = montage(10_000, seed=0)
    assert [s.name for s in wf.stages] == MONTAGE_STAGES
    members = {wf.stages[s].name: m for s, m in enumerate(wf.stage_members())}
    tiles = members["mProject"].size
    assert members["mBackground"].size == tiles
    diffs = members["mDiffFit"]
    assert diffs.size >= 2 * tiles - 2 * int(np.sqrt(tiles)) - 2  # at least the side-by-side pairs
    assert all(wf.parents(int(d)).size == 2 for d in diffs[:50])
    assert wf.parents(int(members["mConcatFit"][0])).size == diffs.size
    assert wf.stages[4].predecessor_stages == frozenset({0, 3})  # mBackground: its tile and the model
    for name in ("mConcatFit", "mBgModel", "mImgtbl", "mAdd", "mShrink", "mJPEG"):
        assert members[name].size == 1


@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_stages_match_build_workflow(shape: str) -> None:
    # The array path must give the same DAG and the same stages as the validated
    # TaskSpec path (which numbers tasks in its own topological order).
    fast = synthetic_workflow(shape, 3000, seed=2)
    slow = build_workflow(fast.name, fast.source, _specs(fast))
    assert slow.n_tasks == fast.n_tasks and slow.n_edges == fast.n_edges
    assert [s.name for s in slow.stages] == [s.name for s in fast.stages]
    assert [s.predecessor_stages for s in slow.stages] == [s.predecessor_stages for s in fast.stages]
    to_slow = np.array([slow.index_of(t) for t in fast.task_ids])
    assert np.array_equal(slow.stage_of[to_slow], fast.stage_of)
    for i in range(0, fast.n_tasks, 97):
        assert sorted(to_slow[fast.children(i)].tolist()) == slow.children(int(to_slow[i])).tolist()


@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_deterministic_per_seed(shape: str) -> None:
    a, b, c = (synthetic_workflow(shape, 2000, seed=s) for s in (7, 7, 8))
    for field in ("runtime_s", "input_bytes", "parent_ptr", "parent_idx", "child_ptr", "child_idx", "stage_of"):
        assert np.array_equal(getattr(a, field), getattr(b, field))
    assert a.task_ids == b.task_ids
    assert not np.array_equal(a.runtime_s, c.runtime_s)
    assert np.array_equal(a.parent_idx, c.parent_idx)  # the seed draws times and sizes, not the shape


def test_too_small_or_unknown() -> None:
    with pytest.raises(ValueError, match="at least"):
        montage(50)
    with pytest.raises(ValueError, match="at least"):
        epigenomics(5)
    with pytest.raises(ValueError, match="unknown synthetic shape"):
        synthetic_workflow("cybershake", 1000)
