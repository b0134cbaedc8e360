"""Issue 14, "validation at the edges" for the config: each bad value is one line naming its key.

Non-finite numbers (YAML's .nan and .inf), numbers too large for any setting,
negative durations and mistyped mappings used to pass: NaN slips through
every ``< 0`` check (a NaN budget crashed the first launch), infinity through
every ``> 0`` one, and a negative ``condor.settle_s`` was never checked.
"""

from __future__ import annotations

import pytest

from wire_daemon.cli.main import main
from wire_daemon.core.errors import ConfigError
from wire_daemon.execute.guarded_cloud import SafetyConfig
from wire_daemon.runtime.settings import load_settings


@pytest.mark.parametrize(
    "body, message",
    [
        ("steering: {interval_s: .inf}", "steering.interval_s must be a finite number (got inf)"),
        ("safety: {budget_units_per_hour: .nan}", "safety.budget_units_per_hour must be a finite number (got nan)"),
        ("site: {speedup: .nan}", "site.speedup must be a finite number (got nan)"),
        ("emulation: {boot_lag_s: .inf}", "emulation.boot_lag_s must be a finite number (got inf)"),
        ("pfa: {release_near_end_s: -.inf}", "pfa.release_near_end_s must be a finite number (got -inf)"),
        ("safety: {join_timeout_s: 1.0e+300}", "safety.join_timeout_s is too large (more than 1e+18)"),
        ("condor: {settle_s: -5}", "condor.settle_s is a duration: it must be >= 0 (got -5)"),
        ("condor: {settle_s: .nan}", "condor.settle_s must be a finite number (got nan)"),
    ],
)
def test_a_bad_number_is_one_line_naming_its_key(tmp_path, body, message):
    path = tmp_path / "c.yaml"
    path.write_text(body + "\n")
    with pytest.raises(ConfigError) as caught:
        load_settings(path)
    assert message in str(caught.value) and "\n" not in str(caught.value)
    assert main(["check-config", str(path)]) == 2


def test_tags_must_be_strings(tmp_path, capsys):
    path = tmp_path / "c.yaml"
    path.write_text(
        f"site: {{kind: condor, submit_root: {tmp_path}}}\n"
        "cloud: {kind: ec2, ec2: {region: us-east-1, image_id: ami-0123456789abcdef0, instance_type: c5.large,\n"
        "        extra_tags: {project: {nested: [1, 2]}}}}\n"
    )
    assert main(["check-config", str(path)]) == 2
    assert "cloud.ec2.extra_tags must map strings to strings" in capsys.readouterr().err


def test_a_long_bad_value_is_quoted_short(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("safety: {max_instances: " + "[" * 200 + "]" * 200 + "}\n")
    with pytest.raises(ConfigError) as caught:
        load_settings(path)
    assert "safety.max_instances must be a number" in str(caught.value) and len(str(caught.value)) < 300


def test_a_nan_budget_built_in_code_is_refused_too():
    with pytest.raises(ConfigError, match="safety.budget_units_per_hour must be a finite number"):
        SafetyConfig(budget_units_per_hour=float("nan"))
