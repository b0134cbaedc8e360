"""`wire-daemon deadline`, `budget` and `plan --deadline`: what the operator types, and the one line a mistake gets."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

from tests.service.emulated_config import emulated_config
from wire_daemon.cli.main import main
from wire_daemon.persist.store import StateStore
from wire_daemon.runtime.settings import load_settings
from wire_daemon.service.daemon import Daemon


def _config(tmp_path: Path, policy: str = "wire") -> Path:
    return emulated_config(tmp_path, extra=f"policy: {policy}")


def _moment(hours_from_now: float) -> str:
    return (datetime.now(UTC) + timedelta(hours=hours_from_now)).strftime("%Y-%m-%dT%H:%M:%SZ")


def test_deadline_and_budget_are_recorded_with_their_argument(tmp_path, capsys):
    config = _config(tmp_path)  # given before the first start: kept for the first run
    tomorrow = _moment(24)
    assert main(["deadline", tomorrow, "--config", str(config)]) == 0
    assert f"deadline {tomorrow}: recorded in" in capsys.readouterr().out
    assert main(["budget", "clear", "--config", str(config)]) == 0
    store = StateStore(tmp_path / "state.sqlite")
    pending = [(c.command, c.argument) for c in store.pending_controls()]
    store.close()
    assert pending == [("deadline", tomorrow), ("budget", "clear")]


def test_a_wall_clock_deadline_already_past_is_refused_a_duration_is_not(tmp_path, capsys):
    """A moment already past when given is a typo more often than a wish: the policy would spend as if late."""
    config = _config(tmp_path)
    assert main(["deadline", _moment(-0.5), "--config", str(config)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "has already passed (30.0 min ago): give a later time" in err[0]
    assert main(["deadline", "2020-01-01T00:00:00Z", "--config", str(config)]) == 2
    assert " days ago)" in capsys.readouterr().err
    assert main(["deadline", "2h", "--config", str(config)]) == 0  # from the workflow's start: the daemon's to judge
    store = StateStore(tmp_path / "state.sqlite")
    assert [(c.command, c.argument) for c in store.pending_controls()] == [("deadline", "2h")]
    store.close()


def test_a_bad_argument_is_one_line_naming_it(tmp_path, capsys):
    config = _config(tmp_path)
    assert main(["deadline", "soon", "--config", str(config)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("wire-daemon: error: deadline WHEN must be a time with its zone")
    assert main(["budget", "0", "--config", str(config)]) == 2
    assert "budget AMOUNT must be a number of money above 0, or clear (got '0')" in capsys.readouterr().err
    assert main(["plan", "--deadline", "8", "--max-instances", "2"]) == 2
    assert "error: --deadline must be a time with its zone" in capsys.readouterr().err


def test_plan_names_the_cheapest_pool_that_meets_the_deadline(capsys):
    assert main(["plan", "--json"]) == 0
    sizes = json.loads(capsys.readouterr().out)["sizes"]
    slowest = max(s["makespan_s"] for s in sizes)
    assert slowest > min(s["makespan_s"] for s in sizes)  # pool size matters on the bundled trace
    assert main(["plan", "--deadline", f"{slowest + 1:.0f}s", "--json"]) == 0
    fit = json.loads(capsys.readouterr().out)["deadline"]
    cheapest = min(sizes, key=lambda s: (s["cost_units"], s["instances"]))
    assert (fit["instances"], fit["cost_units"]) == (cheapest["instances"], cheapest["cost_units"])
    second = sorted(s["makespan_s"] for s in sizes)[-2]  # the slowest size misses it: the next cheapest meets it
    assert main(["plan", "--deadline", f"{(second + slowest) / 2:.0f}s", "--json"]) == 0
    fit = json.loads(capsys.readouterr().out)["deadline"]
    assert fit["instances"] > cheapest["instances"] and fit["makespan_s"] <= second + 1
    assert main(["plan", "--deadline", "1s"]) == 0
    assert "no pool size meets it; the fastest ends" in capsys.readouterr().out
    assert main(["plan", "--deadline", f"{slowest + 1:.0f}s"]) == 0  # its money, at the config's price of a unit
    units = cheapest["cost_units"]
    assert f"{units} unit(s) ({units * 1.0:.2f} on-demand hours)" in capsys.readouterr().out


def test_the_daemon_applies_them_and_its_policy_plans_with_them(tmp_path, capsys):
    config = _config(tmp_path, "target-slowdown")  # given before the first start: kept for the first run
    assert main(["deadline", "90m", "--config", str(config)]) == 0
    assert main(["budget", "12.5", "--config", str(config)]) == 0
    daemon = Daemon(load_settings(config), str(config))
    daemon._apply_controls()
    assert daemon.runtime.control.steering == {"deadline": "90m", "budget": 12.5}
    outcomes = [c.outcome for c in daemon.store.controls()]
    assert outcomes[-2:] == ["applied: deadline set to 90m for this run", "applied: budget set to 12.5 for this run"]
    daemon._iterate(daemon.runtime.now())
    steering = daemon.loop.policy.inner.config  # the target-slowdown policy under the operator's control
    assert (steering.deadline, steering.budget) == ("90m", 12.5)
    assert "deadline 90m after start" in daemon.last_record["rule"]
    assert "(deadline 90m, budget 12.5 by the operator)" in daemon.runtime.control.describe()
    daemon.store.close()
    lines = [json.loads(line) for line in (tmp_path / "decisions.jsonl").read_text().splitlines()]
    said = [r["rule"] for r in lines if r.get("event") == "control"]
    assert [r.split(" (by ")[0] for r in said[-2:]] == [
        "operator: deadline set to 90m for this run",
        "operator: budget set to 12.5 for this run",
    ]


def test_plan_answers_for_the_deadline_and_quantile_of_its_config(tmp_path, capsys):
    config = tmp_path / "config.yaml"
    config.write_text("steering: {deadline: 1s, deadline_quantile: p90}\n")
    assert main(["plan", "--config", str(config), "--json"]) == 0
    fit = json.loads(capsys.readouterr().out)["deadline"]
    assert (fit["given"], fit["quantile"], fit["instances"]) == ("1s", "p90", None)  # no size ends in a second
    assert main(["plan", "--config", str(config), "--quantile", "p50", "--deadline", "30d", "--json"]) == 0
    fit = json.loads(capsys.readouterr().out)["deadline"]
    assert (fit["given"], fit["quantile"]) == ("30d", "p50") and fit["instances"] is not None  # the flags win
    assert main(["plan", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["deadline"] is None  # neither flag nor config: no deadline asked
