"""How Pegasus 5 lays out a planned workflow's DAG: job classes, categories, priorities and the rule
lines of its generated files. Shared by the two submit-dir writers (the live one and the real pool's)."""

from __future__ import annotations

from collections.abc import Sequence

from wire_daemon.core.pegasus_names import aux_kind
from wire_daemon.core.workflow import Workflow

JOB_CLASS = {
    "compute": 1,
    "stage_in": 2,
    "stage_worker": 2,
    "stage_out": 3,
    "register": 4,
    "stage_inter": 5,
    "create_dir": 6,
    "cleanup": 8,
    "chmod": 9,
}
FIXED_PRIORITY = {
    "stage_in": 700,
    "stage_worker": 700,
    "stage_inter": 700,
    "create_dir": 800,
    "chmod": 800,
    "stage_out": 900,
    "cleanup": 1000,
}
CATEGORY = {
    "stage_in": "stagein",
    "stage_worker": "stagein",
    "stage_out": "stageout",
    "register": "registration",
    "cleanup": "cleanup",
}
MAXJOBS = (("registration", 1), ("stagein", 10), ("cleanup", 4), ("stageout", 10))
RULE = "#" * 70


def job_kind(task_id: str, transformation: str) -> str:
    """The auxiliary kind its id or transformation names, else ``compute``."""
    return aux_kind(task_id) or aux_kind(transformation) or "compute"


def compute_levels(wf: Workflow, kinds: Sequence[str]) -> list[int]:
    """Compute ancestors on the longest path above each task (tasks are in topological order)."""
    levels = [0] * wf.n_tasks
    for i in range(wf.n_tasks):
        above = [levels[p] + (kinds[p] == "compute") for p in wf.parents(i).tolist()]
        levels[i] = max(above, default=0)
    return levels


def priority(kind: str, level: int) -> int:
    """Pegasus 5's default priorities: fixed per auxiliary kind, 10 per compute level."""
    if kind in FIXED_PRIORITY:
        return FIXED_PRIORITY[kind]
    return 10 * (level + (2 if kind == "register" else 1))
