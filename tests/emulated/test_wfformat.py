"""Tests for the WfFormat / legacy trace loader against real traces and broken ones."""

from __future__ import annotations

import gzip
import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from wire_daemon.core.errors import WorkflowError
from wire_daemon.core.workflow import Workflow
from wire_daemon.emulated.traces import BUNDLED_TRACE, bundled_trace_path, load_trace

DATA = Path(__file__).resolve().parents[1] / "data"
TRACES = DATA / "traces"  # copies of the smallest real traces of each kind (tests/data/SOURCES.md)
LEGACY = "legacy/montage-4.0-osg-dataset02-run001.json.gz"


@dataclass(frozen=True)
class Expected:
    """One row of traces/MANIFEST.md, plus the two counts the MANIFEST does not give."""

    tasks: int
    types: int
    manifest_stages: int  # distinct (category, set of parent categories) pairs
    stages: int  # model.py's recursive stages: (transformation, set of parent *stages*)
    edges: int  # not in the MANIFEST: distinct parent->child pairs of the raw JSON
    levels: int
    max_width: int
    critical_path_s: float
    total_time_s: float


# Recursive and pair stage counts agree on every WfFormat 1.5 trace. They differ on the
# legacy Montage trace (17 pairs, 20 stages): its stage_out jobs all have an mAdd or mJPEG
# parent, but the mAdd parents belong to two different stages (the per-band mosaics and
# the final shrunken mosaic), so the recursive definition splits (stage_out, {mAdd}) in
# two; and the register jobs, all children of a stage_out, follow their three distinct
# stage_out stages, where the pair count sees one (register, {stage_out}). 17 + 1 + 2 = 20.
E = Expected
MANIFEST = {
    "1000genome-chameleon-10ch-250k-001.json": E(410, 5, 5, 5, 530, 3, 260, 358.9, 25977.7),
    "1000genome-chameleon-22ch-250k-001.json": E(902, 5, 5, 5, 1166, 3, 572, 314.0, 53409.6),
    "1000genome-chameleon-2ch-100k-001.json.gz": E(52, 5, 5, 5, 76, 3, 28, 204.7, 2771.3),
    "cycles-chameleon-1l-1c-12p-001.json": E(219, 7, 7, 7, 325, 4, 108, 250.1, 4876.0),
    "cycles-chameleon-1l-3c-12p-001.json.gz": E(657, 7, 7, 7, 975, 4, 324, 237.6, 10653.0),
    "epigenomics-chameleon-hep-6seq-50k-001.json": E(983, 8, 9, 9, 1218, 9, 242, 194.5, 18044.4),
    "epigenomics-chameleon-ilmn-1seq-100k-001.json.gz": E(125, 8, 9, 9, 153, 9, 30, 143.4, 2578.3),
    "epigenomics-chameleon-ilmn-3seq-100k-001.json": E(405, 8, 9, 9, 500, 9, 99, 236.1, 10074.1),
    "epigenomics-chameleon-ilmn-6seq-50k-001.json.gz": E(1695, 8, 9, 9, 2108, 9, 420, 1084.1, 26060.0),
    "montage-chameleon-2mass-01d-001.json": E(103, 8, 8, 8, 231, 8, 45, 21.1, 362.6),
    "montage-chameleon-2mass-025d-001.json": E(619, 8, 8, 8, 1641, 8, 423, 25.7, 1321.9),
    "montage-chameleon-2mass-05d-001.json.gz": E(1738, 8, 8, 8, 4698, 8, 1242, 102.4, 8694.7),
    "seismology-chameleon-1000p-001.json": E(1001, 2, 2, 2, 1000, 2, 1000, 5.4, 538.4),
    "seismology-chameleon-300p-001.json.gz": E(301, 2, 2, 2, 300, 2, 300, 4.5, 230.3),
    "srasearch-chameleon-30a-001.json": E(64, 4, 5, 5, 92, 4, 31, 3920.3, 50375.2),
    LEGACY: E(3765, 14, 17, 20, 18991, 15, 2316, 748.7, 2729.2),
}
COPIED = ["montage-chameleon-2mass-01d-001.json", "srasearch-chameleon-30a-001.json"]


def shared_trace(name: str) -> Path:
    path = TRACES / name
    assert path.exists(), f"{path} is missing: tests/data/SOURCES.md says where it comes from"
    return path


# --- metrics computed independently of the loader ------------------------------------


def levels(wf: Workflow) -> np.ndarray:
    """Topological generation of each task (tasks are stored in topological order)."""
    level = np.zeros(wf.n_tasks, dtype=np.int64)
    for i in range(wf.n_tasks):
        parents = wf.parents(i)
        if parents.size:
            level[i] = level[parents].max() + 1
    return level


def critical_path(wf: Workflow) -> float:
    finish = np.zeros(wf.n_tasks)
    for i in range(wf.n_tasks):
        parents = wf.parents(i)
        finish[i] = (finish[parents].max() if parents.size else 0.0) + wf.runtime_s[i]
    return float(finish.max())


def category_pairs(wf: Workflow) -> int:
    """The MANIFEST's stage count: distinct (category, set of parent categories)."""
    cats = wf.transformation
    return len({(cats[i], frozenset(cats[p] for p in wf.parents(i))) for i in range(wf.n_tasks)})


def read_doc(path: Path) -> dict[str, Any]:
    raw = path.read_bytes()
    return json.loads(gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw)


def raw_edges(doc: dict[str, Any]) -> set[tuple[str, str]]:
    wf = doc["workflow"]
    if "specification" in wf:
        tasks, key = wf["specification"]["tasks"], "id"
    else:
        tasks, key = wf["jobs"], "name"
    edges = {(p, t[key]) for t in tasks for p in t.get("parents", [])}
    return edges | {(t[key], c) for t in tasks for c in t.get("children", [])}


def check_against_manifest(wf: Workflow, exp: Expected) -> None:
    level = levels(wf)
    assert wf.n_tasks == exp.tasks
    assert len(set(wf.transformation)) == exp.types
    assert len(wf.stages) == exp.stages
    assert category_pairs(wf) == exp.manifest_stages
    assert wf.n_edges == exp.edges
    assert int(level.max()) + 1 == exp.levels
    assert int(np.bincount(level).max()) == exp.max_width
    assert critical_path(wf) == pytest.approx(exp.critical_path_s, abs=0.1)
    assert float(wf.runtime_s.sum()) == pytest.approx(exp.total_time_s, abs=0.1)


# --- real traces ------------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(n for n in MANIFEST if (TRACES / n).exists()))
def test_shared_trace_matches_manifest(name: str) -> None:
    check_against_manifest(load_trace(shared_trace(name)), MANIFEST[name])


@pytest.mark.parametrize("name", COPIED)
def test_copied_trace_matches_manifest(name: str) -> None:
    path = DATA / name
    wf = load_trace(path)
    check_against_manifest(wf, MANIFEST[name])
    assert wf.n_edges == len(raw_edges(read_doc(path)))
    assert wf.name == name.removesuffix(".json")
    assert wf.source == str(path)


def test_wfformat15_task_fields() -> None:
    path = DATA / "montage-chameleon-2mass-01d-001.json"
    doc = read_doc(path)["workflow"]
    sizes = {f["id"]: f["sizeInBytes"] for f in doc["specification"]["files"]}
    task = doc["specification"]["tasks"][0]
    record = next(r for r in doc["execution"]["tasks"] if r["id"] == task["id"])
    wf = load_trace(path)
    i = wf.index_of(task["id"])
    assert wf.transformation[i] == record["command"]["program"] == "mProject"
    assert wf.runtime_s[i] == record["runtimeInSeconds"]
    assert wf.input_bytes[i] == sum(sizes[f] for f in task["inputFiles"])
    assert wf.output_bytes[i] == sum(sizes[f] for f in task["outputFiles"])
    assert wf.peak_memory_bytes[i] == record["memoryInBytes"]
    assert wf.on_pool.all()


def test_epigenomics_uses_program_not_id_prefix() -> None:
    wf = load_trace(shared_trace("epigenomics-chameleon-ilmn-1seq-100k-001.json.gz"))
    # ids look like chr21_chr21_ID0000001; the program is chr21
    assert wf.transformation[wf.index_of("chr21_chr21_ID0000001")] == "chr21"
    assert wf.peak_memory_bytes.max() == 0  # these traces have no memoryInBytes


def test_gzip_trace_loads_under_a_second() -> None:
    path = shared_trace("montage-chameleon-2mass-05d-001.json.gz")
    start = time.perf_counter()
    wf = load_trace(path)
    assert time.perf_counter() - start < 1.0
    assert wf.n_tasks == 1738


def test_bundled_trace() -> None:
    path = bundled_trace_path()
    assert path.name == BUNDLED_TRACE and path.is_file()
    assert path.read_bytes() == (DATA / BUNDLED_TRACE).read_bytes()
    assert load_trace(path).n_tasks == 103


# --- legacy schema 0.2 ------------------------------------------------------------------


def test_legacy_head_slice() -> None:
    path = DATA / "montage-4.0-osg-dataset02-run001-head.json"
    jobs = {j["name"]: j for j in read_doc(path)["workflow"]["jobs"]}
    wf = load_trace(path)
    assert wf.n_tasks == 15 and wf.n_edges == len(raw_edges(read_doc(path))) == 36
    kinds = {wf.transformation[i] for i in range(wf.n_tasks) if not wf.on_pool[i]}
    assert kinds == {"create_dir", "stage_worker", "stage_in"}
    assert int((~wf.on_pool).sum()) == 6
    job = jobs["mProjectPP_ID000390"]
    i = wf.index_of("mProjectPP_ID000390")
    assert wf.transformation[i] == "mProjectPP" and wf.on_pool[i]
    assert wf.input_bytes[i] == sum(f["size"] for f in job["files"] if f["link"] == "input")
    assert wf.output_bytes[i] == sum(f["size"] for f in job["files"] if f["link"] == "output")
    assert wf.peak_memory_bytes[i] == int(job["memory"] * 1000)  # KB in schema 0.2
    assert wf.runtime_s.sum() == pytest.approx(sum(j["runtime"] for j in jobs.values()))


def test_legacy_full_trace_local_jobs_ran_on_the_submit_host() -> None:
    path = shared_trace(LEGACY)
    jobs = read_doc(path)["workflow"]["jobs"]
    wf = load_trace(path)
    aux = {j["name"] for j in jobs if j["type"] == "auxiliary"}
    local = {wf.task_ids[i] for i in np.flatnonzero(~wf.on_pool)}
    assert local == aux and len(aux) == 27
    # evidence for the rule: the machines of auxiliary jobs ran no compute job
    aux_machines = {j.get("machine") for j in jobs if j["type"] == "auxiliary"} - {None}
    compute_machines = {j.get("machine") for j in jobs if j["type"] == "compute"}
    assert aux_machines and not aux_machines & compute_machines
    kinds = {wf.transformation[wf.index_of(n)] for n in aux}
    assert kinds == {"create_dir", "stage_worker", "stage_in", "stage_out", "register"}


@pytest.mark.parametrize(
    ("name", "kind", "on_pool"),
    [
        ("stage_in_remote_condorpool_0_0", "stage_in", True),
        ("stage_in_local_condorpool_0_0", "stage_in", False),
        ("stage_out_remote_local_6_1", "stage_out", False),
        ("stage_inter_remote_condorpool_1_0", "stage_inter", True),
        ("create_dir_montage_0_condorpool", "create_dir", False),
        ("cleanup_montage_0_condorpool", "cleanup", False),
        ("clean_up_montage_0_condorpool", "cleanup", False),
        ("register_condorpool_1_0", "register", False),
        ("chmod_mProject_ID01_0", "chmod", True),
        ("odd_job_local", "odd_job_local", False),
    ],
)
def test_auxiliary_kind_and_placement(tmp_path: Path, name: str, kind: str, on_pool: bool) -> None:
    job = {"name": name, "type": "auxiliary", "runtime": 1.0, "parents": []}
    path = write(tmp_path, "aux.json", {"schemaVersion": "0.2", "workflow": {"jobs": [job]}})
    wf = load_trace(path)
    assert (wf.transformation[0], bool(wf.on_pool[0])) == (kind, on_pool)


# --- WfFormat 1.3 / 1.4 -----------------------------------------------------------------


@pytest.mark.parametrize("version", ["1.3", "1.4"])
def test_flat_wfformat_fixture(version: str) -> None:
    wf = load_trace(DATA / f"wfformat-{version}-mini.json")
    assert wf.n_tasks == 8 and wf.n_edges == 8 and len(wf.stages) == 7
    by_id = {t: i for i, t in enumerate(wf.task_ids)}
    expected = {
        "create_dir_mini_0_local": ("create_dir", False),
        "stage_in_remote_condorpool_0_0": ("stage_in", True),
        "mProject_ID0000003": ("mProject", True),
        "mDiffFit_ID0000005": ("mDiffFit", True),
        "stage_out_local_condorpool_1_0": ("stage_out", False),
        "register_condorpool_1_0": ("register", False),
    }
    for task, (kind, on_pool) in expected.items():
        assert (wf.transformation[by_id[task]], bool(wf.on_pool[by_id[task]])) == (kind, on_pool)
    diff = by_id["mDiffFit_ID0000005"]  # its parents are only given as children of others
    parents = {wf.task_ids[p] for p in wf.parents(diff)}
    assert parents == {"mProject_ID0000003", "mProject_ID0000004"}
    assert wf.input_bytes[diff] == 16200 and wf.output_bytes[diff] == 100
    assert wf.peak_memory_bytes[by_id["mProject_ID0000003"]] == 14692000
    assert wf.runtime_s.sum() == pytest.approx(39.7)


def test_wfformat13_and_14_give_the_same_workflow() -> None:
    a = load_trace(DATA / "wfformat-1.3-mini.json")
    b = load_trace(DATA / "wfformat-1.4-mini.json")
    assert a.task_ids == b.task_ids and a.transformation == b.transformation
    columns = ("runtime_s", "input_bytes", "output_bytes", "peak_memory_bytes", "on_pool")
    for column in (*columns, "parent_idx", "stage_of"):
        np.testing.assert_array_equal(getattr(a, column), getattr(b, column))


def test_jobs_key_and_id_references(tmp_path: Path) -> None:
    doc = read_doc(DATA / "wfformat-1.3-mini.json")
    doc["workflow"]["jobs"] = doc["workflow"].pop("tasks")
    doc["workflow"]["jobs"][-1]["parents"] = ["ID0000007"]  # by id instead of name
    wf = load_trace(write(tmp_path, "jobs.json", doc))
    reference = load_trace(DATA / "wfformat-1.3-mini.json")
    np.testing.assert_array_equal(wf.parent_idx, reference.parent_idx)


def test_transformation_falls_back_to_id_prefix(tmp_path: Path) -> None:
    doc = wf15({"id": "mProject_ID01"}, {"id": "mAdd_00000002", "parents": ["mProject_ID01"]})
    doc["workflow"]["execution"]["tasks"][0]["command"] = {"arguments": []}  # no program
    wf = load_trace(write(tmp_path, "noprogram.json", doc))
    assert wf.transformation == ["mProject", "mAdd"]
    assert wf.peak_memory_bytes.tolist() == [0, 0]


# --- compression detection --------------------------------------------------------------


def test_gzip_detected_by_content_not_suffix(tmp_path: Path) -> None:
    raw = (DATA / "srasearch-chameleon-30a-001.json").read_bytes()
    misnamed = tmp_path / "trace.json"
    misnamed.write_bytes(gzip.compress(raw))
    plain_gz = tmp_path / "plain.json.gz"
    plain_gz.write_bytes(raw)
    assert load_trace(misnamed).n_tasks == load_trace(plain_gz).n_tasks == 64


# --- broken traces ----------------------------------------------------------------------


def write(tmp_path: Path, name: str, doc: Any) -> Path:
    path = tmp_path / name
    path.write_text(json.dumps(doc))
    return path


def wf15(*tasks: dict[str, Any], records: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """A minimal WfFormat 1.5 document; records default to 1 s for every task with an id."""
    if records is None:
        records = [{"id": t["id"], "runtimeInSeconds": 1.0} for t in tasks if "id" in t]
    empty = {"parents": [], "children": [], "inputFiles": [], "outputFiles": []}
    return {
        "schemaVersion": "1.5",
        "workflow": {
            "specification": {
                "tasks": [{**empty, **t} for t in tasks],
                "files": [{"id": "f", "sizeInBytes": 10}],
            },
            "execution": {"tasks": records},
        },
    }


def timed(*runtimes: Any) -> dict[str, Any]:
    """Task a_ID1 with one execution record per runtime given."""
    return wf15({"id": "a_ID1"}, records=[{"id": "a_ID1", "runtimeInSeconds": r} for r in runtimes])


def jobs(*entries: dict[str, Any]) -> dict[str, Any]:
    """A legacy 0.2 document: compute jobs named a_ID1, b_ID2, ... unless given a name."""
    named = [{"name": f"{'ab'[i % 2]}_ID{i + 1}", "type": "compute", "parents": [], **e} for i, e in enumerate(entries)]
    return {"schemaVersion": "0.2", "workflow": {"jobs": named}}


def expect_error(path: Path, *fragments: str) -> WorkflowError:
    with pytest.raises(WorkflowError) as info:
        load_trace(path)
    message = str(info.value)
    assert path.name in message
    for fragment in fragments:
        assert fragment in message
    assert "\n" not in message
    return info.value


A, B = "a_ID1", "b_ID2"
BROKEN: dict[str, tuple[Any, tuple[str, ...]]] = {
    "cycle": (wf15({"id": A, "parents": [B]}, {"id": B, "parents": [A]}), ("cycle", "_ID")),
    "self-loop": (wf15({"id": A, "children": [A]}), ("cycle", A)),
    "unknown-parent": (wf15({"id": A, "parents": ["ghost"]}), (A, "ghost")),
    "unknown-child": (wf15({"id": A, "children": ["ghost"]}), (A, "ghost")),
    "no-execution-record": (wf15({"id": A}, records=[]), (A, "execution record")),
    "no-runtime": (wf15({"id": A}, records=[{"id": A}]), (A, "runtimeInSeconds")),
    "negative-runtime": (timed(-2), (A, "-2")),
    "string-runtime": (timed("5"), (A, "number")),
    "nan-runtime": (timed(float("nan")), (A, "nan")),
    "duplicate-record": (timed(1, 1), (A, "two execution records")),
    "duplicate-id": (
        wf15({"id": A}, {"id": A}, records=timed(1)["workflow"]["execution"]["tasks"]),
        (A, "defined twice"),
    ),
    "record-of-unknown-task": (
        wf15({"id": A}, records=[{"id": i, "runtimeInSeconds": 1} for i in (A, "z_ID9")]),
        ("z_ID9",),
    ),
    "unknown-file": (wf15({"id": A, "inputFiles": ["nofile"]}), (A, "nofile")),
    "huge-file": (wf15({"id": A, "inputFiles": ["big"]}), ("file 'big'", "size")),
    "task-without-id": (wf15({"id": A}, {"name": "b"}), ("task #1", "id")),
    "parents-not-list": (wf15({"id": A, "parents": B}), (A, "parents")),
    "flat-no-runtime": (jobs({}), (A, "no runtime")),
    "flat-negative-runtime": (jobs({"runtime": -0.5}), (A, "-0.5")),
    "flat-duplicate": (jobs({"runtime": 1}, {"name": A, "runtime": 1}), (A, "twice")),
    "flat-unknown-parent": (jobs({"runtime": 1, "parents": ["mX"]}), (A, "mX")),
    "flat-cycle": (
        jobs({"runtime": 1, "parents": [B]}, {"runtime": 1, "parents": [A]}),
        ("cycle", "_ID"),
    ),
    "flat-bad-file-size": (
        jobs({"runtime": 1, "files": [{"name": "x", "size": "big", "link": "input"}]}),
        (A, "'x'"),
    ),
    "flat-files-not-list": (jobs({"runtime": 1, "files": {"name": "x"}}), (A, "files")),
    "flat-task-is-string": ({"workflow": {"tasks": [A]}}, ("task #0",)),
    "tasks-not-list": ({"workflow": {"tasks": {"a": 1}}}, ("workflow.tasks",)),
    "spec-tasks-missing": ({"workflow": {"specification": {}}}, ("workflow.specification.tasks",)),
    "unknown-layout": ({"schemaVersion": "9.9", "workflow": {"graph": []}}, ("unknown", "9.9")),
    "top-level-list": ([1, 2, 3], ("unknown trace layout",)),
    "empty-workflow": ({"workflow": {"jobs": []}}, ("no tasks",)),
}
# 1e300 bytes: no real file holds such a value, but a corrupt one must not overflow int64
_huge = {"id": "big", "sizeInBytes": 1e300}
BROKEN["huge-file"][0]["workflow"]["specification"]["files"].append(_huge)


@pytest.mark.parametrize("case", sorted(BROKEN))
def test_broken_trace_names_file_and_task(tmp_path: Path, case: str) -> None:
    doc, fragments = BROKEN[case]
    error = expect_error(write(tmp_path, f"broken-{case}.json", doc), *fragments)
    assert error.source.endswith(f"broken-{case}.json")


def test_not_json(tmp_path: Path) -> None:
    path = tmp_path / "garbage.json"
    path.write_text('{"workflow": ')
    expect_error(path, "not valid JSON", "line 1")


def test_binary_garbage(tmp_path: Path) -> None:
    path = tmp_path / "binary.json"
    path.write_bytes(b"\xff\xfe\x00\x81 not text")
    expect_error(path, "JSON")


def test_truncated_gzip(tmp_path: Path) -> None:
    path = tmp_path / "cut.json.gz"
    path.write_bytes(gzip.compress(b'{"workflow": {"jobs": []}}' * 50)[:30])
    expect_error(path, "gzip")


def test_gzip_of_non_json(tmp_path: Path) -> None:
    path = tmp_path / "text.json.gz"
    path.write_bytes(gzip.compress(b"hello, world"))
    expect_error(path, "not valid JSON")


def test_missing_file(tmp_path: Path) -> None:
    expect_error(tmp_path / "absent.json", "cannot read")
