"""The chaos suite's short form (the full one: benchmarks/chaos.py).

``wire-daemon run`` against moto through the fault proxy, with a live-written
submit host whose workflows cycle the pool: a few kill -9s (some while a
RunInstances call is held open), then faults on 30 % of the requests; after
each, the audit against moto: nothing leaked, nothing launched twice, never
more than ``max_instances`` live. And the config reader fuzzed a little.
"""

from __future__ import annotations

from wire_lab.chaos.config_fuzz import fuzz
from wire_lab.chaos.harness import KillPlan, RunShape, run_faults, run_kills

SHAPE = RunShape(drain_timeout_s=90.0)


def _zeros(result) -> None:
    audit = result.audit
    assert audit.leaked == [], f"leaked: {audit.leaked}"
    assert audit.duplicate_requests == [] and audit.oversized_requests == [] and audit.launched_twice == []
    assert result.peak <= result.max_instances, f"peak {result.peak} > {result.max_instances}"
    assert result.unexpected_exits == [], f"the daemon died on its own: {result.unexpected_exits}"
    assert result.tracebacks == 0


def test_kill_9_with_a_launch_open_leaks_nothing(tmp_path, chaos_moto):
    # The full form cycles the pool 20 times; here the kills end the run, and the drain releases the pool.
    plan = KillPlan(kills=4, launch_kills=2, cycles=0, launch_share=0.5, gap_s=(1.5, 3.0), max_minutes=1.0)
    result = run_kills(tmp_path, chaos_moto, SHAPE, plan)
    assert result.kills >= 4
    assert result.kills_launch_open >= 1, "no kill landed inside a launch"
    assert result.audit.unknown_after_restart == [], result.audit.unknown_after_restart
    _zeros(result)


def test_cloud_faults_at_30_percent_leak_nothing(tmp_path, chaos_moto):
    result = run_faults(tmp_path, chaos_moto, SHAPE, rate=0.3, seconds=15.0)
    assert result.faulted > 0
    assert result.iterations > 0
    _zeros(result)


def test_the_config_reader_gives_settings_or_its_own_error():
    tally = fuzz(examples=150)
    assert tally.failed == 0, tally.failures
