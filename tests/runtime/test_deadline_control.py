"""The deadline and budget commands: set over the config's for the run, kept across a restart, given to the policy."""

from __future__ import annotations

import re
import sqlite3

import numpy as np
import pytest

from wire_daemon.core.config import SteeringConfig
from wire_daemon.core.instances import Lifecycle
from wire_daemon.persist.store import StateStore
from wire_daemon.ports.policy import PlanResult, SteeringDecision
from wire_daemon.runtime.control import ControlledPolicy, PoolControl


class Recorder:
    """A policy that records the steering it was last given."""

    name = "recorder"

    def __init__(self, steering: SteeringConfig) -> None:
        self.steering = steering
        self.reconfigured = 0

    def reconfigure(self, steering: SteeringConfig) -> None:
        self.steering = steering
        self.reconfigured += 1

    def plan(self, now, state, instances, queue_order) -> PlanResult:
        return PlanResult(SteeringDecision(1, 1, rule="hold"))


def _plan(policy: ControlledPolicy) -> SteeringDecision:
    return policy.plan(0.0, None, [], np.empty(0, dtype=np.int64)).decision


def test_the_commands_set_and_clear_the_keys_over_the_config_and_the_policy_gets_them():
    config = SteeringConfig(deadline="10h", budget=50.0)
    control, inner = PoolControl(), Recorder(config)
    policy = ControlledPolicy(inner, control, Lifecycle(), config)
    _plan(policy)
    assert inner.reconfigured == 0  # nothing set: the policy keeps what it was built with
    assert control.apply("deadline", argument="2026-11-27T08:00:00Z") == (
        "deadline set to 2026-11-27T08:00:00Z for this run"
    )
    assert control.apply("budget", argument="200") == "budget set to 200 for this run"
    assert control.mode == "auto" and control.command == ""  # no mode changed
    _plan(policy)
    assert (inner.steering.deadline, inner.steering.budget) == ("2026-11-27T08:00:00Z", 200.0)
    assert "deadline 2026-11-27T08:00:00Z, budget 200 by the operator" in control.describe()
    control.apply("budget", argument="clear")
    _plan(policy)
    assert inner.steering.budget is None and inner.steering.deadline == "2026-11-27T08:00:00Z"
    policy.reconfigure(SteeringConfig(deadline="3h", budget=9.0, max_instances=5))  # a reload keeps them
    assert (inner.steering.deadline, inner.steering.budget, inner.steering.max_instances) == (
        "2026-11-27T08:00:00Z",
        None,
        5,
    )


@pytest.mark.parametrize(
    ("command", "argument", "words"),
    [
        ("deadline", "soon", "deadline WHEN must be a time with its zone"),
        ("deadline", "", "deadline WHEN must be"),
        ("budget", "-3", "budget AMOUNT must be a number of money above 0"),
        ("budget", "lots", "budget AMOUNT must be a number of money above 0, or clear (got 'lots')"),
    ],
)
def test_a_bad_argument_is_refused_naming_it(command, argument, words):
    control = PoolControl()
    with pytest.raises(ValueError, match=re.escape(words)):
        control.apply(command, argument=argument)
    assert control.steering == {}


def test_the_keys_survive_a_restart_and_a_bad_kept_one_is_dropped():
    control = PoolControl()
    control.apply("deadline", argument="8h")
    control.apply("budget", argument="clear")
    again = PoolControl.from_json(control.to_json())
    assert again.steering == {"deadline": "8h", "budget": None}
    assert PoolControl.from_json({"steering": {"deadline": "soon", "budget": 5}}).steering == {"budget": 5.0}
    assert "steering" not in PoolControl().to_json()  # nothing set: the state file holds what it held before


def test_the_state_file_keeps_the_argument_and_an_old_one_gains_its_column(tmp_path):
    path = tmp_path / "old.sqlite"
    db = sqlite3.connect(path)
    db.execute(
        "CREATE TABLE controls (seq INTEGER PRIMARY KEY AUTOINCREMENT, command TEXT NOT NULL, count INTEGER, "
        "requested_at REAL NOT NULL, requested_by TEXT NOT NULL DEFAULT '', applied_at REAL, outcome TEXT)"
    )
    db.execute("INSERT INTO controls (command, requested_at) VALUES ('pause', 1.0)")
    db.execute("PRAGMA user_version = 4")
    db.commit()
    db.close()
    store = StateStore(path)
    store.request_control("deadline", by="ops", now=2.0, argument="8h")
    assert [(c.command, c.argument) for c in store.pending_controls()] == [("pause", None), ("deadline", "8h")]
    store.close()
