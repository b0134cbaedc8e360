"""Write a real-format Pegasus 5 submit directory while an emulated workflow runs.

``SubmitDirWriter`` turns a ``Workflow`` into the files pegasus-plan leaves in a
submit directory, then appends to them, event by event, what DAGMan, HTCondor
and Pegasus would write as the ``EmulatedSite``'s virtual time advances. The
daemon's own readers (``monitor/``) can then follow the growing files exactly as
they follow a real run. ``LiveEmulation`` / ``run_live`` drive a site and a
writer together, paced against the wall clock.

What is written, and the choices made (ours, modelled on the fixtures under
tests/data/fixtures: Pegasus 5.0.5 submit dirs planned with HTCondor 10):

* ``<wf>-0.dag`` (``<wf>`` = the workflow's name): MAXJOBS lines, then per node
  ``JOB``, ``SCRIPT POST`` (pegasus-exitcode), ``PRIORITY``, ``RETRY``,
  ``CATEGORY`` (transfer, registration and cleanup jobs) and ``VARS``; one
  ``PARENT p CHILD c`` line per edge. Nodes appear in the workflow's (topological)
  order, so a reader numbers tasks and stages as the workflow does.
* **Node names** are the task ids. An id DAGMan cannot take as a node name (a
  blank, a quote, ``+``, ``/``..., or PARENT/CHILD/ALL_NODES) has every other
  character replaced by ``_`` (and ``_2``, ``_3``... appended on a clash);
  ``node_of`` / ``task_of`` give the mapping.
* ``00/00/<node>.sub`` per node (all in one directory, the Pegasus layout for
  small workflows): pool tasks are ``universe = vanilla`` with
  ``+pegasus_site = "condorpool"``; tasks that do not run on the pool
  (``on_pool`` False) are ``universe = local`` with ``+pegasus_site = "local"``.
  ``+pegasus_wf_xformation`` is the task's transformation *verbatim* (Pegasus
  would write ``pegasus::transfer`` etc. for auxiliary jobs; we keep the
  workflow's name so stages read back equal). The job class (1 compute,
  2 stage-in, 3 stage-out, 4 register, 5 inter-site, 6 create-dir, 8 cleanup,
  9 chmod) comes from the Pegasus job-name prefix.
* **Priorities** as Pegasus 5 assigns them: stage-in 700, create-dir 800,
  stage-out 900, cleanup 1000; compute jobs 10 per level of compute ancestors
  (10, 20, ...), register jobs 10 more than a compute job of their level. The
  emulator itself does not read them (its JobPrio starts at 0);
  ``WriterOptions.priorities=False`` leaves them out.
* **Refused events**: an event impossible in the writer's state (a start before
  a submit, a second submit of a queued job, an unknown task) raises
  ``LiveWriterError``; what the same ``feed`` call accepted before it is written.
* ``workflow.yml`` (the abstract workflow): only the compute jobs, as in
  Pegasus; each has one input file ``<node>.input`` and one output file
  ``<node>.output`` whose ``size`` is the task's input / output bytes (the
  Workflow keeps per-task totals, not file names). Auxiliary jobs have dax job
  id ``null``: their sizes are only in their kickstart records.
* ``braindump.yml`` (wf_uuid = root_wf_uuid, dag, condor_log, jsd, submit_dir
  = the directory's absolute path...), an empty ``jobstate.log``.
* **Job event logs**, HTCondor's text format with ISO dates: the node jobs'
  own log ``<wf>-0.log`` (every .sub names it, and the braindump's
  ``condor_log``) and DAGMan's default node log ``<wf>-0.dag.nodes.log`` (what
  DAGMan 10 writes for a Pegasus DAG, with ``DAGMAN_SUPPRESS_JOB_LOGS`` off). Both
  get the same job events; only the node log gets DAGMan's POST-script events
  (016). Events: 000 submit (notes ``DAG Node: <node>`` and ``pool:<site>``),
  001 execute, 040 input transfer finished (for TRANSFERRED events), 005
  terminated (return value or signal, usage, bytes, memory), 004 evicted,
  012 held, 013 released, 009 aborted. Each event ends with ``...`` and is
  appended with one ``write`` (O_APPEND, unbuffered), so a reader never sees
  part of an event unless ``tear_last_event`` asks for it (tests only).
* **Clusters**: every DAGMan submission is a new cluster (a retry after a
  failure or an abort gets the next one); an eviction, hold or release keeps
  it. The DAGMan job itself is ``first_cluster - 1``.
* **Times**: virtual time ``t`` is written as ``epoch + t`` in local time,
  ``YYYY-MM-DD hh:mm:ss`` truncated to the second (HTCondor's default), or
  with milliseconds (``subsecond_times``, HTCondor's SUB_SECOND option);
  jobstate.log has whole epoch seconds; kickstart records milliseconds. With
  whole-second stamps a task shorter than a second can show zero occupancy in
  the event log, exactly as with a real HTCondor log.
* ``jobstate.log`` as pegasus-monitord writes it: MONITORD_STARTED and
  DAGMAN_STARTED with the first events; SUBMIT, EXECUTE, JOB_TERMINATED,
  JOB_SUCCESS / JOB_FAILURE (exit code), JOB_EVICTED, JOB_HELD, JOB_RELEASED,
  JOB_ABORTED, and the POST script lines (POST_SCRIPT_STARTED / TERMINATED /
  SUCCESS | FAILURE); DAGMAN_FINISHED and MONITORD_FINISHED on ``close``.
  The submit sequence column counts submissions (a retry gets a new one).
* **POST scripts and kickstart**: the POST script takes no time. The kickstart
  record ``00/00/<node>.out.NNN`` (NNN = 000 for the first terminated
  submission, 001 for the next...) is written atomically (temporary file +
  rename) just before the terminate event, so a reader that sees the event
  finds the record. Its main job lasts the task's execution time
  (``exec_runtime_s`` of the FINISHED event) and sits inside the slot
  occupancy after the input transfer, the non-executing time being split
  between input and output in proportion to their bytes (the emulator's
  model). ``maxrss`` is the task's peak memory when known (the event's, else
  the workflow's). The terminate event reports the same memory (MB, rounded up).
* **Hosts**: each instance gets an address the first time it is needed, from
  the documentation ranges only (TEST-NET-3 203.0.113.0/24, then TEST-NET-2
  198.51.100.0/24, then TEST-NET-1 192.0.2.0/24, then 2001:db8::/32), never a
  real private range. The submit host (the emulator's ``submit-host``, where
  local-universe jobs run and the schedd lives) is 198.51.100.1. The execute
  event names the slot by its sinful string
  ``<203.0.113.N:9618?addrs=203.0.113.N-9618&alias=ip-203-0-113-N&...>``;
  ``address_of`` / ``addresses`` / ``host_of`` map instance ids and addresses.
"""

from __future__ import annotations

import ipaddress
import json
import math
import os
import re
import time
import uuid
import zlib
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Self

import yaml

from wire_daemon.core.billing import Billing
from wire_daemon.core.config import EmulationConfig
from wire_daemon.core.events import EventKind, TaskEvent
from wire_daemon.core.instances import Instance
from wire_daemon.core.workflow import Workflow
from wire_daemon.emulated.site import EmulatedSite
from wire_daemon.emulated.traces import load_trace
from wire_lab import pegasus_layout as pegasus

SUBMIT_HOST = "submit-host"  # the emulator's host name for local-universe jobs
_SUBMIT_ADDRESS = "198.51.100.1"
_WORKER_NETWORKS = ("203.0.113.0/24", "198.51.100.0/24", "192.0.2.0/24")
_IPV6_PREFIX = "2001:db8::"
_CONDOR_PORT = 9618
_RESERVED_NAMES = frozenset({"PARENT", "CHILD", "ALL_NODES"})
_BAD_NODE_CHARS = re.compile(r"[^A-Za-z0-9_.\-]")
_DAX_ID = re.compile(r"^.+_(ID\d+)$")
_MIB = 1 << 20


class LiveWriterError(ValueError):
    """A task event that cannot happen in the state the writer has (e.g. a start before a submit)."""


@dataclass(frozen=True)
class WriterOptions:
    epoch: float = 1_700_000_000.0  # wall-clock time of virtual time 0 (2023-11-14)
    label: str | None = None  # the Pegasus workflow label; default: the workflow's name
    retry: int = 1  # DAGMan RETRY per node (Pegasus 5's default dagman.retry)
    priorities: bool = True  # write Pegasus's PRIORITY lines / priority commands
    nodes_log: bool = True  # also write DAGMan's default node log <wf>-0.dag.nodes.log
    subsecond_times: bool = False  # event times with milliseconds (HTCondor SUB_SECOND)
    first_cluster: int = 100  # cluster of the first node job (DAGMan itself is one less)
    slot_memory_mb: int = 4096  # per-slot resources reported in execute/terminate events
    slot_disk_kb: int = 10 * 1024 * 1024
    user: str = "pegasus"
    pegasus_version: str = "5.0.5"
    bindir: str = "/usr/bin"  # where pegasus-exitcode lives on the (emulated) submit host
    tear_last_event: bool = False  # tests only: leave the last event of each feed() half-written


# -- hosts --------------------------------------------------------------------------


class HostAddresses:
    """Documentation-range addresses for the emulated hosts, handed out on first use."""

    def __init__(self) -> None:
        self._by_host: dict[str, str] = {SUBMIT_HOST: _SUBMIT_ADDRESS}
        self._by_address: dict[str, str] = {_SUBMIT_ADDRESS: SUBMIT_HOST}
        self._workers = 0

    def address_of(self, host: str) -> str:
        address = self._by_host.get(host)
        if address is None:
            address = _worker_address(self._workers)
            self._workers += 1
            self._by_host[host] = address
            self._by_address[address] = host
        return address

    def host_of(self, address: str) -> str | None:
        return self._by_address.get(address)

    def pin(self, host: str, address: str) -> None:
        """Give ``host`` a known address (a real instance's), instead of a documentation one."""
        if self._by_address.get(address, host) != host or self._by_host.get(host, address) != address:
            raise ValueError(f"address {address} or host {host} already has another mapping")
        self._by_host[host] = address
        self._by_address[address] = host

    def as_dict(self) -> dict[str, str]:
        return dict(self._by_host)

    def alias(self, host: str) -> str:
        address = self.address_of(host)
        if host == SUBMIT_HOST:
            return "submit"
        if ":" in address:
            return f"worker-{address.rsplit(':', 1)[-1]}"
        return "ip-" + address.replace(".", "-")  # the EC2 private-name style

    def sinful(self, host: str, daemon: str = "startd") -> str:
        address = self.address_of(host)
        listed = f"[{address.replace(':', '-')}]" if ":" in address else address
        shown = f"[{address}]" if ":" in address else address
        sock = f"{daemon}_{1000 + len(address)}_{zlib.crc32(address.encode()) & 0xFFFF:04x}"  # stable across runs
        return f"<{shown}:{_CONDOR_PORT}?addrs={listed}-{_CONDOR_PORT}&alias={self.alias(host)}&noUDP&sock={sock}>"


def _worker_address(k: int) -> str:
    """The k-th worker address (0-based): the documentation ranges in order, then IPv6."""
    submit = ipaddress.IPv4Address(_SUBMIT_ADDRESS)
    for network in map(ipaddress.IPv4Network, _WORKER_NETWORKS):
        first = network.network_address + 1
        usable = network.num_addresses - 2 - (1 if submit in network else 0)  # no network/broadcast
        if k < usable:
            address = first + k
            return str(address + 1 if submit in network and address >= submit else address)
        k -= usable
    return str(ipaddress.ip_address(_IPV6_PREFIX) + k + 1)


# -- the static plan of the submit dir ------------------------------------------------


@dataclass(frozen=True)
class _Job:
    task: int
    node: str
    transformation: str
    kind: str  # compute or a Pegasus auxiliary kind
    dax_id: str | None  # None for jobs the planner adds (not in workflow.yml)
    local: bool  # runs on the submit host (local universe)
    priority: int

    @property
    def site(self) -> str:
        return "local" if self.local else "condorpool"

    @property
    def job_class(self) -> int:
        return pegasus.JOB_CLASS.get(self.kind, 1)

    @property
    def category(self) -> str | None:
        return pegasus.CATEGORY.get(self.kind)


def _plan_jobs(wf: Workflow) -> list[_Job]:
    nodes = _node_names(wf.task_ids)
    kinds = [pegasus.job_kind(tid, tr) for tid, tr in zip(wf.task_ids, wf.transformation)]
    dax_ids = _dax_ids(wf.task_ids, kinds)
    levels = pegasus.compute_levels(wf, kinds)
    return [
        _Job(
            i,
            nodes[i],
            wf.transformation[i],
            kinds[i],
            dax_ids[i],
            not bool(wf.on_pool[i]),
            pegasus.priority(kinds[i], int(levels[i])),
        )
        for i in range(wf.n_tasks)
    ]


def _node_names(task_ids: Sequence[str]) -> list[str]:
    """Task ids where DAGMan accepts them; see the module docstring for the others."""
    valid = {t for t in task_ids if not _BAD_NODE_CHARS.search(t) and t.upper() not in _RESERVED_NAMES and t}
    used = set(valid)
    names = []
    for task_id in task_ids:
        if task_id in valid:
            names.append(task_id)
            continue
        base = _BAD_NODE_CHARS.sub("_", task_id) or "node"
        base = base + "_" if base.upper() in _RESERVED_NAMES else base
        name, k = base, 1
        while name in used:
            k += 1
            name = f"{base}_{k}"
        used.add(name)
        names.append(name)
    return names


def _dax_ids(task_ids: Sequence[str], kinds: Sequence[str]) -> list[str | None]:
    """``ID<digits>`` from Pegasus-style names when they are all unique, else ``ID0000001``..."""
    compute = [i for i, kind in enumerate(kinds) if kind == "compute"]
    named = [_DAX_ID.match(task_ids[i]) for i in compute]
    out: list[str | None] = [None] * len(task_ids)
    if all(named) and len({m.group(1) for m in named if m}) == len(named):
        for i, match in zip(compute, named):
            out[i] = match.group(1) if match else None
    else:
        for n, i in enumerate(compute, 1):
            out[i] = f"ID{n:07d}"
    return out


# -- file texts written at the start ----------------------------------------------------


def _dag_text(label: str, wf_name: str, jobs: Sequence[_Job], wf: Workflow, opts: WriterOptions) -> str:
    lines = [
        pegasus.RULE,
        "# PEGASUS WMS GENERATED DAG FILE",
        f"# DAG {label}",
        "# Index = 0, Count = null",
        pegasus.RULE,
    ]
    lines += [f"MAXJOBS {category} {count}" for category, count in pegasus.MAXJOBS]
    lines.append("")
    for job in jobs:
        lines += _dag_node_lines(job, wf_name, opts)
    for child in range(wf.n_tasks):
        for parent in wf.parents(child):
            lines.append(f"PARENT  {jobs[int(parent)].node} CHILD {jobs[child].node}")
    lines += [pegasus.RULE, "# End of DAG", pegasus.RULE]
    return "\n".join(lines) + "\n"


def _dag_node_lines(job: _Job, wf_name: str, opts: WriterOptions) -> list[str]:
    lite = " -s PegasusLite:+exitcode+0" if job.kind == "compute" else ""
    lines = [
        f"JOB {job.node} 00/00/{job.node}.sub",
        (
            f"SCRIPT POST {job.node} {opts.bindir}/pegasus-exitcode  -r $RETURN{lite} -l {wf_name}.exitcode.log"
            f" -M {wf_name}.cache.meta   .//00/00/{job.node}.out"
        ),
    ]
    if opts.priorities:
        lines.append(f"PRIORITY {job.node} {job.priority}")
    lines.append(f"RETRY {job.node} {opts.retry}")
    if job.category:
        lines.append(f"CATEGORY {job.node} {job.category}")
    lines += [f'VARS {job.node} +DAGNodeRetry="$(RETRY)"', ""]
    return lines


def _classad_string(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _sub_text(job: _Job, ctx: _Context) -> str:
    submit = ctx.submit_dir
    head = [
        pegasus.RULE,
        "# PEGASUS WMS GENERATED SUBMIT FILE",
        f"# DAG : {ctx.label}, Index = 0, Count = null",
        f"# SUBMIT FILE NAME : {job.node}.sub",
        pegasus.RULE,
        "stream_error  = false",
        "stream_output = false",
        (
            f'environment = "LANG=en_US.UTF-8 CONDOR_JOBID=$(cluster).$(process) PEGASUS_WF_UUID={ctx.wf_uuid}'
            f' PEGASUS_WF_LABEL={ctx.label} PEGASUS_DAG_JOB_ID={job.node} PEGASUS_SITE={job.site}"'
        ),
        f"error = {submit}//00/00/{job.node}.err",
    ]
    body = _local_commands(job, ctx) if job.local else _vanilla_commands(job, ctx)
    attributes = [
        ("pegasus_generator", '"Pegasus"'),
        ("pegasus_root_wf_uuid", f'"{ctx.wf_uuid}"'),
        ("pegasus_wf_uuid", f'"{ctx.wf_uuid}"'),
        ("pegasus_version", f'"{ctx.opts.pegasus_version}"'),
        ("pegasus_wf_name", f'"{ctx.wf_name}"'),
        ("pegasus_wf_time", f'"{ctx.wf_time}"'),
        ("pegasus_wf_xformation", _classad_string(job.transformation)),
        ("pegasus_wf_dax_job_id", f'"{job.dax_id or "null"}"'),
        ("pegasus_wf_dag_job_id", f'"{job.node}"'),
        ("pegasus_job_class", str(job.job_class)),
        ("pegasus_site", f'"{job.site}"'),
        ("pegasus_job_runtime", "0"),
        ("pegasus_cores", "1"),
        ("pegasus_gpus", "1"),
        ("pegasus_cluster_size", "1"),
    ]
    tail = [f"+{name} = {value}" for name, value in attributes] + [
        "queue",
        pegasus.RULE,
        "# END OF SUBMIT FILE",
        pegasus.RULE,
    ]
    return "\n".join(head + body + tail) + "\n"


def _vanilla_commands(job: _Job, ctx: _Context) -> list[str]:
    submit = ctx.submit_dir
    return [
        f"executable = {submit}/00/00/{job.node}.sh",
        f"log = {submit}/{ctx.wf_name}.log",
        "notification = NEVER",
        f"output = {submit}//00/00/{job.node}.out",
        "periodic_release = False",
        "periodic_remove = (JobStatus == 5) && ((CurrentTime - EnteredCurrentStatus) > 10)",
        *_priority_command(job, ctx.opts),
        "should_transfer_files = YES",
        "submit_event_user_notes = pool:condorpool",
        "transfer_executable = true",
        (
            f"transfer_input_files = {submit}/pegasus-worker-{ctx.opts.pegasus_version}-x86_64_rhel_8.tar.gz,"
            f"{submit}/pegasus-lite-common.sh"
        ),
        f"transfer_output_files = {job.node}.output",
        "universe = vanilla",
        "when_to_transfer_output = ON_EXIT",
    ]


def _local_commands(job: _Job, ctx: _Context) -> list[str]:
    submit = ctx.submit_dir
    return [
        (
            f'arguments = "pegasus-kickstart  -n {job.transformation} -N null -i - -R local  -L {ctx.label}'
            f' -T {ctx.wf_stamp} pegasus-transfer "'
        ),
        f"executable = {ctx.opts.bindir}/pegasus-lite-local.sh",
        f"input = {submit}//00/00/{job.node}.in",
        f"log = {submit}/{ctx.wf_name}.log",
        "notification = NEVER",
        f"output = {submit}//00/00/{job.node}.out",
        "periodic_release = False",
        "periodic_remove = (JobStatus == 5) && ((CurrentTime - EnteredCurrentStatus) > 1800)",
        *_priority_command(job, ctx.opts),
        "submit_event_user_notes = pool:local",
        "transfer_executable = false",
        "universe = local",
    ]


def _priority_command(job: _Job, opts: WriterOptions) -> list[str]:
    return [f"priority = {job.priority}"] if opts.priorities else []


def _lfns(job: _Job) -> tuple[str, str]:
    return f"{job.node}.input", f"{job.node}.output"


def _workflow_yml(ctx: _Context, jobs: Sequence[_Job], wf: Workflow) -> str:
    entries = []
    for job in jobs:
        if job.dax_id is None:
            continue
        lfn_in, lfn_out = _lfns(job)
        entries.append(
            {
                "type": "job",
                "name": job.transformation,
                "id": job.dax_id,
                "arguments": [],
                "uses": [
                    {"lfn": lfn_in, "type": "input", "size": str(int(wf.input_bytes[job.task]))},
                    {
                        "lfn": lfn_out,
                        "type": "output",
                        "stageOut": False,
                        "registerReplica": False,
                        "size": str(int(wf.output_bytes[job.task])),
                    },
                ],
            }
        )
    doc = {
        "x-pegasus": {"apiLang": "python", "createdBy": ctx.opts.user, "createdOn": ctx.created_on},
        "pegasus": "5.0.4",
        "name": ctx.label,
        "jobs": entries,
        "jobDependencies": _dependencies(jobs, wf),
    }
    return yaml.safe_dump(doc, sort_keys=False, default_flow_style=False)


def _dependencies(jobs: Sequence[_Job], wf: Workflow) -> list[dict[str, object]]:
    out: list[dict[str, object]] = []
    for job in jobs:
        if job.dax_id is None:
            continue
        children = [jobs[int(c)].dax_id for c in wf.children(job.task) if jobs[int(c)].dax_id]
        if children:
            out.append({"id": job.dax_id, "children": children})
    return out


def _braindump_yml(ctx: _Context) -> str:
    values = {
        "user": ctx.opts.user,
        "grid_dn": None,
        "submit_hostname": "submit",
        "root_wf_uuid": ctx.wf_uuid,
        "wf_uuid": ctx.wf_uuid,
        "dax": f"{ctx.submit_dir}/workflow.yml",
        "dax_label": ctx.label,
        "dax_index": "0",
        "dax_version": "5.0.4",
        "pegasus_wf_name": ctx.wf_name,
        "timestamp": ctx.wf_time,
        "basedir": str(Path(ctx.submit_dir).parent),
        "submit_dir": ctx.submit_dir,
        "planner": f"{ctx.opts.bindir}/pegasus-plan",
        "planner_version": ctx.opts.pegasus_version,
        "pegasus_build": "emulated",
        "planner_arguments": '"--sites condorpool --output-sites local"',
        "jsd": "jobstate.log",
        "rundir": Path(ctx.submit_dir).name,
        "bindir": ctx.opts.bindir,
        "vogroup": "pegasus",
        "uses_pmc": "false",
        "condor_log": f"{ctx.wf_name}.log",
        "dag": f"{ctx.wf_name}.dag",
        "type": "dag",
        "notify": f"{ctx.wf_name}.notify",
    }
    return "".join(f"{key}: {'null' if value is None else json.dumps(value)}\n" for key, value in values.items())


@dataclass(frozen=True)
class _Context:
    """Names and stamps every rendered file shares."""

    label: str
    wf_name: str
    wf_uuid: str
    submit_dir: str
    opts: WriterOptions

    @property
    def wf_time(self) -> str:  # pegasus_wf_time / braindump timestamp: 20231114T141320-0800
        return datetime.fromtimestamp(self.opts.epoch).astimezone().strftime("%Y%m%dT%H%M%S%z")

    @property
    def wf_stamp(self) -> str:
        return datetime.fromtimestamp(self.opts.epoch).astimezone().isoformat(timespec="seconds")

    @property
    def created_on(self) -> str:
        return datetime.fromtimestamp(self.opts.epoch, UTC).strftime("%m-%d-%yT%H:%M:%SZ")


# -- job event texts ----------------------------------------------------------------------


def _usage(seconds: float) -> str:
    """HTCondor's ``Usr D HH:MM:SS`` rendering of a CPU time."""
    total = max(0, int(seconds))
    days, rest = divmod(total, 86400)
    return f"{days} {rest // 3600:02d}:{rest % 3600 // 60:02d}:{rest % 60:02d}"


def _resource_row(name: str, usage: object, request: object, allocated: object) -> str:
    return f"\t   {name:<21}:{usage!s:>9}{request!s:>9}{allocated!s:>10} \n"


@dataclass(frozen=True)
class _Termination:
    exit_code: int  # negative: killed by that signal
    cpu_s: float
    occupancy_s: float
    sent: int
    received: int
    memory_mb: int | None
    on_slot: bool  # a pool slot (partitionable resources are reported) or the submit host


def _terminated_body(term: _Termination, utc_end: str, opts: WriterOptions) -> str:
    if term.exit_code >= 0:
        text = f"\t(1) Normal termination (return value {term.exit_code})\n"
    else:
        text = f"\t(0) Abnormal termination (signal {-term.exit_code})\n\t(0) No core file\n"
    cpu = _usage(term.cpu_s)
    text += (
        f"\t\tUsr {cpu}, Sys 0 00:00:00  -  Run Remote Usage\n"
        "\t\tUsr 0 00:00:00, Sys 0 00:00:00  -  Run Local Usage\n"
        f"\t\tUsr {cpu}, Sys 0 00:00:00  -  Total Remote Usage\n"
        "\t\tUsr 0 00:00:00, Sys 0 00:00:00  -  Total Local Usage\n"
        f"\t{term.sent}  -  Run Bytes Sent By Job\n\t{term.received}  -  Run Bytes Received By Job\n"
        f"\t{term.sent}  -  Total Bytes Sent By Job\n\t{term.received}  -  Total Bytes Received By Job\n"
    )
    if term.on_slot:
        busy = round(term.occupancy_s)
        text += (
            "\tPartitionable Resources :    Usage  Request Allocated \n"
            + _resource_row("Cpus", 1, 1, 1)
            + _resource_row("Disk (KB)", 1, 1, opts.slot_disk_kb)
            + _resource_row("Memory (MB)", "" if term.memory_mb is None else term.memory_mb, 1, opts.slot_memory_mb)
            + _resource_row("TimeExecute (s)", busy, "", "")
            + _resource_row("TimeSlotBusy (s)", busy, "", "")
        )
    if term.exit_code >= 0:
        text += f"\n\tJob terminated of its own accord at {utc_end} with exit-code {term.exit_code}.\n"
    return text


# -- appending ----------------------------------------------------------------------------


class _AppendLog:
    """An append-only file written one whole record per ``write`` call."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_TRUNC, 0o644)
        self._held_back = b""  # the rest of a deliberately torn record

    def append(self, data: bytes, tear: bool = False) -> None:
        data, self._held_back = self._held_back + data, b""
        if tear and len(data) > 1:
            cut = len(data) // 2
            data, self._held_back = data[:cut], data[cut:]
        _write_all(self._fd, data)

    def complete(self) -> None:
        if self._held_back:
            self.append(b"")

    def close(self) -> None:
        self.complete()
        os.close(self._fd)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:  # one call in practice; the loop only guards against a short write
        written = os.write(fd, view)
        view = view[written:]


def _write_atomically(path: Path, text: str) -> None:
    """Readers must never see a half-written file: write a hidden temporary, then rename."""
    temporary = path.with_name(f".{path.name}.tmp")
    temporary.write_text(text, encoding="utf-8")
    os.replace(temporary, path)


# -- the writer ---------------------------------------------------------------------------


@dataclass
class _Submission:
    """One DAGMan submission of a node: its cluster, and where it runs now."""

    cluster: int
    seq: int
    host: str | None = None
    slot: int | None = None
    started_at: float | None = None
    ended: bool = False


@dataclass
class _Batch:
    """Texts of one ``feed`` call, per target file, written after the whole call is rendered."""

    logs: list[bytes] = field(default_factory=list)  # both job event logs
    nodes_only: list[tuple[int, bytes]] = field(default_factory=list)  # (position among logs, text)
    jobstate: list[bytes] = field(default_factory=list)


class SubmitDirWriter:
    """Writes a Pegasus 5 submit dir for ``workflow`` and appends what a run writes to it."""

    def __init__(
        self, workflow: Workflow, directory: str | os.PathLike[str], options: WriterOptions | None = None
    ) -> None:
        self.workflow = workflow
        self.options = options or WriterOptions()
        self.directory = Path(directory)
        label = self.options.label or workflow.name
        self.wf_name = f"{label}-0"
        self.wf_uuid = str(uuid.uuid5(uuid.NAMESPACE_URL, f"wire-daemon:{label}:{self.options.epoch}"))
        self.jobs = _plan_jobs(workflow)
        self._by_node = {job.node: job.task for job in self.jobs}
        self.hosts = HostAddresses()
        self._submissions: dict[int, _Submission] = {}
        self._records: dict[int, int] = {}
        self._slots: dict[str, set[int]] = {}
        self._next_cluster = self.options.first_cluster
        self._next_seq = 1
        self._logs: list[_AppendLog] = []
        self._nodes_log: _AppendLog | None = None
        self._jobstate: _AppendLog | None = None
        self._began = False
        self._last_time = 0.0
        self._ctx = _Context(label, self.wf_name, self.wf_uuid, str(self.directory.resolve()), self.options)

    # -- names and paths ----------------------------------------------------------

    @property
    def dag_path(self) -> Path:
        return self.directory / f"{self.wf_name}.dag"

    @property
    def log_path(self) -> Path:
        return self.directory / f"{self.wf_name}.log"

    @property
    def nodes_log_path(self) -> Path:
        return self.directory / f"{self.wf_name}.dag.nodes.log"

    @property
    def jobstate_path(self) -> Path:
        return self.directory / "jobstate.log"

    @property
    def braindump_path(self) -> Path:
        return self.directory / "braindump.yml"

    def node_of(self, task_id: str) -> str:
        return self.jobs[self.workflow.index_of(task_id)].node

    def task_of(self, node: str) -> str:
        return self.workflow.task_ids[self._by_node[node]]

    def submit_file(self, task_id: str) -> Path:
        return self.directory / "00" / "00" / f"{self.node_of(task_id)}.sub"

    def kickstart_path(self, task_id: str, attempt: int = 0) -> Path:
        return self.directory / "00" / "00" / f"{self.node_of(task_id)}.out.{attempt:03d}"

    def address_of(self, host: str) -> str:
        """The address written for an instance id (or ``submit-host``); assigned on first use."""
        return self.hosts.address_of(host)

    def host_of(self, address: str) -> str | None:
        return self.hosts.host_of(address)

    @property
    def addresses(self) -> dict[str, str]:
        """Instance id -> address, for every host named so far."""
        return self.hosts.as_dict()

    def with_addresses(self, instances: Iterable[Instance]) -> list[Instance]:
        """The instances with the addresses written for them (to build a ``HostMap``)."""
        return [replace(i, address=self.address_of(i.instance_id)) for i in instances]

    # -- writing ----------------------------------------------------------------------

    def create(self) -> SubmitDirWriter:
        """Write the planned submit dir: node .sub files, workflow.yml, the .dag, braindump, empty logs."""
        if self.dag_path.exists():
            raise FileExistsError(f"{self.dag_path}: a submit dir is already there")
        (self.directory / "00" / "00").mkdir(parents=True, exist_ok=True)
        for job in self.jobs:
            _write_atomically(self.directory / "00" / "00" / f"{job.node}.sub", _sub_text(job, self._ctx))
        _write_atomically(self.directory / "workflow.yml", _workflow_yml(self._ctx, self.jobs, self.workflow))
        _write_atomically(
            self.dag_path, _dag_text(self._ctx.label, self.wf_name, self.jobs, self.workflow, self.options)
        )
        _write_atomically(self.braindump_path, _braindump_yml(self._ctx))
        self._logs = [_AppendLog(self.log_path)]
        if self.options.nodes_log:
            self._nodes_log = _AppendLog(self.nodes_log_path)
            self._logs.append(self._nodes_log)
        self._jobstate = _AppendLog(self.jobstate_path)
        return self

    def feed(self, events: Iterable[TaskEvent]) -> None:
        """Append what DAGMan, HTCondor and Pegasus write for these events (in time order)."""
        if self._jobstate is None:
            raise LiveWriterError("create() the submit dir before feeding events")
        batch = _Batch()
        try:
            for event in events:
                if not self._began:
                    self._begin(event.time, batch)
                self._last_time = max(self._last_time, event.time)
                self._handle(event, batch)
        finally:  # a refused event still leaves the files matching what was accepted before it
            self._flush(batch)

    def close(self, at: float | None = None, status: int = 0) -> None:
        """Finish the run: complete torn records, DAGMAN_FINISHED in jobstate.log, close the files."""
        if self._jobstate is None:
            return
        when = self._last_time if at is None else at
        finished = [
            f"{self._epoch_s(when)} INTERNAL *** DAGMAN_FINISHED {status} ***\n",
            f"{self._epoch_s(when)} INTERNAL *** MONITORD_FINISHED 0 ***\n",
        ]
        for log in self._logs:
            log.close()
        self._jobstate.append("".join(finished).encode() if self._began else b"")
        self._jobstate.close()
        self._logs, self._nodes_log, self._jobstate = [], None, None

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- per event -------------------------------------------------------------------

    def _begin(self, t: float, batch: _Batch) -> None:
        self._began = True
        stamp = self._epoch_s(t)
        batch.jobstate.append(f"{stamp} INTERNAL *** MONITORD_STARTED ***\n".encode())
        batch.jobstate.append(f"{stamp} INTERNAL *** DAGMAN_STARTED {self.options.first_cluster - 1}.0 ***\n".encode())

    def _handle(self, event: TaskEvent, batch: _Batch) -> None:
        try:
            task = self.workflow.index_of(event.task_id)
        except KeyError:
            raise LiveWriterError(f"event for unknown task {event.task_id!r}") from None
        handler = _HANDLERS[event.kind]
        handler(self, task, event, batch)

    def _submitted(self, task: int, ev: TaskEvent, batch: _Batch) -> None:
        current = self._submissions.get(task)
        if current is not None and not current.ended:
            raise LiveWriterError(f"{ev.task_id} submitted twice without its job ending")
        sub = _Submission(self._next_cluster, self._next_seq)
        self._next_cluster += 1
        self._next_seq += 1
        self._submissions[task] = sub
        job = self.jobs[task]
        text = (
            f"Job submitted from host: {self.hosts.sinful(SUBMIT_HOST, 'schedd')}\n"
            f"    DAG Node: {job.node}\n    pool:{job.site}\n"
        )
        self._event(batch, 0, sub, ev.time, text)
        self._state(batch, ev.time, task, "SUBMIT")

    def _started(self, task: int, ev: TaskEvent, batch: _Batch) -> None:
        sub = self._open(task, ev)
        if sub.host is not None:
            raise LiveWriterError(f"{ev.task_id} started while already running on {sub.host}")
        host = ev.host or SUBMIT_HOST
        sub.host, sub.started_at = host, ev.time
        text = f"Job executing on host: {self.hosts.sinful(host, 'startd' if host != SUBMIT_HOST else 'schedd')}\n"
        if host != SUBMIT_HOST:
            sub.slot = self._take_slot(host)
            text += self._slot_props(host, sub)
        self._event(batch, 1, sub, ev.time, text)
        self._state(batch, ev.time, task, "EXECUTE")

    def _transferred(self, task: int, ev: TaskEvent, batch: _Batch) -> None:
        sub = self._running(task, ev)
        self._event(batch, 40, sub, ev.time, "Finished transferring input files\n")

    def _finished(self, task: int, ev: TaskEvent, batch: _Batch) -> None:
        sub = self._running(task, ev)
        code = 0 if ev.exit_code is None else int(ev.exit_code)
        occupancy = _since(sub, ev.time)
        exec_s = occupancy if ev.exec_runtime_s is None else float(ev.exec_runtime_s)
        memory = self._peak_memory(task, ev)
        self._write_kickstart(task, sub, ev, exec_s, occupancy, memory)
        term = _Termination(
            code,
            exec_s,
            occupancy,
            int(self.workflow.output_bytes[task]),
            int(self.workflow.input_bytes[task]),
            None if memory is None else -(-memory // _MIB),
            sub.host != SUBMIT_HOST,
        )
        utc_end = datetime.fromtimestamp(math.floor(self.options.epoch + ev.time), UTC)
        self._event(
            batch,
            5,
            sub,
            ev.time,
            "Job terminated.\n" + _terminated_body(term, utc_end.strftime("%Y-%m-%dT%H:%M:%SZ"), self.options),
        )
        self._release_slot(sub)
        sub.ended = True
        self._state(batch, ev.time, task, "JOB_TERMINATED")
        self._state(batch, ev.time, task, "JOB_SUCCESS" if code == 0 else "JOB_FAILURE", code)
        self._post_script(task, sub, ev.time, 0 if code == 0 else 1, batch)

    def _evicted(self, task: int, ev: TaskEvent, batch: _Batch) -> None:
        sub = self._running(task, ev)
        ran = _since(sub, ev.time)
        text = (
            "Job was evicted.\n\t(0) CPU times\n"
            f"\t\tUsr {_usage(ran)}, Sys 0 00:00:00  -  Run Remote Usage\n"
            "\t\tUsr 0 00:00:00, Sys 0 00:00:00  -  Run Local Usage\n"
            f"\t0  -  Run Bytes Sent By Job\n\t{int(self.workflow.input_bytes[task])}  -  Run Bytes Received By Job\n"
        )
        self._event(batch, 4, sub, ev.time, text)
        self._release_slot(sub)
        self._state(batch, ev.time, task, "JOB_EVICTED")

    def _held(self, task: int, ev: TaskEvent, batch: _Batch) -> None:
        sub = self._open(task, ev)
        self._release_slot(sub)  # a held job leaves its slot
        text = f"Job was held.\n\tvia condor_hold (by user {self.options.user})\n\tCode 1 Subcode 0\n"
        self._event(batch, 12, sub, ev.time, text)
        self._state(batch, ev.time, task, "JOB_HELD")

    def _released(self, task: int, ev: TaskEvent, batch: _Batch) -> None:
        sub = self._open(task, ev)
        self._event(batch, 13, sub, ev.time, f"Job was released.\n\tvia condor_release (by user {self.options.user})\n")
        self._state(batch, ev.time, task, "JOB_RELEASED")

    def _aborted(self, task: int, ev: TaskEvent, batch: _Batch) -> None:
        sub = self._open(task, ev)
        self._release_slot(sub)
        sub.ended = True
        self._event(batch, 9, sub, ev.time, f"Job was aborted.\n\tvia condor_rm (by user {self.options.user})\n")
        self._state(batch, ev.time, task, "JOB_ABORTED")
        self._post_script(task, sub, ev.time, 1, batch)

    # -- helpers ------------------------------------------------------------------

    def _open(self, task: int, ev: TaskEvent) -> _Submission:
        sub = self._submissions.get(task)
        if sub is None or sub.ended:
            raise LiveWriterError(f"{ev.kind.value} event for {ev.task_id}, which has no job in the queue")
        return sub

    def _running(self, task: int, ev: TaskEvent) -> _Submission:
        sub = self._open(task, ev)
        if sub.host is None:
            raise LiveWriterError(f"{ev.kind.value} event for {ev.task_id}, which is not running")
        return sub

    def _take_slot(self, host: str) -> int:
        used = self._slots.setdefault(host, set())
        slot = next(k for k in range(1, len(used) + 2) if k not in used)
        used.add(slot)
        return slot

    def _release_slot(self, sub: _Submission) -> None:
        if sub.host is not None and sub.slot is not None:
            self._slots.get(sub.host, set()).discard(sub.slot)
        sub.host, sub.slot, sub.started_at = None, None, None

    def _slot_props(self, host: str, sub: _Submission) -> str:
        return (
            f"\tSlotName: slot1_{sub.slot}@{self.hosts.alias(host)}\n"
            f'\tCondorScratchDir = "/var/lib/condor/execute/dir_{sub.cluster}"\n'
            f"\tCpus = 1\n\tDisk = {self.options.slot_disk_kb}\n\tMemory = {self.options.slot_memory_mb}\n"
        )

    def _peak_memory(self, task: int, ev: TaskEvent) -> int | None:
        if ev.peak_memory_bytes:
            return int(ev.peak_memory_bytes)
        known = int(self.workflow.peak_memory_bytes[task])
        return known if known > 0 else None

    def _post_script(self, task: int, sub: _Submission, t: float, code: int, batch: _Batch) -> None:
        """pegasus-exitcode, taken to run in no time: jobstate lines and DAGMan's 016 event."""
        self._state(batch, t, task, "POST_SCRIPT_STARTED")
        self._state(batch, t, task, "POST_SCRIPT_TERMINATED")
        self._state(batch, t, task, "POST_SCRIPT_SUCCESS" if code == 0 else "POST_SCRIPT_FAILURE", code)
        if self._nodes_log is not None:
            text = (
                f"POST Script terminated.\n\t(1) Normal termination (return value {code})\n"
                f"    DAG Node: {self.jobs[task].node}\n"
            )
            batch.nodes_only.append((len(batch.logs), self._render(16, sub, t, text)))

    def _event(self, batch: _Batch, code: int, sub: _Submission, t: float, body: str) -> None:
        batch.logs.append(self._render(code, sub, t, body))

    def _render(self, code: int, sub: _Submission, t: float, body: str) -> bytes:
        return f"{code:03d} ({sub.cluster:03d}.000.000) {self._stamp(t)} {body}...\n".encode()

    def _state(self, batch: _Batch, t: float, task: int, state: str, code: int | None = None) -> None:
        job = self.jobs[task]
        sub = self._submissions[task]
        fourth = f"{sub.cluster}.0" if code is None else str(code)
        batch.jobstate.append(f"{self._epoch_s(t)} {job.node} {state} {fourth} {job.site} - {sub.seq}\n".encode())

    def _stamp(self, t: float) -> str:
        when = self.options.epoch + t
        if self.options.subsecond_times:
            millis = math.floor(when * 1000) / 1000
            moment = datetime.fromtimestamp(millis)
            return f"{moment:%Y-%m-%d %H:%M:%S}.{moment.microsecond // 1000:03d}"
        return f"{datetime.fromtimestamp(math.floor(when)):%Y-%m-%d %H:%M:%S}"

    def _epoch_s(self, t: float) -> int:
        return math.floor(self.options.epoch + t)

    def _flush(self, batch: _Batch) -> None:
        assert self._jobstate is not None
        self._append_all(self._logs[0], batch.logs)
        if self._nodes_log is not None:
            self._append_all(self._nodes_log, _merge_nodes(batch))
        self._append_all(self._jobstate, batch.jobstate)

    def _append_all(self, target: _AppendLog, texts: list[bytes]) -> None:
        """One write per record; a record torn by the previous call is completed by this one."""
        if not texts:
            target.complete()
        last = len(texts) - 1
        for k, text in enumerate(texts):
            target.append(text, self.options.tear_last_event and k == last)

    # -- kickstart ----------------------------------------------------------------------

    def _write_kickstart(
        self, task: int, sub: _Submission, ev: TaskEvent, exec_s: float, occupancy: float, memory: int | None
    ) -> None:
        number = self._records.get(task, 0)
        self._records[task] = number + 1
        start = sub.started_at if sub.started_at is not None else ev.time
        main_start = start + max(0.0, occupancy - exec_s) * self._input_share(task)
        record = _KickstartFacts(
            job=self.jobs[task],
            label=self._ctx.label,
            stamp=self._ctx.wf_stamp,
            host=self.hosts.alias(sub.host or SUBMIT_HOST),
            address=self.address_of(sub.host or SUBMIT_HOST),
            start=self.options.epoch + main_start,
            exec_s=exec_s,
            exit_code=0 if ev.exit_code is None else int(ev.exit_code),
            cluster=sub.cluster,
            maxrss_kib=None if memory is None else -(-memory // 1024),
            input_bytes=int(self.workflow.input_bytes[task]),
            output_bytes=int(self.workflow.output_bytes[task]),
        )
        path = self.directory / "00" / "00" / f"{self.jobs[task].node}.out.{number:03d}"
        _write_atomically(path, _kickstart_yaml(record))

    def _input_share(self, task: int) -> float:
        inputs, outputs = int(self.workflow.input_bytes[task]), int(self.workflow.output_bytes[task])
        return inputs / (inputs + outputs) if inputs + outputs else 0.5


def _since(sub: _Submission, t: float) -> float:
    """Seconds the submission has been running at ``t`` (0 when it is not running)."""
    return 0.0 if sub.started_at is None else max(0.0, t - sub.started_at)


def _merge_nodes(batch: _Batch) -> list[bytes]:
    """The node log's texts: the job events with DAGMan's own events at their places."""
    merged: list[bytes] = []
    extra = iter(batch.nodes_only)
    pending = next(extra, None)
    for k, text in enumerate(batch.logs + [b""]):
        while pending is not None and pending[0] == k:
            merged.append(pending[1])
            pending = next(extra, None)
        if text:
            merged.append(text)
    return merged


_HANDLERS: dict[EventKind, Callable[[SubmitDirWriter, int, TaskEvent, _Batch], None]] = {
    EventKind.SUBMITTED: SubmitDirWriter._submitted,
    EventKind.STARTED: SubmitDirWriter._started,
    EventKind.TRANSFERRED: SubmitDirWriter._transferred,
    EventKind.FINISHED: SubmitDirWriter._finished,
    EventKind.EVICTED: SubmitDirWriter._evicted,
    EventKind.HELD: SubmitDirWriter._held,
    EventKind.RELEASED: SubmitDirWriter._released,
    EventKind.ABORTED: SubmitDirWriter._aborted,
}


# -- kickstart records ---------------------------------------------------------------------


@dataclass(frozen=True)
class _KickstartFacts:
    job: _Job
    label: str
    stamp: str
    host: str
    address: str
    start: float  # main job start, seconds since the epoch
    exec_s: float
    exit_code: int  # negative: the signal
    cluster: int
    maxrss_kib: int | None
    input_bytes: int
    output_bytes: int


def _iso(seconds: float) -> str:
    return datetime.fromtimestamp(seconds).astimezone().isoformat(timespec="milliseconds")


def _kickstart_yaml(k: _KickstartFacts) -> str:
    """A Pegasus 5 (kickstart 3.0) YAML invocation record with the fields readers use."""
    cwd = f"/var/lib/condor/execute/dir_{k.cluster}"
    lines = [
        "- invocation: True",
        "  version: 3.0",
        f"  start: {_iso(k.start)}",
        f"  duration: {k.exec_s:.3f}",
        f"  transformation: {json.dumps(k.job.transformation)}",
        f'  derivation: "{k.job.dax_id or "null"}"',
        f'  resource: "{k.job.site}"',
        f'  wf-label: "{k.label}"',
        f'  wf-stamp: "{k.stamp}"',
        "  interface: eth0",
        f"  hostaddr: {k.address}",
        f"  hostname: {k.host}",
        "  pid: 4242",
        "  uid: 1000",
        "  user: pegasus",
        "  gid: 1000",
        "  group: pegasus",
        "  umask: 0o0022",
        "  mainjob:",
        f"    start: {_iso(k.start)}",
        f"    duration: {k.exec_s:.3f}",
        "    pid: 4243",
        "    usage:",
        f"      utime: {k.exec_s:.3f}",
        "      stime: 0.000",
    ]
    if k.maxrss_kib is not None:
        lines.append(f"      maxrss: {k.maxrss_kib}")
    lines += [
        "    status:",
        *_status_lines(k.exit_code),
        "    executable:",
        f"      file_name: {cwd}/{k.job.transformation.split('::')[-1]}",
        "    argument_vector: []",
        "  jobids:",
        f"    condor: {k.cluster}.0",
        f"  cwd: {cwd}",
        "  machine:",
        "    page-size: 4096",
        "    uname_system: linux",
        f"    uname_nodename: {k.host}",
        "    uname_machine: x86_64",
        "  files:",
    ]
    lfn_in, lfn_out = _lfns(k.job)
    lines += _file_lines(lfn_in, f"{cwd}/{lfn_in}", k.input_bytes, "input")
    if k.exit_code == 0:
        lines += _file_lines(lfn_out, f"{cwd}/{lfn_out}", k.output_bytes, "output")
    lines += ["    stdin:", "      file_name: /dev/null", "      size: 0"]
    return "\n".join(lines) + "\n"


def _status_lines(code: int) -> list[str]:
    if code >= 0:
        return [f"      raw: {code << 8}", f"      regular_exitcode: {code}"]
    return [f"      raw: {-code}", f"      signalled_signal: {-code}", "      corefile: False"]


def _file_lines(lfn: str, name: str, size: int, direction: str) -> list[str]:
    key = json.dumps(lfn)
    return [
        f"    {key}:",
        f"      lfn: {key}",
        f"      file_name: {name}",
        "      mode: 0o100644",
        f"      size: {size}",
        f"      {direction}: True",
    ]


# -- driving a site in (accelerated) real time ----------------------------------------------


class LiveEmulation:
    """An ``EmulatedSite`` whose task events go to a ``SubmitDirWriter`` as virtual time advances.

    The site still serves as Cloud / CondorControl (launch, terminate, priorities):
    what those do shows up in the files at the next ``advance_to``. Observations
    come from the files: do not also call ``site.poll_events()``.
    """

    def __init__(self, site: EmulatedSite, writer: SubmitDirWriter) -> None:
        self.site = site
        self.writer = writer
        self.emitted: list[TaskEvent] = []  # ground truth: every event written, in order

    def now(self) -> float:
        return self.site.now()

    @property
    def finished(self) -> bool:
        return self.site.finished

    def instances(self) -> list[Instance]:
        """Every instance the site has had, with the address written in the logs."""
        return self.writer.with_addresses(self.site.all_instances())

    def advance_to(self, t: float) -> list[TaskEvent]:
        self.site.advance_to(t)
        events = list(self.site.poll_events())
        self.writer.feed(events)
        self.emitted.extend(events)
        return events

    def run(
        self,
        until: float | None = None,
        speedup: float | None = None,
        step_s: float = 1.0,
        on_step: Callable[[LiveEmulation], None] | None = None,
        idle_limit_s: float = 86_400.0,
        sleep: Callable[[float], None] = time.sleep,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """Advance in ``step_s`` virtual steps until the workflow finishes (or ``until``).

        ``speedup`` = virtual seconds per wall second; None runs without sleeping.
        ``idle_limit_s``: stop when no task event came for that long (a pool with
        no slot would otherwise never finish). The writer is closed when the
        workflow finishes, not when ``until`` stops the run (it can go on).
        """
        if step_s <= 0 or (speedup is not None and speedup <= 0):
            raise ValueError("step_s and speedup must be > 0")
        virtual0, wall0 = self.now(), clock()
        last_event = self.now()
        while not self.finished and (until is None or self.now() < until):
            target = (math.floor(self.now() / step_s + 1e-9) + 1) * step_s
            target = target if until is None else min(target, until)
            if speedup is not None:
                _pace(wall0 + (target - virtual0) / speedup, sleep, clock)
            if self.advance_to(target):
                last_event = target
            if on_step is not None:
                on_step(self)
            if target - last_event > idle_limit_s:
                break
        if self.finished:
            self.writer.close(self.site.last_finish)


def _pace(deadline: float, sleep: Callable[[float], None], clock: Callable[[], float]) -> None:
    """Sleep until the wall-clock moment a virtual time maps to (never backwards)."""
    remaining = deadline - clock()
    if remaining > 0:
        sleep(remaining)


def build_live(
    workflow: Workflow,
    out_dir: str | os.PathLike[str],
    config: EmulationConfig | None = None,
    slots_per_instance: int = 4,
    charging_unit_s: float = 3600.0,
    options: WriterOptions | None = None,
) -> LiveEmulation:
    """A site for ``workflow`` and a freshly created submit dir in ``out_dir``."""
    config = config or EmulationConfig()
    site = EmulatedSite(workflow, config, slots_per_instance, Billing(charging_unit_s))
    writer = SubmitDirWriter(workflow, out_dir, options).create()
    return LiveEmulation(site, writer)


def run_live(
    trace_path: str | os.PathLike[str],
    out_dir: str | os.PathLike[str],
    speedup: float | None = 60.0,
    config: EmulationConfig | None = None,
    *,
    slots_per_instance: int = 4,
    charging_unit_s: float = 3600.0,
    options: WriterOptions | None = None,
    step_s: float = 1.0,
    until: float | None = None,
    on_step: Callable[[LiveEmulation], None] | None = None,
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.monotonic,
) -> LiveEmulation:
    """Replay a trace on a static emulated pool, writing its submit dir as it runs.

    ``speedup`` virtual seconds pass per wall second (None: as fast as possible,
    no sleeping). The pool is ``config.initial_instances`` instances; pass
    ``on_step`` to act on the site between steps (launch, terminate...).
    """
    live = build_live(load_trace(trace_path), out_dir, config, slots_per_instance, charging_unit_s, options)
    live.run(until=until, speedup=speedup, step_s=step_s, on_step=on_step, sleep=sleep, clock=clock)
    return live
