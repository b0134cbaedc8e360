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
class InstanceType:
    """One instance type (EC2) or flavor (OpenStack) the pool may launch (issue 15)."""

    name: str  # the cloud's name for it: c5.xlarge, m1.large
    cores: int  # Condor slots (cores) one instance has
    memory_mib: float = 0.0  # its memory for jobs; 0: memory does not limit what fits
    price: float = 1.0  # per charging unit, in whatever money the budget is set in

    def validate(self, key: str) -> None:
        if not self.name:
            raise ConfigError(f"{key}.name is required")
        _at_least(f"{key}.cores", self.cores, 1)
        _at_least(f"{key}.memory_mib", self.memory_mib, 0.0)
        _positive(f"{key}.price", self.price)


MARKET_MODES = ("on-demand", "spot", "auto")


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
    # Memory one instance has for jobs (partitionable slots, issue 15): how many tasks fit is then the
    # smaller of the cores and this over the upcoming tasks' typical request_memory. 0: cores only (on
    # the emulated site, emulation.instance_memory_mib).
    instance_memory_mib: float = 0.0
    # Several instance types (EC2) or flavors (OpenStack) to choose from; empty: the one type of the
    # cloud settings, with slots_per_instance slots at a price of 1 a unit. Growing launches the type
    # cheapest per task that fits; the first listed is the one the pool starts with.
    instance_types: tuple[InstanceType, ...] = ()
    # How the cloud bills: "unit" (every started charging_unit_s paid in full, the paper) or "second"
    # (per second after a first charge of minimum_charge_s, as EC2, Google Cloud and Azure bill VMs).
    billing_model: str = "unit"
    minimum_charge_s: float = 60.0
    # Which market launches buy: "on-demand"; "spot" (every launch); "auto" (each launch chosen from
    # the work it would carry: plan/placement.py). Spot costs spot_price_ratio of on-demand, and the
    # policy expects spot_interruptions_per_hour reclaims per spot instance-hour.
    market: str = "on-demand"
    spot_price_ratio: float = 0.35
    spot_interruptions_per_hour: float = 0.05

    @property
    def planning_unit_s(self) -> float:
        """The unit the policies plan in (Algorithms 2-3, release thresholds): the charging unit, or
        under per-second billing the minimum charge, the least an instance started costs."""
        return max(self.minimum_charge_s, 1.0) if self.billing_model == "second" else self.charging_unit_s

    @property
    def billing(self) -> Billing:
        if self.billing_model == "second":
            return Billing.per_second(self.minimum_charge_s)
        return Billing(self.charging_unit_s)

    def instance_type(self, name: str) -> InstanceType | None:
        """The listed type called ``name``; None when types are not listed or the name is not one."""
        return next((t for t in self.instance_types if t.name == name), None)

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
        _at_least("steering.instance_memory_mib", self.instance_memory_mib, 0.0)
        for n, kind in enumerate(self.instance_types):
            kind.validate(f"steering.instance_types[{n}]")
        if self.billing_model not in ("unit", "second"):
            raise ConfigError(f"steering.billing_model must be 'unit' or 'second' (got {self.billing_model!r})")
        _at_least("steering.minimum_charge_s", self.minimum_charge_s, 0.0)
        if self.market not in MARKET_MODES:
            raise ConfigError(f"steering.market must be one of {', '.join(MARKET_MODES)} (got {self.market!r})")
        if not 0.0 < self.spot_price_ratio <= 1.0:
            raise ConfigError(f"steering.spot_price_ratio must be in (0, 1] (got {self.spot_price_ratio!r})")
        _at_least("steering.spot_interruptions_per_hour", self.spot_interruptions_per_hour, 0.0)
        names = [t.name for t in self.instance_types]
        if len(set(names)) != len(names):
            raise ConfigError(f"steering.instance_types names must be distinct (got {', '.join(names)})")


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
    # Partitionable slots with memory (issue 15). 0: memory is not modelled, a task needs one slot and
    # nothing else. Otherwise each instance has this much memory and a job needs a core and its request.
    instance_memory_mib: float = 0.0
    # Every task requests this multiple of its transformation's largest peak memory in the trace (a
    # typical user estimate, set per transformation as Pegasus users do); only with instance memory.
    memory_request_factor: float = 4.0
    # A job that uses more memory than it requested is held after this fraction of its occupancy (the
    # memory paper's "time to failure": 0.1, 0.5 or 0.9 of the run).
    memory_failure_fraction: float = 0.5
    # The spot market (emulated/market.py): reclaims per spot instance-hour, a storm (storm_fraction of
    # the main type's spot capacity reclaimed at once, at a time drawn from the seed), the notice a reclaim
    # gives, and the spot instances of one type the market has room for (None: no limit).
    spot_interruptions_per_hour: float = 0.0
    storm: bool = False
    storm_fraction: float = 0.5
    reclaim_notice_s: float = 120.0
    spot_capacity: int | None = None

    def validate(self) -> None:
        _at_least("emulation.boot_lag_s", self.boot_lag_s, 0.0)
        _positive("emulation.negotiation_interval_s", self.negotiation_interval_s)
        _at_least("emulation.submit_delay_s", self.submit_delay_s, 0.0)
        _positive("emulation.bandwidth_bytes_per_s", self.bandwidth_bytes_per_s)
        _at_least("emulation.initial_instances", self.initial_instances, 0)
        _positive("emulation.time_scale", self.time_scale)
        _at_least("emulation.instance_memory_mib", self.instance_memory_mib, 0.0)
        _positive("emulation.memory_request_factor", self.memory_request_factor)
        _at_least("emulation.spot_interruptions_per_hour", self.spot_interruptions_per_hour, 0.0)
        if not 0.0 < self.storm_fraction <= 1.0:
            raise ConfigError(f"emulation.storm_fraction must be in (0, 1] (got {self.storm_fraction!r})")
        _at_least("emulation.reclaim_notice_s", self.reclaim_notice_s, 0.0)
        if self.spot_capacity is not None:
            _at_least("emulation.spot_capacity", self.spot_capacity, 0)
        if not 0.0 <= self.memory_failure_fraction <= 1.0:
            raise ConfigError(
                f"emulation.memory_failure_fraction must be in [0, 1] (got {self.memory_failure_fraction!r})"
            )


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


MEMORY_PREDICTORS = ("lr", "lr-mean-pm", "lr-mean-minus", "lr-max-minus", "pc50", "pc95")


@dataclass(frozen=True)
class MemoryConfig:
    """Right-sizing request_memory from online peak-memory models (issue 15; analyze/memory.py)."""

    # The one switch: lower the requests of idle jobs to what their stage's model predicts, and double
    # the request of a job held for memory, then release it. In dry-run it only says what it would change.
    rightsizing: bool = False
    # The memory paper's predictors: linear regression on input size, plain or with its offsets
    # ("mean +-", "mean -", "max -"), or a percentile of the peaks seen (50th, 95th).
    predictor: str = "lr-mean-minus"
    # Finished tasks a stage needs before its model replaces the user's request (the paper starts
    # percentiles after 1 and regressions after 2; fewer than the predictor needs is raised to that).
    min_observations: int = 2
    # The request is the prediction times (1 + margin_fraction), plus margin_mib.
    margin_fraction: float = 0.05
    margin_mib: float = 0.0
    # A job held for memory gets its failed request times this, never above max_request_mib.
    failure_factor: float = 2.0
    # The largest slot's memory. 0: the emulated instance's memory (required on a condor site).
    max_request_mib: float = 0.0
    # Re-edit an idle job only when the wanted request differs from the one it has by this fraction.
    edit_tolerance: float = 0.05

    def validate(self) -> None:
        if self.predictor not in MEMORY_PREDICTORS:
            raise ConfigError(
                f"memory.predictor must be one of {', '.join(MEMORY_PREDICTORS)} (got {self.predictor!r})"
            )
        _at_least("memory.min_observations", self.min_observations, 1)
        _at_least("memory.margin_fraction", self.margin_fraction, 0.0)
        _at_least("memory.margin_mib", self.margin_mib, 0.0)
        if not self.failure_factor > 1.0:
            raise ConfigError(f"memory.failure_factor must be > 1 (got {self.failure_factor!r})")
        _at_least("memory.max_request_mib", self.max_request_mib, 0.0)
        _at_least("memory.edit_tolerance", self.edit_tolerance, 0.0)


@dataclass(frozen=True)
class ReplayConfig:
    prediction: PredictionConfig = field(default_factory=PredictionConfig)
    steering: SteeringConfig = field(default_factory=SteeringConfig)
    emulation: EmulationConfig = field(default_factory=EmulationConfig)
    pfa: PFAConfig = field(default_factory=PFAConfig)
    memory: MemoryConfig = field(default_factory=MemoryConfig)

    def validate(self) -> ReplayConfig:
        self.prediction.validate()
        self.steering.validate()
        self.emulation.validate()
        self.pfa.validate()
        self.memory.validate()
        return self


def _positive(key: str, value: float) -> None:
    if not value > 0:
        raise ConfigError(f"{key} must be > 0 (got {value!r})")


def _at_least(key: str, value: float, low: float) -> None:
    if not value >= low:
        raise ConfigError(f"{key} must be >= {low} (got {value!r})")
