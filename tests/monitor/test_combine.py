"""Several workflows as one DAG: ids, edges and stages stay each workflow's own."""

from __future__ import annotations

import numpy as np
import pytest

from wire_daemon.core.workflow import TaskSpec, build_workflow
from wire_daemon.monitor.combine import combine_workflows, split_task_id


def _chain(name: str, n: int) -> object:
    specs = [TaskSpec(f"t{i}", "split" if i == 0 else "work", (f"t{i - 1}",) if i else ()) for i in range(n)]
    return build_workflow(name, f"{name}.json", specs)


def test_union_keeps_edges_stages_and_ids_apart():
    a, b = _chain("a", 3), _chain("b", 2)
    wf = combine_workflows([("a-1", a), ("b-2", b)])
    assert wf.task_ids == ["a-1/t0", "a-1/t1", "a-1/t2", "b-2/t0", "b-2/t1"]
    assert wf.parents(4).tolist() == [3] and wf.children(1).tolist() == [2] and wf.parents(3).tolist() == []
    assert [s.name for s in wf.stages] == [f"a-1/{s.name}" for s in a.stages] + [f"b-2/{s.name}" for s in b.stages]
    assert wf.stage_of.tolist() == a.stage_of.tolist() + (b.stage_of + len(a.stages)).tolist()
    assert wf.stages[len(a.stages) + 1].predecessor_stages == frozenset({len(a.stages)})
    assert wf.index_of("b-2/t1") == 4 and split_task_id("b-2/t1") == ("b-2", "t1")
    assert np.array_equal(wf.n_parents(), [0, 1, 1, 0, 1])


def test_no_workflow_is_an_empty_dag():
    wf = combine_workflows([])
    assert wf.n_tasks == 0 and wf.stages == [] and wf.parent_ptr.tolist() == [0]


def test_labels_cannot_break_the_ids():
    with pytest.raises(ValueError):
        combine_workflows([("a/b", _chain("a", 1))])
