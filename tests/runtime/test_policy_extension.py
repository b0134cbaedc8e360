"""A new policy with an option of its own: one module (tests/runtime/fixed_pool_policy.py) and one registry entry.

Nothing else is edited: the config file's ``fixed_pool`` section is then
validated by the policy's own options model, with errors naming the key, and
the options reach the policy's builder in the daemon's settings and in a replay.
"""

from __future__ import annotations

import pytest

from tests.runtime.fixed_pool_policy import FixedPoolOptions, FixedPoolPolicy
from wire_daemon.core.config import ReplayConfig, SteeringConfig
from wire_daemon.core.errors import ConfigError
from wire_daemon.core.run_state import RunState
from wire_daemon.core.workflow import TaskSpec, build_workflow
from wire_daemon.runtime.policies import POLICIES, Policy, PolicyInputs, make_policy
from wire_daemon.runtime.replay import replay
from wire_daemon.runtime.settings import load_settings


@pytest.fixture(autouse=True)
def registered(monkeypatch):
    """The one registry line a new policy takes."""
    entry = Policy(lambda i: FixedPoolPolicy(i.steering, i.options_for(FixedPoolOptions)), FixedPoolOptions)
    monkeypatch.setitem(POLICIES, "fixed-pool", entry)


def _config(tmp_path, body: str):
    path = tmp_path / "c.yaml"
    path.write_text("policy: fixed-pool\n" + body)
    return path


def _policy(settings) -> FixedPoolPolicy:
    workflow = build_workflow("w", "w.json", [TaskSpec("a", "A", runtime_s=60.0)])
    inputs = PolicyInputs(RunState(workflow), settings.steering, settings.prediction, settings.policy_options)
    policy = make_policy(settings.policy, inputs)
    assert isinstance(policy, FixedPoolPolicy)
    return policy


def test_its_option_is_read_from_the_config_file(tmp_path):
    settings = load_settings(_config(tmp_path, "fixed_pool: {size: 5}\n"))
    assert _policy(settings).options.size == 5


def test_without_its_section_it_runs_with_the_defaults(tmp_path):
    assert _policy(load_settings(_config(tmp_path, ""))).options == FixedPoolOptions()


@pytest.mark.parametrize(
    "body, message",
    [
        ("fixed_pool: {size: 0}", "c.yaml: fixed_pool.size must be >= 1 (got 0)"),
        ("fixed_pool: {size: 2.5}", "c.yaml: fixed_pool.size must be a whole number (got 2.5)"),
        ("fixed_pool: {sise: 3}", "c.yaml: unknown key fixed_pool.sise (known: size)"),
        ("fixed_pool: [3]", "c.yaml: fixed_pool must be a mapping"),
    ],
)
def test_a_bad_option_is_one_line_naming_its_key(tmp_path, body, message):
    with pytest.raises(ConfigError) as caught:
        load_settings(_config(tmp_path, body + "\n"))
    assert str(caught.value).endswith(message) and "\n" not in str(caught.value)


def test_its_section_is_checked_whichever_policy_runs(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("policy: wire\nfixed_pool: {size: -1}\n")
    with pytest.raises(ConfigError, match="fixed_pool.size must be >= 1"):
        load_settings(path)


def test_unregistered_its_section_is_an_unknown_key(tmp_path, monkeypatch):
    monkeypatch.delitem(POLICIES, "fixed-pool")
    path = tmp_path / "c.yaml"
    path.write_text("fixed_pool: {size: 3}\n")
    with pytest.raises(ConfigError, match="unknown key fixed_pool"):
        load_settings(path)


def test_a_replay_hands_it_its_options():
    workflow = build_workflow("w", "w.json", [TaskSpec(f"t{n}", "T", runtime_s=600.0) for n in range(8)])
    steering = SteeringConfig(max_instances=6, charging_unit_s=3600.0)
    config = ReplayConfig(steering=steering, policy_options={"fixed_pool": FixedPoolOptions(size=3)})
    assert replay(workflow, "fixed-pool", config).peak_instances == 3
