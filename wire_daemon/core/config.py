"""Every tunable of the decision, in one place, with the paper's values as defaults."""

from __future__ import annotations

from dataclasses import dataclass, field

from wire_daemon.core.billing import Billing
from wire_daemon.core.errors import ConfigError


@dataclass(frozen=True)
class PredictionConfig:
    # Algorithm 1: one gradient step per MAPE iteration with this learning rate.
    learning_rate: float = 0.1
    gradient_steps_per_interval: int = 1
    # Policy 4 ("input size equivalent to a group of completed tasks"): two sizes
    # are the same when they differ by at most this fraction of the larger one.
    same_input_relative_tolerance: float = 0.01
    # Policy 2 (a stage with running tasks and no completion). "stage-elapsed":
    # every active task keeps a slot at least as long as the stage's oldest task
    # has run (what the paper's §III-E analysis and §IV-A simulation assume);
    # "median-elapsed": running tasks end now, unstarted ones last the median
    # elapsed time (the literal §III-C text). See docs/decisions.md.
    running_only_estimate: str = "stage-elapsed"
    # What a job costs a slot beyond its own occupancy (negotiation, claim,
    # shadow and starter start) until the event stream has shown it; the
    # dispatch learner replaces it with measurements (policy target-slowdown).
    dispatch_prior_s: float = 2.0
    # Before any task of the workflow has been measured, a queued or running task
    # is expected to keep its slot at least this long (one interval: all a
    # reactive policy can assume); only policy target-slowdown uses it.
    unknown_task_s: float = 180.0

    def validate(self) -> None:
        _positive("prediction.learning_rate", self.learning_rate)
        _at_least("prediction.dispatch_prior_s", self.dispatch_prior_s, 0.0)
        _at_least("prediction.unknown_task_s", self.unknown_task_s, 0.0)
        _at_least("prediction.gradient_steps_per_interval", self.gradient_steps_per_interval, 1)
        _at_least("prediction.same_input_relative_tolerance", self.same_input_relative_tolerance, 0.0)
        if self.running_only_estimate not in ("stage-elapsed", "median-elapsed"):
            raise ConfigError(
                "prediction.running_only_estimate must be 'stage-elapsed' or 'median-elapsed' "
                f"(got {self.running_only_estimate!r})"
            )


@dataclass(frozen=True)
class SteeringConfig:
    charging_unit_s: float = 3600.0  # u
    interval_s: float = 180.0  # t, the MAPE period = lag to launch/release
    slots_per_instance: int = 4  # l
    max_instances: int = 12
    min_instances: int = 1  # the "minimal pool" kept while the workflow runs
    # Algorithm 2 line 11: release only when restart cost <= this fraction of u.
    release_restart_cost_fraction: float = 0.2
    # Launch only for load that fills an instance over the unit plus the launch lag.
    boot_aware_launch: bool = True
    # Never release an instance younger than this many intervals (boot + work).
    min_instance_age_intervals: float = 2.0
    # Restart cost counts the work a task already lost to earlier releases, so
    # no task is killed again and again (the paper's rule alone can livelock).
    count_lost_work: bool = True
    # Algorithm 3's packing: "paper" drops an instance's overshoot past u (line
    # 16); "fluid" carries it to the next instance (the §III-E arithmetic).
    packing: str = "paper"
    # A released instance is drained at once and terminated this long before its
    # paid unit ends, so that its running tasks get every paid second to finish.
    release_guard_s: float = 10.0
    # Algorithm 3 line 28: one more instance when leftover work exceeds this fraction of u.
    leftover_fraction: float = 0.2
    # Condor priority hook: boost the first N ready tasks of each stage.
    boost_first_tasks: int = 5
    boost_priority: int = 10
    # Policy target-slowdown: the makespan the operator accepts, as a multiple of
    # what the full pool (max_instances from the start) would take; the policy
    # spends as little as it can within it. 1.0: as fast as the pool can go.
    target_slowdown: float = 1.0

    @property
    def billing(self) -> Billing:
        return Billing(self.charging_unit_s)

    def validate(self) -> None:
        _positive("steering.charging_unit_s", self.charging_unit_s)
        _positive("steering.interval_s", self.interval_s)
        _at_least("steering.slots_per_instance", self.slots_per_instance, 1)
        _at_least("steering.max_instances", self.max_instances, 1)
        _at_least("steering.min_instances", self.min_instances, 0)
        if self.min_instances > self.max_instances:
            raise ConfigError("steering.min_instances must not exceed steering.max_instances")
        _at_least("steering.release_restart_cost_fraction", self.release_restart_cost_fraction, 0.0)
        _at_least("steering.leftover_fraction", self.leftover_fraction, 0.0)
        _at_least("steering.release_guard_s", self.release_guard_s, 0.0)
        _at_least("steering.min_instance_age_intervals", self.min_instance_age_intervals, 0.0)
        if self.packing not in ("paper", "fluid"):
            raise ConfigError(f"steering.packing must be 'paper' or 'fluid' (got {self.packing!r})")
        _at_least("steering.boost_first_tasks", self.boost_first_tasks, 0)
        _at_least("steering.target_slowdown", self.target_slowdown, 1.0)


@dataclass(frozen=True)
class EmulationConfig:
    boot_lag_s: float = 180.0  # launch -> the instance's slots join the pool
    negotiation_interval_s: float = 5.0  # Condor matches idle jobs to free slots this often
    submit_delay_s: float = 1.0  # DAGMan: parents done -> node submitted
    bandwidth_bytes_per_s: float = 125e6  # input/output transfer, per slot (1 Gbit/s)
    initial_instances: int = 1  # pool already up when the workflow is submitted
    # That pool was launched boot_lag_s before and is billed from its launch, like every
    # instance (the full site's boot is paid too); false: it is free until time 0.
    bill_initial_boot: bool = True
    time_scale: float = 1.0  # multiply every runtime and transfer time (study long runs)
    seed: int = 0  # order of ready tasks within one DAGMan submit batch

    def validate(self) -> None:
        _at_least("emulation.boot_lag_s", self.boot_lag_s, 0.0)
        _positive("emulation.negotiation_interval_s", self.negotiation_interval_s)
        _at_least("emulation.submit_delay_s", self.submit_delay_s, 0.0)
        _positive("emulation.bandwidth_bytes_per_s", self.bandwidth_bytes_per_s)
        _at_least("emulation.initial_instances", self.initial_instances, 0)
        _positive("emulation.time_scale", self.time_scale)


@dataclass(frozen=True)
class PFAConfig:
    """The PFA baseline (performance feedback + token-based parallelism); see plan/pfa.py."""

    # How the per-slot task throughput is smoothed over intervals: "ewma" or "ma".
    smoothing: str = "ewma"
    # MA: mean over this many of the latest intervals that completed a task.
    ma_window: int = 5
    # EWMA: weight of the past, s = alpha * s_prev + (1 - alpha) * x (the PFA
    # paper's convention: alpha near 0 follows the last interval).
    ewma_alpha: float = 0.5
    # Charging units the pool may cost per interval (an instance costs
    # interval / u of them); None: no cap beyond steering.max_instances.
    budget_units_per_interval: float | None = None
    # An idle instance is "near the end of its billing period" when its unit
    # ends within this many seconds; None: within one interval.
    release_near_end_s: float | None = None

    def validate(self) -> None:
        if self.smoothing not in ("ewma", "ma"):
            raise ConfigError(f"pfa.smoothing must be 'ewma' or 'ma' (got {self.smoothing!r})")
        _at_least("pfa.ma_window", self.ma_window, 1)
        if not 0.0 <= self.ewma_alpha < 1.0:
            raise ConfigError(f"pfa.ewma_alpha must be in [0, 1) (got {self.ewma_alpha!r})")
        if self.budget_units_per_interval is not None:
            _at_least("pfa.budget_units_per_interval", self.budget_units_per_interval, 0.0)
        if self.release_near_end_s is not None:
            _at_least("pfa.release_near_end_s", self.release_near_end_s, 0.0)


@dataclass(frozen=True)
class ReplayConfig:
    prediction: PredictionConfig = field(default_factory=PredictionConfig)
    steering: SteeringConfig = field(default_factory=SteeringConfig)
    emulation: EmulationConfig = field(default_factory=EmulationConfig)
    pfa: PFAConfig = field(default_factory=PFAConfig)

    def validate(self) -> ReplayConfig:
        self.prediction.validate()
        self.steering.validate()
        self.emulation.validate()
        self.pfa.validate()
        return self


def _positive(key: str, value: float) -> None:
    if not value > 0:
        raise ConfigError(f"{key} must be > 0 (got {value!r})")


def _at_least(key: str, value: float, low: float) -> None:
    if not value >= low:
        raise ConfigError(f"{key} must be >= {low} (got {value!r})")
