"""The MAPE loop's own duties: the priority boost and timed releases."""

import numpy as np

from wire_daemon.core.billing import Billing
from wire_daemon.core.config import EmulationConfig, SteeringConfig
from wire_daemon.core.events import EventKind, TaskEvent
from wire_daemon.core.instances import CloudState
from wire_daemon.core.journal import Journal, ReleasePostponed
from wire_daemon.core.pricing import Market
from wire_daemon.core.run_state import RunState
from wire_daemon.core.workflow import TaskSpec, build_workflow
from wire_daemon.emulated.site import EmulatedSite
from wire_daemon.loop.mape import MapeLoop, PriorityBoost
from wire_daemon.ports.policy import PlanResult, SteeringDecision


class RecordingCondor:
    def __init__(self):
        self.calls = []

    def set_job_priority(self, task_id, priority):
        self.calls.append((task_id, priority))

    def retire_instance(self, instance_id):
        self.calls.append(("retire", instance_id))

    def prefer_market(self, task_id, market, required=False):
        self.calls.append((task_id, market, "required") if required else (task_id, market))


def _state():
    specs = [TaskSpec(f"a{i}", "A") for i in range(8)] + [TaskSpec(f"b{i}", "B") for i in range(3)]
    state = RunState(build_workflow("w", "test", specs))
    for i, spec in enumerate(specs):
        state.apply(TaskEvent(float(i), EventKind.SUBMITTED, spec.task_id))
    return state


def test_boost_first_five_ready_tasks_of_each_stage_once():
    state = _state()
    boost = PriorityBoost(state, first_n=5, priority=10)
    condor = RecordingCondor()
    assert len(boost.apply(state, condor)) == 8
    assert condor.calls == [(f"a{i}", 10) for i in range(5)] + [(f"b{i}", 10) for i in range(3)]
    assert boost.apply(state, condor) == []  # a stage's quota is spent once


def test_queue_order_puts_boosted_tasks_first_then_submit_order():
    state = _state()
    state.apply(TaskEvent(20.0, EventKind.STARTED, "a0", host="i-1"))  # matched before the loop saw it
    boost = PriorityBoost(state, first_n=2, priority=10)
    boost.apply(state, RecordingCondor())
    order = [state.workflow.task_ids[i] for i in boost.queue_order(state)]
    assert order == ["a1", "a2", "b0", "b1", "a3", "a4", "a5", "a6", "a7", "b2"]


class ReleaseFirstInstance:
    name = "test"

    def plan(self, now, state, instances, queue_order):
        first = instances[0].instance_id
        return PlanResult(SteeringDecision(0, 0, release=[first], release_at={first: 50.0}))


def _one_slot_site(wf):
    """One instance of one slot up at the start, per-minute units, a negotiation every second."""
    config = EmulationConfig(initial_instances=1, negotiation_interval_s=1.0, bill_initial_boot=False)
    return EmulatedSite(wf, config, slots_per_instance=1, billing=Billing(60.0))


def test_release_drains_now_and_terminates_at_its_time():
    wf = build_workflow("w", "test", [TaskSpec("a", "A", runtime_s=30.0), TaskSpec("b", "A", runtime_s=30.0)])
    site = _one_slot_site(wf)
    site.advance_to(0.0)  # "a" or "b" starts on the only slot
    loop = MapeLoop(RunState(wf), site, site, site, ReleaseFirstInstance(), SteeringConfig(), boost=False)
    loop.iterate(0.0)
    assert loop.pending_releases == {"i-00001": 50.0}
    site.advance_to(45.0)  # the first task ended at 30; draining: the second never starts
    started = [e.task_id for e in site.poll_events() if e.kind == EventKind.STARTED]
    assert started == []
    assert loop.release_due(49.0) == [] and site.list_instances()
    assert loop.release_due(50.0) == ["i-00001"]
    assert site.list_instances() == []
    assert site.cost_units(50.0) == 1


class Seen:
    def __init__(self):
        self.events = []

    def notify(self, event):
        self.events.append(event)


class Scripted:
    """A policy whose n-th plan is its n-th answer (the last one from then on); an answer is a function of
    the state and the instances listed, giving the PlanResult."""

    name = "test"

    def __init__(self, *answers):
        self.answers = answers
        self.plans = 0

    def plan(self, now, state, instances, queue_order):
        self.plans += 1
        return self.answers[min(self.plans, len(self.answers)) - 1](state, instances)


def _release_then_postpone() -> Scripted:
    """Releases the first instance to end at 50 s; at the next decision moves that end to 110 s."""

    def release(state, instances):
        first = instances[0].instance_id
        return PlanResult(SteeringDecision(0, 0, release=[first], release_at={first: 50.0}))

    def postpone(state, instances):
        return PlanResult(SteeringDecision(0, 0, postpone={instances[0].instance_id: 110.0, "i-gone": 90.0}))

    return Scripted(release, postpone)


def test_a_postponed_release_stays_drained_and_ends_at_its_new_time():
    wf = build_workflow("w", "test", [TaskSpec("a", "A", runtime_s=100.0), TaskSpec("b", "A", runtime_s=30.0)])
    site = _one_slot_site(wf)
    site.advance_to(0.0)
    condor = RecordingCondor()
    journal, seen = Journal(), Seen()
    journal.subscribe(seen)
    loop = MapeLoop(
        RunState(wf), site, site, condor, _release_then_postpone(), SteeringConfig(), journal=journal, boost=False
    )
    loop.iterate(0.0)
    record = loop.iterate(45.0)
    assert loop.pending_releases == {"i-00001": 110.0}  # an instance not released is not made one
    assert record.postponed == ["i-00001"] and record.to_json()["postponed"] == ["i-00001"]
    assert [e for e in seen.events if isinstance(e, ReleasePostponed)] == [ReleasePostponed(45.0, "i-00001", 110.0)]
    assert condor.calls.count(("retire", "i-00001")) == 1  # drained once, and it stays so
    assert loop.release_due(60.0) == []
    assert loop.release_due(110.0) == ["i-00001"]


def test_vectorised_boost_and_queue_order_match_the_one_by_one_scan():
    import random

    rng = random.Random(4)
    for _ in range(40):
        specs = [TaskSpec(f"t{i}", rng.choice("ABCD")) for i in range(rng.randint(1, 60))]
        state = RunState(build_workflow("w", "test", specs))
        for spec in rng.sample(specs, len(specs)):
            state.apply(TaskEvent(0.0, EventKind.SUBMITTED, spec.task_id))
        boost = PriorityBoost(state, first_n=rng.randint(1, 6), priority=rng.choice([10, -3]))
        for _ in range(3):
            for spec in rng.sample(specs, min(len(specs), rng.randint(0, 5))):  # some start between rounds
                state.apply(TaskEvent(1.0, EventKind.STARTED, spec.task_id, host="i-1"))
            expected, used, prio = [], boost.used.copy(), boost.priority_of.copy()
            for task in state.idle_in_queue_order().tolist():  # the rule, task by task
                stage = state.workflow.stage_of[task]
                if used[stage] < boost.first_n and prio[task] <= 0:
                    expected.append(state.workflow.task_ids[task])
                    used[stage] += 1
                    prio[task] = boost.priority
            condor = RecordingCondor()
            assert len(boost.apply(state, condor)) == len(expected)
            assert [task for task, _ in condor.calls] == expected
            idle = state.idle_in_queue_order()
            assert (
                boost.queue_order(state).tolist() == idle[np.argsort(-boost.priority_of[idle], kind="stable")].tolist()
            )


class PlacesJobs:
    name = "test"

    def plan(self, now, state, instances, queue_order):
        wf = state.workflow
        markets = {wf.index_of("a0"): Market.ON_DEMAND, wf.index_of("a1"): Market.SPOT}
        return PlanResult(SteeringDecision(0, 0), job_markets=markets)


def test_the_loop_hands_each_queued_task_s_market_to_condor_once_per_change():
    state, condor = _state(), RecordingCondor()
    loop = MapeLoop(state, _NoEvents(), _NoCloud(), condor, PlacesJobs(), SteeringConfig(), boost=False)
    loop.iterate(0.0)
    loop.iterate(180.0)
    assert condor.calls == [("a0", Market.ON_DEMAND), ("a1", Market.SPOT)]


def _requires_once() -> Scripted:
    """Requires on-demand for a0 in its first plan, then places nothing."""

    def requires(state, instances):
        a0 = state.workflow.index_of("a0")
        return PlanResult(SteeringDecision(0, 0), job_markets={a0: Market.ON_DEMAND}, job_required={a0})

    return Scripted(requires, lambda state, instances: PlanResult(SteeringDecision(0, 0)))


def test_a_requirement_no_later_plan_renews_is_lifted_while_the_task_waits():
    state, condor = _state(), RecordingCondor()
    loop = MapeLoop(state, _NoEvents(), _NoCloud(), condor, _requires_once(), SteeringConfig(), boost=False)
    loop.iterate(0.0)
    loop.iterate(180.0)
    loop.iterate(360.0)
    assert condor.calls == [("a0", Market.ON_DEMAND, "required"), ("a0", Market.ON_DEMAND)]


class _NoEvents:
    def poll_events(self):
        return []


class _NoCloud:
    slots_per_instance = 4

    def list_instances(self, include_unusable=False):
        return []


class CountsOut:
    name = "counts-out"

    def __init__(self):
        self.let_go_calls = []

    def let_go(self, instance_id, at):
        self.let_go_calls.append((instance_id, at))

    def plan(self, now, state, instances, queue_order):
        return PlanResult(SteeringDecision(len(instances), len(instances)))


class Wrapper:
    name = "wrapper"

    def __init__(self, inner):
        self.inner = inner

    def plan(self, now, state, instances, queue_order):
        return self.inner.plan(now, state, instances, queue_order)


def test_a_new_loop_takes_over_the_releases_of_the_last_and_tells_its_policy_through_wrappers():
    wf = build_workflow("w", "test", [TaskSpec("a", "A", runtime_s=30.0)])
    site = EmulatedSite(wf, EmulationConfig(initial_instances=1), slots_per_instance=1, billing=Billing(60.0))
    inner = CountsOut()
    loop = MapeLoop(RunState(wf), site, site, site, Wrapper(Wrapper(inner)), SteeringConfig(), boost=False)
    pending = {"i-00001": 50.0}
    loop.take_over_releases(pending)
    pending["i-00002"] = 70.0  # the earlier loop's dict is its own
    assert loop.pending_releases == {"i-00001": 50.0}
    assert inner.let_go_calls == [("i-00001", 50.0)]
    # A policy that keeps no count of released instances (WIRE, the baselines) is left alone.
    plain = MapeLoop(RunState(wf), site, site, site, ReleaseFirstInstance(), SteeringConfig(), boost=False)
    plain.take_over_releases({"i-00001": 50.0})
    assert plain.pending_releases == {"i-00001": 50.0}


def test_the_policy_sees_an_instance_as_booting_until_its_startd_joins():
    """The cloud runs a VM a minute or two before its startd joins: until then it offers no slot."""
    wf = build_workflow("w", "test", [TaskSpec("a", "A", runtime_s=30.0)])
    seen = []
    policy = Scripted(
        lambda state, instances: seen.append([i.state for i in instances]) or PlanResult(SteeringDecision(1, 0))
    )
    for joined, expected in ((lambda instance_id: False, CloudState.PENDING), (None, CloudState.RUNNING)):
        site = _one_slot_site(wf)
        loop = MapeLoop(RunState(wf), site, site, site, policy, SteeringConfig(), boost=False, joined=joined)
        loop.iterate(0.0)
        assert seen[-1] == [expected]
        assert [i.state for i in site.list_instances()] == [CloudState.RUNNING]  # the cloud's word is kept
