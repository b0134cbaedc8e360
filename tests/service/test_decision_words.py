"""A decision reads as one short line: what changed and the main reason; the figures go to --verbose and status."""

import json

from wire_daemon.cli.main import main
from wire_daemon.core.journal import InstanceReleased, InstancesLaunched
from wire_daemon.service.load_change import LoadWatch
from wire_daemon.service.metrics import Metrics
from wire_daemon.service.status import StageStatus
from wire_daemon.service.wording import DECISION_WORDS_MAX, decision_line, decision_words

from .emulated_config import emulated_config

ESTIMATES = [
    {"size": 1, "makespan_s": 900.0, "cost_units": 2},
    {"size": 2, "makespan_s": 600.0, "cost_units": 3},
    {"size": 3, "makespan_s": 500.0, "cost_units": 4},
]
# A decision as the log held it when its line ran past 400 characters.
LONG = {
    "time": 1_795_510_000.0,
    "clock": "wall",
    "policy": "target-slowdown",
    "pool": 1,
    "target": 6,
    "planned": 2,
    "launched": ["i-00002", "i-00003", "i-00004", "i-00005", "i-00006"],
    "done": 0,
    "running": 4,
    "idle": 17,
    "upcoming_tasks": 103,
    "upcoming_load_s": 3984.0,
    "cost_units": 6,
    "cost_money": 1.5,
    "rule": "grow: 5 for the tasks still queued when they boot; target end in 190 s",
    "estimates": ESTIMATES,
    "full_pool_makespan_s": 190.0,
    "notes": ["limit max_launches_per_interval: launching 4 of 6", "a long note " * 10],
}


def test_a_decision_is_one_short_line_with_the_change_the_reason_and_the_money():
    words = decision_words(LONG)
    assert len(words) <= DECISION_WORDS_MAX and len(decision_line(LONG)) <= 160
    assert words.startswith("pool 1 -> 6, launching 5 (i-00002")
    assert "grow: 5 for the tasks still queued when they boot" in words
    assert words.endswith("; cost 6 unit(s), 1.50")
    for figure in ("estimates", "predicted load", "deadline", "notes", "instance(s) (chosen)"):
        assert figure not in words
    verbose = decision_words(LONG, verbose=True)  # every figure is still there for whoever asks
    for figure in ("estimates: ", "predicted load 103 task(s)", "target end in 190 s", "notes: ", "i-00006"):
        assert figure in verbose


def test_an_operator_s_override_says_what_was_asked_and_what_the_policy_would_have_done():
    held = LONG | {
        "pool": 2,
        "target": 0,
        "launched": [],
        "released": ["i-00002", "i-00003"],
        "rule": "held at 0 by the operator (the policy wanted 6)",
    }
    words = decision_words(held)
    assert "held at 0 by the operator; the policy would have 6" in words
    assert "releasing 2 (i-00002, i-00003)" in words and "(chosen)" not in words
    verbose = decision_words(held, verbose=True)
    assert "(chosen)" not in verbose and "2 instance(s) (the policy's choice)" in verbose
    paused = LONG | {
        "pool": 6,
        "target": 6,
        "launched": [],
        "rule": "paused by the operator: no change (the policy wanted 1: shrink: not needed; target end in 19 s)",
    }
    assert "paused by the operator; the policy would have 1" in decision_words(paused)


def test_a_dry_run_decision_says_what_it_would_have_done():
    dry = LONG | {"dry_run": True, "released": ["dry-run-0001"], "terminated": ["dry-run-0002"]}
    words = decision_words(dry)
    assert "would launch 5" in words and "would release 1" in words and "would terminate 1" in words
    assert "launching" not in words and "releasing" not in words and "terminated" not in words


def test_a_release_put_off_for_a_task_running_late_is_said():
    kept = LONG | {
        "pool": 9,
        "target": 9,
        "launched": [],
        "postponed": ["i-00015"],
        "rule": "hold; 1 draining kept to a later unit's end: their tasks would be killed; target end in 9712 s",
    }
    words = decision_words(kept)
    assert words.startswith("pool stays at 9, kept draining 1 (i-00015): no change needed")
    assert "would keep draining 1" in decision_words(kept | {"dry_run": True})


def _stage(name, done, running, tasks, each):
    return StageStatus(name, tasks, done, running, 0, tasks - done - running, each, 2)


def test_a_large_move_of_the_predicted_load_says_why():
    watch = LoadWatch()
    assert watch.explain(3984.0, [_stage("m/mProject", 0, 16, 21, 41.7), _stage("m/mDiffFit", 0, 0, 45, None)]) == ""
    moved = watch.explain(14400.0, [_stage("m/mProject", 5, 16, 21, 312.0), _stage("m/mDiffFit", 0, 0, 45, None)])
    assert moved == "mProject took 5.2 min, not 42 s: load 66 min -> 4.0 h"
    small = watch.explain(14000.0, [_stage("m/mProject", 6, 15, 21, 312.0), _stage("m/mDiffFit", 0, 0, 45, None)])
    assert small == ""  # a small move says nothing
    quiet = LONG | {"pool": 6, "target": 6, "launched": [], "rule": "hold; target end in 1874 s", "load_change": moved}
    assert decision_words(quiet) == f"pool stays at 6: no change needed; {moved}; cost 6 unit(s), 1.50"
    busy = LONG | {"load_change": moved}  # with launches too: still one line, the reason before the note
    words = decision_words(busy)
    assert len(words) <= DECISION_WORDS_MAX and "grow: 5 for the tasks still queued" in words
    assert "mProject took" in words


def test_a_dry_run_counts_no_launch_and_no_release():
    metrics = Metrics()
    metrics.dry_run = True
    metrics.notify(InstancesLaunched(0.0, ("dry-run-0001", "dry-run-0002")))
    metrics.notify(InstanceReleased(0.0, "dry-run-0001", 60.0))
    assert metrics.launched._value.get() == 0 and metrics.released._value.get() == 0
    metrics.dry_run = False
    metrics.notify(InstancesLaunched(0.0, ("i-1",)))
    assert metrics.launched._value.get() == 1


def test_dry_run_on_the_emulated_site_launches_nothing_and_says_would(tmp_path, capsys):
    config = emulated_config(tmp_path, extra="safety: {dry_run: true}")
    assert main(["run", "--config", str(config), "--max-iterations", "3"]) == 0
    records = [json.loads(line) for line in (tmp_path / "decisions.jsonl").read_text().splitlines()]
    decisions = [r for r in records if r.get("event") is None]
    assert decisions and all(r["dry_run"] is True for r in decisions)
    launched = [i for r in decisions for i in r.get("launched", [])]
    assert launched and all(i.startswith("dry-run-") for i in launched)  # phantoms: nothing reached the site
    capsys.readouterr()
    assert main(["decisions", "--config", str(config)]) == 0
    out = capsys.readouterr().out
    assert "would launch" in out and "launching" not in out
    assert main(["status", "--config", str(config)]) == 0
    assert capsys.readouterr().out.startswith("DRY-RUN: ")
    assert main(["status", "--config", str(config), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["dry_run"] is True


def test_status_json_gives_a_real_boolean_for_dry_run_on_every_site(tmp_path, capsys):
    config = emulated_config(tmp_path)
    assert main(["run", "--config", str(config), "--max-iterations", "1"]) == 0
    capsys.readouterr()
    assert main(["status", "--config", str(config), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["dry_run"] is False


def test_a_stage_running_with_none_finished_is_not_predicted_0_s():
    from wire_daemon.service.status import StatusSnapshot
    from wire_daemon.service.status_text import _stage_lines

    snapshot = StatusSnapshot(time=0.0, stages=[StageStatus("mProject", 21, 0, 16, 5, 0, 0.0, 2)])
    (line,) = _stage_lines(snapshot)[1:]
    assert "at least    0.0 s (running, none finished yet)" in line and "predicted" not in line


def test_a_dry_run_s_shutdown_says_what_it_would_have_terminated():
    record = {"event": "shutdown", "reason": "the workflow finished", "terminated": ["dry-run-0001"], "dry_run": True}
    assert "would have terminated dry-run-0001" in decision_words(record)


def test_the_instance_ids_give_way_before_the_reason_is_cut():
    """As the operator session showed it: the money's currency and committed share left the reason cut to
    'grow: 2 for the tasks st…' while two instance ids stayed."""
    record = {
        "pool": 4,
        "target": 6,
        "launched": ["dry-run-0005", "dry-run-0006"],
        "dry_run": True,
        "rule": "grow: 2 for the tasks still queued when they boot; target end in 188 s",
        "cost_units": 6,
        "cost_money": 0.2,
        "money_committed": 0.19,
        "currency": "on-demand hours",
    }
    words = decision_words(record)
    assert len(words) <= DECISION_WORDS_MAX
    assert words == (
        "pool 4 -> 6, would launch 2: grow: 2 for the tasks still queued when they boot; "
        "cost 6 unit(s), 0.20 on-demand hours (0.19 committed)"
    )
    assert "dry-run-0006" in decision_words(record, verbose=True)
    nothing_charged = decision_words(record | {"cost_units": 0, "cost_money": 0.0, "money_committed": 0.0})
    assert nothing_charged.endswith("; cost 0 unit(s), 0.00 on-demand hours")
