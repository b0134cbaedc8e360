"""The operator's hand on the pool: pause, resume, hold N, drain-all, terminate-all; a deadline and a budget.

``PoolControl`` is the mode the operator set; ``ControlledPolicy`` is a
``ScalingPolicy`` decorator that applies it over whatever policy runs. The
inner policy always plans (its models keep learning, and status keeps its
predictions); in a mode other than ``auto`` its decision is replaced:

* **paused**: no launch, no release; the pool stays as it is. Releases the
  policy decided before the pause still end on time (their instances are
  already drained).
* **hold N**: the pool is brought to N instances and kept there: launches up
  to N (within the safety limits), or releases the extra instances, those
  whose paid unit ends first (each drained now and terminated just before its
  unit ends, as the policy's own releases).
* **drain-all**: every instance is released at once (drained now, terminated
  when its paid unit ends); then the pool is held at 0.
* **terminate-all**: every instance is released for termination now (its
  running jobs are killed and rerun elsewhere); then the pool is held at 0.
  With HTCondor control on, a worker whose slot is still claimed after the
  drain is terminated when the claim ends (the guard's rule).

``resume`` returns to ``auto``.

``deadline WHEN`` and ``budget AMOUNT`` set ``steering.deadline`` and
``steering.budget`` for the run, over what the config says (``clear``: none,
whatever the config says); they change no mode. The policy is reconfigured
with them at its next plan, and again after every reload of the config, until
a later command changes them. The commands reach the daemon through the
state file (``StateStore.request_control``); the daemon applies them
(``PoolControl.apply``), persists the mode, and journals each change.

A control given is a control done. drain-all and terminate-all are one-shot
actions: once given, a later command (in the same batch, or before the next
decision) changes only the mode the pool is in *after* the action, never
cancels it. So terminate-all then pause terminates every instance, then
keeps the pool paused at 0; terminate-all then hold N terminates every
instance, then brings the pool back to N; terminate-all then resume
terminates every instance, then lets the policy decide. Of two actions the
stronger is carried out: terminate-all outranks drain-all whatever the order.
``apply`` returns what was done in words, for the command to print.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from wire_daemon.core.config import SteeringConfig
from wire_daemon.core.deadlines import parse_deadline
from wire_daemon.core.instances import Instance, Lifecycle, LifecycleState
from wire_daemon.core.run_state import RunState
from wire_daemon.plan.steering import release_time
from wire_daemon.ports.policy import PlanResult, ScalingPolicy, SteeringDecision

AUTO, PAUSED, HOLD = "auto", "paused", "hold"
CLEAR = "clear"  # the argument of deadline / budget that removes it
# The commands that set a steering key for the run, and the key each sets.
STEERING_COMMANDS = {"deadline": "deadline", "budget": "budget"}
_GOING = (LifecycleState.DRAINING, LifecycleState.TERMINATING, LifecycleState.TERMINATED, LifecycleState.VANISHED)


@dataclass
class PoolControl:
    """The mode the operator set, and a one-shot action still to carry out."""

    mode: str = AUTO  # auto | paused | hold
    count: int = 0  # hold: the pool size to keep
    action: str = ""  # drain-all | terminate-all: release every instance at the next plan
    command: str = ""  # the command that set the mode
    since: float | None = None  # wall clock
    # Set by the daemon, not the operator, and never persisted with the mode: why it is in its safe state
    # (service/safe_state.py). While set, nothing changes the pool whatever the mode; "" outside it.
    safe: str = ""
    # Steering keys the operator set for the run (deadline, budget), over the config's; None: cleared.
    steering: dict[str, Any] = field(default_factory=dict)

    def apply(self, command: str, count: int | None = None, when: float | None = None, argument: str = "") -> str:
        """Take an operator's command and say what it does; raises ValueError for one it does not know."""
        if command in STEERING_COMMANDS:
            return self._set_steering(command, argument)
        pending = self.action
        if command == "pause":
            self.mode = PAUSED
        elif command == "resume":
            self.mode = AUTO
        elif command == "hold":
            if count is None or count < 0:
                raise ValueError(f"hold needs a pool size >= 0 (got {count!r})")
            self.mode, self.count = HOLD, int(count)
        elif command in ("drain-all", "terminate-all"):
            self.mode, self.count = HOLD, 0
            self.action = "terminate-all" if "terminate-all" in (pending, command) else command
        else:
            raise ValueError(f"unknown control command {command!r}")
        self.command, self.since = command, when
        return self._outcome(command, pending)

    def _set_steering(self, command: str, argument: str) -> str:
        key, given = STEERING_COMMANDS[command], argument.strip()
        if given == CLEAR:
            self.steering[key] = None
            return f"{command} cleared: none for this run, whatever the config says"
        self.steering[key] = steering_value(command, given)
        return f"{command} set to {given} for this run"

    def after_action(self) -> str:
        """The mode the pool is in once the one-shot action is carried out, in words."""
        if self.mode == PAUSED:
            return "then paused at what is left"
        if self.mode == AUTO:
            return "then the policy decides"
        return f"pool held at {self.count}"

    def _outcome(self, command: str, pending: str) -> str:
        if command in ("drain-all", "terminate-all"):
            if pending == "terminate-all" and command == "drain-all":
                return "the terminate-all given before it goes further: every instance terminated now; pool held at 0"
            return f"{self.action} at the next decision; {self.after_action()}"
        if pending:
            return f"the {pending} given before it is carried out first; {self.after_action()}"
        return self.describe()

    def describe(self) -> str:
        """The mode in words, for status and the journal."""
        first = f"{self.action} at the next decision, then " if self.action and self.mode != HOLD else ""
        if self.mode == PAUSED:
            return f"{first}paused by the operator: the pool is kept as it is"
        if self.mode == HOLD:
            pending = f" ({self.action} at the next decision)" if self.action else ""
            how = " after drain-all" if self.command == "drain-all" else ""
            how = " after terminate-all" if self.command == "terminate-all" else how
            return f"held at {self.count} instance(s) by the operator{how}{pending}"
        return f"{first}automatic: the scaling policy decides{self._steering_words()}"

    def _steering_words(self) -> str:
        if not self.steering:
            return ""
        words = {
            k: "cleared" if v is None else f"{v:g}" if isinstance(v, float) else v for k, v in self.steering.items()
        }
        given = ", ".join(f"{k} {words[k]}" for k in STEERING_COMMANDS.values() if k in words)
        return f" ({given} by the operator)"

    def to_json(self) -> dict[str, Any]:
        return {
            "mode": self.mode,
            "count": self.count,
            "action": self.action,
            "command": self.command,
            "since": self.since,
        } | ({"steering": dict(self.steering)} if self.steering else {})

    @classmethod
    def from_json(cls, data: dict[str, Any] | None) -> PoolControl:
        data = data or {}
        mode = data.get("mode", AUTO)
        if mode not in (AUTO, PAUSED, HOLD):
            mode = AUTO
        count = data.get("count", 0)
        return cls(
            mode=mode,
            count=count if isinstance(count, int) and count >= 0 else 0,
            action=data.get("action", "") if data.get("action") in ("drain-all", "terminate-all") else "",
            command=str(data.get("command", "")),
            since=data.get("since") if isinstance(data.get("since"), (int, float)) else None,
            steering=_kept_steering(data.get("steering")),
        )


def steering_value(command: str, given: str) -> Any:
    """The value ``deadline WHEN`` or ``budget AMOUNT`` sets; ValueError with one line naming the argument."""
    if command == "deadline":
        try:
            parse_deadline(given)
        except ValueError as exc:
            raise ValueError(f"deadline WHEN {exc}") from None
        return given
    try:
        amount = float(given)
    except ValueError:
        raise ValueError(f"budget AMOUNT must be a number of money above 0, or {CLEAR} (got {given!r})") from None
    if not amount > 0 or amount == float("inf"):
        raise ValueError(f"budget AMOUNT must be a number of money above 0, or {CLEAR} (got {given!r})")
    return amount


def _kept_steering(data: Any) -> dict[str, Any]:
    """The operator's steering keys a state file kept; one that no longer reads is dropped, not trusted."""
    kept: dict[str, Any] = {}
    for command, key in STEERING_COMMANDS.items():
        if not isinstance(data, dict) or key not in data:
            continue
        value = data[key]
        try:
            kept[key] = None if value is None else steering_value(command, str(value))
        except ValueError:
            continue
    return kept


class ControlledPolicy:
    """A ScalingPolicy whose decision the operator can override (see the module docstring)."""

    def __init__(
        self, inner: ScalingPolicy, control: PoolControl, lifecycle: Lifecycle, steering: SteeringConfig
    ) -> None:
        self.inner = inner
        self.name = inner.name
        self.control = control
        self.lifecycle = lifecycle
        self.steering = steering
        self._given: dict[str, Any] = {}  # the operator's steering keys the inner policy was last given

    def reconfigure(self, steering: SteeringConfig) -> None:
        self.steering = steering
        self._given = dict(self.control.steering)
        self.inner.reconfigure(replace(steering, **self._given))

    def plan(self, now: float, state: RunState, instances: Sequence[Instance], queue_order: np.ndarray) -> PlanResult:
        if self.control.steering != self._given:  # a deadline or budget command since the last plan
            self.reconfigure(self.steering)
        result = self.inner.plan(now, state, instances, queue_order)
        control = self.control
        if control.mode == AUTO and not control.action and not control.safe:
            return result
        wanted = result.decision
        staying = [i for i in instances if self.lifecycle.state_of(i.instance_id) not in _GOING]
        if control.safe:  # outranks the operator's mode; a drain-all or terminate-all waits for its end
            decision = SteeringDecision(
                len(staying),
                wanted.planned,
                rule=f"safe state, no change: {control.safe} (the policy wanted {wanted.target}: {wanted.rule})",
            )
        elif control.action:  # a one-shot action given is carried out whatever mode a later command set
            decision = self._release_all(now, instances, control.action, wanted, control.after_action())
            control.action = ""  # carried out by the loop right after this plan
        elif control.mode == PAUSED:
            decision = SteeringDecision(
                len(staying),
                wanted.planned,
                rule=f"paused by the operator: no change (the policy wanted {wanted.target}: {wanted.rule})",
                postpone=wanted.postpone,  # what was released stays so; a task its termination would kill is spared
            )
        else:
            decision = self._hold(now, staying, control.count, wanted)
            decision.postpone = wanted.postpone
        return replace(result, decision=decision)

    def _hold(self, now: float, staying: list[Instance], count: int, wanted: SteeringDecision) -> SteeringDecision:
        why = f"held at {count} by the operator (the policy wanted {wanted.target})"
        if len(staying) < count:
            return SteeringDecision(count, wanted.planned, launch=count - len(staying), rule=why)
        if len(staying) == count:
            return SteeringDecision(count, wanted.planned, rule=why)
        billing = self.steering.billing
        preferred = set(wanted.release)
        order = sorted(
            staying,
            key=lambda i: (
                i.instance_id not in preferred,
                billing.time_to_next_charge(i.launch_time, now),
                -(now - i.launch_time),
            ),
        )
        release = [i.instance_id for i in order[: len(staying) - count]]
        when = {
            i.instance_id: release_time(
                now, billing.time_to_next_charge(i.launch_time, now), self.steering.release_guard_s
            )
            for i in order[: len(staying) - count]
        }
        return SteeringDecision(count, wanted.planned, release=release, release_at=when, rule=why)

    def _release_all(
        self, now: float, instances: Sequence[Instance], action: str, wanted: SteeringDecision, then: str
    ) -> SteeringDecision:
        billing = self.steering.billing
        gone = (LifecycleState.TERMINATING, LifecycleState.TERMINATED, LifecycleState.VANISHED)
        targets = [i for i in instances if self.lifecycle.state_of(i.instance_id) not in gone]
        if action == "terminate-all":
            when = {i.instance_id: now for i in targets}
            rule = f"terminate-all by the operator: every instance terminated now; {then}"
        else:
            when = {
                i.instance_id: release_time(
                    now, billing.time_to_next_charge(i.launch_time, now), self.steering.release_guard_s
                )
                for i in targets
            }
            rule = f"drain-all by the operator: every instance drained, terminated when its unit ends; {then}"
        return SteeringDecision(0, wanted.planned, release=list(when), release_at=when, rule=rule)
