"""Build the ``Workflow`` of a Pegasus (or plain DAGMan) submit directory.

Sources: the ``.dag`` (nodes, edges), each node's ``.sub`` file, the
braindump, and the abstract workflow for input sizes. Decisions (ours):

* **Which DAG.** The braindump's ``dag``; without a braindump, the one ``*.dag``
  in the directory (rescue DAGs ``*.dag.rescueNNN`` are not ``*.dag``). None or
  several: ``InputError``.
* **Tasks.** Every DAG node is a task, sub-workflows included (``pegasus-plan_*``
  jobs and ``SUBDAG EXTERNAL`` nodes: a DAGMan job on the submit host). SERVICE
  and PROVISIONER nodes run beside the DAG, not in it, and are left out. A
  FINAL node runs after everything else: it becomes a child of every node
  without children.
* **Transformation.** ``+pegasus_wf_xformation`` of the node's submit file.
  Without it (no submit file, or a non-Pegasus one): the Pegasus auxiliary job
  kind read from the node name (create_dir, stage_in, stage_out, stage_inter,
  stage_worker, register, cleanup, chmod, pegasus-plan), else the name's prefix
  before ``_ID<digits>`` (``findrange_ID0000002`` -> ``findrange``), else the
  name without a trailing ``_<digits>``; SUBDAG nodes are ``condor::dagman``
  (the transformation Pegasus gives its own sub-workflow jobs).
* **Which tasks occupy the managed pool** (``on_pool``). A task does not when
  its submit file says ``universe`` local, scheduler or grid (local and
  scheduler jobs run on the submit host, grid jobs on a remote resource), or
  ``+pegasus_site = "local"`` (the submit host). SUBDAG and NOOP nodes never
  occupy a slot. Without a submit file, the Pegasus naming rule decides:
  create_dir, stage_worker, register, cleanup and pegasus-plan jobs, and
  transfer jobs whose name says ``local`` after the kind, run on the submit host.
* **Input bytes**: see ``abstract_wf``; the abstract job is the node's
  ``+pegasus_wf_dax_job_id`` (else the ``ID<digits>`` suffix of its name). The
  abstract workflow is the braindump's ``dax`` file name found in the submit
  dir, else ``workflow.yml``; if it is missing or unreadable (one warning)
  every input size is 0.
* **Sub-workflows** are discovered, not merged: ``sub_workflows`` lists each
  sub-workflow node with its own submit dir and ``.dag`` once they exist. For a
  Pegasus ``pegasus-plan_*`` job the directory is the job's ``initialdir``
  (made relative to the braindump's ``submit_dir``, else taken as the name next
  to the ``.sub`` file); Pegasus links ``<name>`` to the newest ``<name>.NNN``,
  so without the link the highest ``.NNN`` is used; the ``.dag`` is the
  ``-Dag`` argument of the DAGMan job.
"""

from __future__ import annotations

import math
import os
import re
from dataclasses import dataclass, field
from pathlib import Path

from wire_daemon.core.errors import InputError
from wire_daemon.core.pegasus_names import AUX_KINDS, LOCAL_KINDS, aux_kind
from wire_daemon.core.workflow import TaskSpec, Workflow, build_workflow
from wire_daemon.monitor.abstract_wf import AbstractWorkflow, read_abstract_workflow
from wire_daemon.monitor.braindump import Braindump, find_braindump, read_braindump
from wire_daemon.monitor.dag import DagFile, DagNode, parse_dag
from wire_daemon.monitor.problems import Problems
from wire_daemon.monitor.submit_file import SubmitFile, expand_macros, parse_submit_file

_AUX_KINDS = (*AUX_KINDS, "pegasus-plan")  # a sub-workflow's planning job, too
_LOCAL_KINDS = LOCAL_KINDS | {"pegasus-plan"}
_OFF_POOL_UNIVERSES = frozenset({"local", "scheduler", "grid"})
_ID_SUFFIX = re.compile(r"^(.+?)_(ID\d+)$")
_NUMBER_SUFFIX = re.compile(r"^(.+?)_\d+$")
_DAG_ARGUMENT = re.compile(r"-Dag\s+(\S+)", re.IGNORECASE)
_RUN_SUFFIX = re.compile(r"\.(\d{3,})$")
SUBDAG_TRANSFORMATION = "condor::dagman"


@dataclass(frozen=True)
class SubWorkflowRef:
    node: str
    submit_dir: Path | None  # None until the planner has created it
    dag_path: Path | None


@dataclass
class SubmitDir:
    path: Path
    dag: DagFile
    workflow: Workflow
    braindump: Braindump | None = None
    abstract: AbstractWorkflow | None = None
    submit_files: dict[str, SubmitFile] = field(default_factory=dict)
    sub_workflows: list[SubWorkflowRef] = field(default_factory=list)


def workflow_from_submit_dir(path: str | os.PathLike[str], problems: Problems | None = None) -> Workflow:
    return read_submit_dir(path, problems).workflow


def read_submit_dir(path: str | os.PathLike[str], problems: Problems | None = None) -> SubmitDir:
    problems = problems or Problems()
    root = Path(path)
    if not root.is_dir():
        raise InputError(str(root), "not a directory")
    braindump = _braindump(root, problems)
    dag_path = _dag_path(root, braindump)
    dag = parse_dag(dag_path, problems)
    submit_files = _submit_files(dag_path.parent, dag, problems)
    abstract = _abstract(root, braindump, problems)
    specs = [_spec(dag, i, parents, submit_files, abstract) for i, parents in _task_parents(dag)]
    name = braindump.wf_name if braindump and braindump.wf_name else dag_path.stem
    workflow = build_workflow(name, str(dag_path), specs)
    result = SubmitDir(root, dag, workflow, braindump, abstract, submit_files)
    result.sub_workflows = sub_workflow_refs(result)
    return result


def sub_workflow_refs(submit_dir: SubmitDir) -> list[SubWorkflowRef]:
    """The sub-workflow nodes and where their submit dirs are *now* (they appear when planned)."""
    dag_dir = Path(submit_dir.dag.path).parent
    subs = submit_dir.submit_files
    return [
        _sub_workflow(submit_dir.path, dag_dir, node, subs.get(node.name), submit_dir.braindump)
        for node in submit_dir.dag.nodes
        if _is_sub_workflow(node, subs.get(node.name))
    ]


# -- tasks -------------------------------------------------------------------------


def _task_parents(dag: DagFile) -> list[tuple[int, list[str]]]:
    """(node index, parent names) of the nodes that are tasks; FINAL after all sinks."""
    parents = dag.parents_of()
    kept = [i for i, node in enumerate(dag.nodes) if node.kind not in ("service", "provisioner")]
    has_child = set(dag.edge_parent)
    finals = [i for i in kept if dag.nodes[i].kind == "final"]
    sinks = [dag.names[i] for i in kept if i not in has_child and dag.nodes[i].kind != "final"]
    for i in finals:
        parents[i] = sorted(set(parents[i]) | set(sinks))
    return [
        (i, [p for p in parents[i] if dag.nodes[dag.index[p]].kind not in ("service", "provisioner")]) for i in kept
    ]


def _spec(
    dag: DagFile, i: int, parents: list[str], subs: dict[str, SubmitFile], abstract: AbstractWorkflow | None
) -> TaskSpec:
    node = dag.nodes[i]
    sub = subs.get(node.name)
    job_id = _resolved(sub.dax_job_id if sub else None, node) or _dax_id_from_name(node.name)
    inputs = abstract.input_bytes(job_id) if abstract and job_id else 0
    outputs = abstract.output_bytes(job_id) if abstract and job_id else 0
    return TaskSpec(
        task_id=node.name,
        transformation=transformation_of(node, sub),
        parents=tuple(parents),
        runtime_s=math.nan,
        input_bytes=inputs,
        output_bytes=outputs,
        on_pool=runs_on_pool(node, sub),
    )


def transformation_of(node: DagNode, sub: SubmitFile | None) -> str:
    if node.kind == "subdag":
        return SUBDAG_TRANSFORMATION
    return _resolved(sub.xformation if sub else None, node) or transformation_from_name(node.name)


def _resolved(value: str | None, node: DagNode) -> str | None:
    """A submit-file value with the node's DAGMan macros expanded; None if one stays unknown."""
    if not value:
        return None
    expanded = expand_macros(value, {"JOB": node.name, **dict(node.vars)})
    return None if "$(" in expanded else expanded


def transformation_from_name(name: str) -> str:
    kind = _aux_kind(name)
    if kind:
        return kind
    match = _ID_SUFFIX.match(name) or _NUMBER_SUFFIX.match(name)
    return match.group(1) if match else name


def _aux_kind(name: str) -> str | None:
    return aux_kind(name, _AUX_KINDS)


def runs_on_pool(node: DagNode, sub: SubmitFile | None) -> bool:
    """The rule in the module docstring."""
    if node.kind == "subdag" or node.noop:
        return False
    if sub is not None:
        return sub.universe not in _OFF_POOL_UNIVERSES and (sub.site or "").lower() != "local"
    kind = _aux_kind(node.name)
    if kind in _LOCAL_KINDS:
        return False
    rest = node.name[len(kind) :] if kind else ""
    return not (kind and "local" in rest.split("_"))


def _dax_id_from_name(name: str) -> str | None:
    match = _ID_SUFFIX.match(name)
    return match.group(2) if match else None


# -- files -------------------------------------------------------------------------


def _braindump(root: Path, problems: Problems) -> Braindump | None:
    found = find_braindump(root)
    if found is None:
        return None
    try:
        return read_braindump(found)
    except InputError as exc:
        problems.warn(str(found), f"braindump ignored: {exc.detail}", exc.where)
        return None


def _dag_path(root: Path, braindump: Braindump | None) -> Path:
    if braindump and braindump.dag:
        candidate = root / braindump.dag
        if candidate.is_file():
            return candidate
    dags = sorted(root.glob("*.dag"))
    if len(dags) == 1:
        return dags[0]
    if not dags:
        raise InputError(str(root), "no .dag file in the submit directory")
    raise InputError(str(root), f"several .dag files and no braindump to choose: {', '.join(d.name for d in dags)}")


def _submit_files(base: Path, dag: DagFile, problems: Problems) -> dict[str, SubmitFile]:
    found: dict[str, SubmitFile] = {}
    missing = 0
    for node in dag.nodes:
        if node.kind in ("subdag", "splice") or node.submit_path is None:
            continue
        path = base / node.submit_path
        if not path.exists():  # anything else there (a FIFO, a device) is refused by the reader, with a warning
            missing += 1
            continue
        sub = parse_submit_file(path, problems)
        if sub is not None:
            found[node.name] = sub
    if missing:
        problems.warn(dag.path, f"{missing} node submit file(s) not found; those nodes use the naming rules")
    return found


def _abstract(root: Path, braindump: Braindump | None, problems: Problems) -> AbstractWorkflow | None:
    names = []
    if braindump and braindump.dax:
        names.append(Path(braindump.dax).name)
    names.append("workflow.yml")
    path = next((root / n for n in names if (root / n).is_file()), None)
    if path is None:
        return None
    catalogs = [c for c in (root / "catalogs" / "replicas.yml",) if c.is_file()]
    try:
        return read_abstract_workflow(path, catalogs, problems)
    except InputError as exc:
        problems.warn(exc.source, f"input sizes unknown (taken as 0): {exc.detail}", exc.where)
        return None


# -- sub-workflows -----------------------------------------------------------------


def _is_sub_workflow(node: DagNode, sub: SubmitFile | None) -> bool:
    if node.kind == "subdag":
        return True
    if sub is not None and (sub.job_class in (10, 11) or sub.xformation == SUBDAG_TRANSFORMATION):
        return True
    return node.name.startswith("pegasus-plan_")


def _sub_workflow(
    root: Path, dag_dir: Path, node: DagNode, sub: SubmitFile | None, braindump: Braindump | None
) -> SubWorkflowRef:
    if node.kind == "subdag":
        subdag = dag_dir / (node.directory or "") / (node.file or "")
        return SubWorkflowRef(
            node.name, subdag.parent if subdag.parent.is_dir() else None, subdag if subdag.is_file() else None
        )
    directory = _pegasus_sub_dir(root, dag_dir, node, sub, braindump)
    dag_name = _DAG_ARGUMENT.search(sub.arguments or "") if sub else None
    dag_path: Path | None = directory / dag_name.group(1) if directory and dag_name else None
    if directory and dag_path is None:
        dag_path = next(iter(sorted(directory.glob("*.dag"))), None)
    return SubWorkflowRef(node.name, directory, dag_path if dag_path and dag_path.is_file() else None)


def _pegasus_sub_dir(
    root: Path, dag_dir: Path, node: DagNode, sub: SubmitFile | None, braindump: Braindump | None
) -> Path | None:
    if sub is None or not sub.initialdir:
        return None
    initial = sub.initialdir
    planned = braindump.submit_dir if braindump else None
    if planned and initial.startswith(planned.rstrip("/") + "/"):
        candidate = root / os.path.normpath(initial[len(planned.rstrip("/")) + 1 :])
    else:
        candidate = (dag_dir / (node.submit_path or "")).parent / Path(initial).name
    if candidate.is_dir():
        return candidate
    runs = [p for p in candidate.parent.glob(candidate.name + ".*") if _RUN_SUFFIX.search(p.name) and p.is_dir()]
    return max(runs, key=lambda p: int(_RUN_SUFFIX.search(p.name).group(1))) if runs else None  # type: ignore[union-attr]
