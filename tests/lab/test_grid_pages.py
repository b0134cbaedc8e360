"""What the grid benchmarks' pages say: how the page was made, and the best possible run."""

import pytest

from tests.lab.benchmark_script import load_benchmark
from wire_lab.evaluation.grid import how_it_ran


def test_a_page_gives_its_wall_time_or_says_every_job_came_from_the_cache():
    assert how_it_ran(282.2, 0, 384, 2) == "282 s wall time with at most 2 processes"
    assert how_it_ran(40.4, 100, 384, 2) == (
        "40 s wall time with at most 2 processes (100 of the 384 jobs read from the cache)"
    )
    # Rendered from the cache alone, the command's own second of wall time says nothing about the runs.
    assert how_it_ran(0.2, 384, 384, 2) == (
        "every one of the 384 jobs read from the cache of an earlier run of the same code"
    )


@pytest.fixture(scope="module")
def policy_study():
    return load_benchmark("target_slowdown.py", "target_slowdown_study")


def test_the_best_possible_run_among_scaling_policies_leaves_out_the_pools_up_at_submit(policy_study):
    study = policy_study
    row = {p: {"cost_units": 100, "makespan_s": 1000.0} for p in study.POLICY_NAMES}
    row["target-slowdown"] = {"cost_units": 90, "makespan_s": 900.0}
    row["pfa"] = {"cost_units": 80, "makespan_s": 900.0}  # as soon, and cheaper
    row[study.fixed_name(2)] = {"cost_units": 30, "makespan_s": 500.0}  # up at submit: sooner and cheaper
    row["full-site"] = {"cost_units": 60, "makespan_s": 400.0}
    assert study.best_possible_ratio(row, "target-slowdown") == pytest.approx(3.0)
    assert study.best_possible_ratio(row, "target-slowdown", study.ELASTIC_RUNS) == pytest.approx(90 / 80)
    # A run that ended later is never the best possible, however cheap.
    row["pfa"] = {"cost_units": 10, "makespan_s": 901.0}
    assert study.best_possible_ratio(row, "target-slowdown", study.ELASTIC_RUNS) == pytest.approx(1.0)


def test_each_deadline_peer_is_held_to_the_knobs_measure_ties_counted_for_each():
    study = load_benchmark("deadlines.py", "deadlines_study")
    row = {p: {"cost_units": 100, "makespan_s": 1000.0} for p in study.KNOB_PEERS}
    row["full-site"] = {"cost_units": 120, "makespan_s": 800.0}
    row["pfa"] = {"cost_units": 90, "makespan_s": 1190.0}
    row["wire"] = {"cost_units": 90, "makespan_s": 1200.0}  # as cheap, and on the deadline (1.5 x 800 s): a tie
    row["reactive-conserving"] = {"cost_units": 80, "makespan_s": 1300.0}  # cheapest, and late
    runs = {("t", 1.0, 1.0, 0): row}
    shares = study.cheapest_shares(runs, list(runs), 1.5)
    assert shares == {"wire": 1, "full-site": 0, "pure-reactive": 0, "reactive-conserving": 0, "pfa": 1}


def test_every_policy_is_held_to_target_1a_against_the_others_of_the_field(policy_study):
    study = policy_study
    row = {
        "a": {"cost_units": 10, "makespan_s": 100.0},
        "b": {"cost_units": 10, "makespan_s": 90.0},  # as cheap, sooner: dominates a
        "c": {"cost_units": 5, "makespan_s": 200.0},  # cheaper, later: dominates no one
    }
    runs = {("t", 1.0, 1.0, 0): row, ("t", 1.0, 1.0, 1): {**row, "a": {"cost_units": 10, "makespan_s": 90.0}}}
    assert [study.dominated_among(runs, p, ("a", "b", "c")) for p in "abc"] == [1, 0, 0]
