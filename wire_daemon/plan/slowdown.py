"""Policy target-slowdown: the cheapest pool whose whole-DAG makespan stays within a target.

The operator sets one number, ``steering.target_slowdown``: the makespan
accepted, as a multiple of what the full pool (``max_instances`` up from the
start) would take. Every interval the policy

1. predicts every unfinished task's remaining occupancy as a distribution
   (``Prediction.remaining_mean_s`` and ``remaining_p90_s``) and reads the
   dispatch learner's per-job costs;
2. estimates, with the level-based model (``makespan.py``), the full-pool
   makespan and, for each choice it could make now, when the workflow would
   end and how many units it would still pay: launch k instances now; launch
   k at the next decision instead; or let j of the instances whose paid unit
   ends before the next decision go;
3. sets the deadline: at target 1, the full-pool makespan; above it, from
   now, ``target_slowdown`` x the time the fastest choice still needs. It
   takes the cheapest choice that ends by the deadline, counting lateness
   past it at the full pool's price (at target 1 with units no longer than
   the interval, while tasks queue, time before the deadline has a price
   too: ``QUEUED_SECOND_WORTH``). Of equally cheap choices it takes the
   faster at target 1; above it, the one that launches fewest instances now
   (a launch commits money on estimates), then the faster
   (``choices.best_for_target``).

What is kept and what goes:

* Already-paid units are free: an instance is only ever let go when its
  paid unit is about to end (drained at once, terminated ``release_guard_s``
  before the unit ends, as every policy here does), and until then the
  model counts its slots.
* Of those that may go, the dearest type goes first, then the one whose
  release loses the least work, then the one whose unit ends first (WIRE's
  order: an idle instance goes before one whose young task a release would
  kill; ``_choices``).
* An instance whose tasks would lose more than
  ``release_restart_cost_fraction`` x u of work (Algorithm 2's rule, lost
  work counted) is kept, and with units longer than the interval one that
  would lose any work at all; a task predicted only from a prior is never
  counted on to end in time (``_restart_costs``). A released instance whose
  tasks run late, so that its termination would now lose such work, is kept
  drained to the end of a later unit (``_postpone_kills``).
* An instance younger than ``min_instance_age_intervals`` is kept, unless
  every decision renews its unit (units no longer than the interval) and it
  is up with no task on it: kept idle it would pay an interval for nothing,
  and the model still keeps it when it is needed before it could come back
  (``_members``).
* Billed per second, a choice that ends before the next decision pays its
  pool only to that end at P90 (the pool goes when the workflow does),
  unless a running task is timed from a prior (``_work_at_the_end``).

What is bought on a guess:

* Before anything is measured, with units longer than the interval, the
  pool grows to a slot per queued or running task, as a reactive policy does
  (``_reactive_floor``).
* While a running task is predicted only from a prior, launches stop at a
  slot per queued or running task; once that has lasted ``GUESS_KEPT_LAGS``
  launch lags, so does what is kept (``_speculation_cap``).

An operator's deadline (``steering.deadline``) replaces the target: the
policy then takes the cheapest choice whose estimated end, at
``steering.deadline_quantile`` (P50, or P90 from the tasks' 90th-percentile
remaining times), is by the deadline; when none is, the one that ends
soonest (the fastest it can go), and its decision line says by how much the
deadline will be missed. The pool as it is (no launch, no release) is kept
while it meets the deadline and the cheapest choice saves no more than
``choices.POOL_CHANGE_MARGIN`` of the money still to pay. While a queued or
running task has nothing measured to predict it by, an estimate cannot speak
for a deadline on the clock (a later stage may be many times longer than the
prior says): the pool is then at least the reactive floor, a slot for every
task still there at the next boot, as it is when late. A budget
(``steering.budget``, money per workflow; ``budget.py``) keeps out every
choice whose money still to pay, added to the bill of every instance the
cloud listed so far, exceeds it, and caps launches and renewals at what is
left; the decision line says when it binds. With neither set, nothing here
changes what the policy decides.

With nothing left to run the pool goes to ``min_instances`` at the units'
ends, like WIRE. The decision record carries the estimates at the chosen
size and one instance either side.
"""

from __future__ import annotations

import functools
import math
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace

import numpy as np

from wire_daemon.core.config import SteeringConfig
from wire_daemon.core.deadlines import Deadline
from wire_daemon.core.instances import CloudState, Instance
from wire_daemon.core.run_state import DONE, WAITING, RunState
from wire_daemon.core.run_state import RUNNING as RUNNING_TASK
from wire_daemon.plan.budget import WorkflowBill, cut_to_budget, unit_money
from wire_daemon.plan.choices import Aim, Choice, pick
from wire_daemon.plan.makespan import (
    LevelModel,
    Levels,
    PoolMember,
    capacity_of,
    drains_now,
    plan_instances,
    rank_members,
)
from wire_daemon.plan.shapes import dearness
from wire_daemon.plan.steering import release_time
from wire_daemon.ports.policy import PlanResult, SizeEstimate, SteeringDecision, UpcomingLoad
from wire_daemon.ports.prediction import (
    POLICY_GRADIENT,
    POLICY_RUNNING_ONLY,
    POLICY_SAME_INPUT,
    POLICY_STAGE_MEDIAN,
    DispatchEstimate,
    DispatchModel,
    Prediction,
    Predictor,
)

# Predicted from the task's own stage's measurements (WIRE's policies 3-5), not from a prior.
MEASURED = frozenset({POLICY_STAGE_MEDIAN, POLICY_SAME_INPUT, POLICY_GRADIENT})
# Launch lags after which running tasks guessed from a prior no longer keep the pool waiting for them.
GUESS_KEPT_LAGS = 2.0
# At target 1 with a unit no longer than the interval, while tasks wait for a slot: instance-seconds a second
# of the workflow is worth even before the deadline (see ``SlowdownPolicy._queued_time_price``).
QUEUED_SECOND_WORTH = 1.25


def quantile_levels(
    model: LevelModel, state: RunState, prediction: Prediction, dispatch: DispatchEstimate, prior_tail: bool = False
) -> Levels:
    """The remaining work with every task at its 90th-percentile remaining time: what a P90 end is estimated on.

    The one place a P90 end's work comes from (the level-based model here): an estimator that gives a
    makespan distribution replaces this function. ``prior_tail``: a task not started of a stage timed by
    a prior keeps that prior's tail (``Prediction.remaining_p90_wide_s``), as the per-second bill to the
    workflow's end counts it; a deadline counts it at the prior's median, as the level model does.
    """
    wide = prediction.remaining_p90_wide_s if prior_tail else None
    p90 = wide if wide is not None else prediction.remaining_p90_s
    if p90 is None:
        return model.remaining(state, prediction, dispatch)
    return model.remaining(state, replace(prediction, remaining_mean_s=p90, remaining_s=p90), dispatch)


def _sunk(state: RunState, task: int, moment: float) -> float:
    """The work a running task loses if its instance is terminated at ``moment``: what it will have run by
    then, and what earlier kills already cost it."""
    return moment - float(state.start_time[task]) + float(state.lost_s[task])


def _running_end_guessed(state: RunState, prediction: Prediction) -> bool:
    """Whether a running pool task is timed only from a prior: then when it, and the workflow, ends is a guess."""
    running = (state.status == RUNNING_TASK) & state.workflow.on_pool
    return bool((running & ~np.isin(prediction.policy, list(MEASURED))).any())


class SlowdownPolicy:
    """The cheapest pool within a target slowdown of the full pool, on a whole-DAG estimate."""

    def __init__(
        self, predictor: Predictor, dispatch: DispatchModel, config: SteeringConfig, name: str = "target-slowdown"
    ) -> None:
        self.predictor = predictor
        self.dispatch = dispatch
        self.config = config
        self.name = name
        self._model: LevelModel | None = None
        self._released: dict[str, float] = {}  # instance -> when it is terminated
        self._guessing_since: float | None = None  # first of the decisions in a row under the speculation cap
        self._bill = WorkflowBill()  # every instance the cloud listed, for the workflow's budget

    def reconfigure(self, steering: SteeringConfig) -> None:
        self.config = steering

    def let_go(self, instance_id: str, at: float) -> None:
        """Count ``instance_id`` out of the pool, terminated at ``at``: released by a decorator (a market swap)."""
        self._released[instance_id] = at

    def plan(self, now: float, state: RunState, instances: Sequence[Instance], queue_order: np.ndarray) -> PlanResult:
        if self._model is None or self._model.workflow is not state.workflow:
            self._model = LevelModel(state.workflow)
        model, config = self._model, self.config
        self.predictor.update(state, now)
        self.dispatch.update(state, now)
        prediction = self.predictor.predict(state, now)
        dispatch = self.dispatch.estimate()
        model.learn(state)
        live = {i.instance_id for i in instances}
        if config.budget is not None:  # before the releases of instances gone are forgotten: they end the bill
            self._bill.track(config, instances, self._released, now)
        self._released = {i: at for i, at in self._released.items() if i in live}
        pool = [
            i
            for i in instances
            if i.instance_id not in self._released and i.state in (CloudState.RUNNING, CloudState.PENDING)
        ]
        leaving = [i for i in instances if i.instance_id in self._released]
        postponed = self._postpone_kills(state, prediction, leaving, now)
        restart = self._restart_costs(state, prediction, pool, now)
        upcoming = self._upcoming(state, prediction, dispatch, restart)
        counts = {p: c for p, c in enumerate(np.bincount(prediction.policy).tolist()) if p > 0 and c > 0}
        if state.n_done() >= state.workflow.n_tasks:
            return PlanResult(self._wind_down(now, pool), upcoming, counts, prediction)
        levels = model.remaining(state, prediction, dispatch)
        origin = state.first_event_time if state.first_event_time is not None else 0.0
        full = model.full_pool(state, prediction, dispatch, config.max_instances * config.slots_per_instance, now)
        aim = self._aim(state, now)
        # An operator's deadline is what the estimate is held to, guesses and all: no cap on them then.
        cap = None if aim.deadline is not None else self._speculation_cap(state, prediction, levels)
        keep_at_most = cap if self._guessed_for(now, cap) >= GUESS_KEPT_LAGS * config.interval_s else None
        late_levels = None
        if aim.deadline is not None and config.deadline_quantile == "p90":
            late_levels = quantile_levels(model, state, prediction, dispatch)
        best, choices, deadline, bound = self._choices(
            now,
            levels,
            pool,
            leaving,
            restart,
            dispatch,
            origin + full,
            keep_at_most,
            aim,
            late_levels,
            _work_on_hosts(state, prediction),
            self._work_at_the_end(state, prediction, dispatch),
        )
        floor = 0
        blind = self._blind(state, prediction)
        # Late whatever it does, or a deadline that an estimate of nothing measured cannot speak for: at least a
        # slot for every task still there at the next boot.
        if best.end_at_quantile > deadline or (aim.deadline is not None and blind):
            floor = self._reactive_floor(levels, pool, blind)
        decision = self._decide(now, best, pool, floor, cap)
        if postponed:
            decision.postpone = postponed
            decision.rule += f"; {len(postponed)} draining kept to a later unit's end: their tasks would be killed"
        if aim.money_left is not None:
            bound = cut_to_budget(config, now, decision, pool, aim.money_left) or bound
            self._released.update(decision.release_at)
        if aim.deadline is not None:
            decision.rule += self._deadline_words(best, aim)
        else:  # the end the target asks for, relative: on a real site the clock is epoch seconds, which nobody reads
            left = deadline - now
            decision.rule += f"; target end in {left:.0f} s" if left >= 0 else f"; target end passed {-left:.0f} s ago"
        if bound and aim.budget is not None:
            committed = aim.budget - (aim.money_left or 0.0)
            if committed > aim.budget:
                decision.rule += f"; budget {aim.budget:g} exceeded ({committed:.2f} committed): only the minimal pool"
            else:
                decision.rule += f"; budget {aim.budget:g} binds ({committed:.2f} committed)"
        estimates = [SizeEstimate(c.size, c.end, c.cost) for c in choices if abs(c.size - best.size) <= 1]
        return PlanResult(decision, upcoming, counts, prediction, estimates, full_pool_makespan_s=origin + full)

    # -- the choices ------------------------------------------------------------------

    def _members(
        self,
        now: float,
        pool: Sequence[Instance],
        leaving: Sequence[Instance],
        restart: dict[str, float],
        work_on: Mapping[str, float],
    ) -> list[PoolMember]:
        config = self.config
        billing, lag = config.billing, config.interval_s
        limit = self._restart_limit()
        min_age = config.min_instance_age_intervals * config.interval_s
        # With a unit renewed at every decision, an idle instance kept for its age pays an interval for nothing:
        # the age guard then holds only instances running work.
        young_may_go = config.planning_unit_s <= config.interval_s
        members = []
        for i in pool:
            ready = now if i.state == CloudState.RUNNING else max(i.launch_time + lag, now)
            paid = now + billing.time_to_next_charge(i.launch_time, now)
            old_enough = now - i.launch_time >= min_age or (
                young_may_go and i.state == CloudState.RUNNING and i.instance_id not in work_on
            )
            releasable = restart.get(i.instance_id, 0.0) <= limit and old_enough
            dear = dearness(config, i)
            working = i.instance_id in work_on  # the work running now is on it: the model puts it there first
            members.append(
                PoolMember(
                    i.instance_id,
                    i.slots,
                    ready,
                    paid,
                    i.launch_time,
                    releasable=releasable,
                    dearness=dear,
                    running_work=working,
                )
            )
        for i in leaving:  # released earlier: drained, it ends the tasks on it, at no further cost
            end = self._released[i.instance_id]
            ready = now if i.state == CloudState.RUNNING else i.launch_time + lag
            gone = _serves_until(end, now, work_on.get(i.instance_id, 0.0), i.slots)
            members.append(PoolMember(i.instance_id, i.slots, ready, end, i.launch_time, gone_at=gone, let_go=True))
        return members

    def _choices(
        self,
        now: float,
        levels: Levels,
        pool: Sequence[Instance],
        leaving: Sequence[Instance],
        restart: dict[str, float],
        dispatch: DispatchEstimate,
        full_pool_end: float,
        keep_at_most: int | None,
        aim: Aim,
        late_levels: Levels | None,
        work_on: Mapping[str, float],
        end_levels: Callable[[], Levels] | None,
    ) -> tuple[Choice, list[Choice], float, bool]:
        """The best pool size, every size looked at (at most that many instances for any level), and the deadline.

        Every size up to 12 above the smallest is looked at, then sizes about
        15 % apart, then every size within 3 of the best of those: a few
        dozen schedules however large ``max_instances`` is. No size above
        ``keep_at_most``, unless the instances that cannot go already make more.
        With an operator's deadline or budget (``aim``) the best is chosen by
        ``choices.within``; ``late_levels``: the work at P90 for a P90 deadline. Under a
        deadline a choice's ``end_q`` is also no earlier than the estimate with
        the frontier run in whole tasks: a promise cannot count on a task split
        across slots. ``end_levels``: the work at P90, when no
        running task's end is a guess; a choice whose end comes before the
        next decision pays its pool only up to that P90 end (the pool goes
        when the workflow ends). The last value: whether the budget bound.
        """
        config, model = self.config, self._model
        assert model is not None
        billing, lag, interval, slots = config.billing, config.interval_s, config.interval_s, config.slots_per_instance
        base = rank_members(self._members(now, pool, leaving, restart, work_on))
        # How long a job started now holds its slot: the frontier's mean task.
        lead = levels.work_s[0] / levels.tasks[0] if levels.tasks[0] > 0 else 0.0
        kept = [b for b in base if b.gone_at == math.inf]
        # Fewer instances: the cheapest to let go leave at the end of their paid unit: the dearest type first,
        # then those whose release loses the least work, as WIRE's Algorithm 2 orders them.
        going = sorted(
            (b for b in kept if b.releasable),
            key=lambda b: (-b.dearness, restart.get(b.instance_id, 0.0), b.paid_until, b.instance_id),
        )
        # Let go now, an instance only ends the tasks on it; let go at a later decision, it serves until then.
        dropped = {
            b.instance_id: replace(
                b,
                gone_at=_serves_until(b.paid_until, now, work_on.get(b.instance_id, 0.0), b.slots)
                if drains_now(b.paid_until, now, interval, lead)
                else b.paid_until,
            )
            for b in going
        }
        low = max(config.min_instances, len(kept) - len(going), 1)
        high = max(config.max_instances if keep_at_most is None else min(config.max_instances, keep_at_most), low)
        new_member = PoolMember("new", slots, now + lag, now, now)
        price = config.max_instances / billing.charging_unit_s  # lateness, per second: the full pool's price
        early = self._queued_time_price(levels, pool)
        seen: dict[int, Choice] = {}
        promised = aim.deadline is not None
        late_work = functools.cache(end_levels) if end_levels is not None else None

        def look(size: int) -> Choice:
            if size not in seen:
                if size <= len(kept):
                    drop = {b.instance_id for b in going[: len(kept) - size]}
                    members = [dropped[b.instance_id] if b.instance_id in drop else b for b in base]
                else:
                    members = [*base, *([new_member] * (size - len(kept)))]
                capacity = capacity_of(members)
                schedule = model.schedule(levels, now, capacity, slots, dispatch.level_latency_s)
                late = math.nan
                if promised:  # the frontier in whole tasks, and at P90 the later of that and the P90 end
                    late = model.schedule(levels, now, capacity, slots, dispatch.level_latency_s, True).end
                    if late_levels is not None:
                        p90 = model.schedule(late_levels, now, capacity, slots, dispatch.level_latency_s).end
                        late = max(late, p90)
                ends_at = math.inf
                if late_work is not None and schedule.end < now + interval:
                    ends_at = model.schedule(late_work(), now, capacity, slots, dispatch.level_latency_s).end
                plan = plan_instances(
                    members, schedule, billing, now, lag, interval, config.min_instances, lead, True, ends_at
                )
                seen[size] = Choice(size, schedule.end, plan.cost_units, plan.launch_now, plan.release_now, late)
            return seen[size]

        def best() -> tuple[Choice, bool]:
            return pick(seen.values(), deadline, aim, price, config.target_slowdown, early)

        size = low
        while size <= high:
            look(size)
            size = size + 1 if size < low + 12 else max(size + 1, int(size * 1.15))
        look(high)
        look(min(max(len(kept), low), high))
        deadline = self._deadline(now, full_pool_end, min(c.end for c in seen.values()))
        if aim.deadline is not None:
            deadline = aim.deadline
        chosen, _ = best()
        for around in range(chosen.size - 3, chosen.size + 4):
            if low <= around <= high:
                look(around)
        chosen, bound = best()
        return chosen, [seen[k] for k in sorted(seen)], deadline, bound

    def _deadline(self, now: float, full_pool_end: float, fastest_end: float) -> float:
        """When the workflow should end: the full pool's estimated end at target 1, above it a share of what is left.

        At a target above 1 the slack is a share of the remaining time of the
        fastest choice, re-estimated at each decision, not of the full pool's
        estimate from the start: that estimate starts near zero (nothing is
        measured at the first decisions) and grows many times over, so the
        slack it gives swings with each correction, least when the pool is
        first sized. A ratio of remaining times keeps its meaning when every
        prediction is off by the same factor, and what the run lost so far is
        neither made up for nor spent again.
        """
        target = self.config.target_slowdown
        if target <= 1.0 or not math.isfinite(fastest_end):  # no choice ends: nothing to share out
            return full_pool_end
        return now + target * max(fastest_end - now, 0.0)

    def _queued_time_price(self, levels: Levels, pool: Sequence[Instance]) -> float:
        """What a second of the workflow is worth before the deadline, in units: at target 1, with a unit no
        longer than the interval, while more tasks are queued or running than the slots up can hold.

        The target-1 deadline is the level model's full-pool makespan, and that model runs levels one
        after another, each at least as long as its longest task: where parallel chains of unequal
        length run side by side, it estimates the full pool's end too late and the pool behind the
        longest chain as no faster for more instances. Before that deadline time cost nothing, so the
        cheapest choice kept a few instances for a long queue (Epigenomics with several lanes: a
        fifth to a quarter slower than the reactive peers for a few percent less money). With a unit
        renewed at every decision an instance added for a queue is paid only while it runs, so a
        choice that ends sooner is worth ``QUEUED_SECOND_WORTH`` instance-seconds for each second it
        saves. With nothing queued, a longer unit (a launch pays a whole unit ahead), or slack to
        spend above target 1, time before the deadline stays free.
        """
        config = self.config
        if config.target_slowdown > 1.0 or config.planning_unit_s > config.interval_s:
            return 0.0
        up = sum(i.slots for i in pool if i.state == CloudState.RUNNING)
        if float(levels.tasks[0]) <= up:
            return 0.0
        return QUEUED_SECOND_WORTH / config.billing.charging_unit_s

    def _restart_limit(self) -> float:
        """The work an instance's release may sink: none when a unit spans several decisions.

        Algorithm 2's ``release_restart_cost_fraction`` x u only where every decision renews a unit
        anyway (u at most the interval); with longer units, keeping an instance until its tasks end
        costs at most the units they still need, and a killed task costs its work twice.
        """
        config = self.config
        if config.planning_unit_s > config.interval_s:
            return 0.0
        return config.release_restart_cost_fraction * config.planning_unit_s

    def _restart_costs(
        self, state: RunState, prediction: Prediction, pool: Sequence[Instance], now: float
    ) -> dict[str, float]:
        """Per instance: the work its running tasks would lose if it were terminated at its unit's end."""
        billing, guard = self.config.billing, self.config.release_guard_s
        moments = {
            i.instance_id: release_time(now, billing.time_to_next_charge(i.launch_time, now), guard) for i in pool
        }
        cost = {i: 0.0 for i in moments}
        p90 = prediction.p90_remaining()
        for task, host in state.host.items():
            moment = moments.get(host)
            if moment is None:
                continue
            lost = float(state.lost_s[task])
            start = float(state.start_time[task])
            on_time = now - start <= float(prediction.occupancy_s[task])  # not yet past its predicted length
            measured = int(prediction.policy[task]) in MEASURED  # a prior says little about when it ends
            if now + float(p90[task]) <= moment and on_time and measured and lost == 0.0:
                continue  # ends before the instance goes; an overdue task, or one killed once, is never risked
            cost[host] = max(cost[host], _sunk(state, task, moment))
        return cost

    def _postpone_kills(
        self, state: RunState, prediction: Prediction, leaving: Sequence[Instance], now: float
    ) -> dict[str, float]:
        """Drained instances to be terminated before the next decision that would then more likely than not
        kill a task, sinking more work than a release may: each is kept, still drained, to the end of the
        unit the next decision falls in (instance -> new termination time), and that decision looks again.

        Tasks on a released instance were predicted to end before its termination; one that runs
        late (1000Genome's ``frequency`` at K = 100: 10,000 s in, past every measurement of its
        stage) would be killed and rerun from zero, which costs its work twice and delays what
        follows it. Another unit of one instance costs less than that. The median end decides here,
        not the 90th percentile a release is held to: each postponement pays a unit for certain.
        """
        config = self.config
        next_decision = now + config.interval_s
        due = {i.instance_id: i for i in leaving if self._released[i.instance_id] < next_decision}
        if not due:
            return {}
        limit, billing, guard = self._restart_limit(), config.billing, config.release_guard_s
        later: dict[str, float] = {}
        for task, host in state.host.items():
            instance = due.get(host)
            if instance is None or host in later:
                continue
            moment = self._released[host]
            killed = now + float(prediction.remaining_s[task]) > moment
            if killed and _sunk(state, task, moment) > limit:
                at = release_time(
                    next_decision, billing.time_to_next_charge(instance.launch_time, next_decision), guard
                )
                later[host] = max(at, next_decision + guard)  # past the next decision's tick: it decides first
        self._released.update(later)
        return later

    # -- the operator's deadline and budget --------------------------------------------

    def _aim(self, state: RunState, now: float) -> Aim:
        """The deadline on this clock (a duration counts from the workflow's first event) and the money left."""
        config = self.config
        given: Deadline | None = config.operator_deadline()
        deadline = shown = None
        if given is not None:
            start = state.first_event_time if state.first_event_time is not None else now
            deadline, shown = given.resolve(start), given.shown()
        if config.budget is None:
            return Aim(deadline, shown or "")
        spent = self._bill.at(config, now)  # tracked at the start of this decision
        return Aim(deadline, shown or "", config.budget - spent.total, unit_money(config), config.budget)

    @staticmethod
    def _deadline_words(best: Choice, aim: Aim) -> str:
        """``; deadline 08:00Z met with ~12 min to spare`` or ``; deadline 08:00Z missed by ~25 min at full pool``."""
        assert aim.deadline is not None
        gap = aim.deadline - best.end_at_quantile
        if not math.isfinite(gap):
            return f"; deadline {aim.shown}: no estimate of the end yet"
        minutes = abs(gap) / 60.0
        amount = f"~{minutes:.0f} min" if minutes >= 1 else f"~{abs(gap):.0f} s"
        if gap >= 0:
            return f"; deadline {aim.shown} met with {amount} to spare"
        return f"; deadline {aim.shown} missed by {amount} at full pool"

    # -- the decision -----------------------------------------------------------------

    def _decide(
        self, now: float, best: Choice, pool: Sequence[Instance], floor: int = 0, cap: int | None = None
    ) -> SteeringDecision:
        m = len(pool)
        billing, guard = self.config.billing, self.config.release_guard_s
        launch_of = {i.instance_id: i.launch_time for i in pool}
        going = [i for i in best.release if i in launch_of]  # not those already let go
        launch = best.launch if cap is None else min(best.launch, max(cap - (m - len(going)), 0))
        short = floor - (m - len(going) + launch)
        if short > 0:  # below the reactive floor: keep what was to go first, then launch
            kept = min(short, len(going))
            going = going[: len(going) - kept]
            launch = min(launch + short - kept, max(self.config.max_instances - m, launch))
        when = {i: release_time(now, billing.time_to_next_charge(launch_of[i], now), guard) for i in going}
        self._released.update(when)
        target = m + launch - len(going)
        if launch > best.launch:
            rule = f"grow: {launch} for the tasks still queued when they boot"
        elif launch:
            rule = f"grow: {launch} needed before a later launch could boot"
        elif going:
            rule = "shrink: not needed before it could come back"
        else:
            rule = "hold"
        return SteeringDecision(target, best.size, launch=launch, release=going, release_at=when, rule=rule)

    def _work_at_the_end(
        self, state: RunState, prediction: Prediction, dispatch: DispatchEstimate
    ) -> Callable[[], Levels] | None:
        """The P90 work a choice ending before the next decision bills its pool to, or None: to the next decision.

        The pool goes when the workflow ends. Billed per second, an end estimated early costs the seconds
        it is off by; billed per started unit it costs whole units (billed to the estimated end, the
        per-minute slice's runs cheaper than PFA fell from 58 of 96 to 55-57). A running task timed from
        a prior leaves the end a guess.
        """
        model = self._model
        if model is None or self.config.billing_model != "second" or _running_end_guessed(state, prediction):
            return None
        return lambda: quantile_levels(model, state, prediction, dispatch, prior_tail=True)

    def _speculation_cap(self, state: RunState, prediction: Prediction, levels: Levels) -> int | None:
        """At most a slot per queued or running task while a running task's end is only guessed from a prior.

        Launching ahead for the levels behind it bets on that guess (a prior from other stages says
        little about a long serial task); a reactive policy waits for the work to be submitted, and so
        does this one then. None: no cap.
        """
        if not _running_end_guessed(state, prediction):
            return None
        return math.ceil(float(levels.tasks[0]) / self.config.slots_per_instance)

    def _guessed_for(self, now: float, cap: int | None) -> float:
        """How long the speculation cap has been in force, decision after decision (0 when it is not).

        Past ``GUESS_KEPT_LAGS`` launch lags the cap bounds the instances kept
        too, not only the ones launched: a pool kept idle for the levels
        behind guessed tasks (legacy Montage's serial ``mConcatFit`` then
        ``mBgModel``) bets unit after unit on guesses that keep being wrong,
        where a launch when they end costs one lag. A shorter wait is kept
        for: at K = 1 such tasks end within seconds, and letting the pool go
        there cost both time and units.
        """
        if cap is None:
            self._guessing_since = None
            return 0.0
        if self._guessing_since is None:
            self._guessing_since = now
        return now - self._guessing_since

    @staticmethod
    def _blind(state: RunState, prediction: Prediction) -> bool:
        """Whether a queued or running pool task has nothing measured to predict it by (WIRE's policies 1, 2)."""
        submitted = (state.status != DONE) & (state.status != WAITING) & state.workflow.on_pool
        return bool(np.any(submitted & (prediction.policy <= POLICY_RUNNING_ONLY)))

    def _reactive_floor(self, levels: Levels, pool: Sequence[Instance], blind: bool = False) -> int:
        """Instances for every queued or running task the pool up now will not have finished a launch lag from now.

        What a reactive policy would size the pool to when a new instance
        boots: the frontier's expected work beyond what the slots up now do
        in one lag, counted in tasks of the frontier's mean length. With units
        longer than the interval a launch pays a whole unit, which the model
        prices better than this count does: there the floor holds only while
        nothing is measured (``blind``), as a slot per queued or running task.
        """
        config = self.config
        work, tasks = float(levels.work_s[0]), float(levels.tasks[0])
        if config.planning_unit_s > config.interval_s:
            if not blind or tasks <= 0:
                return 0
            return min(math.ceil(tasks / config.slots_per_instance), config.max_instances)
        if tasks <= 0 or work <= 0:
            return 0
        up = sum(i.slots for i in pool if i.state == CloudState.RUNNING)
        left = min(tasks, max(work - up * config.interval_s, 0.0) / (work / tasks))
        return min(math.ceil(left / config.slots_per_instance), config.max_instances)

    def _wind_down(self, now: float, pool: Sequence[Instance]) -> SteeringDecision:
        """Nothing left to run: let every instance go at its unit's end, down to ``min_instances``."""
        config, billing = self.config, self.config.billing
        target = min(max(0, config.min_instances), config.max_instances)
        ordered = sorted(pool, key=lambda i: (billing.time_to_next_charge(i.launch_time, now), i.instance_id))
        going = [
            i.instance_id
            for i in ordered[: max(len(pool) - target, 0)]
            if billing.time_to_next_charge(i.launch_time, now) <= config.interval_s
        ]
        when = {
            i.instance_id: release_time(now, billing.time_to_next_charge(i.launch_time, now), config.release_guard_s)
            for i in pool
            if i.instance_id in going
        }
        self._released.update(when)
        return SteeringDecision(len(pool) - len(going), 0, release=going, release_at=when, rule="no work left")

    def _upcoming(
        self, state: RunState, prediction: Prediction, dispatch: DispatchEstimate, restart: dict[str, float]
    ) -> UpcomingLoad:
        """Every unfinished pool task with its expected remaining slot time, dispatch included."""
        wf = state.workflow
        left = np.flatnonzero((state.status != 3) & wf.on_pool)
        mean = prediction.mean_remaining()
        load = mean[left] + dispatch.gap_per_task(wf.stage_of[left])
        return UpcomingLoad(left, load, np.zeros(left.size), restart, 0)


def _work_on_hosts(state: RunState, prediction: Prediction) -> dict[str, float]:
    """Per instance running tasks: the work they have left (slot-seconds, at the mean)."""
    left = np.nan_to_num(prediction.mean_remaining())
    work: dict[str, float] = defaultdict(float)
    for task, host in state.host.items():
        work[host] += float(left[task])
    return dict(work)


def _serves_until(end: float, now: float, work_s: float, slots: int) -> float:
    """Until when a drained instance adds to the pool's slots, as the fluid levels count them.

    Drained, it takes no new job (Condor's drain; the loop drains an instance
    the moment it is released): its slots only end the tasks on it, whose
    work is ``work_s``. As a capacity the levels can use, that is all its
    slots until the work is done, and never past its termination at ``end``.
    Counted until ``end`` instead, a release looked free while tasks queued.
    """
    return min(end, now + work_s / slots) if slots > 0 else now
