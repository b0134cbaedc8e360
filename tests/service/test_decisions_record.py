"""The decisions log is the one record of what the daemon decided, and its estimates read the same on any clock."""

from __future__ import annotations

import json
import sqlite3
import time
from pathlib import Path

from wire_daemon.cli.main import main
from wire_daemon.core.config import EmulationConfig
from wire_daemon.emulated.traces import bundled_trace_path, load_trace
from wire_daemon.runtime.settings import load_settings
from wire_daemon.service.daemon import Daemon
from wire_daemon.service.render import format_estimates
from wire_daemon.service.wording import decision_line, decision_words
from wire_lab.live_writer import WriterOptions, build_live

from .emulated_config import emulated_config

DAY_S = 86_400.0


def _records(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_decisions_go_to_the_log_file_only_not_to_the_state_file(tmp_path):
    config = emulated_config(tmp_path)
    assert Daemon(load_settings(config), str(config)).run(max_iterations=3) == 0
    records = _records(tmp_path / "decisions.jsonl")
    assert len(records) == 5 and records[0]["event"] == "run"  # the run's header, three decisions, its end
    db = sqlite3.connect(tmp_path / "state.sqlite")
    tables = {name for (name,) in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    db.close()
    assert "decisions" not in tables and "meta" in tables
    decided = records[1:4]  # each gives the bill in the config's currency, and the part of it committed
    assert all(r["currency"] == "on-demand hours" and 0 <= r["money_committed"] <= r["cost_money"] for r in decided)
    assert decided[0]["money_committed"] > 0  # the first instance's unit is charged and mostly unused


def _submit_host(tmp_path: Path) -> Path:
    """A dry run of target-slowdown on a submit host: its loop's clock is the wall clock (epoch seconds)."""
    root = tmp_path / "submit"
    live = build_live(
        load_trace(bundled_trace_path()),
        root / "run1",
        EmulationConfig(initial_instances=2),
        4,
        3600.0,
        WriterOptions(epoch=time.time() - 30.0, label="montage"),
    )
    live.advance_to(30.0)
    config = tmp_path / "condor.yaml"
    config.write_text(
        f"""
policy: target-slowdown
site: {{kind: condor, submit_root: "{root}"}}
condor: {{control: "off", settle_s: 0}}
cloud:
  kind: ec2
  ec2: {{region: us-east-1, image_id: ami-0123456789abcdef0, instance_type: c5.large,
         endpoint_url: "http://127.0.0.1:9"}}
steering: {{interval_s: 60, charging_unit_s: 900, min_instances: 0}}
safety: {{dry_run: true}}
state_path: {tmp_path / "state.sqlite"}
log: {{decisions_path: {tmp_path / "decisions.jsonl"}}}
"""
    )
    return config


def test_estimates_on_a_wall_clock_site_are_seconds_from_the_decision(tmp_path, capsys):
    config = _submit_host(tmp_path)
    assert main(["run", "--config", str(config), "--max-iterations", "1"]) == 0
    (decision,) = [r for r in _records(tmp_path / "decisions.jsonl") if r.get("estimates")]
    assert decision["clock"] == "wall" and decision["time"] > 1e9
    spans = [e["makespan_s"] for e in decision["estimates"]]
    assert spans and all(0.0 <= s < 30 * DAY_S for s in spans), spans  # durations, not epoch times
    assert abs(decision["full_pool_makespan_s"]) < 30 * DAY_S  # negative: that end is past already
    # The readers take them as durations: the words and the replay's text say the same time to the end.
    chosen = next(e for e in decision["estimates"] if e["size"] == decision["planned"])
    assert f"ends in {chosen['makespan_s']:.0f} s" in format_estimates(decision)
    capsys.readouterr()
    assert main(["decisions", "--config", str(config)]) == 0
    assert "estimates: " not in capsys.readouterr().out  # one short line each; the figures with --verbose
    assert main(["decisions", "--config", str(config), "--verbose"]) == 0
    assert "estimates: " in capsys.readouterr().out
    words = decision_words(decision, verbose=True)
    assert "ends in" in words and str(int(decision["time"]))[:6] not in words.split("estimates: ")[1]


def test_an_estimate_reads_as_the_time_to_the_end_whichever_way_the_log_wrote_it():
    base = {"time": 1_795_510_000.0, "clock": "wall", "policy": "target-slowdown", "planned": 5}
    duration = base | {"estimates": [{"size": 5, "makespan_s": 300.0, "cost_units": 6}], "full_pool_makespan_s": 30.0}
    older = base | {  # an older log: the end itself, in epoch seconds
        "estimates": [{"size": 5, "makespan_s": 1_795_510_300.0, "cost_units": 6}],
        "full_pool_makespan_s": 1_795_510_030.0,
    }
    for record in (duration, older):
        words = decision_words(record, verbose=True)
        assert "5 instance(s) (chosen): ends in 5.0 min" in words and "the full pool would end in 30 s" in words
        assert format_estimates(record) == "estimates [5: ends in 300 s, +6 units] (full pool: ends in 30 s)"
    past = duration | {"full_pool_makespan_s": -242.0}
    assert "the full pool would have ended 4 min ago" in decision_words(past, verbose=True)
    assert format_estimates(past).endswith("(full pool: ended 242 s ago)")
    replayed = {"time": 540.0, "clock": "virtual", "planned": 2, "estimates": [{"size": 2, "makespan_s": 120.0}]}
    replayed["estimates"][0]["cost_units"] = 1
    assert format_estimates(replayed) == "estimates [2: ends in 120 s, +1 units]"


def test_a_decision_line_gives_the_money_beside_the_units():
    line = decision_line({"time": 0.0, "pool": 2, "target": 2, "cost_units": 3, "cost_money": 0.855})
    assert line.endswith(("; cost 3 unit(s), 0.85", "; cost 3 unit(s), 0.86"))


def test_a_decision_line_names_the_currency_and_what_is_committed():
    record = {"time": 0.0, "pool": 2, "target": 2, "cost_units": 3, "cost_money": 1.25, "money_committed": 0.4}
    line = decision_line(record | {"currency": "USD"})
    assert line.endswith("; cost 3 unit(s), 1.25 USD (0.40 committed)")
