"""Every tunable of the decision, in one place, with the paper's values as defaults."""

from __future__ import annotations

from dataclasses import field, replace
from typing import Annotated, Any

from pydantic import Field

from wire_daemon.core.billing import Billing
from wire_daemon.core.deadlines import Deadline, parse_deadline
from wire_daemon.core.errors import ConfigError
from wire_daemon.core.pricing import SECONDS_PER_HOUR, Offer, price_list
from wire_daemon.core.sections import AtLeastOne, AtLeastZero, Positive, check, one_of, section

# Condor slots per instance unless steering.slots_per_instance says otherwise: the one place of this default.
SLOTS_PER_INSTANCE = 4


@section("prediction")
class PredictionConfig:
    # Algorithm 1: one gradient step per MAPE iteration with this learning rate.
    learning_rate: Annotated[float, Positive] = 0.1
    gradient_steps_per_interval: Annotated[int, AtLeastOne] = 1
    # Policy 4 ("input size equivalent to a group of completed tasks"): two sizes
    # are the same when they differ by at most this fraction of the larger one.
    same_input_relative_tolerance: Annotated[float, AtLeastZero] = 0.01
    # Policy 2 (a stage with running tasks and no completion). "stage-elapsed":
    # every active task keeps a slot at least as long as the stage's oldest task
    # has run (what the paper's §III-E analysis and §IV-A simulation assume);
    # "median-elapsed": running tasks end now, unstarted ones last the median
    # elapsed time (the literal §III-C text). See docs/decisions.md.
    running_only_estimate: Annotated[str, one_of("stage-elapsed", "median-elapsed")] = "stage-elapsed"
    # What a job costs a slot beyond its own occupancy (negotiation, claim,
    # shadow and starter start) until the event stream has shown it; the
    # dispatch learner replaces it with measurements (policy target-slowdown).
    dispatch_prior_s: Annotated[float, AtLeastZero] = 2.0
    # Before any task of the workflow has been measured, a queued or running task
    # is expected to keep its slot at least this long (one interval: all a
    # reactive policy can assume); only policy target-slowdown uses it.
    unknown_task_s: Annotated[float, AtLeastZero] = 180.0


@section("instance_type")
class InstanceType:
    """One instance type or flavor the pool may launch, by the cloud's name for it."""

    name: Annotated[str, Field(min_length=1)]  # the cloud's name for it: c5.xlarge, m1.large
    cores: Annotated[int, AtLeastOne]  # Condor slots (cores) one instance has
    memory_mib: Annotated[float, AtLeastZero] = 0.0  # its memory for jobs; 0: memory does not limit what fits
    price: Annotated[float, Positive] = 1.0  # per charging unit, in whatever money the budget is set in
    # Its spot price per charging unit, in the same money; None: spot_price_ratio x price (or, with
    # cloud.ec2.spot_prices cloud, what EC2 quotes).
    spot_price: Annotated[float | None, Positive] = None
    # The same per hour, as clouds list them; given, they win over price and spot_price, which the
    # steering section sets from them for its billing rule (billed per second, the unit is a second).
    price_per_hour: Annotated[float | None, Positive] = None
    spot_price_per_hour: Annotated[float | None, Positive] = None

    def hourly(self, unit_s: float) -> InstanceType:
        """With its prices per charging unit of ``unit_s`` seconds as hourly prices, where none is given: the
        same money an hour under another billing."""
        hours = unit_s / SECONDS_PER_HOUR
        price = self.price / hours if self.price_per_hour is None else self.price_per_hour
        spot = self.spot_price_per_hour
        if spot is None and self.spot_price is not None:
            spot = self.spot_price / hours
        return replace(self, price_per_hour=price, spot_price_per_hour=spot)

    def per_unit(self, unit_s: float) -> InstanceType:
        """With its hourly prices, if given, as prices per charging unit of ``unit_s`` seconds."""
        if self.price_per_hour is None and self.spot_price_per_hour is None:
            return self
        hours = unit_s / SECONDS_PER_HOUR
        price = self.price if self.price_per_hour is None else self.price_per_hour * hours
        spot = self.spot_price if self.spot_price_per_hour is None else self.spot_price_per_hour * hours
        return replace(self, price=price, spot_price=spot)


# The probabilities a deadline can be met with (steering.deadline_quantile): the estimate's median or 90th percentile.
DEADLINE_QUANTILES = ("p50", "p90")
# Which market launches buy (steering.market): see plan/placement.py.
MARKET_MODES = ("on-demand", "spot", "auto")
# Money when no price is set: one on-demand instance-hour costs 1 of this.
DEFAULT_CURRENCY = "on-demand hours"


@section("steering")
class SteeringConfig:
    charging_unit_s: Annotated[float, Positive] = 3600.0  # u
    interval_s: Annotated[float, Positive] = 180.0  # t, the MAPE period = lag to launch/release
    # l: the one slot count of the pool's instances; every cloud and the workers' user-data take it from here.
    slots_per_instance: Annotated[int, AtLeastOne] = SLOTS_PER_INSTANCE
    max_instances: Annotated[int, AtLeastOne] = 12
    min_instances: Annotated[int, AtLeastZero] = 1  # the "minimal pool" kept while the workflow runs
    # Algorithm 2 line 11: release only when restart cost <= this fraction of u.
    release_restart_cost_fraction: Annotated[float, AtLeastZero] = 0.2
    # Launch only for load that fills an instance over the unit plus the launch lag.
    boot_aware_launch: bool = True
    # Never release an instance younger than this many intervals (boot + work).
    min_instance_age_intervals: Annotated[float, AtLeastZero] = 2.0
    # Restart cost counts the work a task already lost to earlier releases, so
    # no task is killed again and again (the paper's rule alone can livelock).
    count_lost_work: bool = True
    # Algorithm 3's packing: "paper" drops an instance's overshoot past u (line
    # 16); "fluid" carries it to the next instance (the §III-E arithmetic).
    packing: Annotated[str, one_of("paper", "fluid")] = "paper"
    # A released instance is drained at once and terminated this long before its
    # paid unit ends, so that its running tasks get every paid second to finish.
    release_guard_s: Annotated[float, AtLeastZero] = 10.0
    # Algorithm 3 line 28: one more instance when leftover work exceeds this fraction of u.
    leftover_fraction: Annotated[float, AtLeastZero] = 0.2
    # Condor priority hook: boost the first N ready tasks of each stage.
    boost_first_tasks: Annotated[int, AtLeastZero] = 5
    boost_priority: int = 10
    # Policy target-slowdown: the makespan the operator accepts, as a multiple of
    # what the full pool (max_instances from the start) would take; the policy
    # spends as little as it can within it. 1.0: as fast as the pool can go.
    target_slowdown: Annotated[float, Field(ge=1.0)] = 1.0
    # Policy target-slowdown: the operator's deadline for the workflow, a time with its zone
    # (2026-11-27T08:00:00Z) or a duration from the workflow's start (8h, 90m: core/deadlines.py). Set,
    # it replaces the target: the least money whose estimated end, at deadline_quantile, is by then.
    deadline: str | None = None
    deadline_quantile: Annotated[str, one_of(*DEADLINE_QUANTILES)] = "p50"
    # The most money the workflow may cost, in `currency`: spent and committed on every instance the
    # cloud listed for the pool. None: no budget. Policy target-slowdown never commits beyond it.
    budget: Annotated[float | None, Positive] = None
    # Memory one instance has for jobs (partitionable slots): how many tasks fit is then the
    # smaller of the cores and this over the upcoming tasks' typical request_memory. 0: cores only (on
    # the emulated site, emulation.instance_memory_mib).
    instance_memory_mib: Annotated[float, AtLeastZero] = 0.0
    # Several instance types (EC2) or flavors (OpenStack) to choose from; empty: the one type of the
    # cloud settings, with slots_per_instance slots at a price of 1 a unit. The first listed is the pool's
    # own type (it starts with it, and sizes in it); growing launches the type cheapest in money per
    # slot-second the predicted tasks can use (plan/shapes.py).
    instance_types: tuple[InstanceType, ...] = ()
    # How the cloud bills: "unit" (every started charging_unit_s paid in full, the paper) or "second"
    # (per second after a first charge of minimum_charge_s, as EC2, Google Cloud and Azure bill VMs).
    billing_model: Annotated[str, one_of("unit", "second")] = "unit"
    minimum_charge_s: Annotated[float, AtLeastZero] = 60.0
    # Which market launches buy: "on-demand"; "spot" (every launch); "auto" (each launch chosen from
    # the work it would carry: plan/placement.py). Spot costs spot_price_ratio of on-demand, and the
    # policy expects spot_interruptions_per_hour reclaims per spot instance-hour until it has seen some.
    market: Annotated[str, one_of(*MARKET_MODES)] = "on-demand"
    spot_price_ratio: Annotated[float, Field(gt=0.0, le=1.0)] = 0.35
    spot_interruptions_per_hour: Annotated[float, AtLeastZero] = 0.05
    # Money: the on-demand price of one instance-hour of the configured type (instance_types carry their
    # own: price_per_hour, or price per charging unit), and the currency status, decisions and metrics
    # name. By default one on-demand instance-hour costs 1: money is then counted in on-demand instance-hours.
    price_per_hour: Annotated[float, Positive] = 1.0
    currency: Annotated[str, Field(min_length=1)] = DEFAULT_CURRENCY

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

    def offers(self) -> dict[str, Offer]:
        """What the pool may launch, priced per hour in each market (``core.pricing``)."""
        return price_list(
            self.instance_types, self.slots_per_instance, self.billing, self.spot_price_ratio, self.price_per_hour
        )

    def instance_type(self, name: str) -> InstanceType | None:
        """The listed type called ``name``; None when types are not listed or the name is not one."""
        return next((t for t in self.instance_types if t.name == name), None)

    def __post_init__(self) -> None:
        check(self.min_instances <= self.max_instances, "steering.min_instances must not exceed steering.max_instances")
        # Hourly prices become prices per unit of this billing: set again when a copy changes the billing.
        unit_s = self.billing.charging_unit_s
        object.__setattr__(self, "instance_types", tuple(t.per_unit(unit_s) for t in self.instance_types))
        names = [t.name for t in self.instance_types]
        check(len(set(names)) == len(names), f"steering.instance_types names must be distinct (got {', '.join(names)})")
        if self.deadline is not None:
            try:
                parse_deadline(self.deadline)
            except ValueError as exc:
                raise ConfigError(f"steering.deadline {exc}") from None

    def operator_deadline(self) -> Deadline | None:
        """The deadline set, parsed (checked when the section was built); None: none set."""
        return None if self.deadline is None else parse_deadline(self.deadline)


@section("emulation")
class EmulationConfig:
    boot_lag_s: Annotated[float, AtLeastZero] = 180.0  # launch -> the instance's slots join the pool
    negotiation_interval_s: Annotated[float, Positive] = 5.0  # Condor matches idle jobs to free slots this often
    submit_delay_s: Annotated[float, AtLeastZero] = 1.0  # DAGMan: parents done -> node submitted
    bandwidth_bytes_per_s: Annotated[float, Positive] = 125e6  # input/output transfer, per slot (1 Gbit/s)
    initial_instances: Annotated[int, AtLeastZero] = 1  # pool already up when the workflow is submitted
    # That pool was launched boot_lag_s before and is billed from its launch, like every
    # instance (the full site's boot is paid too); false: it is free until time 0.
    bill_initial_boot: bool = True
    time_scale: Annotated[float, Positive] = 1.0  # multiply every runtime and transfer time (study long runs)
    seed: int = 0  # order of ready tasks within one DAGMan submit batch
    # Partitionable slots with memory. 0: memory is not modelled, a task needs one slot and
    # nothing else. Otherwise each instance has this much memory and a job needs a core and its request.
    instance_memory_mib: Annotated[float, AtLeastZero] = 0.0
    # Every task requests this multiple of its transformation's largest peak memory in the trace (a
    # typical user estimate, set per transformation as Pegasus users do); only with instance memory.
    memory_request_factor: Annotated[float, Positive] = 4.0
    # A job that uses more memory than it requested is held after this fraction of its occupancy (the
    # memory paper's "time to failure": 0.1, 0.5 or 0.9 of the run).
    memory_failure_fraction: Annotated[float, Field(ge=0.0, le=1.0)] = 0.5
    # The spot market (emulated/market.py): reclaims per spot instance-hour, a storm (storm_fraction of
    # the main type's spot capacity reclaimed at once, at a time drawn from the seed), the notice a reclaim
    # gives, and the spot instances of one type the market has room for (None: no limit).
    spot_interruptions_per_hour: Annotated[float, AtLeastZero] = 0.0
    storm: bool = False
    storm_fraction: Annotated[float, Field(gt=0.0, le=1.0)] = 0.5
    reclaim_notice_s: Annotated[float, AtLeastZero] = 120.0
    spot_capacity: Annotated[int | None, AtLeastZero] = None


MEMORY_PREDICTORS = ("lr", "lr-mean-pm", "lr-mean-minus", "lr-max-minus", "pc50", "pc95")


@section("memory")
class MemoryConfig:
    """Right-sizing request_memory from online peak-memory models (analyze/memory.py)."""

    # The one switch: lower the requests of idle jobs to what their stage's model predicts, and double
    # the request of a job held for memory, then release it. In dry-run it only says what it would change.
    rightsizing: bool = False
    # The memory paper's predictors: linear regression on input size, plain or with its offsets
    # ("mean +-", "mean -", "max -"), or a percentile of the peaks seen (50th, 95th).
    predictor: Annotated[str, one_of(*MEMORY_PREDICTORS)] = "lr-mean-minus"
    # Finished tasks a stage needs before its model replaces the user's request (the paper starts
    # percentiles after 1 and regressions after 2; fewer than the predictor needs is raised to that).
    min_observations: Annotated[int, AtLeastOne] = 2
    # The request is the prediction times (1 + margin_fraction), plus margin_mib.
    margin_fraction: Annotated[float, AtLeastZero] = 0.05
    margin_mib: Annotated[float, AtLeastZero] = 0.0
    # A job held for memory gets its failed request times this, never above max_request_mib.
    failure_factor: Annotated[float, Field(gt=1.0)] = 2.0
    # The largest slot's memory. 0: the emulated instance's memory (required on a condor site).
    max_request_mib: Annotated[float, AtLeastZero] = 0.0
    # Re-edit an idle job only when the wanted request differs from the one it has by this fraction.
    edit_tolerance: Annotated[float, AtLeastZero] = 0.05


@section("")
class ReplayConfig:
    """What a replay decides with; the daemon's ``Settings`` are these sections and those of a real site."""

    prediction: PredictionConfig = field(default_factory=PredictionConfig)
    steering: SteeringConfig = field(default_factory=SteeringConfig)
    emulation: EmulationConfig = field(default_factory=EmulationConfig)
    memory: MemoryConfig = field(default_factory=MemoryConfig)
    # The options of the policies that have their own (plan/<policy>.py declares them), by their section's
    # key (pfa); a policy given none here runs with its options' defaults.
    policy_options: dict[str, Any] = field(default_factory=dict)
