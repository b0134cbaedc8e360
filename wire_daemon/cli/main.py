"""The ``wire-daemon`` command."""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from wire_daemon.cli.service_commands import CONFIG_HELP, add_service_commands
from wire_daemon.core.config import DEADLINE_QUANTILES, MARKET_MODES, ReplayConfig, SteeringConfig
from wire_daemon.core.deadlines import parse_deadline
from wire_daemon.core.errors import ConfigError, WireError
from wire_daemon.emulated.traces import bundled_trace_path, load_trace
from wire_daemon.runtime.policies import DEFAULT_POLICY, POLICY_NAMES, buys_spot, compared_policies, policy_entry
from wire_daemon.runtime.replay import ReplayResult, compare
from wire_daemon.runtime.settings import Settings, load_settings
from wire_daemon.service.render import format_decision, format_table


def main(argv: Sequence[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    try:
        return args.handler(args)
    except WireError as exc:
        print(f"wire-daemon: error: {exc}", file=sys.stderr)
        return 2
    except BrokenPipeError:
        return 0
    except KeyboardInterrupt:  # Ctrl-C during replay, decisions --follow, ...: one line, the shell's code
        print("wire-daemon: interrupted", file=sys.stderr)
        return 130


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="wire-daemon", description="Online-prediction autoscaler for Pegasus/HTCondor workflows."
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {_version()}", help="print the version")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    rp = sub.add_parser("replay", help="replay a workflow trace on the emulated site and report cost and makespan")
    rp.add_argument("trace", nargs="?", help="WfFormat trace (.json or .json.gz); default: the bundled Montage trace")
    rp.add_argument("--policy", choices=POLICY_NAMES, default=DEFAULT_POLICY)
    rp.add_argument("--compare", action="store_true", help="run every policy side by side")
    rp.add_argument(
        "--charging-unit", type=float, default=60.0, metavar="MIN", help="charging unit u in minutes (default 60)"
    )
    rp.add_argument(
        "--interval", type=float, default=180.0, metavar="SEC", help="MAPE interval = launch lag, seconds (default 180)"
    )
    rp.add_argument(
        "--boot-lag", type=float, default=None, metavar="SEC", help="instance boot lag, seconds (default: the interval)"
    )
    rp.add_argument("--slots", type=int, default=4, metavar="N", help="slots per instance (default 4)")
    rp.add_argument("--max-instances", type=int, default=12, metavar="N", help="pool size limit (default 12)")
    rp.add_argument(
        "--time-scale",
        type=float,
        default=1.0,
        metavar="K",
        help="multiply every task's runtime and transfer time by K",
    )
    rp.add_argument(
        "--bandwidth", type=float, default=125.0, metavar="MB/S", help="per-slot transfer bandwidth (default 125 MB/s)"
    )
    rp.add_argument("--seed", type=int, default=0, help="order of ready siblings, reclaims and the storm (default 0)")
    _add_market_flags(rp)
    rp.add_argument("--no-boost", action="store_true", help="do not raise the priority of each stage's first tasks")
    rp.add_argument(
        "--config",
        metavar="FILE",
        help=f"{CONFIG_HELP}: replay with its steering (instance types, prices, billing, market), prediction, "
        "emulation and memory settings and its policy; each flag given overrides the file",
    )
    rp.add_argument("--json", action="store_true", help="print one JSON object")
    rp.add_argument("--verbose", action="store_true", help="print every interval's decision")
    rp.add_argument(
        "--decisions-out",
        metavar="FILE",
        help=(
            "write each policy's decisions as JSON lines (FILE, or FILE.<policy> with --compare), "
            "for `wire-daemon report`"
        ),
    )
    rp.set_defaults(handler=_replay, **dict.fromkeys(_FROM_CONFIG))  # None: not given (the file's, or the default)
    add_service_commands(sub)
    ip = sub.add_parser("inspect", help="show the stages, task states, predictions and running tasks of a submit dir")
    ip.add_argument("submit_dir", metavar="SUBMIT_DIR", help="a Pegasus (or DAGMan) submit directory")
    ip.add_argument("--json", action="store_true", help="print one JSON object (shape: docs/monitor.md)")
    ip.add_argument(
        "--wall-clock",
        action="store_true",
        help="measure elapsed times against the current time, not the last event (live dirs)",
    )
    ip.set_defaults(handler=_inspect)
    _add_plan(sub)
    _fill_help(parser)
    return parser


def _add_market_flags(rp: argparse.ArgumentParser) -> None:
    rp.add_argument(
        "--billing",
        choices=("unit", "second"),
        default="unit",
        help="unit: every started charging unit paid in full (the paper); second: per second, 60 s minimum",
    )
    rp.add_argument(
        "--market",
        choices=MARKET_MODES,
        default="on-demand",
        help="what launches buy: on-demand, spot, or auto (the policy chooses per launch); default on-demand",
    )
    rp.add_argument(
        "--interruptions",
        type=float,
        default=0.0,
        metavar="R",
        help="expected spot reclaims per spot instance-hour in the emulated market (default 0)",
    )
    rp.add_argument(
        "--spot-price-ratio",
        type=float,
        default=0.35,
        metavar="P",
        help="spot price over on-demand price (default 0.35)",
    )
    rp.add_argument(
        "--storm",
        action="store_true",
        help="half the spot capacity of the main type reclaimed at once, at a time drawn from the seed",
    )


def _add_plan(sub: Any) -> None:
    pl = sub.add_parser(
        "plan", help="estimate the makespan and cost for each pool size, 1 to max, before or during a run"
    )
    pl.add_argument(
        "input",
        nargs="?",
        metavar="TRACE_OR_SUBMIT_DIR",
        help="a WfFormat trace (before its run) or a submit dir (before or during it); default: the bundled trace",
    )
    pl.add_argument("--config", metavar="FILE", help=f"{CONFIG_HELP}: steering, prediction and emulation settings")
    pl.add_argument(
        "--max-instances", type=int, metavar="N", help="the largest pool size (default: steering.max_instances)"
    )
    pl.add_argument(
        "--price",
        type=float,
        metavar="P",
        help="the price of one instance for one charging unit (default: the config's, for the pool's own type)",
    )
    pl.add_argument("--json", action="store_true", help="print one JSON object")
    pl.add_argument(
        "--wall-clock", action="store_true", help="a live submit dir: now is the current time, not the last event"
    )
    pl.add_argument(
        "--deadline",
        metavar="WHEN",
        help="also name the cheapest pool size that meets this deadline (a time with its zone, or a duration: 8h;"
        " default: steering.deadline of --config, if set)",
    )
    pl.add_argument(
        "--quantile",
        choices=DEADLINE_QUANTILES,
        help="the estimate the deadline is met at (default: steering.deadline_quantile, p50 without --config)",
    )
    pl.set_defaults(handler=_plan)


# Help for the options declared without it (kept apart so their lines stay as they are).
_HELP = {
    "--policy": f"the scaling policy to replay (default {DEFAULT_POLICY}); --compare replays them all",
}


def _fill_help(parser: argparse.ArgumentParser) -> None:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                _fill_help(sub)
        elif action.help is None:
            action.help = next((_HELP[o] for o in action.option_strings if o in _HELP), None)


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("wire-daemon")
    except PackageNotFoundError:  # pragma: no cover - run from a source tree without an install
        return "(not installed)"


def _inspect(args: argparse.Namespace) -> int:
    from wire_daemon.service.inspect import inspect_submit_dir, render_text, report_json

    logging.getLogger("wire_daemon.monitor").setLevel(logging.ERROR)  # warnings are part of the report
    logging.getLogger("wire_daemon.core.run_state").setLevel(logging.ERROR)
    report = inspect_submit_dir(args.submit_dir, wall_clock=args.wall_clock)
    if args.json:
        print(json.dumps(report_json(report), indent=2))
    else:
        print(render_text(report))
    return 0


def _plan(args: argparse.Namespace) -> int:
    from wire_daemon.service.sizing import fit_deadline, plan_input, render_text, report_json

    logging.getLogger("wire_daemon.monitor").setLevel(logging.ERROR)  # warnings are part of the report
    logging.getLogger("wire_daemon.core.run_state").setLevel(logging.ERROR)
    settings = load_settings(args.config) if args.config else Settings()
    limit = settings.steering.max_instances if args.max_instances is None else args.max_instances
    if not limit > 0:
        raise ConfigError(f"--max-instances must be > 0 (got {limit})")
    if args.price is not None and not args.price >= 0:
        raise ConfigError(f"--price must be >= 0 (got {args.price:g})")
    # The daemon's own deadline and quantile unless the flags say otherwise: plan answers for what it will aim at.
    deadline = settings.steering.deadline if args.deadline is None else args.deadline
    quantile = settings.steering.deadline_quantile if args.quantile is None else args.quantile
    if args.deadline is not None:
        try:
            parse_deadline(args.deadline)
        except ValueError as exc:
            raise ConfigError(f"--deadline {exc}") from None
    if args.input:
        inputs, wall_clock = [Path(args.input)], args.wall_clock
    else:
        inputs, live = _plan_inputs(settings, args.config)
        wall_clock = args.wall_clock or live
    reports = [plan_input(path, settings, limit, args.price, wall_clock) for path in inputs]
    if deadline is not None:
        for report in reports:
            report.deadline = fit_deadline(report, deadline, quantile, time.time())
    if args.json:
        shown = [report_json(r) for r in reports]
        print(json.dumps(shown[0] if len(shown) == 1 else shown, indent=2))
    else:
        print("\n\n".join(render_text(r) for r in reports))
    return 0


# The replay flags a daemon config also sets: each one's value in a config (in the flag's unit), the default
# without --config coming from ReplayConfig's own defaults. A flag given overrides the file.
_FROM_CONFIG: dict[str, Callable[[Any], Any]] = {
    "policy": lambda c: getattr(c, "policy", DEFAULT_POLICY),
    "charging_unit": lambda c: c.steering.charging_unit_s / 60.0,
    "interval": lambda c: c.steering.interval_s,
    "slots": lambda c: c.steering.slots_per_instance,
    "max_instances": lambda c: c.steering.max_instances,
    "billing": lambda c: c.steering.billing_model,
    "market": lambda c: c.steering.market,
    "spot_price_ratio": lambda c: c.steering.spot_price_ratio,
    "time_scale": lambda c: c.emulation.time_scale,
    "bandwidth": lambda c: c.emulation.bandwidth_bytes_per_s / 1e6,
    "seed": lambda c: c.emulation.seed,
    "interruptions": lambda c: c.emulation.spot_interruptions_per_hour,
    "storm": lambda c: c.emulation.storm,
}


def _replay_base(args: argparse.Namespace) -> tuple[ReplayConfig, set[str]]:
    """The daemon config's replay sections (or the defaults), and the flags given; those not given are filled
    in from the sections."""
    base: ReplayConfig = load_settings(args.config) if args.config else ReplayConfig()
    given = {name for name in _FROM_CONFIG if getattr(args, name) is not None}
    for name, of_config in _FROM_CONFIG.items():
        if name not in given:
            setattr(args, name, of_config(base))
    if args.boot_lag is None and args.config:
        args.boot_lag = base.emulation.boot_lag_s
    return base, given


def _plan_inputs(settings: Settings, config: str | None) -> tuple[list[Path], bool]:
    """What ``plan --config`` plans without an input: the running daemon's workflows, from its state file
    (their submit dirs, live: the clock is the wall's), else the config's trace, else the bundled one."""
    if not config:
        return [bundled_trace_path()], False
    from wire_daemon.service.status import read_status

    snapshot = read_status(settings.state_path).snapshot
    followed = snapshot.workflows if snapshot is not None and snapshot.workflows else []
    running = [Path(w.submit_dir) for w in followed if w.submit_dir and w.state == "running"]
    if running:
        return running, True
    if settings.site.kind == "condor":
        raise ConfigError(
            f"plan --config {config}: the daemon follows no running workflow now ({settings.state_path}); "
            "give the submit dir to plan"
        )
    return [Path(settings.site.trace) if settings.site.trace else bundled_trace_path()], False


def _replay_config(args: argparse.Namespace) -> ReplayConfig:
    """The replay's settings from its flags over its config; a bad value is named by its flag, in its unit."""
    base, given = _replay_base(args)
    for flag, value in (
        ("--charging-unit", args.charging_unit),
        ("--interval", args.interval),
        ("--time-scale", args.time_scale),
        ("--bandwidth", args.bandwidth),
        ("--slots", args.slots),
        ("--max-instances", args.max_instances),
    ):
        if not value > 0:
            raise ConfigError(f"{flag} must be > 0 (got {value:g})")
    if args.boot_lag is not None and not args.boot_lag >= 0:
        raise ConfigError(f"--boot-lag must be >= 0 (got {args.boot_lag:g})")
    if not args.interruptions >= 0:
        raise ConfigError(f"--interruptions must be >= 0 reclaims per spot instance-hour (got {args.interruptions:g})")
    if not 0 < args.spot_price_ratio <= 1:
        raise ConfigError(f"--spot-price-ratio must be in (0, 1] (got {args.spot_price_ratio:g})")
    steering = replace(
        base.steering,
        # Prices per unit of the file's billing kept as the same money an hour: a flag changes the billing.
        instance_types=tuple(t.hourly(base.steering.billing.charging_unit_s) for t in base.steering.instance_types),
        # In the file's own unit unless the flag is given: minutes and back need not be exact.
        charging_unit_s=args.charging_unit * 60.0 if "charging_unit" in given else base.steering.charging_unit_s,
        interval_s=args.interval,
        slots_per_instance=args.slots,
        max_instances=args.max_instances,
        billing_model=args.billing,
        market=args.market,
        spot_price_ratio=args.spot_price_ratio,
    )
    emulation = replace(
        base.emulation,
        boot_lag_s=args.interval if args.boot_lag is None else args.boot_lag,
        bandwidth_bytes_per_s=args.bandwidth * 1e6 if "bandwidth" in given else base.emulation.bandwidth_bytes_per_s,
        time_scale=args.time_scale,
        seed=args.seed,
        spot_interruptions_per_hour=args.interruptions,
        storm=args.storm,
    )
    _reclaims_reach_spot(args, given, steering)
    return ReplayConfig(base.prediction, steering, emulation, base.memory, base.policy_options)


def _reclaims_reach_spot(args: argparse.Namespace, given: set[str], steering: SteeringConfig) -> None:
    """Reclaims asked for on the command line must have a spot instance to reclaim: not a silent no-op."""
    asked = [f for f, on in (("--interruptions", args.interruptions > 0), ("--storm", args.storm)) if on]
    asked = [f for f in asked if f.removeprefix("--") in given]
    replayed = compared_policies(steering) if args.compare else (args.policy,)
    if asked and not any(buys_spot(policy_entry(name), steering) for name in replayed):
        raise ConfigError(
            f"{' and '.join(asked)} {'reclaim' if len(asked) > 1 else 'reclaims'} spot instances, and this replay "
            f"buys none (market {steering.market}); "
            "add --market spot or auto, or --policy annex-spot or reactive-spot"
        )


def _replay(args: argparse.Namespace) -> int:
    path = Path(args.trace) if args.trace else bundled_trace_path()
    workflow = load_trace(path)
    config = _replay_config(args)
    boost = not args.no_boost
    if args.compare:
        results = compare(workflow, config, boost=boost)
    else:
        results = compare(workflow, config, (args.policy,), boost=boost)
    if args.decisions_out:
        _write_decisions(Path(args.decisions_out), results, several=args.compare)
    if args.json:
        print(json.dumps(_json(path, workflow.n_tasks, config, results, args.verbose), indent=2))
        return 0
    per_second = f"billed per second ({config.steering.minimum_charge_s:g} s minimum)"
    billed = f"u = {args.charging_unit:g} min" if args.billing == "unit" else per_second
    market = "" if args.market == "on-demand" else f", market {args.market} ({args.interruptions:g} reclaims/h)"
    print(
        f"trace {path.name}: {workflow.n_tasks} tasks, {len(workflow.stages)} stages; "
        f"{billed}{market}, interval {args.interval:g} s, "
        f"{args.slots} slots x {args.max_instances} instances, "
        f"time scale {args.time_scale:g}"
    )
    if args.verbose:
        for result in results.values():
            _print_decisions(result)
    print(format_table(results))
    return 0


def _write_decisions(path: Path, results: dict[str, ReplayResult], several: bool) -> None:
    for name, result in results.items():
        target = path.with_name(f"{path.name}.{name}") if several else path
        with target.open("w", encoding="utf-8") as out:
            for record in result.records:
                out.write(json.dumps(record.to_json(), sort_keys=True) + "\n")


def _print_decisions(result: ReplayResult) -> None:
    print(f"\n== decisions: {result.policy} ==")
    for record in result.records:
        print(format_decision(record.to_json()))
    print()


def _json(
    path: Path, n_tasks: int, config: ReplayConfig, results: dict[str, ReplayResult], verbose: bool
) -> dict[str, Any]:
    out: dict[str, Any] = {
        "trace": path.name,
        "tasks": n_tasks,
        "charging_unit_s": config.steering.charging_unit_s,
        "billing": config.steering.billing_model,
        "currency": config.steering.currency,
        "market": config.steering.market,
        "interruptions_per_hour": config.emulation.spot_interruptions_per_hour,
        "storm": config.emulation.storm,
        "interval_s": config.steering.interval_s,
        "slots_per_instance": config.steering.slots_per_instance,
        "max_instances": config.steering.max_instances,
        "time_scale": config.emulation.time_scale,
        "seed": config.emulation.seed,
        "policies": {name: r.summary() for name, r in results.items()},
    }
    if verbose:
        for name, r in results.items():
            out["policies"][name]["decisions"] = [rec.to_json() for rec in r.records]
    return out


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
