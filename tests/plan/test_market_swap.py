"""The market swap: an on-demand instance no shielded work needs is let go, a spot one launched in its place."""

from dataclasses import replace

import numpy as np

from wire_daemon.core.config import SteeringConfig
from wire_daemon.core.instances import Instance
from wire_daemon.core.pricing import Market
from wire_daemon.core.run_state import RunState, TaskStatus
from wire_daemon.core.workflow import TaskSpec, build_workflow
from wire_daemon.plan.placement import SWAP_HOLD_INTERVALS, MarketPlacement
from wire_daemon.ports.policy import PlanResult, SteeringDecision, tell_let_go
from wire_daemon.ports.prediction import POLICY_NOT_STARTED, POLICY_STAGE_MEDIAN, Prediction

HOUR = 3600.0
NOW = 2 * HOUR
STEERING = SteeringConfig(
    slots_per_instance=1, max_instances=12, market="auto", spot_interruptions_per_hour=0.2, billing_model="second"
)
INTERVAL = STEERING.interval_s


def _workflow():
    """A two-task chain of hour-long tasks beside eight short tasks that feed nothing."""
    specs = [TaskSpec("L1", "long", runtime_s=HOUR), TaskSpec("L2", "long2", ("L1",), runtime_s=HOUR)]
    specs += [TaskSpec(f"S{i}", "short", runtime_s=30.0) for i in range(8)]
    return build_workflow("w", "test", specs)


class _Keeps:
    """A scaling policy that keeps its pool as it is."""

    name = "fake"

    def __init__(self, measured: bool = True) -> None:
        self.measured = measured

    def reconfigure(self, steering):
        pass

    def plan(self, now, state, instances, queue_order):
        wf = state.workflow
        remaining = np.array([HOUR if name.startswith("long") else 30.0 for name in wf.transformation])
        remaining[state.status == TaskStatus.DONE] = np.nan
        source = POLICY_STAGE_MEDIAN if self.measured else POLICY_NOT_STARTED
        policy = np.full(wf.n_tasks, source, dtype=np.int8)
        prediction = Prediction(remaining, remaining.copy(), remaining.copy(), policy)
        return PlanResult(SteeringDecision(len(instances), len(instances)), prediction=prediction)


class _Holds(_Keeps):
    """The same, recording what a decorator lets go."""

    def __init__(self, measured: bool = True) -> None:
        super().__init__(measured)
        self.let_go_calls: list[tuple[str, float]] = []

    def let_go(self, instance_id: str, at: float) -> None:
        self.let_go_calls.append((instance_id, at))


def _state(wf, running: dict[str, str], queued: tuple[str, ...] = ()) -> RunState:
    """L1 and the short tasks done, except those ``running`` (task -> instance) or ``queued``."""
    state = RunState(wf)
    state.status[:] = TaskStatus.DONE
    for name, host in running.items():
        task = wf.index_of(name)
        state.status[task] = TaskStatus.RUNNING
        state.host[task] = host
        state.start_time[task] = NOW - 10.0
    for name in queued:
        state.status[wf.index_of(name)] = TaskStatus.IDLE
    return state


def _pool(*on_demand: str) -> list[Instance]:
    spot = Instance("i-spot", 0.0, 1, market=Market.SPOT)
    return [spot, *(Instance(i, 0.0, 1, market=Market.ON_DEMAND) for i in on_demand)]


def _plan(policy, state, pool, now=NOW, queue=()):
    return policy.plan(now, state, pool, np.array([state.workflow.index_of(q) for q in queue], dtype=np.int64))


def test_an_idle_on_demand_instance_is_let_go_at_once_and_spot_launched_in_its_place():
    wf = _workflow()
    inner = _Holds()
    state = _state(wf, {"L2": "i-spot"})  # an hour of critical work left, on spot
    decision = _plan(MarketPlacement(inner, STEERING), state, _pool("i-od")).decision
    assert decision.release == ["i-od"] and decision.release_at["i-od"] == NOW  # billed per second: now
    assert decision.launch == 1 and decision.spot_launches == 1 and decision.target == 2
    assert inner.let_go_calls == [("i-od", NOW)]


def test_a_busy_instance_is_drained_and_terminated_only_once_idle():
    wf = _workflow()
    inner = _Holds()
    policy = MarketPlacement(inner, STEERING)
    hold = SWAP_HOLD_INTERVALS * INTERVAL
    busy = _plan(policy, _state(wf, {"L2": "i-spot", "S0": "i-od"}), _pool("i-od")).decision
    assert busy.release == ["i-od"] and busy.release_at["i-od"] == NOW + 30.0 + hold  # past S0's predicted end
    assert busy.launch == 0  # nothing waits for its slot: the scaling policy launches when capacity is wanted
    assert busy.target == 1  # the spot instance only
    later = NOW + INTERVAL  # S0 overran: still running, its termination is put off again
    still = _plan(policy, _state(wf, {"L2": "i-spot", "S0": "i-od"}), _pool("i-od"), now=later).decision
    assert still.release_at["i-od"] == later + 30.0 + hold
    then = later + INTERVAL
    idle = _plan(policy, _state(wf, {"L2": "i-spot"}), _pool("i-od"), now=then).decision
    assert idle.release_at["i-od"] == then and idle.launch == 0  # a swap under way is not replaced twice
    assert [at for _, at in inner.let_go_calls] == [busy.release_at["i-od"], still.release_at["i-od"], then]


def test_an_instance_running_shielded_work_stays():
    wf = _workflow()
    decision = _plan(MarketPlacement(_Holds(), STEERING), _state(wf, {"L2": "i-od"}), _pool("i-od")).decision
    assert decision.release == [] and decision.launch == 0  # L2, an hour of critical work, is judged on-demand


def test_an_instance_stays_while_queued_work_ranks_on_demand():
    wf = _workflow()
    state = _state(wf, {"S0": "i-spot"}, queued=("L2",))
    decision = _plan(MarketPlacement(_Holds(), STEERING), state, _pool("i-od"), queue=("L2",)).decision
    assert "i-od" not in decision.release


def test_a_task_whose_end_is_only_guessed_keeps_the_instance():
    wf = _workflow()
    state = _state(wf, {"L2": "i-spot", "S0": "i-od"})
    decision = _plan(MarketPlacement(_Holds(measured=False), STEERING), state, _pool("i-od")).decision
    assert decision.release == []


def test_no_swap_without_room_for_the_replacement_or_a_policy_that_can_let_go():
    wf = _workflow()
    state = _state(wf, {"L2": "i-spot"})
    full = replace(STEERING, max_instances=2)
    assert _plan(MarketPlacement(_Holds(), full), state, _pool("i-od")).decision.release == []
    assert _plan(MarketPlacement(_Keeps(), STEERING), state, _pool("i-od")).decision.release == []


def test_a_spot_only_pool_is_never_swapped():
    wf = _workflow()
    state = _state(wf, {"L2": "i-spot"})
    spot = replace(STEERING, market="spot")
    decision = _plan(MarketPlacement(_Holds(), spot), state, _pool("i-od")).decision
    assert decision.release == [] and decision.launch == 0


def test_a_drained_instance_s_free_slots_do_not_count_for_work_that_wants_on_demand():
    wf = _workflow()
    policy = MarketPlacement(_Holds(), STEERING)
    pool = [Instance("i-spot", 0.0, 1, market=Market.SPOT), Instance("i-od", 0.0, 2, market=Market.ON_DEMAND)]
    first = _plan(policy, _state(wf, {"L2": "i-spot", "S0": "i-od"}), pool).decision
    assert first.release == ["i-od"]  # drained, one of its two slots still busy
    state = _state(wf, {"S0": "i-od", "S1": "i-spot"}, queued=("L2",))  # a rerun of L2 ranks on-demand
    result = _plan(policy, state, pool, now=NOW + INTERVAL, queue=("L2",))
    assert result.decision.launch == 1 and result.decision.spot_launches == 0  # the shield buys on-demand
    assert result.job_required == {wf.index_of("L2")}


def test_a_new_loop_takes_over_a_swap_under_way_and_does_not_replace_it_twice():
    wf = _workflow()
    first = MarketPlacement(_Holds(), STEERING)
    busy = _plan(first, _state(wf, {"L2": "i-spot", "S0": "i-od"}), _pool("i-od")).decision
    assert busy.release == ["i-od"] and busy.launch == 0
    inner = _Holds()
    restarted = MarketPlacement(inner, STEERING)  # a restart: a new policy, told what is under way
    tell_let_go(restarted, "i-od", busy.release_at["i-od"])
    assert inner.let_go_calls == [("i-od", busy.release_at["i-od"])]
    then = NOW + INTERVAL
    idle = _plan(restarted, _state(wf, {"L2": "i-spot"}), _pool("i-od"), now=then).decision
    assert idle.release_at["i-od"] == then and idle.launch == 0  # terminated now; no second spot launch for it


def test_a_release_taken_over_is_no_room_for_work_that_wants_on_demand():
    wf = _workflow()
    policy = MarketPlacement(_Holds(), STEERING)
    tell_let_go(policy, "i-od", NOW + HOUR)  # draining since before the restart
    state = _state(wf, {"S1": "i-spot"}, queued=("L2",))
    result = _plan(policy, state, _pool("i-od"), queue=("L2",))
    assert result.decision.launch == 1 and result.decision.spot_launches == 0  # the shield buys on-demand
    assert result.job_required == {wf.index_of("L2")}


def test_a_spot_instance_released_before_a_restart_is_not_counted_as_a_reclaim():
    wf = _workflow()
    policy = MarketPlacement(_Holds(), STEERING)
    tell_let_go(policy, "i-spot", NOW + 60.0)
    state = _state(wf, {"L2": "i-od"})
    _plan(policy, state, _pool("i-od"))
    _plan(policy, state, _pool("i-od")[1:], now=NOW + INTERVAL)  # i-spot terminated by our own hand
    assert policy.rate.reclaims == 0
