"""Node submit files, braindump, abstract workflow sizes and the Workflow of real submit dirs."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import numpy as np
import pytest

from wire_daemon.core.errors import InputError
from wire_daemon.monitor.abstract_wf import read_abstract_workflow
from wire_daemon.monitor.braindump import read_braindump
from wire_daemon.monitor.problems import Problems
from wire_daemon.monitor.submit_dir import read_submit_dir, transformation_from_name, workflow_from_submit_dir
from wire_daemon.monitor.submit_file import parse_submit_file, parse_submit_text

from .conftest import FIXTURES, LSST, SUBMIT

HIER = SUBMIT / "hierarchical_wf_success"
INNER = HIER / "00" / "00" / "blackdiamond_diamond_subworkflow.000"


def test_pegasus_compute_submit_file() -> None:
    sub = parse_submit_file(SUBMIT / "process_wf_success" / "00" / "00" / "ls_ID0000001.sub")
    assert sub is not None
    assert (sub.universe, sub.xformation, sub.job_class, sub.site) == ("vanilla", "ls", 1, "condorpool")
    assert (sub.dag_job_id, sub.dax_job_id, sub.priority) == ("ls_ID0000001", "ID0000001", 10)
    assert sub.log.endswith("/process-0.log") and sub.queue == ""
    assert sub.attributes["wantioproxy"] is True and sub.attributes["pegasus_cores"] == 1
    assert sub.request_memory_mib is None


def test_pegasus_sub_workflow_submit_file() -> None:
    sub = parse_submit_file(HIER / "00" / "00" / "pegasus-plan_diamond_subworkflow.sub")
    assert sub is not None
    assert (sub.universe, sub.xformation, sub.job_class, sub.site) == ("scheduler", "condor::dagman", 10, "local")
    assert "-Dag inner.dag" in sub.arguments
    assert sub.attributes["otherjobremoverequirements"] == "DAGManJobId =?= $(cluster)"
    assert sub.dax_job_id == "diamond_subworkflow"


def test_submit_file_syntax_and_bad_lines() -> None:
    problems = Problems()
    text = (
        '# c\nUniverse = Vanilla\nrequest_memory = 2 GB\narguments = "-a \\\n  b"\nMY.Foo = 2.5\n'
        "+Bar = undefined\nthis is not a command\nqueue 3\n"
    )
    sub = parse_submit_text(text, "x.sub", problems)
    assert (sub.universe, sub.request_memory_mib, sub.arguments, sub.queue) == ("vanilla", 2048.0, "-a b", "3")
    assert sub.attributes == {"foo": 2.5, "bar": "undefined"}
    assert problems.messages == ["x.sub:8: not a submit command: 'this is not a command'; skipped"]


def test_unreadable_submit_file_warns(tmp_path: Path) -> None:
    problems = Problems()
    assert parse_submit_file(tmp_path / "none.sub", problems) is None
    assert problems.messages[0].startswith(str(tmp_path / "none.sub") + ": cannot read the submit file")


def test_braindump() -> None:
    dump = read_braindump(INNER / "braindump.yml")
    assert (dump.wf_uuid, dump.root_wf_uuid) == (
        "160be601-bda4-45fb-86cd-9cf7a269bb22",
        "48f759a4-165f-47d6-8c32-571649ce311b",
    )
    assert (dump.dag, dump.condor_log, dump.jobstate_log, dump.wf_name) == (
        "inner.dag",
        "inner.log",
        "jobstate.log",
        "blackdiamond-0",
    )
    assert not dump.is_root and read_braindump(HIER / "braindump.yml").is_root


def test_broken_braindump_is_an_input_error_with_line(tmp_path: Path) -> None:
    path = tmp_path / "braindump.yml"
    path.write_text('wf_uuid: "abc"\ndag: [unclosed\n')
    with pytest.raises(InputError) as err:
        read_braindump(path)
    assert err.value.source == str(path) and err.value.where is not None and "bad YAML" in err.value.detail


def test_abstract_workflow_sizes() -> None:
    wf = read_abstract_workflow(FIXTURES / "pegasus-workflow" / "junit-workflow.yml")
    assert wf.file_sizes == {"f.b1": 2048}
    assert wf.input_bytes("ID000002") == 2048  # findrange reads f.b1, whose producer declared its size
    assert wf.input_bytes("ID000001") == 0 and wf.output_bytes("ID000001") == 2048


# -- whole submit dirs -------------------------------------------------------------------

EXPECTED = {
    # dir: (tasks, edges, stages, tasks on the pool)
    "process_wf_success": (5, 4, 5, 1),
    "process_wf_failure": (5, 4, 5, 1),
    "sample_wf_held": (8, 8, 8, 1),
    "hierarchical_wf_success": (13, 17, 13, 2),
    "hierarchical_wf_success/00/00/blackdiamond_diamond_subworkflow.000": (15, 20, 11, 4),
}


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_submit_dir_counts(name: str) -> None:
    problems = Problems()
    wf = workflow_from_submit_dir(SUBMIT / name, problems)
    assert (wf.n_tasks, wf.n_edges, len(wf.stages), int(wf.on_pool.sum())) == EXPECTED[name]
    assert problems.messages == []


def test_process_workflow_stages_and_pool_rule() -> None:
    wf = workflow_from_submit_dir(SUBMIT / "process_wf_success")
    assert wf.name == "process-0"
    stage = {wf.task_ids[i]: wf.stages[wf.stage_of[i]].name for i in range(wf.n_tasks)}
    assert stage == {
        "create_dir_process_0_local": "pegasus::dirmanager",
        "ls_ID0000001": "ls",
        "stage_out_local_local_0_0": "pegasus::transfer",
        "cleanup_process_0_local": "pegasus::cleanup",
        "register_local_0_0": "pegasus::rc-client",
    }
    assert [wf.task_ids[i] for i in np.flatnonzero(wf.on_pool)] == ["ls_ID0000001"]


def test_inner_diamond_stages() -> None:
    wf = workflow_from_submit_dir(INNER)
    members = {s.name: sorted(wf.task_ids[i] for i in m) for s, m in zip(wf.stages, wf.stage_members())}
    assert members["findrange"] == ["findrange_ID0000002", "findrange_ID0000003"]
    assert members["pegasus::transfer#1"] == [
        "stage_in_local_local_0_0",
        "stage_in_local_local_1_0",
        "stage_in_local_local_2_0",
        "stage_in_remote_local_0_0",
    ]
    assert sorted(wf.task_ids[i] for i in np.flatnonzero(wf.on_pool)) == [
        "analyze_ID0000004",
        "findrange_ID0000002",
        "findrange_ID0000003",
        "preprocess_ID0000001",
    ]


def test_hierarchical_sub_workflow_is_a_node_off_the_pool_and_is_discovered() -> None:
    found = read_submit_dir(HIER)
    wf = found.workflow
    i = wf.index_of("pegasus-plan_diamond_subworkflow")
    assert wf.transformation[i] == "condor::dagman" and not wf.on_pool[i]
    (ref,) = found.sub_workflows
    assert ref.node == "pegasus-plan_diamond_subworkflow"
    assert ref.submit_dir == INNER and ref.dag_path == INNER / "inner.dag"


def test_sub_workflow_symlink_is_followed_and_a_missing_one_reported(tmp_path: Path) -> None:
    copy = tmp_path / "hier"
    shutil.copytree(HIER, copy)
    link = copy / "00" / "00" / "blackdiamond_diamond_subworkflow"
    os.symlink("blackdiamond_diamond_subworkflow.000", link)
    (ref,) = read_submit_dir(copy).sub_workflows
    assert ref.submit_dir == link and ref.dag_path == link / "inner.dag"
    (failed_ref,) = read_submit_dir(SUBMIT / "hierarchical_wf_failure").sub_workflows
    assert failed_ref.submit_dir is None and failed_ref.dag_path is None  # planned, never created


def test_input_sizes_come_from_the_replica_catalog(tmp_path: Path) -> None:
    copy = tmp_path / "inner"
    shutil.copytree(INNER, copy)
    (copy / "catalogs" / "replicas.yml").write_text(
        "pegasus: 5.0.4\nreplicas:\n- lfn: pegasus.html\n  pfns: [{site: local, pfn: /x/pegasus.html}]\n"
        "  metadata: {size: 123456}\n"
    )
    wf = workflow_from_submit_dir(copy)
    assert wf.input_bytes[wf.index_of("preprocess_ID0000001")] == 123456
    assert wf.input_bytes[wf.index_of("findrange_ID0000002")] == 0


def test_broken_abstract_workflow_only_warns(tmp_path: Path) -> None:
    copy = tmp_path / "proc"
    shutil.copytree(SUBMIT / "process_wf_success", copy)
    (copy / "workflow.yml").write_text("jobs: [ {id: x\n")
    problems = Problems()
    wf = workflow_from_submit_dir(copy, problems)
    assert wf.n_tasks == 5 and int(wf.input_bytes.sum()) == 0
    (message,) = problems.messages
    assert message.startswith(str(copy / "workflow.yml") + ":") and "input sizes unknown" in message


def test_plain_dagman_dir_without_submit_files() -> None:
    problems = Problems()
    found = read_submit_dir(LSST / "group_failed_1", problems)
    wf = found.workflow
    # 27 nodes less the SERVICE node; FINAL is a child of every sink.
    assert (wf.n_tasks, wf.n_edges) == (26, 41)
    assert wf.transformation[wf.index_of("wms_group_order1_val1a")] == "condor::dagman"
    assert [r.node for r in found.sub_workflows] == [
        "wms_group_order1_val1a",
        "wms_group_order1_val1b",
        "wms_group_order1_val1c",
    ]
    assert all(r.dag_path is not None and r.dag_path.is_file() for r in found.sub_workflows)
    assert problems.messages == [
        f"{found.dag.path}: 24 node submit file(s) not found; those nodes use the naming rules"
    ]


@pytest.mark.parametrize(
    "name, transformation",
    [
        ("findrange_ID0000002", "findrange"),
        ("stage_in_remote_local_0_0", "stage_in"),
        ("clean_up_local_level_3_0", "cleanup"),
        ("pegasus-plan_diamond_subworkflow", "pegasus-plan"),
        ("label1_val1a_7", "label1_val1a"),
        ("pipetaskInit", "pipetaskInit"),
    ],
)
def test_transformation_from_name(name: str, transformation: str) -> None:
    assert transformation_from_name(name) == transformation


def test_submit_dir_errors(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="no .dag file"):
        read_submit_dir(tmp_path)
    (tmp_path / "a.dag").write_text("JOB a a.sub\n")
    (tmp_path / "b.dag").write_text("JOB b b.sub\n")
    with pytest.raises(InputError, match="several .dag files"):
        read_submit_dir(tmp_path)
    with pytest.raises(InputError, match="not a directory"):
        read_submit_dir(tmp_path / "a.dag")


def test_a_shared_submit_file_takes_each_node_s_vars(tmp_path: Path) -> None:
    """A plain DAGMan workflow names its transformation through VARS: the stage is the value, not $(xform)."""
    (tmp_path / "sleep.sub").write_text(
        'universe = vanilla\nexecutable = /bin/sleep\n+pegasus_wf_xformation = "$(xform)"\n'
        '+pegasus_wf_dag_job_id = "$(JOB)"\nqueue\n'
    )
    (tmp_path / "w.dag").write_text(
        "JOB a sleep.sub\nJOB b sleep.sub\nJOB c sleep.sub\nJOB d sleep.sub\n"
        'VARS a xform="prep"\nVARS b xform="work"\nVARS c xform="work"\n'
        "PARENT a CHILD b c\nPARENT b c CHILD d\n"
    )
    wf = read_submit_dir(tmp_path).workflow
    stages = {t: str(wf.transformation[wf.index_of(t)]) for t in "abcd"}
    assert stages == {"a": "prep", "b": "work", "c": "work", "d": "d"}  # d has no VARS: the naming rules
    assert len({wf.stage_of[wf.index_of(t)] for t in "bc"}) == 1  # one stage, not $(xform)#1 / #2


def test_classad_strings_unescape_backslashes() -> None:
    sub = parse_submit_text('+pegasus_wf_xformation = "a\\\\b \\"q\\""\nqueue\n', "x.sub", Problems())
    assert sub.xformation == 'a\\b "q"'
