"""The choices target-slowdown weighs at a decision, and how it picks one.

A ``Choice`` is one pool size as the level model and the cost model see it:
when the workflow would end, what it would still pay, what it launches and
lets go now. ``best_for_target`` picks for the slowdown target (lateness
priced); ``within`` for an operator's deadline and budget (``Aim``). Pure
functions over values: the policy (``slowdown.py``) builds the choices and
acts on the one picked.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

# Under a deadline, the share of the money still to pay a launch or a release must save to be made while the
# pool as it is meets the deadline (see ``within``).
POOL_CHANGE_MARGIN = 0.05


@dataclass(frozen=True)
class Choice:
    size: int  # the most instances any level may use
    end: float  # estimated end of the workflow
    cost: int  # units still to pay
    launch: int  # launched now
    release: tuple[str, ...]  # let go now (at the end of their paid unit)
    end_q: float = math.nan  # estimated end at the operator's quantile (NaN: the estimate above)

    @property
    def end_at_quantile(self) -> float:
        return self.end if math.isnan(self.end_q) else self.end_q


@dataclass(frozen=True)
class Aim:
    """What the operator set beyond the target: a deadline on the policy's clock, and money left to commit."""

    deadline: float | None = None
    shown: str = ""  # the deadline as a decision line names it
    money_left: float | None = None  # the budget less the bill so far; None: no budget
    unit_money: float = 1.0  # one charging unit of a new instance
    budget: float | None = None

    def affords(self, choice: Choice) -> bool:
        return self.money_left is None or choice.cost * self.unit_money <= self.money_left + 1e-9


def within(choices: Iterable[Choice], deadline: float, aim: Aim) -> tuple[Choice, bool]:
    """The cheapest choice that ends by ``deadline`` at the operator's quantile, else the one least late,
    among those the budget allows; and whether the budget kept a cheaper or faster choice out.

    The pool as it is, if it ends by the deadline, is kept unless the cheapest choice saves more than
    ``POOL_CHANGE_MARGIN`` of the money it still pays. Work costs about as much on few instances as on
    many, so which size is cheapest turns on a unit or two that moves with every re-estimate; followed
    decision by decision, the pool is let go and bought back (Epigenomics hep 6seq, u = 60, K = 100:
    12 instances, then 5, then 12 again within two hours), and each launch pays a new unit.
    """
    every = list(choices)
    affordable = [c for c in every if aim.affords(c)]
    allowed = affordable or [_cheapest(every)]  # none fits: the cheapest
    best, unbound = _in_time(allowed, deadline), _in_time(every, deadline)
    return best, unbound is not best and unbound.end_at_quantile < best.end_at_quantile


def _in_time(choices: list[Choice], deadline: float) -> Choice:
    """``within``'s choice among ``choices``, the budget aside."""
    best = min(choices, key=lambda c: (max(c.end_at_quantile - deadline, 0.0), c.cost, c.launch, c.end, c.size))
    margin = best.cost * (1.0 + POOL_CHANGE_MARGIN)
    kept = [c for c in choices if not c.launch and not c.release and c.end_at_quantile <= deadline and c.cost <= margin]
    return min(kept, key=lambda c: (c.cost, c.end, c.size)) if kept else best


def _cheapest(choices: Iterable[Choice]) -> Choice:
    return min(choices, key=lambda c: (c.cost, c.end, c.size))


def best_for_target(
    choices: Iterable[Choice], deadline: float, price: float, target: float, early: float = 0.0
) -> Choice:
    """The cheapest choice, lateness past the deadline priced at ``price`` a second, and the time until the
    deadline at ``early`` a second (0: time before the deadline is free).

    Of equally cheap choices: the faster at target 1; above it, the one that
    launches fewest instances now (a launch commits money on estimates), then
    the faster.
    """

    def score(c: Choice) -> tuple[float, ...]:
        late = c.cost + price * max(c.end - deadline, 0.0)
        if early > 0.0:
            late += early * min(c.end, deadline)  # the same offset for every choice: only differences count
        return (late, c.launch, c.end, c.size) if target > 1.0 else (late, c.end, c.size)

    return min(choices, key=score)


def pick(
    choices: Iterable[Choice], deadline: float, aim: Aim, price: float, target: float, early: float
) -> tuple[Choice, bool]:
    """The choice for this decision, and whether the budget bound it.

    With neither an operator's deadline nor a budget, the target's choice
    (``deadline``: the target's). With a budget alone, the target's choice
    among what the budget allows (none allowed: the cheapest). With an
    operator's deadline (``aim.deadline``), ``within`` it.
    """
    every = list(choices)
    if aim.deadline is not None:
        return within(every, aim.deadline, aim)
    free = best_for_target(every, deadline, price, target, early)
    if aim.money_left is None:
        return free, False
    allowed = [c for c in every if aim.affords(c)]
    if not allowed:
        return _cheapest(every), True
    chosen = best_for_target(allowed, deadline, price, target, early)
    return chosen, chosen is not free
