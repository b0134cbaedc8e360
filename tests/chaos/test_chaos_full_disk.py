"""The chaos suite's full-disk case: the state file's 256 KiB tmpfs filled mid-run (wire_lab/chaos/full_disk.py).

Root only: without root it skips with one line; with CI=true it fails instead.
Against moto, with the cycled workload: the daemon never dies and prints no
traceback, says once that its disk has no room, keeps deciding, never takes
the pool past ``max_instances``, and once the filler is gone its state file
on disk knows every live instance; the drain then leaks nothing.
"""

from __future__ import annotations

import os

import pytest

from wire_lab.chaos.full_disk import FullDiskPlan, run_full_disk
from wire_lab.chaos.harness import RunShape
from wire_lab.chaos.small_disk import cannot_mount

pytestmark = pytest.mark.slow


def test_a_full_state_disk_kills_nothing_and_forgets_nothing(tmp_path, chaos_moto):
    reason = cannot_mount()
    if reason:
        if os.environ.get("CI", "").lower() not in ("", "0", "false", "no"):
            pytest.fail(reason, pytrace=False)
        pytest.skip(reason)
    result = run_full_disk(tmp_path, chaos_moto, RunShape(drain_timeout_s=90.0), FullDiskPlan())
    print(
        f"full disk: filled {result.filled_bytes} B; {result.decisions_while_full} decision(s) and "
        f"{len(result.launched_while_full)} launch(es) while full; room again {result.room_after_s:.1f} s after the "
        f"filler went; {len(result.live_at_room)} live then, {len(result.unknown)} unknown; peak {result.peak}/"
        f"{result.max_instances}; lines: {result.no_room_lines} no room, {result.room_again_lines} room again; "
        f"exits {result.unexpected_exits}, tracebacks {result.tracebacks}; leaked {len(result.audit.leaked)}, "
        f"duplicates {result.audit.duplicates}"
    )

    assert result.filled_bytes > 0
    assert result.unexpected_exits == [], f"the daemon died: {result.unexpected_exits}"
    assert result.tracebacks == 0
    assert result.no_room_lines == 1, "one line when the disk filled"
    assert result.room_again_lines >= 1 and result.room_after_s >= 0, "it never wrote again after the filler went"
    assert result.decisions_while_full > 0, "the daemon stopped deciding on a full disk"
    assert result.peak <= result.max_instances, f"peak {result.peak} > {result.max_instances}"
    assert result.live_at_room, "nothing live when room came back: nothing to check"
    assert result.unknown == [], f"live but not in the state file once there is room: {result.unknown}"
    audit = result.audit
    assert audit.leaked == [], f"leaked: {audit.leaked}"
    assert audit.duplicate_requests == [] and audit.oversized_requests == [] and audit.launched_twice == []
    assert result.ok
