"""The chaos suite's state-loss case: the state file lost mid-run, the daemon restarted (wire_lab/chaos/state_loss.py).

Against moto, with the cycled workload: the daemon killed with the pool up,
its state file truncated to 0 bytes (then, the second time, deleted), the
daemon restarted. Nothing live at the loss is orphaned, the endpoint never
lists more than ``max_instances`` live, and each restart says in one line
which instances it adopted.
"""

from __future__ import annotations

import pytest

from wire_lab.chaos.harness import RunShape
from wire_lab.chaos.state_loss import StateLossPlan, run_state_loss

pytestmark = pytest.mark.slow


def test_a_lost_state_file_orphans_nothing_and_the_cap_holds(tmp_path, chaos_moto):
    result = run_state_loss(tmp_path, chaos_moto, RunShape(drain_timeout_s=90.0), StateLossPlan(losses=2))
    for a in result.adoptions:
        print(
            f"state loss ({a.how}): {len(a.live_at_loss)} live at the loss; "
            f"{len(a.lines)} adoption line(s) naming {len(a.named)}"
        )
    print(
        f"state loss: {result.losses} loss(es); orphaned {len(result.orphaned)}; "
        f"peak {result.peak}/{result.max_instances} "
        f"over {result.samples} samples; exits {result.unexpected_exits}, tracebacks {result.tracebacks}; "
        f"leaked {len(result.audit.leaked)}, duplicates {result.audit.duplicates}"
    )

    assert result.losses == 2
    assert result.orphaned == [], f"orphaned: {result.orphaned}"
    assert result.peak <= result.max_instances, f"peak {result.peak} > {result.max_instances}"
    for adoption in result.adoptions:
        assert adoption.live_at_loss, f"the pool was empty at the {adoption.how}: nothing to adopt"
        assert len(adoption.lines) == 1, f"{adoption.how}: {adoption.lines}"
        assert set(adoption.live_at_loss) <= set(adoption.named), adoption
    audit = result.audit
    assert audit.leaked == [], f"leaked: {audit.leaked}"
    assert audit.duplicate_requests == [] and audit.oversized_requests == [] and audit.launched_twice == []
    assert result.unexpected_exits == [], f"the daemon died on its own: {result.unexpected_exits}"
    assert result.tracebacks == 0
    assert result.ok
