"""The stage-prior study (benchmarks/stage_priors.py): each prior's error, on workflows made for it."""

import math

import pytest

from tests.lab.benchmark_script import load_benchmark
from wire_daemon.core.workflow import TaskSpec, build_workflow


@pytest.fixture(scope="module")
def study():
    return load_benchmark("stage_priors.py", "stage_priors_study")


def _chain(b_seconds_per_byte: float) -> list[TaskSpec]:
    """Stage a: 4 tasks of 10 s on 100 bytes each; stage b, after them: 2 tasks on 1,000 bytes each."""
    a = [TaskSpec(f"a{i}", "a", runtime_s=10.0, input_bytes=100) for i in range(4)]
    parents = tuple(t.task_id for t in a)
    b = [TaskSpec(f"b{i}", "b", parents, runtime_s=1000 * b_seconds_per_byte, input_bytes=1000) for i in range(2)]
    return a + b


def test_a_stage_timed_by_its_bytes_is_found_by_the_bytes_prior_alone(study):
    errors = study.prior_errors(build_workflow("w", "t", _chain(0.1)))  # b: 100 s, ten times a's bytes and time
    assert errors["bytes x rate"] == [pytest.approx(0.0)]
    assert errors["workflow median"] == [pytest.approx(-math.log(10.0))]  # ten times too short
    assert errors["sqrt bytes"] == [pytest.approx(-math.log(10.0) / 2)]
    assert "workflow median: 100 % too short, 0 % too long" in study.direction(errors)


def test_a_stage_as_long_as_the_ones_before_is_found_by_the_medians(study):
    errors = study.prior_errors(build_workflow("w", "t", _chain(0.01)))  # b: 10 s, like a
    assert errors["workflow median"] == [pytest.approx(0.0)]
    assert errors["median of stages"] == [pytest.approx(0.0)]
    assert errors["bytes x rate"] == [pytest.approx(math.log(10.0))]  # ten times too long
    assert "workflow median: 0.00 / 100 %" in study.summary(errors)


def test_the_first_stage_reached_is_never_judged(study):
    only_a = [TaskSpec(f"a{i}", "a", runtime_s=10.0, input_bytes=100) for i in range(4)]
    assert all(e == [] for e in study.prior_errors(build_workflow("w", "t", only_a)).values())


def test_no_trace_there_is_one_clear_line(study, tmp_path, capsys):
    assert study.main(["--traces", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and str(tmp_path) in err
