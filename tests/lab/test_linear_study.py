"""The linear-workflow study (benchmarks/linear_study.py) on one cheap point.

Guards the §IV-A reproduction: for R > U the paper bounds the resource usage
ratio by 1.33 and the completion time ratio by 1.67. One point (N = 10,
R/U = 2, the paper's packing) runs in well under a second.
"""

import pytest

from tests.lab.benchmark_script import load_benchmark


@pytest.fixture(scope="module")
def study():
    return load_benchmark("linear_study.py", "linear_study")


def test_r_twice_u_stays_within_the_paper_bounds(study):
    unit = study.UNIT_S
    out = study.run_point(10, 2 * unit, "paper")
    assert out.optimal_units == pytest.approx(20.0)
    assert out.resource_ratio == pytest.approx(out.cost_units / 20.0)
    assert out.completion_ratio == pytest.approx(out.makespan_s / (2 * unit))
    assert 1.0 <= out.resource_ratio <= 1.33
    assert 1.0 <= out.completion_ratio <= 1.67
    assert out.peak_instances <= 10
    assert out.stranded_iterations == 0  # every instance got a task at once


def test_dt_is_fine_where_the_budget_allows_and_bounded_elsewhere(study):
    # N = 10, R = 2U: U / (40 N).
    assert study.choose_dt(10, 200.0) == pytest.approx(0.25)
    # N = 1000, R = 400U: the iteration budget sets dt.
    dt = study.choose_dt(1000, 40_000.0)
    assert 2 * (40_000.0 + study.UNIT_S) / dt <= study.LARGE_N_ITERATION_BUDGET + 1
