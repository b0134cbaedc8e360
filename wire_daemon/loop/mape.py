"""The MAPE loop: Monitor, Analyze, Plan, Execute, once per interval.

It knows the world only through the ports (``wire_daemon.ports``): the same
code drives the emulated site and a real submit host. It keeps each
instance's lifecycle (``core.instances``) and publishes what it does on the
journal (``core.journal``) for the decisions log, metrics and status.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import Any

import numpy as np

from wire_daemon.core.config import SteeringConfig
from wire_daemon.core.errors import CloudError
from wire_daemon.core.instances import CloudState, Instance, Lifecycle, LifecycleState, can_move
from wire_daemon.core.journal import (
    InstanceReleased,
    InstancesLaunched,
    InstancesTerminated,
    Journal,
    Notice,
    ReleasePostponed,
    TasksBoosted,
    cloud_error,
)
from wire_daemon.core.pricing import Market
from wire_daemon.core.run_state import RunState, TaskStatus
from wire_daemon.ports import Cloud, CondorControl, Observations
from wire_daemon.ports.memory import JobSizer
from wire_daemon.ports.policy import PlanResult, ScalingPolicy, tell_let_go

log = logging.getLogger(__name__)


@dataclass
class DecisionRecord:
    """One iteration, as the decisions log keeps it."""

    time: float
    policy: str
    done: int
    running: int
    idle: int
    pool: int
    target: int
    planned: int
    launched: list[str] = field(default_factory=list)
    released: list[str] = field(default_factory=list)  # drained now, terminated when their unit ends
    terminated: list[str] = field(default_factory=list)  # terminated since the previous record
    postponed: list[str] = field(default_factory=list)  # released earlier, their termination moved later
    rule: str = ""
    upcoming_tasks: int = 0
    upcoming_load_s: float = 0.0
    prediction_policies: dict[int, int] = field(default_factory=dict)
    boosted: int = 0
    decision_s: float = 0.0
    cost_units: int | None = None  # set by the service, which knows the bill
    cost_money: float | None = None  # likewise: the money spent and committed so far
    money_committed: float | None = None  # of it, charged but not yet used (the rest of paid units, minimums)
    currency: str = ""  # steering.currency, set with the money
    notices: list[Notice] = field(default_factory=list)  # what the cloud, the guard and the monitor said
    # Policies that estimate the whole run (target-slowdown): the estimated
    # makespan and the units still to pay at the chosen size and one instance
    # either side, and the full pool's estimated makespan. Empty / None otherwise.
    # Each makespan is in seconds from this decision to the estimated end, on
    # any clock: a reader needs no epoch and no replay's origin.
    estimates: list[dict[str, float | int]] = field(default_factory=list)
    full_pool_makespan_s: float | None = None
    # Set by the service, kept out of a replay's records when unset: a dry run's decision (what it would have
    # done), and a large move of the predicted load since the previous decision with its reason, in words.
    dry_run: bool = False
    load_change: str = ""

    def to_json(self) -> dict[str, Any]:
        """The decisions-log line; notices become their one-line texts."""
        record = asdict(self)
        del record["notices"]
        if self.cost_units is None:
            del record["cost_units"]
        for money in ("cost_money", "money_committed"):
            if record[money] is None:
                del record[money]
            else:
                record[money] = round(record[money], 4)
        if not self.currency:
            del record["currency"]
        if not self.estimates:  # a policy without estimates logs the lines it always did
            del record["estimates"]
        if self.full_pool_makespan_s is None:
            del record["full_pool_makespan_s"]
        for unset in [key for key in ("dry_run", "load_change", "postponed") if not record[key]]:
            del record[unset]
        return record | {"notes": [n.line for n in self.notices]}


class PriorityBoost:
    """Raise JobPrio of the first N ready tasks of every stage, so each stage is measured early.

    "Ready" means idle in the queue when the loop looks: a task that was
    matched before the loop saw it idle is not boosted and does not count, so
    every stage gets N boosted tasks whatever the interval.
    """

    def __init__(self, state: RunState, first_n: int, priority: int) -> None:
        self.first_n = first_n
        self.priority = priority
        self.priority_of = np.zeros(state.workflow.n_tasks, dtype=np.int64)
        self.used = np.zeros(len(state.workflow.stages), dtype=np.int64)

    def apply(self, state: RunState, condor: CondorControl) -> list[str]:
        """Boost the tasks whose turn it is; their ids."""
        if self.first_n <= 0:
            return []
        boosted = []
        for task in self._to_boost(state).tolist():
            task_id = state.workflow.task_ids[task]
            condor.set_job_priority(task_id, self.priority)
            self.mark(state, task, self.priority)
            boosted.append(task_id)
        return boosted

    def mark(self, state: RunState, task: int, priority: int) -> None:
        """``task`` has its boost (now, or before a restart or a rebuilt DAG): it counts for its stage."""
        self.priority_of[task] = priority
        self.used[state.workflow.stage_of[task]] += 1

    def _to_boost(self, state: RunState) -> np.ndarray:
        """The first ``first_n - used`` unboosted idle tasks of each stage, in queue order.

        Vectorised over the queue, which can hold a whole wide stage; the same
        tasks the one-by-one scan of the queue would pick.
        """
        idle = state.idle_in_queue_order()
        stage_of = state.workflow.stage_of
        room = self.first_n - self.used
        candidates = idle[(room[stage_of[idle]] > 0) & (self.priority_of[idle] <= 0)]
        if candidates.size == 0:
            return candidates
        stages = stage_of[candidates]
        by_stage = np.argsort(stages, kind="stable")  # queue order kept within each stage
        sorted_stages = stages[by_stage]
        rank = np.empty(candidates.size, dtype=np.int64)
        rank[by_stage] = np.arange(candidates.size) - np.searchsorted(sorted_stages, sorted_stages)
        return candidates[rank < room[stages]]

    def queue_order(self, state: RunState) -> np.ndarray:
        """Idle tasks in the order Condor will start them: JobPrio, then submit order.

        A stable sort by descending priority, done on the few prioritised tasks
        only: the bulk of the queue has priority 0 and keeps its order.
        """
        idle = state.idle_in_queue_order()
        priority = self.priority_of[idle]
        marked = np.flatnonzero(priority)
        if marked.size == 0:
            return idle
        high, low = marked[priority[marked] > 0], marked[priority[marked] < 0]
        high = high[np.argsort(-priority[high], kind="stable")]
        low = low[np.argsort(-priority[low], kind="stable")]
        return idle[np.concatenate([high, np.flatnonzero(priority == 0), low])]


class MapeLoop:
    # The daemon's safe state (service/safe_state.py): while True nothing is launched and the timed
    # releases wait; the policy's decision is already "no change" then, this holds the rest.
    frozen: bool = False

    def __init__(
        self,
        state: RunState,
        observations: Observations,
        cloud: Cloud,
        condor: CondorControl,
        policy: ScalingPolicy,
        steering: SteeringConfig,
        boost: bool = True,
        journal: Journal | None = None,
        lifecycle: Lifecycle | None = None,
        joined: Callable[[str], bool] | None = None,
        memory: JobSizer | None = None,
    ) -> None:
        self.state = state
        self.observations = observations
        self.cloud = cloud
        self.condor = condor
        self.policy = policy
        self.steering = steering
        self.boost = PriorityBoost(state, steering.boost_first_tasks if boost else 0, steering.boost_priority)
        self._job_market: dict[int, tuple[Market, bool]] = {}  # the market each task was last asked for, required
        self._required: set[int] = set()  # tasks asked to start on their market only
        self.last_plan: PlanResult | None = None
        # Drained instance -> its termination time; published (InstanceReleased), so a state file keeps it.
        self.pending_releases: dict[str, float] = {}
        self.terminated: list[str] = []  # since the last record: timed releases happen between iterations
        self.journal = journal or Journal()
        self.lifecycle = lifecycle or Lifecycle()
        self.joined = joined  # does HTCondor see the instance's startd? None: running means joined
        self.memory = memory  # the request_memory rightsizer; None: requests are left alone

    def iterate(self, now: float) -> DecisionRecord:
        events = self.observations.poll_events()
        self.state.apply_all(events)  # Monitor
        if self.memory is not None:  # Analyze + Execute for job shapes: before the pool is sized on them
            for line in self.memory.step(now, events, self.state):
                self.journal.publish(Notice(line))
        instances = list(self.cloud.list_instances())
        self.lifecycle.sync(instances, self.joined)
        started = time.perf_counter()
        seen = self._as_the_pool_has_them(instances)
        plan = self.policy.plan(now, self.state, seen, self.boost.queue_order(self.state))  # Analyze + Plan
        decision_s = time.perf_counter() - started
        self.last_plan = plan
        decision = plan.decision
        launched = self._launch(now, decision.launch - decision.spot_launches, decision.launch_type)  # Execute
        launched += self._launch(now, decision.spot_launches, decision.launch_type, Market.SPOT)
        for instance_id in decision.release:
            self._release(now, instance_id, decision.release_at.get(instance_id, now))
        postponed = [i for i, at in decision.postpone.items() if self._postpone(now, i, at)]
        self.release_due(now)
        self._place_jobs(plan.job_markets, plan.job_required)
        boosted = self.boost.apply(self.state, self.condor)
        if boosted:
            self.journal.publish(TasksBoosted(now, tuple(boosted), self.boost.priority))
        return self._record(now, plan, len(instances), launched, postponed, len(boosted), decision_s)

    def _as_the_pool_has_them(self, instances: list[Instance]) -> list[Instance]:
        """The instances as the policy plans with them: one the cloud runs whose startd has not joined yet
        offers no slot, so it is still booting (the cloud says running a minute or two before the startd
        joins). Without ``joined`` (the emulated site) running means joined: the list is unchanged."""
        if self.joined is None:
            return instances
        booting = set(self.lifecycle.in_state(LifecycleState.BOOTING))
        return [
            replace(i, state=CloudState.PENDING) if i.state == CloudState.RUNNING and i.instance_id in booting else i
            for i in instances
        ]

    def _place_jobs(self, markets: dict[int, Market], required: set[int]) -> None:
        """Ask Condor to start each queued task on the market the plan chose for it (once per change)."""
        status = self.state.status
        for task in [t for t in self._required if t not in required and t not in markets]:
            if status[task] == TaskStatus.IDLE:  # no plan renews it: the job must not wait for it forever
                self._place_job(task, self._job_market[task][0], False)
            elif status[task] == TaskStatus.DONE:
                self._required.discard(task)
        for task, market in markets.items():
            if self._job_market.get(task) != (market, task in required) and status[task] != TaskStatus.DONE:
                self._place_job(task, market, task in required)

    def _place_job(self, task: int, market: Market, required: bool) -> None:
        self.condor.prefer_market(self.state.workflow.task_ids[task], market, required)
        self._job_market[task] = (market, required)
        if required:
            self._required.add(task)
        else:
            self._required.discard(task)

    def next_release(self) -> float | None:
        if self.frozen:
            return None
        return min(self.pending_releases.values(), default=None)

    def _call_launch(self, count: int, instance_type: str, market: Market) -> Sequence[Instance]:
        # The type and market only when chosen: a cloud of one on-demand type is called as it always was.
        if market is not Market.ON_DEMAND:
            return self.cloud.launch(count, instance_type=instance_type, market=market)
        if instance_type:
            return self.cloud.launch(count, instance_type=instance_type)
        return self.cloud.launch(count)

    def _launch(self, now: float, count: int, instance_type: str = "", market: Market = Market.ON_DEMAND) -> list[str]:
        if count <= 0 or self.frozen:
            return []
        try:
            made = self._call_launch(count, instance_type, market)
        except CloudError as failed:  # a guarded cloud reports its own; a bare one (a replay's) is reported here
            self.journal.publish(cloud_error(f"launching {count} ({market})", failed.kind, failed))
            made = [i for i in failed.partial if isinstance(i, Instance)]
        launched = [i.instance_id for i in made]
        self.lifecycle.move_all([i for i in launched if self.lifecycle.state_of(i) is None], LifecycleState.BOOTING)
        self.journal.publish(InstancesLaunched(now, tuple(launched)))
        return launched

    def _release(self, now: float, instance_id: str, terminate_at: float) -> None:
        """Drain now; terminate at ``terminate_at`` (``release_due``)."""
        self.condor.retire_instance(instance_id)
        if self._is_live(instance_id):
            self.lifecycle.move(instance_id, LifecycleState.DRAINING)
        self.pending_releases[instance_id] = terminate_at
        self.journal.publish(InstanceReleased(now, instance_id, terminate_at))

    def take_over_releases(self, pending: dict[str, float]) -> None:
        """Releases an earlier loop decided (a restart, a changed DAG): their timers, and the policy told,
        so that it does not count a draining instance's slots as its own, nor release it again."""
        self.pending_releases = dict(pending)
        for instance_id, terminate_at in pending.items():
            tell_let_go(self.policy, instance_id, terminate_at)

    def _postpone(self, now: float, instance_id: str, terminate_at: float) -> bool:
        """Move a drained instance's termination; it stays drained (no new job starts on it). False: it
        was not waiting for one."""
        if instance_id not in self.pending_releases:
            return False
        self.pending_releases[instance_id] = terminate_at
        self.journal.publish(ReleasePostponed(now, instance_id, terminate_at))
        return True

    def release_due(self, now: float) -> list[str]:
        """Terminate the drained instances whose time has come."""
        if self.frozen:
            return []
        due = [i for i, at in self.pending_releases.items() if at <= now]
        if due:
            self.terminate(due)
            for instance_id in due:
                del self.pending_releases[instance_id]
            self.terminated.extend(due)
            self.journal.publish(InstancesTerminated(now, tuple(due)))
        return due

    def terminate(self, instance_ids: list[str]) -> list[str]:
        """Terminate now, through the lifecycle: terminating before the cloud call, terminated after; those ended."""
        self.lifecycle.move_all([i for i in instance_ids if self._can_terminate(i)], LifecycleState.TERMINATING)
        ended = list(self.cloud.terminate(instance_ids))
        self.lifecycle.move_all(ended, LifecycleState.TERMINATED)
        return ended

    def _is_live(self, instance_id: str) -> bool:
        state = self.lifecycle.state_of(instance_id)
        return state is not None and state.is_live

    def _can_terminate(self, instance_id: str) -> bool:
        state = self.lifecycle.state_of(instance_id)
        return state is not None and can_move(state, LifecycleState.TERMINATING)

    def take_terminated(self) -> list[str]:
        done, self.terminated = self.terminated, []
        return done

    def _record(
        self,
        now: float,
        plan: PlanResult,
        pool: int,
        launched: list[str],
        postponed: list[str],
        boosted: int,
        decision_s: float,
    ) -> DecisionRecord:
        upcoming, full = plan.upcoming, plan.full_pool_makespan_s
        return DecisionRecord(
            time=now,
            policy=self.policy.name,
            done=self.state.n_done(),
            running=self.state.count(TaskStatus.RUNNING),
            idle=self.state.count(TaskStatus.IDLE),
            pool=pool,
            target=plan.decision.target,
            planned=plan.decision.planned,
            launched=launched,
            released=list(plan.decision.release),
            terminated=self.take_terminated(),
            postponed=postponed,
            rule=plan.decision.rule,
            upcoming_tasks=len(upcoming) if upcoming is not None else 0,
            upcoming_load_s=float(upcoming.remaining_s.sum()) if upcoming is not None else 0.0,
            prediction_policies=plan.policy_counts,
            boosted=boosted,
            decision_s=decision_s,
            estimates=[e.to_json(now) for e in plan.estimates],
            full_pool_makespan_s=None if full is None else round(full - now, 1),
        )
