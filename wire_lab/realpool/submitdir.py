"""Turn a workflow trace into a Pegasus-layout DAGMan submit directory that a real HTCondor pool runs.

``write_submit_dir(trace, out_dir, time_scale=K)`` writes what pegasus-plan
would leave in a submit directory, so that wire-daemon's readers (``monitor/``)
read it exactly as a real Pegasus workflow; HTCondor and DAGMan then write the
event logs, ``dagman.out`` and the jobs' kickstart records themselves when the
DAG runs. Each job runs ``task_emulator``'s shell script, which sleeps the
trace's runtime x K and prints a kickstart record. CLI::

    python -m wire_lab.realpool.submitdir TRACE OUT_DIR [--time-scale K] [--pool NAME] [--retry N]
                                          [--pool-dir PATH] [--label L] [--wf-uuid U] [--fail TASK[:N]]...

Run the DAG from the directory: ``cd OUT_DIR && condor_submit_dag <label>-0.dag``
(the ``JOB`` lines and POST-script arguments are relative to it, as Pegasus
writes them).

What is written, and why (modelled on the Pegasus 5.0.5 submit dirs in
tests/data/fixtures/pegasus-submit; the readers' needs in brackets):

* ``<label>-0.dag``: ``MAXJOBS`` for Pegasus' auxiliary-job categories, then
  per node ``JOB``, ``SCRIPT POST`` (``bin/wire-exitcode.sh``, standing in for
  pegasus-exitcode: it rotates ``<job>.out`` to ``.out.NNN``, which the monitor
  counts on to find the k-th attempt's record), ``PRIORITY``, ``RETRY n``
  (``--retry``, default 1 as Pegasus 5's ``dagman.retry``), ``CATEGORY`` (aux
  jobs only) and ``VARS <node> +DAGNodeRetry="$(RETRY)"`` (Pegasus' line; the
  emulator reads the attempt from it); one ``PARENT p CHILD c`` line per edge.
  Nodes are in the workflow's topological order, so the readers number tasks
  and stages as the trace loader does [``dag.py``, ``submit_dir.py``]. The
  ``.dag`` is written last (temporary file + rename): a reader never sees a
  DAG whose submit files are not there yet.
* **Node names** follow Pegasus: ``<transformation>_ID<7 digits>``; a task id
  already of that form (``mProject_ID0000001``) is kept, as is a Pegasus
  auxiliary-job name (``stage_in_local_local_0_0``). Any other id becomes
  ``<transformation>_ID<task number>``, with characters outside
  ``[A-Za-z0-9_.-]`` replaced by ``_`` (DAGMan forbids blanks and reserves
  ``+``; the daemon's priority boost refuses other characters in a node name).
* ``.sub`` files in Pegasus' hashed layout (``00/00``, ``00/01``...: 2 levels,
  multiplier 5, 254 entries a directory, as Pegasus' Hashed submit mapper).
  Each names its transformation literally in ``+pegasus_wf_xformation``
  (never through a DAG ``VARS`` macro) and carries ``+pegasus_wf_uuid`` (=
  the braindump's, which the daemon's priority boost queries with
  ``DAGNodeName``), ``+pegasus_wf_dag_job_id``, ``+pegasus_wf_dax_job_id``
  [abstract-workflow input sizes], ``+pegasus_job_class``, ``+pegasus_site``
  [``on_pool``]. ``log`` = ``<label>-0.log`` (Pegasus' job log, the
  braindump's ``condor_log``; DAGMan also writes ``<dag>.nodes.log``, which the
  monitor prefers); ``output``/``error`` = ``<job>.out``/``.err`` beside the
  ``.sub`` [where the monitor looks for the kickstart record].
* Pool jobs (the trace's ``on_pool`` tasks): ``universe = vanilla``,
  ``request_cpus = 1``, ``requirements = TARGET.WirePool =?= "<pool>"`` (what
  pegasus_sites/sites.yml makes every condorpool job carry: the daemon's
  workers advertise ``WirePool``, condor_config/wire-execute.conf.in; their
  START expression asks nothing of the job, so no ``+Want...`` attribute is
  needed), ``should_transfer_files = YES`` / ``when_to_transfer_output =
  ON_EXIT``: works whether or not the workers share the submit host's
  ``FILESYSTEM_DOMAIN``, like Pegasus' condorio; the executable is
  transferred, stdout (the record) comes back as ``<job>.out`` at exit.
  Tasks off the pool (auxiliary jobs Pegasus runs on the submit host) are
  ``universe = local`` with ``+pegasus_site = "local"``.
* ``workflow.yml``, an abstract workflow with every job (auxiliary ones too,
  unlike Pegasus, so their input sizes are known before they run): one input
  file ``<node>.input`` whose size is the trace task's input bytes, one output
  ``<node>.output`` (a file only when the size is not 0). The trace's
  per-file lists are not kept: the loader's ``Workflow`` holds per-task
  totals, and the readers sum file sizes per task anyway.
* ``braindump.yml`` (``wf_uuid`` = ``root_wf_uuid``, ``dag``, ``condor_log``,
  ``jsd``, ``dax``, ``submit_dir`` = the pool-side path...) plus the trace
  path and time scale; ``bin/`` with the two scripts. No ``jobstate.log``:
  pegasus-monitord does not run; the monitor follows the event log.
* **Paths**: absolute paths inside the files use ``pool_dir`` (default: the
  directory itself), the path at which the schedd, DAGMan and the workers see
  the directory (e.g. a bind mount in a chroot). The monitor maps them back
  through the braindump's ``submit_dir``.
* ``failures``: task id -> number of first attempts that exit 1, to exercise
  DAGMan retries (and the monitor's attempt counting) on the real pool.
* **Memory** (off unless asked): ``request_memory_mib`` (transformation ->
  MiB) writes ``request_memory`` into that transformation's pool jobs, as a
  Pegasus ``condor`` profile per transformation does; ``hold_memory`` makes
  each pool job really hold its trace peak while it sleeps (the emulator's
  ``-M``), so HTCondor measures it; ``held_remove_s`` is how long a held pool
  job stays in the queue before its ``periodic_remove`` (default 10 s, as in
  the Pegasus fixture this layout follows; a site that fixes memory holds
  needs minutes, Pegasus' own default is 1800 s).

**Choosing K.** HTCondor stamps job events to the second (unless the schedd's
``DEFAULT_USERLOG_FORMAT_OPTIONS`` has ``SUB_SECOND``), and the daemon's run
state caps a task's kickstart duration at its event-log occupancy: a task
shorter than a second can read back as 0 s. Pick K so that the tasks that
matter last several seconds.

Checked on HTCondor 23.9.6 (the trixie chroot, a personal pool as ``nobody``):
the bundled Montage trace and wfformat-1.4-mini ran to the end with injected
failures retried (vanilla and local universe), and ``wire-daemon inspect``
read every job's record from the nodes log and the rotated ``.out.NNN``.
"""

from __future__ import annotations

import argparse
import getpass
import json
import math
import os
import re
import socket
import sys
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

import yaml

from wire_lab import pegasus_layout as pegasus
from wire_lab.realpool.daemon_api import InputError, Workflow, load_trace
from wire_lab.realpool.task_emulator import EMULATOR_NAME, EXITCODE_NAME, EmulatedTask, install

DEFAULT_POOL = "wire-pool"  # the daemon's cloud.pool default, as in pegasus_sites/make_sites.py
PEGASUS_VERSION = "5.0.5"
_NODE_SAFE = re.compile(r"^[A-Za-z0-9_.\-]+$")
_UNSAFE_CHARS = re.compile(r"[^A-Za-z0-9_.\-]")
_PEGASUS_NAME = re.compile(r"^(?P<xform>.+)_ID(?P<number>\d+)$")
_POOL_NAME = re.compile(r"^[A-Za-z0-9._:@-]+$")
_RESERVED = frozenset({"PARENT", "CHILD", "ALL_NODES"})
# Pegasus' Hashed submit mapper (HashedFileFactory): files per directory, multiplier, top-level offset.
_HASH_FILES_PER_DIR, _HASH_MULTIPLIER, _HASH_OFFSET = 254, 5, 30


@dataclass(frozen=True)
class SubmitDirOptions:
    pool: str | None = DEFAULT_POOL  # requirements TARGET.WirePool =?= pool; None: no requirements
    retry: int = 1  # DAGMan RETRY per node (Pegasus 5's default dagman.retry)
    pool_dir: str | None = None  # absolute path where the pool sees the directory; default: the directory
    label: str | None = None  # Pegasus workflow label; default: the workflow's (trace file's) name
    wf_uuid: str | None = None  # default: a fresh uuid4, as pegasus-plan makes one per plan
    priorities: bool = True  # Pegasus' job priorities (PRIORITY lines and priority commands)
    report_memory: bool = True  # the trace's peak memory as the record's maxrss
    failures: Mapping[str, int] = field(default_factory=dict)  # task id -> first attempts that fail
    request_memory_mib: Mapping[str, int] = field(default_factory=dict)  # transformation -> request_memory
    hold_memory: bool = False  # pool jobs really hold their trace peak memory while they run
    held_remove_s: int = 10  # a held pool job is removed after this long (periodic_remove)


@dataclass(frozen=True)
class PlannedJob:
    task: int
    task_id: str
    node: str
    dax_id: str
    transformation: str
    kind: str  # compute or a Pegasus auxiliary kind
    on_pool: bool
    subdir: str  # "00/00"
    priority: int
    emulated: EmulatedTask

    @property
    def site(self) -> str:
        return "condorpool" if self.on_pool else "local"

    @property
    def job_class(self) -> int:
        return pegasus.JOB_CLASS.get(self.kind, 1)

    @property
    def category(self) -> str | None:
        return pegasus.CATEGORY.get(self.kind)

    @property
    def submit_path(self) -> str:
        return f"{self.subdir}/{self.node}.sub"


@dataclass(frozen=True)
class WrittenSubmitDir:
    path: Path
    dag: Path
    label: str
    wf_uuid: str
    pool_dir: str
    time_scale: float
    jobs: tuple[PlannedJob, ...]
    n_edges: int
    n_stages: int

    @property
    def node_of(self) -> dict[str, str]:
        """Trace task id -> DAG node name."""
        return {job.task_id: job.node for job in self.jobs}

    def summary(self) -> str:
        on_pool = sum(job.on_pool for job in self.jobs)
        busy = sum(job.emulated.seconds for job in self.jobs)
        return (
            f"{self.label}: {len(self.jobs)} jobs ({on_pool} on the pool), {self.n_stages} stages, "
            f"{self.n_edges} edges, time scale {self.time_scale:g} ({busy:.0f} s of task time) -> {self.dag} "
            f"(wf_uuid {self.wf_uuid}); run: cd {self.pool_dir} && condor_submit_dag {self.dag.name}"
        )


@dataclass(frozen=True)
class _Context:
    """Names and paths every rendered file shares."""

    label: str
    wf_uuid: str
    pool_dir: str
    source: str
    time_scale: float
    options: SubmitDirOptions
    wf_time: str = field(default_factory=lambda: datetime.now().astimezone().strftime("%Y%m%dT%H%M%S%z"))

    @property
    def wf_name(self) -> str:
        return f"{self.label}-0"

    @property
    def bin_dir(self) -> str:
        return f"{self.pool_dir}/bin"


# -- planning --------------------------------------------------------------------------


def write_submit_dir(
    trace: str | os.PathLike[str] | Workflow,
    out_dir: str | os.PathLike[str],
    time_scale: float = 1.0,
    options: SubmitDirOptions | None = None,
) -> WrittenSubmitDir:
    """Write the submit dir of ``trace`` (a trace file or a loaded ``Workflow``) into ``out_dir``."""
    options = options or SubmitDirOptions()
    if not (math.isfinite(time_scale) and time_scale > 0):
        raise ValueError(f"time scale {time_scale!r}: must be a positive number")
    if options.retry < 0:
        raise ValueError(f"retry {options.retry}: must be 0 or more")
    if options.held_remove_s < 0:
        raise ValueError(f"held_remove_s {options.held_remove_s}: must be 0 or more")
    for xform, mib in options.request_memory_mib.items():
        if not (isinstance(mib, int) and mib > 0):
            raise ValueError(f"request_memory of {xform!r}: {mib!r} is not a positive number of MiB")
    if options.pool is not None and not _POOL_NAME.match(options.pool):
        raise ValueError(f"pool name {options.pool!r}: use letters, digits and . _ : @ - only")
    workflow = trace if isinstance(trace, Workflow) else load_trace(trace)
    out = _empty_dir(Path(out_dir))
    pool_dir = (options.pool_dir or os.fspath(out.resolve())).rstrip("/") or "/"
    if not os.path.isabs(pool_dir):
        raise ValueError(f"pool dir {pool_dir!r}: must be an absolute path")
    label = _UNSAFE_CHARS.sub("_", options.label or workflow.name) or "workflow"
    source = os.path.abspath(workflow.source) if os.path.exists(workflow.source) else workflow.source
    ctx = _Context(label, options.wf_uuid or str(uuid.uuid4()), pool_dir, source, time_scale, options)
    jobs = plan_jobs(workflow, time_scale, options)
    _write_files(out, ctx, jobs, workflow)
    return WrittenSubmitDir(
        out,
        out / f"{ctx.wf_name}.dag",
        label,
        ctx.wf_uuid,
        pool_dir,
        time_scale,
        tuple(jobs),
        int(workflow.n_edges),
        len(workflow.stages),
    )


def plan_jobs(workflow: Workflow, time_scale: float, options: SubmitDirOptions) -> list[PlannedJob]:
    unknown = sorted(set(options.failures) - set(workflow.task_ids))
    if unknown:
        raise ValueError(f"failures name unknown task {unknown[0]!r}")
    kinds = [pegasus.job_kind(t, x) for t, x in zip(workflow.task_ids, workflow.transformation)]
    names = node_names(workflow.task_ids, workflow.transformation, kinds)
    levels = pegasus.compute_levels(workflow, kinds)
    return [_job(workflow, i, names[i], kinds[i], int(levels[i]), time_scale, options) for i in range(workflow.n_tasks)]


def _job(
    wf: Workflow, i: int, name: tuple[str, str], kind: str, level: int, time_scale: float, options: SubmitDirOptions
) -> PlannedJob:
    task_id, (node, dax_id) = wf.task_ids[i], name
    runtime = float(wf.runtime_s[i])
    if not math.isfinite(runtime) or runtime < 0:
        raise ValueError(f"task {task_id!r}: no usable runtime ({runtime!r})")
    memory = int(wf.peak_memory_bytes[i])
    on_pool = bool(wf.on_pool[i])
    emulated = EmulatedTask(
        transformation=wf.transformation[i],
        dax_id=dax_id,
        site="condorpool" if on_pool else "local",
        seconds=runtime * time_scale,
        maxrss_kib=-(-memory // 1024) if options.report_memory and memory > 0 else None,
        hold_mib=-(-memory // (1 << 20)) if options.hold_memory and on_pool and memory > 0 else None,
        failed_attempts=int(options.failures.get(task_id, 0)),
        inputs=_files(f"{node}.input", int(wf.input_bytes[i])),
        outputs=_files(f"{node}.output", int(wf.output_bytes[i])),
    )
    emulated.argv()  # refuse, now, a name the record cannot hold
    return PlannedJob(
        i,
        task_id,
        node,
        dax_id,
        wf.transformation[i],
        kind,
        on_pool,
        hashed_subdir(i),
        pegasus.priority(kind, level),
        emulated,
    )


def _files(lfn: str, size: int) -> tuple[tuple[str, int], ...]:
    return ((lfn, size),) if size > 0 else ()


def node_names(task_ids: Sequence[str], transformations: Sequence[str], kinds: Sequence[str]) -> list[tuple[str, str]]:
    """(node name, dax job id) per task: see the module docstring.

    Names that are already right are claimed first, so a renamed task never
    takes the node name or ``ID`` number of a task whose name is kept.
    """
    kept = [_kept_name(t, x, k) for t, x, k in zip(task_ids, transformations, kinds)]
    out: dict[int, tuple[str, str]] = {}
    used_ids: set[str] = set()
    used_nodes: set[str] = set()
    for i, name in enumerate(kept):  # Pegasus compute names: node and dax id both fixed
        if name and name[1] and name[0] not in used_nodes and name[1] not in used_ids:
            out[i] = (name[0], name[1])
            used_nodes.add(name[0])
            used_ids.add(name[1])
    aux = {}  # Pegasus auxiliary names: the node is fixed, the dax id is not
    for i, name in enumerate(kept):
        if name and not name[1] and name[0] not in used_nodes:
            aux[i] = name[0]
            used_nodes.add(name[0])
    for i, xform in enumerate(transformations):
        if i in out:
            continue
        number = i + 1
        while f"ID{number:07d}" in used_ids or (i not in aux and f"{_safe(xform)}_ID{number:07d}" in used_nodes):
            number += 1
        dax_id = f"ID{number:07d}"
        out[i] = (aux.get(i) or f"{_safe(xform)}_{dax_id}", dax_id)
        used_ids.add(dax_id)
        used_nodes.add(out[i][0])
    return [out[i] for i in range(len(task_ids))]


def _kept_name(task_id: str, xform: str, kind: str) -> tuple[str, str | None] | None:
    """(task id, its dax id or None) when the id can stay the node name."""
    if not _NODE_SAFE.match(task_id) or task_id.upper() in _RESERVED:
        return None
    match = _PEGASUS_NAME.match(task_id)
    if match and match.group("xform") == _safe(xform):
        return task_id, f"ID{match.group('number')}"
    if kind != "compute" and task_id.startswith(kind + "_"):
        return task_id, None  # a Pegasus auxiliary job name; it gets a dax id later
    return None


def _safe(text: str) -> str:
    return _UNSAFE_CHARS.sub("_", text) or "task"


def hashed_subdir(k: int) -> str:
    """The directory of the k-th job (0-based), as Pegasus' Hashed submit mapper places it."""
    estimate = (k * _HASH_MULTIPLIER + _HASH_OFFSET) // _HASH_FILES_PER_DIR
    low = estimate % _HASH_FILES_PER_DIR
    high = (estimate // _HASH_FILES_PER_DIR) % _HASH_FILES_PER_DIR
    return f"{high:02X}/{low:02X}"


# -- writing -----------------------------------------------------------------------------


def _empty_dir(out: Path) -> Path:
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise FileExistsError(f"{out}: exists and is not an empty directory")
    out.mkdir(parents=True, exist_ok=True)
    return out


def _write_files(out: Path, ctx: _Context, jobs: Sequence[PlannedJob], wf: Workflow) -> None:
    install(out / "bin")
    for job in jobs:
        (out / job.subdir).mkdir(parents=True, exist_ok=True)
        (out / job.submit_path).write_text(_sub_text(ctx, job), encoding="utf-8")
    (out / "workflow.yml").write_text(_workflow_yml(ctx, jobs, wf), encoding="utf-8")
    (out / "braindump.yml").write_text(_braindump_yml(ctx), encoding="utf-8")
    _write_atomically(out / f"{ctx.wf_name}.dag", _dag_text(ctx, jobs, wf))  # last: the DAG appears complete


def _write_atomically(path: Path, text: str) -> None:
    temporary = path.with_name(f".{path.name}.tmp")
    temporary.write_text(text, encoding="utf-8")
    os.replace(temporary, path)


def _dag_text(ctx: _Context, jobs: Sequence[PlannedJob], wf: Workflow) -> str:
    lines = [
        pegasus.RULE,
        "# PEGASUS WMS GENERATED DAG FILE (layout; written by wire_lab.realpool.submitdir)",
        f"# DAG {ctx.label}",
        f"# trace {ctx.source}, time scale {ctx.time_scale:g}",
        "# Index = 0, Count = null",
        pegasus.RULE,
    ]
    lines += [f"MAXJOBS {category} {count}" for category, count in pegasus.MAXJOBS]
    lines.append("")
    for job in jobs:
        lines += _dag_node_lines(ctx, job)
    for child in range(wf.n_tasks):
        lines += [f"PARENT  {jobs[p].node} CHILD {jobs[child].node}" for p in wf.parents(child).tolist()]
    lines += [pegasus.RULE, "# End of DAG", pegasus.RULE]
    return "\n".join(lines) + "\n"


def _dag_node_lines(ctx: _Context, job: PlannedJob) -> list[str]:
    lines = [
        f"JOB {job.node} {job.submit_path}",
        f"SCRIPT POST {job.node} {ctx.bin_dir}/{EXITCODE_NAME} -r $RETURN .//{job.subdir}/{job.node}.out",
    ]
    if ctx.options.priorities:
        lines.append(f"PRIORITY {job.node} {job.priority}")
    lines.append(f"RETRY {job.node} {ctx.options.retry}")
    if job.category:
        lines.append(f"CATEGORY {job.node} {job.category}")
    return lines + [f'VARS {job.node} +DAGNodeRetry="$(RETRY)"', ""]


def _sub_text(ctx: _Context, job: PlannedJob) -> str:
    head = [
        pegasus.RULE,
        "# PEGASUS WMS GENERATED SUBMIT FILE (layout; written by wire_lab.realpool.submitdir)",
        f"# DAG : {ctx.label}, Index = 0, Count = null",
        f"# SUBMIT FILE NAME : {job.node}.sub",
        pegasus.RULE,
        "stream_error  = false",
        "stream_output = false",
        (
            f'environment = "CONDOR_JOBID=$(cluster).$(process) PEGASUS_WF_UUID={ctx.wf_uuid}'
            f' PEGASUS_WF_LABEL={ctx.label} PEGASUS_DAG_JOB_ID={job.node} PEGASUS_SITE={job.site}"'
        ),
        f"arguments = {condor_arguments(job.emulated.argv())}",
        f"error = {ctx.pool_dir}/{job.subdir}/{job.node}.err",
        f"executable = {ctx.bin_dir}/{EMULATOR_NAME}",
        f"log = {ctx.pool_dir}/{ctx.wf_name}.log",
        "notification = NEVER",
        f"output = {ctx.pool_dir}/{job.subdir}/{job.node}.out",
        "periodic_release = False",
    ]
    body = _pool_commands(ctx, job) if job.on_pool else _local_commands(ctx, job)
    return (
        "\n".join(
            head + body + _pegasus_attributes(ctx, job) + ["queue", pegasus.RULE, "# END OF SUBMIT FILE", pegasus.RULE]
        )
        + "\n"
    )


def _pool_commands(ctx: _Context, job: PlannedJob) -> list[str]:
    lines = [
        f"initialdir = {ctx.pool_dir}",
        f"periodic_remove = (JobStatus == 5) && ((CurrentTime - EnteredCurrentStatus) > {ctx.options.held_remove_s})",
        *_priority_command(ctx, job),
        "request_cpus = 1",
    ]
    if job.transformation in ctx.options.request_memory_mib:
        lines.append(f"request_memory = {ctx.options.request_memory_mib[job.transformation]}")
    if ctx.options.pool is not None:
        lines.append(f'requirements = TARGET.WirePool =?= "{ctx.options.pool}"')
    return lines + [
        "should_transfer_files = YES",
        "submit_event_user_notes = pool:condorpool",
        "transfer_executable = true",
        "universe = vanilla",
        "when_to_transfer_output = ON_EXIT",
    ]


def _local_commands(ctx: _Context, job: PlannedJob) -> list[str]:
    return [
        f"initialdir = {ctx.pool_dir}",
        "periodic_remove = (JobStatus == 5) && ((CurrentTime - EnteredCurrentStatus) > 1800)",
        *_priority_command(ctx, job),
        "submit_event_user_notes = pool:local",
        "transfer_executable = false",
        "universe = local",
    ]


def _priority_command(ctx: _Context, job: PlannedJob) -> list[str]:
    return [f"priority = {job.priority}"] if ctx.options.priorities else []


def _pegasus_attributes(ctx: _Context, job: PlannedJob) -> list[str]:
    attributes = [
        ("pegasus_generator", _classad_string("Pegasus")),
        ("pegasus_root_wf_uuid", _classad_string(ctx.wf_uuid)),
        ("pegasus_wf_uuid", _classad_string(ctx.wf_uuid)),
        ("pegasus_version", _classad_string(PEGASUS_VERSION)),
        ("pegasus_wf_name", _classad_string(ctx.wf_name)),
        ("pegasus_wf_time", _classad_string(ctx.wf_time)),
        ("pegasus_wf_xformation", _classad_string(job.transformation)),
        ("pegasus_wf_dax_job_id", _classad_string(job.dax_id)),
        ("pegasus_wf_dag_job_id", _classad_string(job.node)),
        ("pegasus_job_class", str(job.job_class)),
        ("pegasus_site", _classad_string(job.site)),
        ("pegasus_job_runtime", "0"),
        ("pegasus_cores", "1"),
        ("pegasus_gpus", "0"),
        ("pegasus_cluster_size", "1"),
    ]
    return [f"+{name} = {value}" for name, value in attributes]


def _classad_string(text: str) -> str:
    # Only quotes are escaped: the .sub reader unescapes \" but not \\ (a transformation never holds one).
    return '"' + text.replace('"', '\\"') + '"'


def condor_arguments(argv: Sequence[str]) -> str:
    """HTCondor's new-syntax ``arguments`` value: double-quoted, blanks separate, single quotes group."""
    return '"' + " ".join(_condor_argument(a) for a in argv) + '"'


def _condor_argument(arg: str) -> str:
    text = arg.replace('"', '""')
    if arg and not re.search(r"[\s']", arg):
        return text
    return "'" + text.replace("'", "''") + "'"


def _workflow_yml(ctx: _Context, jobs: Sequence[PlannedJob], wf: Workflow) -> str:
    entries = [
        {
            "type": "job",
            "name": job.transformation,
            "id": job.dax_id,
            "arguments": [],
            "uses": (
                [{"lfn": lfn, "type": "input", "size": str(size)} for lfn, size in job.emulated.inputs]
                + [
                    {"lfn": lfn, "type": "output", "stageOut": False, "registerReplica": False, "size": str(size)}
                    for lfn, size in job.emulated.outputs
                ]
            ),
        }
        for job in jobs
    ]
    dependencies = []
    for job in jobs:
        children = [jobs[c].dax_id for c in wf.children(job.task).tolist()]
        if children:
            dependencies.append({"id": job.dax_id, "children": children})
    created = datetime.now(UTC).strftime("%m-%d-%yT%H:%M:%SZ")
    doc = {
        "x-pegasus": {"apiLang": "python", "createdBy": _user(), "createdOn": created},
        "pegasus": "5.0.4",
        "name": ctx.label,
        "jobs": entries,
        "jobDependencies": dependencies,
    }
    return yaml.safe_dump(doc, sort_keys=False, default_flow_style=False)


def _braindump_yml(ctx: _Context) -> str:
    values = {
        "user": _user(),
        "grid_dn": None,
        "submit_hostname": socket.gethostname(),
        "root_wf_uuid": ctx.wf_uuid,
        "wf_uuid": ctx.wf_uuid,
        "dax": f"{ctx.pool_dir}/workflow.yml",
        "dax_label": ctx.label,
        "dax_index": "0",
        "dax_version": "5.0.4",
        "pegasus_wf_name": ctx.wf_name,
        "timestamp": ctx.wf_time,
        "basedir": os.path.dirname(ctx.pool_dir),
        "submit_dir": ctx.pool_dir,
        "planner": "wire_lab.realpool.submitdir",
        "planner_version": PEGASUS_VERSION,
        "planner_arguments": f"--time-scale {ctx.time_scale:g} {ctx.source}",
        "jsd": "jobstate.log",
        "rundir": os.path.basename(ctx.pool_dir),
        "bindir": ctx.bin_dir,
        "vogroup": "pegasus",
        "uses_pmc": "false",
        "condor_log": f"{ctx.wf_name}.log",
        "dag": f"{ctx.wf_name}.dag",
        "type": "dag",
        "wire_trace": ctx.source,
        "wire_time_scale": ctx.time_scale,
    }
    return "".join(f"{key}: {'null' if value is None else json.dumps(value)}\n" for key, value in values.items())


def _user() -> str:
    try:
        return getpass.getuser()
    except (KeyError, OSError):  # no passwd entry (containers)
        return "pegasus"


# -- command line --------------------------------------------------------------------------


def _failure(text: str) -> tuple[str, int]:
    task, sep, count = text.rpartition(":")
    if sep and count.isdigit():
        return task, int(count)
    return text, 1


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m wire_lab.realpool.submitdir",
        description="Write a Pegasus-layout DAGMan submit dir that emulates a trace.",
    )
    parser.add_argument("trace", help="WfFormat trace (JSON, or .json.gz)")
    parser.add_argument("out_dir", help="the submit directory to create (must not exist, or be empty)")
    parser.add_argument("--time-scale", type=float, default=1.0, metavar="K", help="sleep runtime x K (default 1)")
    parser.add_argument("--pool", default=DEFAULT_POOL, help=f"WirePool the jobs require (default {DEFAULT_POOL})")
    parser.add_argument("--no-requirements", action="store_true", help="no WirePool requirement (any slot)")
    parser.add_argument("--retry", type=int, default=1, help="DAGMan RETRY per node (default 1)")
    parser.add_argument("--pool-dir", help="absolute path of the directory as the pool sees it")
    parser.add_argument("--label", help="workflow label (default: the trace file's name)")
    parser.add_argument("--wf-uuid", help="workflow uuid (default: a new one)")
    parser.add_argument("--no-priorities", action="store_true", help="leave out Pegasus' job priorities")
    parser.add_argument(
        "--fail",
        action="append",
        default=[],
        metavar="TASK[:N]",
        help="the first N (default 1) attempts of TASK exit 1; repeatable",
    )
    args = parser.parse_args(argv)
    options = SubmitDirOptions(
        pool=None if args.no_requirements else args.pool,
        retry=args.retry,
        pool_dir=args.pool_dir,
        label=args.label,
        wf_uuid=args.wf_uuid,
        priorities=not args.no_priorities,
        failures=dict(_failure(f) for f in args.fail),
    )
    try:
        written = write_submit_dir(args.trace, args.out_dir, args.time_scale, options)
    except (InputError, ValueError, OSError) as exc:  # a bad trace, option or out dir: one line, no traceback
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(written.summary())
    return 0


if __name__ == "__main__":
    sys.exit(main())
