"""Memory in the plan and several instance types (issue 15, items 3 and 4)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from wire_daemon.core.billing import Billing
from wire_daemon.core.config import EmulationConfig, InstanceType, ReplayConfig, SteeringConfig
from wire_daemon.core.errors import ConfigError
from wire_daemon.core.events import EventKind, TaskEvent
from wire_daemon.core.instances import CloudState, Instance
from wire_daemon.core.run_state import RunState
from wire_daemon.core.workflow import TaskSpec, build_workflow
from wire_daemon.emulated.site import EmulatedSite
from wire_daemon.emulated.traces import load_trace
from wire_daemon.plan.makespan import PoolMember, rank_members
from wire_daemon.plan.shapes import ShapedPolicy, Work, choose_launch, fitting, predicted_work
from wire_daemon.plan.steering import InstanceView, choose_releases
from wire_daemon.ports.policy import PlanResult, SteeringDecision
from wire_daemon.ports.prediction import Prediction
from wire_daemon.runtime.replay import replay
from wire_daemon.runtime.settings import load_settings

DATA = Path(__file__).resolve().parents[1] / "data"
SMALL = InstanceType("c.small", cores=4, memory_mib=1600, price=1.0)
LARGE = InstanceType("c.large", cores=16, memory_mib=6400, price=4.0)


def test_fitting_is_cores_or_memory_whichever_runs_out_first():
    assert fitting(4, 0.0, 1000.0) == 4  # memory not modelled
    assert fitting(4, 1600.0, float("nan")) == 4  # no request known
    assert fitting(4, 1600.0, 400.0) == 4
    assert fitting(4, 1600.0, 500.0) == 3  # floor(1600 / 500)
    assert fitting(16, 6400.0, 1600.0) == 4
    assert fitting(4, 1600.0, 5000.0) == 1  # larger than the instance: one, not an empty pool


HOUR = Billing(3600.0)
PRICES = {"c.small": 1.0, "c.large": 4.0}


def test_proportional_prices_launch_the_smaller_type():
    busy = Work(slot_s=16 * 3600.0 * 5, mean_s=600.0, longest_s=600.0)  # fills 16 slots for five hours
    chosen = choose_launch([SMALL, LARGE], PRICES, 100.0, 16, 12, busy, HOUR)
    assert (chosen.kind, chosen.count) == (SMALL, 4)
    per_second = choose_launch([SMALL, LARGE], PRICES, 100.0, 16, 12, busy, Billing.per_second())
    assert per_second.kind == SMALL  # a larger instance pays a longer tail when its last task runs


def test_a_discounted_large_type_is_launched_only_for_work_that_fills_it():
    prices = {"c.small": 1.0, "c.large": 3.2}
    busy = Work(slot_s=16 * 3600.0 * 5, mean_s=600.0, longest_s=600.0)
    chosen = choose_launch([SMALL, LARGE], prices, 100.0, 4, 12, busy, HOUR)
    assert (chosen.kind, chosen.count, chosen.fit) == (LARGE, 1, 16)  # 0.2 a slot-hour against 0.25
    # Four tasks of ten minutes: a large instance would pay an hour for 16 slots and use four.
    short = Work(slot_s=4 * 600.0, mean_s=600.0, longest_s=600.0)
    assert choose_launch([SMALL, LARGE], prices, 100.0, 4, 12, short, HOUR).kind == SMALL
    # Twelve slots wanted and work for twelve: three small instances (3) cost less than a large one (3.2).
    twelve = Work(slot_s=12 * 3000.0, mean_s=3000.0, longest_s=3000.0)
    assert choose_launch([SMALL, LARGE], prices, 100.0, 12, 12, twelve, HOUR).kind == SMALL
    # Nothing predicted: the launch that costs least for the slots wanted.
    assert choose_launch([SMALL, LARGE], prices, 100.0, 16, 12, Work(), HOUR).kind == LARGE
    assert choose_launch([SMALL, LARGE], prices, 100.0, 4, 12, Work(), HOUR).kind == SMALL


def test_memory_fit_counts_in_the_type_choice():
    # 1000 MiB jobs fit once on the small type (1 a slot) and 6 times on the large (0.67 a slot).
    busy = Work(slot_s=6 * 3600.0 * 5, mean_s=600.0, longest_s=600.0)
    chosen = choose_launch([SMALL, LARGE], PRICES, 1000.0, 6, 12, busy, HOUR)
    assert (chosen.kind, chosen.count, chosen.fit) == (LARGE, 1, 6)
    # The same slots by cores only: four small instances are as cheap, and smaller.
    assert choose_launch([SMALL, LARGE], PRICES, 100.0, 6, 12, busy, HOUR).kind == SMALL


def test_a_launch_never_has_more_instances_than_room():
    busy = Work(slot_s=16 * 3600.0 * 5, mean_s=600.0, longest_s=600.0)
    chosen = choose_launch([LARGE, SMALL], {"c.small": 1.0, "c.large": 4.0}, 1000.0, 12, 3, busy, HOUR)
    assert chosen.count <= 3


class _Recorder:
    """A policy that records what the shape decorator handed it, and asks for one launch."""

    name = "recorder"

    def __init__(self) -> None:
        self.steering: SteeringConfig | None = None
        self.instances: list[Instance] = []

    def reconfigure(self, steering: SteeringConfig) -> None:
        self.steering = steering

    def plan(self, now, state, instances, queue_order) -> PlanResult:
        self.instances = list(instances)
        return PlanResult(SteeringDecision(len(instances) + 1, len(instances) + 1, launch=1))


class _Shapes:
    def __init__(self, requests: np.ndarray) -> None:
        self.requests = requests

    def task_request_mib(self, tasks: np.ndarray) -> np.ndarray:
        return self.requests[tasks]


def _state_with_queue(n_queued: int) -> tuple[RunState, np.ndarray]:
    workflow = load_trace(DATA / "srasearch-chameleon-30a-001.json")
    state = RunState(workflow)
    return state, np.arange(n_queued, dtype=np.int64)


def test_the_policy_plans_in_tasks_that_fit_by_memory():
    state, queue = _state_with_queue(8)
    requests = np.full(state.workflow.n_tasks, 800.0)
    inner = _Recorder()
    steering = SteeringConfig(slots_per_instance=4)
    policy = ShapedPolicy(inner, steering, 1600.0, _Shapes(requests))
    result = policy.plan(0.0, state, [Instance("i-1", 0.0, 4, CloudState.RUNNING)], queue)
    assert policy.last_request_mib == 800.0
    assert [i.slots for i in inner.instances] == [2]  # two 800 MiB jobs fill 1600 MiB
    assert inner.steering is not None and inner.steering.slots_per_instance == 2
    assert result.decision.launch_type == ""  # one type: the cloud's own


class _Launcher(_Recorder):
    """Asks for ``launch`` instances of the slots it was told an instance has."""

    def __init__(self, launch: int) -> None:
        super().__init__()
        self.launch = launch

    def plan(self, now, state, instances, queue_order) -> PlanResult:
        self.instances = list(instances)
        size = len(instances) + self.launch
        return PlanResult(SteeringDecision(size, size, launch=self.launch, spot_launches=self.launch))


def test_the_policy_launches_the_cheapest_type_and_counts_each_instance_by_its_type():
    state, queue = _state_with_queue(8)
    requests = np.full(state.workflow.n_tasks, 1000.0)
    inner = _Launcher(6)
    steering = SteeringConfig(max_instances=30, instance_types=(SMALL, LARGE))
    policy = ShapedPolicy(inner, steering, 0.0, _Shapes(requests))
    pool = [
        Instance("i-1", 0.0, 4, CloudState.RUNNING, instance_type="c.small"),
        Instance("i-2", 0.0, 16, CloudState.RUNNING),
    ]
    result = policy.plan(0.0, state, pool, queue)
    # The policy plans in the pool's own type (one 1000 MiB job fits a small instance): six slots,
    # bought as one large instance (4 for six slots) rather than six small ones (6).
    assert inner.steering is not None and inner.steering.slots_per_instance == 1
    assert (result.decision.launch_type, result.decision.launch, result.decision.target) == ("c.large", 1, 3)
    assert result.decision.spot_launches == 1  # the market layer's share, kept for the converted count
    # The listed type by its shape; an unlisted instance by its own slots (memory unknown: cores).
    assert [i.slots for i in inner.instances] == [1, 16]


def test_the_pool_never_holds_more_slots_than_the_full_pool_of_its_own_type():
    state, queue = _state_with_queue(8)
    requests = np.full(state.workflow.n_tasks, 1000.0)
    steering = SteeringConfig(max_instances=4, instance_types=(SMALL, LARGE))
    policy = ShapedPolicy(_Launcher(2), steering, 0.0, _Shapes(requests))
    small = Instance("i-1", 0.0, 4, CloudState.RUNNING, instance_type="c.small")
    large = Instance("i-2", 0.0, 16, CloudState.RUNNING, instance_type="c.large")
    # Four small instances hold four 1000 MiB jobs; the pool already holds 1 + 6.
    held = policy.plan(0.0, state, [small, large], queue).decision
    assert (held.launch, held.target, held.spot_launches) == (0, 2, 0)
    alone = policy.plan(0.0, state, [small], queue).decision
    assert (alone.launch, alone.launch_type) == (2, "c.small")  # three slots left: two small ones (2) beat a large (4)


def test_releases_prefer_the_dearest_per_task():
    views = [
        InstanceView("cheap", 60.0, 0.0, 60.0, dearness=0.2),
        InstanceView("dear", 90.0, 100.0, 90.0, dearness=0.25),
    ]
    assert choose_releases(views, 1, 180.0, 3600.0) == ["dear"]
    same = [replace(v, dearness=0.0) for v in views]
    assert choose_releases(same, 1, 180.0, 3600.0) == ["cheap"]  # without types: the paper's order
    members = [
        PoolMember("dear", 4, 0.0, 500.0, -100.0, dearness=0.25),
        PoolMember("cheap", 16, 0.0, 100.0, -100.0, dearness=0.2),
    ]
    assert [m.instance_id for m in rank_members(members)] == ["cheap", "dear"]  # the dearest are used last


def test_emulated_site_launches_instances_of_the_named_type():
    workflow = load_trace(DATA / "srasearch-chameleon-30a-001.json")
    steering = SteeringConfig(instance_types=(SMALL, LARGE))
    emulation = EmulationConfig(instance_memory_mib=6400.0, initial_instances=1)
    site = EmulatedSite(workflow, emulation, 4, steering.billing, steering.instance_types)
    (large,) = site.launch(1, instance_type="c.large")
    assert large.slots == 16 and large.instance_type == "c.large"
    first = site.list_instances()[0]
    assert first.instance_type == "c.small" and first.slots == 4  # the initial pool is of the first type
    assert site._instances[first.instance_id].memory_mib == 1600.0
    site.advance_to(100.0)
    assert site.cost_units(100.0) == 2 and site.cost_money(100.0) == 5.0
    with pytest.raises(ConfigError):
        site.launch(1, instance_type="c.unknown")


def _two_type_config(large_price: float) -> ReplayConfig:
    steering = SteeringConfig(
        charging_unit_s=900.0, max_instances=8, instance_types=(SMALL, replace(LARGE, price=large_price))
    )
    emulation = EmulationConfig(instance_memory_mib=6400.0, memory_request_factor=1.0, time_scale=5.0)
    return ReplayConfig(steering=steering, emulation=emulation)


def test_a_replay_with_a_discounted_large_type_grows_with_it():
    workflow = load_trace(DATA / "srasearch-chameleon-30a-001.json")
    result = replay(workflow, "target-slowdown", _two_type_config(3.2))
    launched = result.instance_types["instances_by_type"]
    assert launched.get("c.large", 0) >= 1 and launched["c.small"] == 1  # only the initial instance is small
    units = result.instance_types["units_by_type"]
    assert result.instance_types["cost_money"] == pytest.approx(units["c.small"] * 1.0 + units.get("c.large", 0) * 3.2)
    assert "cost_money" in result.summary()


def test_settings_read_a_list_of_instance_types(tmp_path):
    path = tmp_path / "wire.yaml"
    path.write_text(
        "steering:\n"
        "  instance_memory_mib: 8192\n"
        "  instance_types:\n"
        "    - {name: c5.xlarge, cores: 4, memory_mib: 7000, price: 0.17}\n"
        "    - {name: c5.4xlarge, cores: 16, memory_mib: 28000, price: 0.68}\n"
    )
    steering = load_settings(path).steering
    assert [t.name for t in steering.instance_types] == ["c5.xlarge", "c5.4xlarge"]
    assert steering.instance_type("c5.4xlarge") == InstanceType("c5.4xlarge", 16, 28000.0, 0.68)
    path.write_text("steering:\n  instance_types:\n    - {name: a.b, cores: 4}\n    - {name: a.b, cores: 8}\n")
    with pytest.raises(ConfigError, match="distinct"):
        load_settings(path)
    path.write_text("steering:\n  instance_types:\n    - {name: a.b, cores: 0}\n")
    with pytest.raises(ConfigError, match=r"instance_types\[0\].cores"):
        load_settings(path)


def test_the_work_weighed_is_the_queue_and_the_tasks_coming_within_the_interval():
    specs = [
        TaskSpec("a", "t"),
        TaskSpec("b", "t"),
        TaskSpec("e", "t"),
        TaskSpec("c", "u", parents=("a", "b")),  # coming: a is done, b ends within the interval
        TaskSpec("d", "u", parents=("b", "e")),  # not coming: e has not started
        TaskSpec("q", "t"),
    ]
    workflow = build_workflow("w", "test", specs)
    state = RunState(workflow)
    for t in ("a", "b", "q", "e"):
        state.apply(TaskEvent(0.0, EventKind.SUBMITTED, t))
    state.apply(TaskEvent(1.0, EventKind.STARTED, "a", host="i-1"))
    state.apply(TaskEvent(1.0, EventKind.STARTED, "b", host="i-1"))
    state.apply(TaskEvent(50.0, EventKind.FINISHED, "a", exit_code=0))
    n = workflow.n_tasks
    remaining = np.full(n, 100.0)
    remaining[workflow.index_of("b")] = 20.0
    policy = np.full(n, 3, dtype=np.int8)
    prediction = Prediction(remaining, remaining, remaining, policy)
    queue = state.idle_in_queue_order()
    work = predicted_work(state, prediction, queue, 180.0, 1.0)
    assert sorted(workflow.task_ids[i] for i in queue) == ["e", "q"]
    assert (work.slot_s, work.mean_s, work.longest_s) == (300.0, 100.0, 100.0)  # e, q and c
    assert predicted_work(state, prediction, queue, 10.0, 0.5).slot_s == 100.0  # b ends too late for c
    guessed = Prediction(remaining, remaining, remaining, np.full(n, 7, dtype=np.int8))
    assert predicted_work(state, guessed, queue, 180.0, 1.0) == Work()  # a prior from elsewhere is not counted


def test_with_a_discounted_large_type_two_types_cost_no_more_than_the_small_one_alone():
    """Short tasks in a wide stage: a pool of large instances the work cannot fill would cost three times more."""
    workflow = load_trace(DATA / "traces" / "seismology-chameleon-300p-001.json.gz")

    def cost(*types: InstanceType) -> float:
        steering = SteeringConfig(max_instances=12, instance_types=types)
        config = ReplayConfig(steering=steering, emulation=EmulationConfig(time_scale=20.0))
        return float(replay(workflow, "target-slowdown", config).instance_types["cost_money"])

    small, large = replace(SMALL, memory_mib=0.0), replace(LARGE, memory_mib=0.0, price=3.2)
    assert cost(small, large) <= cost(small)


def test_a_level_keeps_busy_the_instances_that_hold_its_slots_not_a_count_of_the_own_type():
    from wire_daemon.plan.makespan import Schedule, plan_instances

    now, billing = 1000.0, Billing(1.0)  # per second: an idle instance is let go at once
    large = PoolMember("large", 16, now, now, 0.0, dearness=0.034)
    small = PoolMember("small", 4, now, now, 0.0, dearness=0.0425)
    # Eight tasks for an hour: the pool's own type (4 slots) counts two instances, and the large one holds all eight.
    level = Schedule(now + 3600.0, np.array([now]), np.array([now + 3600.0]), np.array([2]), np.array([8.0]))
    plan = plan_instances([large, small], level, billing, now, 180.0, 180.0)
    assert plan.release_now == ("small",)
    counted = replace(level, slots_used=None)  # counted in instances: both are kept for one level
    assert plan_instances([large, small], counted, billing, now, 180.0, 180.0).release_now == ()


def test_the_instances_running_tasks_are_ranked_first():
    idle_cheap = PoolMember("idle", 16, 0.0, 100.0, -100.0, dearness=0.034)
    working = PoolMember("working", 4, 0.0, 100.0, -100.0, dearness=0.0425, running_work=True)
    # The work now sits on the instance running it; the idle one, even cheaper per task, is the one let go.
    assert [m.instance_id for m in rank_members([idle_cheap, working])] == ["working", "idle"]
