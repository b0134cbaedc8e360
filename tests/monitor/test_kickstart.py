"""Kickstart records: Pegasus 5 YAML, Pegasus 4.9 YAML, old XML (with and without maxrss), cluster lines."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from wire_daemon.monitor.kickstart import kickstart_files, read_kickstart
from wire_daemon.monitor.problems import Problems

from .conftest import KICKSTART, SUBMIT

INNER = SUBMIT / "hierarchical_wf_success" / "00" / "00" / "blackdiamond_diamond_subworkflow.000" / "00" / "00"


def test_pegasus5_yaml_record_with_multipart_sections() -> None:
    problems = Problems()
    out = read_kickstart(INNER / "preprocess_ID0000001.out.000", problems)
    assert out is not None and problems.messages == []
    (record,) = out.records
    assert (record.format, record.transformation, record.derivation, record.resource) == (
        "yaml",
        "preprocess",
        "ID0000001",
        "condorpool",
    )
    assert (record.hostname, record.hostaddr) == ("workflow.isi.edu", "128.9.46.53")
    assert (record.duration, record.main_duration) == (20.109, 20.006)
    pacific = timezone(timedelta(hours=-8))
    assert record.main_start == datetime(2023, 3, 4, 1, 3, 1, 880000, tzinfo=pacific).timestamp()
    assert (record.status, record.exit_code, record.succeeded) == ("regular", 0, True)
    assert record.maxrss_bytes == 3300 * 1024
    assert {(f.lfn, f.size, f.output) for f in record.files} == {("f.b1", 424, True), ("f.b2", 424, True)}
    assert (record.output_bytes, record.input_bytes) == (848, 0)


def test_failed_attempts_of_a_retried_job() -> None:
    files = kickstart_files(SUBMIT / "process_wf_failure" / "00" / "00" / "ls_ID0000001.out")
    assert [f.name for f in files] == ["ls_ID0000001.out.000", "ls_ID0000001.out.001"]
    records = [read_kickstart(f).records[0] for f in files]  # type: ignore[union-attr]
    assert [(r.exit_code, r.raw_status, r.succeeded) for r in records] == [(2, 512, False), (2, 512, False)]
    assert [r.maxrss_bytes for r in records] == [2696 * 1024, 2532 * 1024]


def test_pegasus49_yaml_record() -> None:
    (record,) = read_kickstart(KICKSTART / "yaml" / "yaml-ok.out").records  # type: ignore[union-attr]
    assert (record.transformation, record.main_duration, record.exit_code) == ("diamond::findrange:4.0", 6.035, 0)
    assert [(f.lfn, f.size, f.output) for f in record.files] == [("f.c1", 220, True)]
    assert record.condor_cluster == 5363338  # jobids: condor: 5363338.0


@pytest.mark.parametrize(
    "name, status, code, maxrss",
    [
        ("ok.out", "regular", 0, None),  # schema 2.0, no maxrss attribute
        ("nonzero.out", "regular", 1, None),
        ("largecode.out", "regular", 42, None),
        ("failed.out", "failure", None, None),
        ("success_message_zero_exit.out", "regular", 0, 516096),  # darwin: ru_maxrss is bytes
        ("success_message_nonzero_exit.out", "regular", 1, 516096),
    ],
)
def test_xml_records(name: str, status: str, code: int | None, maxrss: int | None) -> None:
    problems = Problems()
    out = read_kickstart(KICKSTART / "xml" / name, problems)
    assert out is not None and problems.messages == []
    (record,) = out.records
    assert (record.format, record.status, record.exit_code, record.maxrss_bytes) == ("xml", status, code, maxrss)
    assert record.hostaddr and record.main_duration is not None


def test_xml_file_with_forty_clustered_records_killed_by_signals() -> None:
    out = read_kickstart(KICKSTART / "xml" / "signalled.out")
    assert out is not None and len(out.records) == 40
    first = out.records[0]
    assert (first.status, first.signal, first.exit_code, first.raw_status) == ("signalled", 11, -11, 139)
    assert (first.transformation, first.hostname, first.main_duration) == (
        "scec::seismogram_synthesis:1.0",
        "abe0203-ib0",
        7.407,
    )


def test_cluster_summary_lines() -> None:
    out = read_kickstart(KICKSTART / "cluster" / "cluster_summary_failed.out")
    assert out is not None
    (summary,) = out.summaries
    assert (summary.kind, summary.get("stat"), summary.get("tasks"), summary.get("failed")) == (
        "cluster-summary",
        "ok",
        1,
        1,
    )
    assert summary.get("duration") == 1.019 and summary.get("app") == "./pegasus-mpi-cluster"
    (task,) = out.tasks
    assert (task.get("name"), task.get("status"), task.get("hostname"), task.get("memory")) == (
        "A",
        0,
        "gideon.isi.edu",
        5,
    )
    seq = read_kickstart(KICKSTART / "cluster" / "seqexec-ok.out")
    assert seq is not None and [(s.kind, s.get("succeeded")) for s in seq.summaries] == [("seqexec-summary", 1)]
    stat = read_kickstart(KICKSTART / "cluster" / "cluster_summary_stat.out")
    assert stat is not None and len(stat.records) == 1 and stat.summaries[0].get("stat") == "failed"
    missing = read_kickstart(KICKSTART / "xml" / "cluster_summary_missing.out")
    assert missing is not None and len(missing.records) == 1 and len(missing.tasks) == 1 and missing.summaries == []


def test_junk_between_cluster_lines_warns_and_keeps_the_summary() -> None:
    problems = Problems()
    out = read_kickstart(KICKSTART / "cluster" / "cluster-ok.out", problems)
    assert out is not None and out.summaries[0].get("tasks") == 9628
    (message,) = problems.messages
    assert message.startswith(str(KICKSTART / "cluster" / "cluster-ok.out") + ":") and "bad YAML" in message


@pytest.mark.parametrize(
    "content, message",
    [
        (b"", "empty kickstart record"),
        (b"just some text\n", "no kickstart record found"),
        (b"- invocation: True\n  start: [oops\n", "part skipped: bad YAML"),
        (b"<invocation start='x'><mainjob>", "unterminated <invocation> record"),
        (b"<!DOCTYPE x [<!ENTITY a 'b'>]><invocation>&a;</invocation>", "DOCTYPE/ENTITY declaration refused"),
        (b"\xff\xfe\x00garbage\x00", "no kickstart record found"),
    ],
)
def test_garbage_gives_one_warning_naming_the_file_and_none(tmp_path: Path, content: bytes, message: str) -> None:
    path = tmp_path / "job.out.000"
    path.write_bytes(content)
    problems = Problems()
    assert read_kickstart(path, problems) is None
    assert any(m.startswith(str(path)) and message in m for m in problems.messages)


def test_record_missing_fields_still_reads(tmp_path: Path) -> None:
    path = tmp_path / "job.out.000"
    path.write_text("- invocation: True\n  hostname: w1\n  mainjob:\n    status:\n      raw: 256\n")
    (record,) = read_kickstart(path).records  # type: ignore[union-attr]
    assert (record.hostname, record.status, record.exit_code, record.main_duration, record.maxrss_bytes) == (
        "w1",
        "regular",
        1,
        None,
        None,
    )


def test_empty_record_of_a_held_job() -> None:
    problems = Problems()
    assert (
        read_kickstart(SUBMIT / "sample_wf_held" / "00" / "00" / "chebi_drug_loader_ID0000001.out.000", problems)
        is None
    )
    assert "empty kickstart record" in problems.messages[0]
