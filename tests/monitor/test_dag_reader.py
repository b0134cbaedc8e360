"""The DAGMan .dag reader on real Pegasus / LSST DAGs and on hand-made bad ones."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from wire_daemon.core.errors import InputError
from wire_daemon.monitor.dag import apply_rescue, parse_dag, rescue_dags
from wire_daemon.monitor.problems import Problems

from .conftest import FIXTURES, LSST, SUBMIT


@pytest.mark.parametrize(
    "relative, nodes, edges",
    [
        ("pegasus-submit/process_wf_success/process-0.dag", 5, 4),
        ("pegasus-submit/process_wf_failure/process-0.dag", 5, 4),
        ("pegasus-submit/sample_wf_held/Drug-Combination-Therapy-0.dag", 8, 8),
        ("pegasus-submit/hierarchical_wf_success/hierarchical-workflow-0.dag", 13, 17),
        ("pegasus-submit/hierarchical_wf_success/00/00/blackdiamond_diamond_subworkflow.000/inner.dag", 15, 20),
        ("dagman/pegasus-older/abcd.dag", 4, 5),
        ("dagman/pegasus-older/broadband.dag", 74, 265),
        ("dagman/pegasus-older/genome.dag", 41, 95),
        ("dagman/pegasus-older/montage.dag", 56, 348),
        ("dagman/pegasus-older/pipeline.dag", 7, 8),
        ("dagman/ctrl_bps_htcondor/group_failed_1/group_failed_1.dag", 27, 29),
        ("dagman/ctrl_bps_htcondor/noop_failed_1/noop_failed_1.dag", 34, 38),
        ("dagman/ctrl_bps_htcondor/tiny_problems/tiny_problems.dag", 7, 4),
        ("dagman/ctrl_bps_htcondor/tiny_running/tiny_running.dag", 5, 2),
        ("dagman/naudzyk_salib/salib.dag", 5, 4),
    ],
)
def test_real_dags_node_and_edge_counts(relative: str, nodes: int, edges: int) -> None:
    problems = Problems()
    dag = parse_dag(FIXTURES / relative, problems)
    assert (dag.n_nodes, dag.n_edges) == (nodes, edges)
    assert problems.messages == []


def test_pegasus_node_attributes() -> None:
    dag = parse_dag(SUBMIT / "process_wf_success" / "process-0.dag")
    assert dag.names == [
        "create_dir_process_0_local",
        "ls_ID0000001",
        "stage_out_local_local_0_0",
        "cleanup_process_0_local",
        "register_local_0_0",
    ]
    stage_out = dag.node("stage_out_local_local_0_0")
    assert stage_out.file == "00/00/stage_out_local_local_0_0.sub"
    assert (stage_out.retry, stage_out.priority, stage_out.category) == (1, 900, "stageout")
    assert stage_out.vars == (("+DAGNodeRetry", "$(RETRY)"),)
    (post,) = stage_out.scripts
    assert post.kind == "POST" and post.executable.endswith("pegasus-exitcode")
    assert post.arguments.startswith("-r $RETURN -l process-0.exitcode.log")
    assert dag.node("register_local_0_0").category == "registration"
    assert dag.maxjobs == {"registration": 1, "stagein": 10, "cleanup": 4, "stageout": 10}
    assert set(dag.edges()) == {
        ("stage_out_local_local_0_0", "cleanup_process_0_local"),
        ("stage_out_local_local_0_0", "register_local_0_0"),
        ("ls_ID0000001", "stage_out_local_local_0_0"),
        ("create_dir_process_0_local", "ls_ID0000001"),
    }


def test_pegasus_sub_workflow_job_has_a_pre_script() -> None:
    dag = parse_dag(SUBMIT / "hierarchical_wf_success" / "hierarchical-workflow-0.dag")
    plan = dag.node("pegasus-plan_diamond_subworkflow")
    assert [s.kind for s in plan.scripts] == ["PRE"]
    assert plan.category == "subwf" and plan.priority == 20


def test_lsst_dag_kinds_dirs_settings_and_subdags() -> None:
    dag = parse_dag(LSST / "group_failed_1" / "group_failed_1.dag")
    assert Counter(n.kind for n in dag.nodes) == {"job": 22, "subdag": 3, "final": 1, "service": 1}
    subdag = dag.node("wms_group_order1_val1a")
    assert (subdag.file, subdag.directory) == ("group_order1_val1a.dag", "subdags/wms_group_order1_val1a")
    assert subdag.submit_path == "subdags/wms_group_order1_val1a/group_order1_val1a.dag"
    job = dag.node("pipetaskInit")
    assert (job.file, job.directory) == ("pipetaskInit.sub", "jobs/pipetaskInit")
    assert dag.node("wms_check_status_wms_group_order1_val1a").vars == (("group_job_name", "wms_group_order1_val1a"),)
    assert dag.settings["dot"].endswith(".dot") and dag.settings["node_status_file"].endswith(".node_status")
    assert sum(1 for _, text in dag.raw_commands if text.startswith("SET_JOB_ATTR")) == 12


def test_partial_rescue_dags_mark_nodes_done() -> None:
    base = SUBMIT / "process_wf_failure"
    (rescue_path,) = rescue_dags(base / "process-0.dag")
    assert rescue_path.name == "process-0.dag.rescue001"
    rescue = parse_dag(rescue_path)
    assert rescue.partial and rescue.n_nodes == 0
    assert rescue.done == {"create_dir_process_0_local"}
    assert len(rescue.retry_marks) == 5
    dag = parse_dag(base / "process-0.dag")
    apply_rescue(dag, rescue)
    assert [n.name for n in dag.nodes if n.done] == ["create_dir_process_0_local"]
    assert len(parse_dag(LSST / "group_failed_1" / "group_failed_1.dag.rescue001").done) == 22


def test_duplicate_node_names_are_an_input_error() -> None:
    # Pegasus's own analyzer test DAG defines job0 twice (and JOB job2 twice).
    with pytest.raises(InputError) as err:
        parse_dag(SUBMIT / "sample.dag")
    assert err.value.where == "3" and "'job0' is defined twice" in str(err.value)
    assert str(err.value).startswith(str(SUBMIT / "sample.dag") + ":3: ")


def _write(tmp_path: Path, text: str, name: str = "t.dag") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def test_cycle_names_the_parent_line_and_the_nodes(tmp_path: Path) -> None:
    path = _write(
        tmp_path, "JOB a a.sub\nJOB b b.sub\nJOB c c.sub\nPARENT a CHILD b\nPARENT b CHILD c\nPARENT c CHILD a\n"
    )
    with pytest.raises(InputError) as err:
        parse_dag(path)
    assert err.value.source == str(path)
    assert err.value.where in {"4", "5", "6"}
    assert "cycle" in err.value.detail and all(n in err.value.detail for n in ("a ->", "b", "c"))


def test_self_edge_is_a_cycle(tmp_path: Path) -> None:
    with pytest.raises(InputError, match=r"t\.dag:2: cycle: node 'a' is its own parent"):
        parse_dag(_write(tmp_path, "JOB a a.sub\nPARENT a CHILD a\n"))


def test_edge_to_unknown_node_names_file_and_line(tmp_path: Path) -> None:
    path = _write(tmp_path, "JOB a a.sub\n\n# comment\nPARENT a CHILD ghost\n")
    with pytest.raises(InputError) as err:
        parse_dag(path)
    assert (err.value.where, err.value.detail) == ("4", "PARENT/CHILD names unknown node 'ghost'")


@pytest.mark.parametrize(
    "text, message",
    [
        ("JOB a a.sub\nPARENT a\n", "PARENT line without CHILD"),
        ("JOB a a.sub\nPARENT CHILD a\n", "at least one parent and one child"),
        ("JOB a\n", "needs a node name and a file"),
        ("SUBDAG a a.dag\n", "SUBDAG must be followed by EXTERNAL"),
        ("JOB PARENT a.sub\n", "reserved word"),
        ("JOB a {\nexecutable = /bin/true\n", "no closing '}'"),
    ],
)
def test_graph_breaking_lines_raise(tmp_path: Path, text: str, message: str) -> None:
    with pytest.raises(InputError, match=message):
        parse_dag(_write(tmp_path, text))


def test_unknown_keywords_and_bad_values_warn_with_file_and_line(tmp_path: Path) -> None:
    path = _write(tmp_path, "JOB a a.sub\nFROB a 1\nRETRY a lots\nPRIORITY ghost 3\nJOB b b.sub\nPARENT a CHILD b\n")
    problems = Problems()
    dag = parse_dag(path, problems)
    assert (dag.n_nodes, dag.n_edges) == (2, 1)
    assert problems.messages == [
        f"{path}:2: unknown keyword 'FROB'; line skipped",
        f"{path}:3: RETRY needs a node and a non-negative count; line skipped",
        f"{path}:4: PRIORITY names unknown node 'ghost'; line skipped",
    ]


def test_syntax_details(tmp_path: Path) -> None:
    text = (
        "# a comment \\\n"
        "job A a.sub DIR d1 NOOP\n"
        'Job B "b c.sub" DONE\n'
        "JOB C {\n  executable = /bin/true\n  queue\n}\n"
        "PARENT A B \\\n   CHILD C\n"
        "RETRY ALL_NODES 2\nRETRY B 5 UNLESS-EXIT 3\nPRIORITY ALL_NODES 7\n"
        'VARS A x="has \\"quotes\\" and blanks" y="2"\n'
        "SCRIPT DEFER 4 60 POST A post.sh $RETURN\n"
        "parent A child C\n"
    )
    dag = parse_dag(_write(tmp_path, text))
    a, b, c = (dag.node(n) for n in "ABC")
    assert (a.directory, a.noop, a.submit_path) == ("d1", True, "d1/a.sub")
    assert (b.file, b.done) == ("b c.sub", True) and dag.done == {"B"}
    assert c.file is None and c.inline_submit == "executable = /bin/true\nqueue"
    assert set(dag.edges()) == {("A", "C"), ("B", "C")}
    assert (a.retry, b.retry, b.retry_unless_exit, c.retry) == (2, 5, 3, 2)
    assert a.priority == b.priority == c.priority == 7
    assert a.vars == (("x", 'has "quotes" and blanks'), ("y", "2"))
    assert a.scripts[0].kind == "POST" and a.scripts[0].arguments == "$RETURN"


def test_splices_are_expanded(tmp_path: Path) -> None:
    (tmp_path / "inner").mkdir()
    _write(tmp_path / "inner", "JOB x x.sub\nJOB y y.sub\nJOB z z.sub\nPARENT x CHILD y z\n", "inner.dag")
    outer = _write(
        tmp_path,
        "JOB start s.sub\nSPLICE S inner.dag DIR inner\nJOB end e.sub\nPARENT start CHILD S\nPARENT S CHILD end\n",
    )
    dag = parse_dag(outer)
    assert dag.names == ["start", "S+x", "S+y", "S+z", "end"]
    assert dag.node("S+x").directory == "inner"
    assert set(dag.edges()) == {("S+x", "S+y"), ("S+x", "S+z"), ("start", "S+x"), ("S+y", "end"), ("S+z", "end")}


def test_a_splice_that_includes_itself_is_refused(tmp_path: Path) -> None:
    path = _write(tmp_path, "JOB a a.sub\nSPLICE S t.dag\n")
    with pytest.raises(InputError, match="includes itself"):
        parse_dag(path)


def test_unreadable_file_is_an_input_error(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="cannot read the DAG file"):
        parse_dag(tmp_path / "missing.dag")
