"""One assembly for every loop: replay and both runtimes wrap the policy the same way."""

from __future__ import annotations

from dataclasses import replace

import pytest

from tests.runtime.fakes import NoCloud
from wire_daemon.core.config import EmulationConfig, ReplayConfig, SteeringConfig
from wire_daemon.core.errors import ConfigError
from wire_daemon.core.journal import Journal
from wire_daemon.core.workflow import TaskSpec, Workflow, build_workflow
from wire_daemon.execute.guarded_cloud import SafetyConfig
from wire_daemon.loop.mape import MapeLoop
from wire_daemon.persist.store import StateStore
from wire_daemon.plan.baselines import PureReactivePolicy
from wire_daemon.plan.shapes import ShapedPolicy
from wire_daemon.runtime import assembly, policies, replay, runtimes
from wire_daemon.runtime.control import ControlledPolicy, PoolControl
from wire_daemon.runtime.settings import CloudSettings, CondorSettings, Settings, SiteSettings

EPOCH = 1_700_000_000.0


def _chain(loop: MapeLoop) -> list[type]:
    """The policy's decorators, outermost first, down to the policy itself."""
    chain, policy = [], loop.policy
    while True:
        chain.append(type(policy))
        if not hasattr(policy, "inner"):
            return chain
        policy = policy.inner


@pytest.fixture
def built(monkeypatch):
    """Every loop assembled while the test runs, whichever module asked for it."""
    loops: list[MapeLoop] = []

    def spy(*args, **kwargs):
        loop = assembly.assemble_loop(*args, **kwargs)
        loops.append(loop)
        return loop

    monkeypatch.setattr(runtimes, "assemble_loop", spy)
    monkeypatch.setattr(replay, "assemble_loop", spy)
    return loops


def _workflow() -> Workflow:
    return build_workflow("tiny", "tiny.json", [TaskSpec(f"T{i}", "t", runtime_s=30.0) for i in range(6)])


def test_replay_and_both_runtimes_wrap_the_policy_the_same_way(built, tmp_path):
    steering = SteeringConfig(min_instances=0, max_instances=3, instance_memory_mib=4096.0)
    replay.replay(_workflow(), "pure-reactive", ReplayConfig(steering=steering))
    emulated = Settings(policy="pure-reactive", steering=steering, site=SiteSettings(speedup=1e6))
    runtimes.EmulatedRuntime(emulated, Journal())
    condor = replace(
        emulated,
        site=SiteSettings(kind="condor", submit_root=str(tmp_path / "submit")),
        cloud=CloudSettings(kind="ec2"),
        condor=CondorSettings(control="off", settle_s=0.0),
        safety=SafetyConfig(),
    )
    store = StateStore(tmp_path / "state.sqlite")
    runtimes.SubmitHostRuntime(condor, store, Journal(), driver=NoCloud(), clock=lambda: EPOCH)
    store.close()

    assert len(built) == 3
    assert {tuple(_chain(loop)) for loop in built} == {(ControlledPolicy, ShapedPolicy, PureReactivePolicy)}


def test_without_memory_or_types_the_chain_has_no_shape_step(built):
    replay.replay(_workflow(), "pure-reactive", ReplayConfig(steering=SteeringConfig(max_instances=3)))
    assert _chain(built[0]) == [ControlledPolicy, PureReactivePolicy]


def test_the_operator_s_mode_reaches_the_assembled_loop():
    """The options carry the runtime's PoolControl and lifecycle into the policy the loop runs."""
    workflow = _workflow()
    config = ReplayConfig(steering=SteeringConfig(min_instances=0, max_instances=3))
    site = assembly.EmulatedSite(workflow, config.emulation, 4, config.steering.billing)
    control = PoolControl()
    control.apply("pause")
    inputs = policies.PolicyInputs(replay.RunState(workflow), config.steering)
    options = assembly.LoopOptions(control)
    loop = assembly.assemble_loop("pure-reactive", inputs, assembly.World(site, site, site), 0.0, site, options)
    assert loop.lifecycle is options.lifecycle is loop.policy.lifecycle
    record = loop.iterate(0.0)
    assert record.launched == [] and "paused by the operator" in record.rule


def _first_pool(monkeypatch, name: str) -> int:
    seen: list[int] = []
    real = assembly.EmulatedSite

    def site(*args, **kwargs):
        made = real(*args, **kwargs)
        seen.append(len(made.list_instances()))
        return made

    monkeypatch.setattr(assembly, "EmulatedSite", site)
    config = ReplayConfig(steering=SteeringConfig(max_instances=3), emulation=EmulationConfig(initial_instances=1))
    replay.replay(_workflow(), name, config)
    monkeypatch.setattr(assembly, "EmulatedSite", real)
    return seen[0]


def test_a_static_pool_is_what_a_policy_declares_not_its_name(monkeypatch):
    assert _first_pool(monkeypatch, "pure-reactive") == 1  # the emulation's initial pool
    assert _first_pool(monkeypatch, replay.REFERENCE_POLICY) == 3  # full-site declares a static pool
    static = policies.Policy(lambda i: PureReactivePolicy(i.steering), static_pool=True)
    monkeypatch.setitem(policies.POLICIES, "test-static", static)
    assert _first_pool(monkeypatch, "test-static") == 3


def test_an_unknown_policy_is_one_config_error():
    with pytest.raises(ConfigError, match="unknown policy 'nope'; choose one of wire, full-site"):
        policies.policy_entry("nope")


def test_compare_measures_relative_time_against_the_reference_policy():
    config = ReplayConfig(steering=SteeringConfig(max_instances=3))
    results = replay.compare(_workflow(), config, ("pure-reactive",))
    assert list(results) == ["pure-reactive"]  # the reference runs, but only what was asked is returned
    reference = replay.replay(_workflow(), replay.REFERENCE_POLICY, config)
    assert results["pure-reactive"].relative_time == pytest.approx(
        results["pure-reactive"].makespan_s / reference.makespan_s
    )


def test_a_policy_that_reads_the_true_times_is_refused_off_the_emulated_site_by_what_it_declares(monkeypatch):
    truthful = policies.Policy(lambda i: PureReactivePolicy(i.steering), needs_truth=True)
    monkeypatch.setitem(policies.POLICIES, "test-truth", truthful)
    with pytest.raises(ConfigError, match="policy test-truth needs the true task times: only the emulated site"):
        Settings(
            policy="test-truth", site=SiteSettings(kind="condor", submit_root="/x"), cloud=CloudSettings(kind="ec2")
        )
    assert Settings(policy="test-truth").policy == "test-truth"  # the emulated site has them
