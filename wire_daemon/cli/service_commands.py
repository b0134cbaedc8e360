"""The service subcommands: run, status, decisions, check-config."""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from wire_daemon.core.store import StateStore
from wire_daemon.runtime.settings import Settings, load_settings
from wire_daemon.service.render import format_decision


def add_service_commands(sub: Any) -> None:
    run = sub.add_parser("run", help="run the MAPE loop as a service")
    run.add_argument("--config", required=True, help="YAML config file")
    run.add_argument("--site", choices=("emulated", "condor"), help="override site.kind")
    run.add_argument("--trace", help="emulated site: WfFormat trace to replay")
    run.add_argument("--speedup", type=float, help="emulated site: virtual seconds per wall second")
    run.add_argument("--max-iterations", type=int, help="stop after N iterations (testing)")
    run.set_defaults(handler=_run)

    check = sub.add_parser("check-config", help="validate a config file and print the effective settings")
    check.add_argument("config")
    check.set_defaults(handler=_check_config)

    status = sub.add_parser("status", help="what the daemon is doing, from its state file")
    status.add_argument("--config", required=True)
    status.add_argument("--json", action="store_true")
    status.set_defaults(handler=_status)

    decisions = sub.add_parser("decisions", help="render the decisions log")
    decisions.add_argument("--config", required=True)
    decisions.add_argument("--since", type=float, default=float("-inf"), help="virtual/loop time in seconds")
    decisions.add_argument("--follow", action="store_true", help="keep printing new decisions")
    decisions.set_defaults(handler=_decisions)

    report = sub.add_parser(
        "report", help="draw a PNG timeline (pool, tasks, predicted load, cost) from a decisions log"
    )
    report.add_argument("decisions_log", nargs="?", help="a decisions log (JSON lines) of the daemon or of a replay")
    report.add_argument("--config", help="read the daemon's decisions log (rotated files too) named in this config")
    report.add_argument(
        "--out", default="wire-daemon-report.png", help="PNG to write (default: wire-daemon-report.png)"
    )
    report.add_argument("--title", default="", help="title above the plots (default: the log's name)")
    report.set_defaults(handler=_report)


def _settings(args: argparse.Namespace) -> Settings:
    settings = load_settings(args.config)
    site = settings.site
    overrides = {k: getattr(args, k, None) for k in ("site", "trace", "speedup")}
    if any(v is not None for v in overrides.values()):
        from dataclasses import replace

        site = replace(
            site,
            kind=overrides["site"] or site.kind,
            trace=overrides["trace"] or site.trace,
            speedup=overrides["speedup"] or site.speedup,
        )
        settings = replace(settings, site=site).validate()
    return settings


def _run(args: argparse.Namespace) -> int:
    from wire_daemon.service.daemon import Daemon

    daemon = Daemon(_settings(args), config_path=args.config)
    daemon.install_signal_handlers()
    return daemon.run(args.max_iterations)


def _check_config(args: argparse.Namespace) -> int:
    from dataclasses import asdict

    settings = load_settings(args.config)
    if settings.site.kind == "condor":  # the cloud sections are only read on a real site
        from wire_daemon.runtime.builders import driver_config, user_data

        driver_config(settings)
        user_data(settings)
    print(f"{args.config}: OK")
    print(json.dumps(asdict(settings), indent=2, sort_keys=True, default=str))
    return 0


def _status(args: argparse.Namespace) -> int:
    settings = load_settings(args.config)
    report = read_status(settings)
    if args.json:
        print(json.dumps(report, indent=2, sort_keys=True))
    else:
        print(render_status(report))
    return 0


def read_status(settings: Settings) -> dict[str, Any]:
    """The last snapshot the daemon wrote, and whether it is alive."""
    path = Path(settings.state_path)
    if not path.exists():
        return {"daemon": "never ran", "state_path": str(path)}
    store = StateStore(path)
    try:
        snapshot = json.loads(store.get_meta("status") or "{}")
        heartbeat = json.loads(store.get_meta("heartbeat") or "{}")
        stopped = json.loads(store.get_meta("stopped") or "{}")
        pid = int(store.get_meta("pid") or 0)
    finally:
        store.close()
    alive = _alive(pid) and not stopped.get("wall", 0) > heartbeat.get("wall", 0)
    return {
        "daemon": "running" if alive else "down",
        "pid": pid or None,
        "last_heartbeat_wall": heartbeat.get("wall"),
        "workflow_finished": stopped.get("finished"),
        **snapshot,
    }


def _alive(pid: int) -> bool:
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def render_status(report: dict[str, Any]) -> str:
    lines = [f"daemon: {report['daemon']}" + (f" (pid {report['pid']})" if report.get("pid") else "")]
    if "time" not in report:
        return "\n".join(lines + ["no decision yet"])
    last = report["last_decision"]
    lines.append(
        f"loop time {report['time']:.0f} s; cost so far {report['cost_units']} units; "
        f"remaining work over the pool ~{report['remaining_makespan_estimate_s']:.0f} s"
    )
    lines.append(f"last decision: target {last['target']} (planned {last['planned']}): {last['rule']}")
    lines.append("pool:")
    for i in report["pool"]:
        lines.append(
            f"  {i['instance_id']:<14} {i['state']:<8} age {i['age_s']:>8.0f} s  "
            f"busy {i['busy_slots']}/{i['slots']}  next charge in {i['next_charge_in_s']:>6.0f} s"
        )
    lines.append("stages:")
    for s in report["stages"]:
        predicted = (
            ""
            if s.get("predicted_occupancy_s") is None
            else f"  predicted {s['predicted_occupancy_s']:>7.1f} s (policy {s['prediction_policy']})"
        )
        lines.append(
            f"  {s['stage']:<24} done {s['done']:>5}/{s['tasks']:<5} running {s['running']:>4} "
            f"idle {s['idle']:>5} not ready {s['not_ready']:>5}{predicted}"
        )
    return "\n".join(lines)


def _report(args: argparse.Namespace) -> int:
    from wire_daemon.core.errors import ConfigError
    from wire_daemon.service.report import load_decisions, render_report

    if bool(args.decisions_log) == bool(args.config):
        raise ConfigError("report: give either a decisions log or --config, not both or neither")
    path = Path(args.decisions_log) if args.decisions_log else Path(load_settings(args.config).log.decisions_path)
    records = load_decisions(path, rotated=bool(args.config))
    out = render_report(records, Path(args.out), args.title or path.name)
    print(f"wrote {out} ({len(records)} decisions)")
    return 0


def _decisions(args: argparse.Namespace) -> int:
    settings = load_settings(args.config)
    path = Path(settings.log.decisions_path)
    for record in follow_decisions(path, args.since, args.follow):
        print(format_decision(record), flush=True)
    return 0


def follow_decisions(path: Path, since: float, follow: bool, poll_s: float = 1.0) -> Iterator[dict[str, Any]]:
    """Decisions from the log (rotated files first), then new ones as they come when following."""
    files = sorted(
        path.parent.glob(path.name + ".*"), key=lambda p: -int(p.suffix[1:]) if p.suffix[1:].isdigit() else 0
    )
    for older in files:
        yield from _records(older, since)
    offset = 0
    while True:
        if path.exists():
            with path.open(encoding="utf-8") as handle:
                handle.seek(offset)
                for line in iter(handle.readline, ""):
                    if not line.endswith("\n"):
                        break  # half-written: next time
                    offset += len(line.encode("utf-8"))
                    record = _parse(path, line)
                    if record is not None and record.get("time", 0) >= since:
                        yield record
        if not follow:
            return
        time.sleep(poll_s)


def _records(path: Path, since: float) -> Iterator[dict[str, Any]]:
    with path.open(encoding="utf-8") as handle:
        for number, line in enumerate(handle, 1):
            record = _parse(path, line, number)
            if record is not None and record.get("time", 0) >= since:
                yield record


def _parse(path: Path, line: str, number: int | None = None) -> dict[str, Any] | None:
    try:
        record = json.loads(line)
    except json.JSONDecodeError:
        where = f":{number}" if number else ""
        print(f"wire-daemon: warning: {path}{where}: not a decision record, skipped", file=sys.stderr)
        return None
    return record if isinstance(record, dict) else None
