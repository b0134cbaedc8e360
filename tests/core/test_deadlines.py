"""The operator's deadline and budget as the config and the control commands take them."""

from __future__ import annotations

import pytest
import yaml

from wire_daemon.core.config import SteeringConfig
from wire_daemon.core.deadlines import parse_deadline
from wire_daemon.core.errors import ConfigError
from wire_daemon.core.sections import parse


def test_a_duration_counts_from_the_start_and_a_moment_is_a_moment():
    assert parse_deadline("8h").resolve(100.0) == 100.0 + 8 * 3600
    assert parse_deadline("1h30m").after_s == 5400.0
    assert parse_deadline("45 s").after_s == 45.0
    moment = parse_deadline("2026-11-27T08:00:00Z")
    assert moment.resolve(0.0) == moment.resolve(1e9) == 1795766400.0
    assert moment.shown() == "08:00Z"
    assert parse_deadline("2026-11-27T09:00:00+01:00").at == moment.at


@pytest.mark.parametrize(
    ("text", "words"),
    [("tomorrow", "must be a time with its zone"), ("2026-11-27T08:00:00", "needs its time zone"), ("0h", "above 0")],
)
def test_a_bad_deadline_is_refused_with_what_is_taken(text, words):
    with pytest.raises(ValueError, match=words):
        parse_deadline(text)


def test_the_steering_keys_from_yaml_an_unquoted_timestamp_included():
    raw = yaml.safe_load("deadline: 2026-11-27T08:00:00Z\ndeadline_quantile: p90\nbudget: 200")
    steering = parse(SteeringConfig, raw, "c.yaml")
    deadline = steering.operator_deadline()
    assert deadline is not None and deadline.at == 1795766400.0
    assert (steering.deadline_quantile, steering.budget) == ("p90", 200.0)
    assert SteeringConfig().operator_deadline() is None and SteeringConfig().budget is None


@pytest.mark.parametrize(
    ("text", "line"),
    [
        ("deadline: soon", "c.yaml: steering.deadline must be a time with its zone"),
        ("deadline: 2026-11-27 08:00", "c.yaml: steering.deadline needs its time zone"),
        ("deadline_quantile: p99", "c.yaml: steering.deadline_quantile must be one of p50, p90 (got 'p99')"),
        ("budget: 0", "c.yaml: steering.budget must be > 0 (got 0)"),
    ],
)
def test_bad_values_are_one_line_naming_the_key(text, line):
    with pytest.raises(ConfigError) as err:
        parse(SteeringConfig, yaml.safe_load(text), "c.yaml")
    assert str(err.value).startswith(line) and "\n" not in str(err.value)
