"""How target-slowdown picks among its choices (plan/choices.py): the target's, a budget's, a deadline's."""

from __future__ import annotations

from wire_daemon.plan.choices import Aim, Choice, pick

FAST = Choice(size=12, end=1000.0, cost=40, launch=8, release=())
SLOW = Choice(size=4, end=1600.0, cost=20, launch=0, release=())
DEADLINE = 1200.0  # the target's deadline: FAST makes it, SLOW is 400 s late
PRICE = 0.2  # units a second late: SLOW's lateness costs 80 units, more than FAST's 20 more units


def _pick(aim: Aim) -> tuple[Choice, bool]:
    return pick([FAST, SLOW], DEADLINE, aim, PRICE, target=1.0, early=0.0)


def test_without_a_deadline_or_a_budget_the_target_picks_and_nothing_binds():
    assert _pick(Aim()) == (FAST, False)


def test_a_budget_keeps_out_what_it_cannot_pay_and_says_it_bound():
    assert _pick(Aim(money_left=30.0)) == (SLOW, True)  # FAST's 40 units at 1 a unit: over
    assert _pick(Aim(money_left=50.0)) == (FAST, False)  # both affordable: the target's choice, not bound
    assert _pick(Aim(money_left=30.0, unit_money=2.0)) == (SLOW, True)  # SLOW costs 40 in money: none fits


def test_with_nothing_affordable_the_cheapest_is_taken():
    assert _pick(Aim(money_left=5.0)) == (SLOW, True)


def test_a_deadline_takes_the_cheapest_that_meets_it_not_the_target():
    assert _pick(Aim(deadline=2000.0)) == (SLOW, False)  # both meet 2,000 s: the cheaper
    assert _pick(Aim(deadline=1100.0)) == (FAST, False)  # only FAST meets it
