"""Load real workflow traces (WfCommons WfFormat and its predecessors) as a ``Workflow``.

Layouts read, recognised by their structure rather than by ``schemaVersion``
(the version string is only quoted in error messages):

* **WfFormat 1.5+** -- ``workflow.specification.tasks[]`` (id, parents,
  children, inputFiles, outputFiles), ``workflow.specification.files[]`` (id,
  sizeInBytes) and ``workflow.execution.tasks[]`` (id, runtimeInSeconds,
  command.program, memoryInBytes). Every specification task needs an
  execution record with a runtime.
* **Flat layouts** -- WfFormat 1.0-1.4 and the pre-WfFormat 0.2 traces: one
  list ``workflow.tasks[]`` (WfFormat >= 1.3) or ``workflow.jobs[]`` (older),
  each entry with ``name`` (the key that parents/children refer to; ``id`` is
  accepted as an alias), ``type``, ``runtime`` or ``runtimeInSeconds``,
  ``parents``, optional ``children``, ``files[{name|id, size|sizeInBytes,
  link}]``, optional ``category`` / ``command.program``, ``memory`` (KB,
  before 1.4) or ``memoryInBytes``. Either key spelling is accepted under any
  version, since real files mix them.

Decisions (ours, see DESIGN.md "Ambiguities ... are ours to decide"):

* **Transformation.** 1.5: ``command.program`` of the execution record, else
  the task id's prefix before ``_ID`` (else the id without a trailing
  ``_<digits>``). Flat compute tasks: ``category``, else ``command.program``,
  else that same id prefix of ``name``. Flat non-compute tasks (``auxiliary``
  or ``transfer``): the Pegasus job kind read from the name prefix
  (create_dir, stage_in, stage_out, stage_inter, stage_worker, register,
  cleanup, chmod), because categories of migrated traces collapse them to
  ``stage``/``create``; unknown kinds fall back to the compute rule.
* **Which jobs run on the submit host** (``on_pool=False``). Compute tasks
  always run on the pool. A non-compute task runs on the submit host when its
  kind is create_dir, stage_worker, register or cleanup (Pegasus plans these in
  the local universe), or when its name holds the token ``local`` after the
  kind: Pegasus names transfer jobs ``stage_in_<local|remote>_<site>_<level>_<n>``
  where ``local`` means the transfer runs on the submit host, and a site
  handle ``local`` is the submit host itself (so names ending ``_local`` are
  covered too). A transfer such as ``stage_in_remote_condorpool_0_0`` runs on
  the pool. In the legacy Montage OSG trace this makes every auxiliary job
  local, which its ``machine`` field confirms: every auxiliary job that records
  a machine names the submit host (xd-login.opensciencegrid.org), where no
  compute job ran.
* **Parents** are the union of a task's ``parents`` and of every task that
  lists it among its ``children`` (traces often give only one side).
* **Sizes.** ``input_bytes``/``output_bytes`` sum the distinct input/output
  files of a task. ``size`` is taken as bytes (Pegasus wrote bytes; WfFormat's
  own 1.3->1.4 migration renames it unchanged). Pre-1.4 ``memory`` is KB and
  is multiplied by 1000, as WfFormat's migration does.
* The workflow is named after the file (``montage-chameleon-2mass-01d-001``),
  which tells traces apart better than the trace's own ``name`` field.

Every problem raises ``WorkflowError`` naming the file and, where there is
one, the task: also a document nested too deeply for Python to walk, an
integer of more than 4,300 digits, and numbers that cannot be true (a runtime
that is negative, not finite or beyond ``_MAX_SECONDS``; a size or memory that
is negative or beyond an exbibyte, including integers too large for a float).
Values are quoted in messages shortened (``reprlib``), never in full.
"""

from __future__ import annotations

import atexit
import contextlib
import gzip
import json
import math
import os
import re
import reprlib
import zlib
from collections.abc import Iterable
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any, TypeGuard

from wire_daemon.core.errors import WorkflowError
from wire_daemon.core.pegasus_names import LOCAL_KINDS, aux_kind
from wire_daemon.core.workflow import TaskSpec, Workflow, build_workflow

BUNDLED_TRACE = "montage-chameleon-2mass-01d-001.json"

_GZIP_MAGIC = b"\x1f\x8b"
_MAX_BYTES = 2**60  # 1 EiB: larger sizes are corrupt values, and would overflow int64
_MAX_SECONDS = 1e12  # ~31,700 years: a longer runtime is a corrupt value
_SHOW = reprlib.Repr()
_SHOW.maxstring = _SHOW.maxother = 60
_SHOW.maxlong = 40
_TRAILING_NUMBER = re.compile(r"_\d+$")
_KEEP_OPEN = contextlib.ExitStack()  # keeps an extracted bundled file alive until exit
atexit.register(_KEEP_OPEN.close)


def load_trace(path: str | os.PathLike[str]) -> Workflow:
    """Read a WfFormat (1.x) or legacy (0.2) trace, plain or gzip, into a ``Workflow``."""
    source = os.fspath(path)
    try:
        doc = _read_json(source)
        specs = _Reader(source, doc).task_specs()
    except RecursionError:  # json and the checks below walk nested values recursively
        raise WorkflowError(source, "nested too deeply to be a trace") from None
    return build_workflow(_trace_name(source), source, specs)


def bundled_trace_path() -> Path:
    """Path of the small real trace shipped with the package (used by the README demo)."""
    ref = resources.files("wire_daemon") / "data" / BUNDLED_TRACE
    return _KEEP_OPEN.enter_context(resources.as_file(ref))


# --- reading -----------------------------------------------------------------


def _read_json(source: str) -> Any:
    try:
        raw = Path(source).read_bytes()
    except OSError as exc:
        raise WorkflowError(source, f"cannot read the trace: {exc.strerror or exc}") from None
    if raw[:2] == _GZIP_MAGIC:  # by content, so a misnamed .json.gz still loads
        try:
            raw = gzip.decompress(raw)
        except (OSError, EOFError, zlib.error) as exc:
            raise WorkflowError(source, f"not a readable gzip file: {exc}") from None
    try:
        return json.loads(raw)
    except UnicodeDecodeError:
        raise WorkflowError(source, "not a JSON trace (not UTF-8 text)") from None
    except json.JSONDecodeError as exc:
        where = f"line {exc.lineno} column {exc.colno}"
        raise WorkflowError(source, f"not valid JSON: {exc.msg}", where) from None
    except ValueError as exc:  # an integer of more than 4,300 digits
        raise WorkflowError(source, f"not a usable JSON trace: {_value_error(exc)}") from None


def _trace_name(source: str) -> str:
    name = Path(source).name
    for suffix in (".gz", ".json"):
        name = name.removesuffix(suffix)
    return name or source


@dataclass
class _Reader:
    """Turns one parsed trace document into ``TaskSpec``s, whatever its layout."""

    source: str
    doc: Any

    def fail(self, message: str) -> WorkflowError:
        return WorkflowError(self.source, message)

    def task_specs(self) -> list[TaskSpec]:
        workflow = self.doc.get("workflow") if isinstance(self.doc, dict) else None
        if isinstance(workflow, dict) and "specification" in workflow:
            return self._wfformat15(workflow)
        if isinstance(workflow, dict) and ("tasks" in workflow or "jobs" in workflow):
            return self._flat(workflow)
        version = self.doc.get("schemaVersion") if isinstance(self.doc, dict) else None
        raise self.fail(
            f"unknown trace layout (schemaVersion {_show(version)}): expected "
            "workflow.specification (WfFormat 1.5+) or workflow.tasks / workflow.jobs"
        )

    # --- WfFormat 1.5+ -------------------------------------------------------

    def _wfformat15(self, workflow: dict[str, Any]) -> list[TaskSpec]:
        spec = self._dict(workflow.get("specification"), "workflow.specification")
        execution = self._dict(workflow.get("execution", {}), "workflow.execution")
        tasks = self._list(spec.get("tasks"), "workflow.specification.tasks")
        sizes = self._file_sizes(self._list(spec.get("files", []), "workflow.specification.files"))
        records = self._execution_records(self._list(execution.get("tasks", []), "workflow.execution.tasks"))
        ids = [self._entry_id(t, i, ("id",)) for i, t in enumerate(tasks)]
        parents = self._parent_sets(tasks, ids, {i: i for i in ids})
        unknown = records.keys() - set(ids)
        if unknown:
            raise self.fail(f"execution record for unknown task {_show(min(unknown))}")
        return [
            self._spec15(task, task_id, parents[task_id], records.get(task_id), sizes)
            for task, task_id in zip(tasks, ids)
        ]

    def _spec15(
        self,
        task: dict[str, Any],
        task_id: str,
        parents: Iterable[str],
        record: dict[str, Any] | None,
        sizes: dict[str, int],
    ) -> TaskSpec:
        if record is None:
            raise self.fail(f"task {_show(task_id)} has no execution record, so no runtime")
        if "runtimeInSeconds" not in record:
            raise self.fail(f"task {_show(task_id)} has no runtimeInSeconds")
        return TaskSpec(
            task_id=task_id,
            transformation=_program(record) or _id_prefix(task_id),
            parents=tuple(parents),
            runtime_s=self._seconds(record["runtimeInSeconds"], task_id),
            input_bytes=self._sum_files(task.get("inputFiles") or [], sizes, task_id),
            output_bytes=self._sum_files(task.get("outputFiles") or [], sizes, task_id),
            peak_memory_bytes=self._memory(record, task_id),
        )

    def _file_sizes(self, files: list[Any]) -> dict[str, int]:
        sizes: dict[str, int] = {}
        for i, entry in enumerate(files):
            file_id = self._entry_id(entry, i, ("id", "name"), what="file")
            sizes[file_id] = self._bytes(entry, file_id, None)
        return sizes

    def _execution_records(self, records: list[Any]) -> dict[str, dict[str, Any]]:
        by_id: dict[str, dict[str, Any]] = {}
        for i, record in enumerate(records):
            task_id = self._entry_id(record, i, ("id",), what="execution record")
            if task_id in by_id:
                raise self.fail(f"task {_show(task_id)} has two execution records")
            by_id[task_id] = record
        return by_id

    def _sum_files(self, file_ids: Any, sizes: dict[str, int], task_id: str) -> int:
        if not isinstance(file_ids, list) or not all(isinstance(f, str) for f in file_ids):
            raise self.fail(f"task {_show(task_id)}: file list is not a list of file ids")
        unique = dict.fromkeys(file_ids)  # a file listed twice is read once
        unknown = [f for f in unique if f not in sizes]
        if unknown:
            raise self.fail(f"task {_show(task_id)} names unknown file {_show(unknown[0])}")
        return self._total((sizes[f] for f in unique), task_id)

    # --- flat layouts (WfFormat 1.0-1.4, legacy 0.2) -------------------------

    def _flat(self, workflow: dict[str, Any]) -> list[TaskSpec]:
        key = "tasks" if "tasks" in workflow else "jobs"
        tasks = self._list(workflow[key], f"workflow.{key}")
        names = [self._entry_id(t, i, ("name", "id"), what=key[:-1]) for i, t in enumerate(tasks)]
        aliases = {n: n for n in names}
        for task, name in zip(tasks, names):  # ids are aliases, never shadowing a name
            alias = task.get("id")
            if isinstance(alias, str):
                aliases.setdefault(alias, name)
        parents = self._parent_sets(tasks, names, aliases)
        return [self._spec_flat(t, n, parents[n]) for t, n in zip(tasks, names)]

    def _spec_flat(self, task: dict[str, Any], name: str, parents: Iterable[str]) -> TaskSpec:
        runtime_key = "runtimeInSeconds" if "runtimeInSeconds" in task else "runtime"
        if runtime_key not in task:
            raise self.fail(f"task {_show(name)} has no runtime")
        compute = task.get("type", "compute") == "compute"
        inputs, outputs = self._flat_file_bytes(task, name)
        return TaskSpec(
            task_id=name,
            transformation=_flat_transformation(task, name, compute),
            parents=tuple(parents),
            runtime_s=self._seconds(task[runtime_key], name),
            input_bytes=inputs,
            output_bytes=outputs,
            on_pool=compute or not _runs_on_submit_host(name),
            peak_memory_bytes=self._memory(task, name),
        )

    def _flat_file_bytes(self, task: dict[str, Any], name: str) -> tuple[int, int]:
        seen: dict[tuple[str, bool], int] = {}
        for i, entry in enumerate(self._list(task.get("files") or [], f"files of task {_show(name)}")):
            file_id = self._entry_id(entry, i, ("name", "id"), what=f"file of task {_show(name)}")
            link = entry.get("link")
            is_input = isinstance(link, str) and link.lower() == "input"
            seen[(file_id, is_input)] = self._bytes(entry, file_id, name)
        inputs = self._total((size for (_, is_in), size in seen.items() if is_in), name)
        outputs = self._total((size for (_, is_in), size in seen.items() if not is_in), name)
        return inputs, outputs

    # --- shared checks -------------------------------------------------------

    def _parent_sets(
        self, tasks: list[dict[str, Any]], ids: list[str], aliases: dict[str, str]
    ) -> dict[str, dict[str, None]]:
        """Parents of each task: its own list plus every task naming it as a child."""
        parents: dict[str, dict[str, None]] = {task_id: {} for task_id in ids}
        for task, task_id in zip(tasks, ids):
            for ref in self._refs(task, "parents", task_id):
                # unknown parents are left as written for build_workflow to report
                parents[task_id][aliases.get(ref, ref)] = None
            for ref in self._refs(task, "children", task_id):
                if ref not in aliases:
                    raise self.fail(f"task {_show(task_id)} names unknown child {_show(ref)}")
                parents[aliases[ref]][task_id] = None
        return parents

    def _refs(self, task: dict[str, Any], key: str, task_id: str) -> list[str]:
        refs = task.get(key) or []
        if not isinstance(refs, list) or not all(isinstance(r, str) for r in refs):
            raise self.fail(f"task {_show(task_id)}: {key} is not a list of task ids")
        return refs

    def _entry_id(self, entry: Any, index: int, keys: tuple[str, ...], what: str = "task") -> str:
        if isinstance(entry, dict):
            for key in keys:
                value = entry.get(key)
                if isinstance(value, str) and value:
                    return value
        raise self.fail(f"{what} #{index} has no {' or '.join(keys)}")

    def _seconds(self, value: Any, task_id: str) -> float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise self.fail(f"task {_show(task_id)}: runtime {_show(value)} is not a number")
        if not _non_negative(value) or value > _MAX_SECONDS:
            raise self.fail(f"task {_show(task_id)}: runtime {_show(value)} is negative, not finite or absurdly long")
        return float(value)

    def _bytes(self, entry: dict[str, Any], file_id: str, task_id: str | None) -> int:
        value = entry.get("sizeInBytes", entry.get("size"))
        if not _non_negative(value) or value > _MAX_BYTES:
            owner = f"task {_show(task_id)}: " if task_id else ""
            raise self.fail(f"{owner}file {_show(file_id)} has no valid size ({_show(value)})")
        return int(value)

    def _total(self, sizes: Iterable[int], task_id: str) -> int:
        total = sum(sizes)
        if total > _MAX_BYTES:  # keeps the int64 columns of Workflow from overflowing
            raise self.fail(f"task {_show(task_id)}: file sizes add up to an absurd {total} bytes")
        return total

    def _memory(self, record: dict[str, Any], task_id: str) -> int:
        if "memoryInBytes" in record:
            value, scale = record["memoryInBytes"], 1
        elif "memory" in record:
            value, scale = record["memory"], 1000  # KB before WfFormat 1.4
        else:
            return 0
        if not _non_negative(value) or value * scale > _MAX_BYTES:
            raise self.fail(f"task {_show(task_id)}: memory {_show(value)} is not a size")
        return int(value * scale)

    def _dict(self, value: Any, where: str) -> dict[str, Any]:
        if not isinstance(value, dict):
            raise self.fail(f"{where} is not an object")
        return value

    def _list(self, value: Any, where: str) -> list[Any]:
        if not isinstance(value, list):
            raise self.fail(f"{where} is not a list")
        return value


# --- transformations and placement ---------------------------------------------


def _non_negative(value: Any) -> TypeGuard[float]:
    """A finite number >= 0 (JSON bools are ints to Python; NaN parses from real files; an int is
    finite however large, though ``math.isfinite`` cannot take one too large for a float)."""
    if isinstance(value, bool):
        return False
    if isinstance(value, int):
        return value >= 0
    return isinstance(value, float) and math.isfinite(value) and value >= 0


def _show(value: Any) -> str:
    """A value for a message: shortened, and safe however deep or long it is."""
    return _SHOW.repr(value)


def _value_error(exc: ValueError) -> str:
    if "integer string conversion" in str(exc):
        return "an integer of more than 4,300 digits"
    return str(exc).splitlines()[0] if str(exc) else type(exc).__name__


def _program(record: dict[str, Any]) -> str | None:
    command = record.get("command")
    program = command.get("program") if isinstance(command, dict) else None
    return program if isinstance(program, str) and program else None


def _id_prefix(task_id: str) -> str:
    """``mProject_ID0000001`` -> ``mProject``; ``mProject_00000001`` -> ``mProject``."""
    if "_ID" in task_id:
        return task_id.split("_ID", 1)[0]
    return _TRAILING_NUMBER.sub("", task_id) or task_id


def _flat_transformation(task: dict[str, Any], name: str, compute: bool) -> str:
    kind = None if compute else aux_kind(name)
    if kind:
        return kind
    category = task.get("category")
    if isinstance(category, str) and category:
        return category
    return _program(task) or _id_prefix(name)


def _runs_on_submit_host(name: str) -> bool:
    """Pegasus naming rule for non-compute jobs; see the module docstring."""
    kind = aux_kind(name)
    if kind in LOCAL_KINDS:
        return True
    rest = name[len(kind) :] if kind else name
    return "local" in rest.split("_")
