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
   past it at the full pool's price. Of equally cheap choices it takes the
   faster at target 1; above it, the one that launches fewest instances now
   (a launch commits money on estimates), then the faster.

Already-paid units are free: an instance is only ever let go when its paid
unit is about to end (drained at once, terminated ``release_guard_s`` before
the unit ends, as every policy here does), and until then the model counts
its slots. An instance whose tasks would lose more than
``release_restart_cost_fraction`` x u of work (Algorithm 2's rule, lost work
counted) is kept, and with units longer than the interval one that would lose
any work at all; a task predicted only from a prior is never counted on to end
in time. So is one younger than ``min_instance_age_intervals``. Before anything
is measured, with units longer than the interval, the pool grows to a slot per
queued or running task, as a reactive policy does. While a running task is
predicted only from a prior, launches stop at a slot per queued or running
task; once that has lasted two launch lags, so does what is kept.

With nothing left to run the pool goes to ``min_instances`` at the units'
ends, like WIRE. The decision record carries the estimates at the chosen
size and one instance either side.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace

import numpy as np

from wire_daemon.core.config import SteeringConfig
from wire_daemon.core.instances import CloudState, Instance
from wire_daemon.core.run_state import DONE, WAITING, RunState
from wire_daemon.core.run_state import RUNNING as RUNNING_TASK
from wire_daemon.plan.makespan import LevelModel, Levels, PoolMember, capacity_of, plan_instances, rank_members
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


@dataclass(frozen=True)
class _Choice:
    size: int  # the most instances any level may use
    end: float  # estimated end of the workflow
    cost: int  # units still to pay
    launch: int  # launched now
    release: tuple[str, ...]  # let go now (at the end of their paid unit)


def _best(choices: Iterable[_Choice], deadline: float, price: float, target: float) -> _Choice:
    """The cheapest choice, lateness past the deadline priced at ``price`` a second.

    Of equally cheap choices: the faster at target 1; above it, the one that
    launches fewest instances now (a launch commits money on estimates), then
    the faster.
    """

    def score(c: _Choice) -> tuple[float, ...]:
        late = c.cost + price * max(c.end - deadline, 0.0)
        return (late, c.launch, c.end, c.size) if target > 1.0 else (late, c.end, c.size)

    return min(choices, key=score)


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

    def reconfigure(self, steering: SteeringConfig) -> None:
        self.config = steering

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
        self._released = {i: at for i, at in self._released.items() if i in live}
        pool = [
            i
            for i in instances
            if i.instance_id not in self._released and i.state in (CloudState.RUNNING, CloudState.PENDING)
        ]
        leaving = [i for i in instances if i.instance_id in self._released]
        restart = self._restart_costs(state, prediction, pool, now)
        upcoming = self._upcoming(state, prediction, dispatch, restart)
        counts = {p: c for p, c in enumerate(np.bincount(prediction.policy).tolist()) if p > 0 and c > 0}
        if state.n_done() >= state.workflow.n_tasks:
            return PlanResult(self._wind_down(now, pool), upcoming, counts, prediction)
        levels = model.remaining(state, prediction, dispatch)
        origin = state.first_event_time if state.first_event_time is not None else 0.0
        full = model.full_pool(state, prediction, dispatch, config.max_instances * config.slots_per_instance, now)
        cap = self._speculation_cap(state, prediction, levels)
        keep_at_most = cap if self._guessed_for(now, cap) >= GUESS_KEPT_LAGS * config.interval_s else None
        best, choices, deadline = self._choices(
            now, levels, pool, leaving, restart, dispatch, origin + full, keep_at_most
        )
        floor = 0
        if best.end > deadline:  # late whatever it does: at least a slot for every task still there at the next boot
            floor = self._reactive_floor(levels, pool, self._blind(state, prediction))
        decision = self._decide(now, best, pool, floor, cap)
        # Relative: on a real site the clock is epoch seconds, which nobody reads.
        left = deadline - now
        decision.rule += f"; deadline in {left:.0f} s" if left >= 0 else f"; deadline passed {-left:.0f} s ago"
        estimates = [SizeEstimate(c.size, c.end, c.cost) for c in choices if abs(c.size - best.size) <= 1]
        return PlanResult(decision, upcoming, counts, prediction, estimates, full_pool_makespan_s=origin + full)

    # -- the choices ------------------------------------------------------------------

    def _members(
        self, now: float, pool: Sequence[Instance], leaving: Sequence[Instance], restart: dict[str, float]
    ) -> list[PoolMember]:
        config = self.config
        billing, lag = config.billing, config.interval_s
        limit = self._restart_limit()
        min_age = config.min_instance_age_intervals * config.interval_s
        members = []
        for i in pool:
            ready = now if i.state == CloudState.RUNNING else max(i.launch_time + lag, now)
            paid = now + billing.time_to_next_charge(i.launch_time, now)
            releasable = restart.get(i.instance_id, 0.0) <= limit and now - i.launch_time >= min_age
            dear = dearness(config, i)
            members.append(
                PoolMember(i.instance_id, i.slots, ready, paid, i.launch_time, releasable=releasable, dearness=dear)
            )
        for i in leaving:  # released earlier: its slots serve until it is terminated, at no further cost
            gone = self._released[i.instance_id]
            ready = now if i.state == CloudState.RUNNING else i.launch_time + lag
            members.append(PoolMember(i.instance_id, i.slots, ready, gone, i.launch_time, gone_at=gone, let_go=True))
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
        keep_at_most: int | None = None,
    ) -> tuple[_Choice, list[_Choice], float]:
        """The best pool size, every size looked at (at most that many instances for any level), and the deadline.

        Every size up to 12 above the smallest is looked at, then sizes about
        15 % apart, then every size within 3 of the best of those: a few
        dozen schedules however large ``max_instances`` is. No size above
        ``keep_at_most``, unless the instances that cannot go already make more.
        """
        config, model = self.config, self._model
        assert model is not None
        billing, lag, interval, slots = config.billing, config.interval_s, config.interval_s, config.slots_per_instance
        base = rank_members(self._members(now, pool, leaving, restart))
        # How long a job started now holds its slot: the frontier's mean task.
        lead = levels.work_s[0] / levels.tasks[0] if levels.tasks[0] > 0 else 0.0
        kept = [b for b in base if b.gone_at == math.inf]
        # Fewer instances: the cheapest to let go leave at the end of their paid unit (the dearest type first).
        going = sorted((b for b in kept if b.releasable), key=lambda b: (-b.dearness, b.paid_until, b.instance_id))
        dropped = {b.instance_id: replace(b, gone_at=b.paid_until) for b in going}
        low = max(config.min_instances, len(kept) - len(going), 1)
        high = max(config.max_instances if keep_at_most is None else min(config.max_instances, keep_at_most), low)
        new_member = PoolMember("new", slots, now + lag, now, now)
        price = config.max_instances / config.planning_unit_s  # lateness, per second: the full pool's price
        seen: dict[int, _Choice] = {}

        def look(size: int) -> _Choice:
            if size not in seen:
                if size <= len(kept):
                    drop = {b.instance_id for b in going[: len(kept) - size]}
                    members = [dropped[b.instance_id] if b.instance_id in drop else b for b in base]
                else:
                    members = [*base, *([new_member] * (size - len(kept)))]
                schedule = model.schedule(levels, now, capacity_of(members), slots, dispatch.level_latency_s)
                plan = plan_instances(members, schedule, billing, now, lag, interval, config.min_instances, lead, True)
                seen[size] = _Choice(size, schedule.end, plan.cost_units, plan.launch_now, plan.release_now)
            return seen[size]

        size = low
        while size <= high:
            look(size)
            size = size + 1 if size < low + 12 else max(size + 1, int(size * 1.15))
        look(high)
        look(min(max(len(kept), low), high))
        deadline = self._deadline(now, full_pool_end, min(c.end for c in seen.values()))
        best = _best(seen.values(), deadline, price, config.target_slowdown)
        for around in range(best.size - 3, best.size + 4):
            if low <= around <= high:
                look(around)
        best = _best(seen.values(), deadline, price, config.target_slowdown)
        return best, [seen[k] for k in sorted(seen)], deadline

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
        p90 = prediction.remaining_p90_s if prediction.remaining_p90_s is not None else prediction.remaining_s
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
            sunk = moment - start + lost
            cost[host] = max(cost[host], sunk)
        return cost

    # -- the decision -----------------------------------------------------------------

    def _decide(
        self, now: float, best: _Choice, pool: Sequence[Instance], floor: int = 0, cap: int | None = None
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

    def _speculation_cap(self, state: RunState, prediction: Prediction, levels: Levels) -> int | None:
        """At most a slot per queued or running task while a running task's end is only guessed from a prior.

        Launching ahead for the levels behind it bets on that guess (a prior from other stages says
        little about a long serial task); a reactive policy waits for the work to be submitted, and so
        does this one then. None: no cap.
        """
        running = (state.status == RUNNING_TASK) & state.workflow.on_pool
        guessed = running & ~np.isin(prediction.policy, list(MEASURED))
        if not guessed.any():
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
        mean = prediction.remaining_mean_s if prediction.remaining_mean_s is not None else prediction.remaining_s
        load = mean[left] + dispatch.gap_per_task(wf.stage_of[left])
        return UpcomingLoad(left, load, np.zeros(left.size), restart, 0)
