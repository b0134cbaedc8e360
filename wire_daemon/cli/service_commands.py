"""The service subcommands: run, check-config, status, decisions, report, and the operator's controls.

The controls (pause, resume, hold N, drain-all, terminate-all, deadline, budget) act through
the daemon's state file: each writes a request there, the running daemon
applies it within about a second (or at its next start, when it is down)
and records the change in the decisions log.
"""

from __future__ import annotations

import argparse
import getpass
import json
import os
import re
import sqlite3
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from wire_daemon.core.deadlines import FORMS as DEADLINE_FORMS
from wire_daemon.core.deadlines import parse_deadline
from wire_daemon.core.errors import ConfigError, InputError
from wire_daemon.core.secrets import redact
from wire_daemon.persist.store import StateStore, no_room
from wire_daemon.runtime.control import CLEAR, steering_value
from wire_daemon.runtime.settings import Settings, as_file, check_paths, load_settings
from wire_daemon.service.config_check import check_run_needs, run_warnings
from wire_daemon.service.decisions_log import Run, select_run
from wire_daemon.service.status import StatusReport, open_state_file, read_status
from wire_daemon.service.status_text import render_status
from wire_daemon.service.wording import Since, decision_line, decision_words, duration, parse_since
from wire_daemon.service.wording import wall as wall_time

CONFIG_HELP = "the daemon's YAML config file (e.g. /etc/wire-daemon/config.yaml)"
JSON_HELP = "print one JSON object instead of text"
RUN_HELP = "the run to show, by the id its header gives; default: the last run; all: every run"
CONTROL_WAIT_S = 10.0  # how long a control command waits for the running daemon to apply it


def add_service_commands(sub: Any) -> None:
    run = sub.add_parser("run", help="run the MAPE loop as a service (see README, 'Install as a service')")
    run.add_argument("--config", required=True, metavar="FILE", help=CONFIG_HELP)
    run.add_argument("--site", choices=("emulated", "condor"), help="override site.kind of the config")
    run.add_argument("--trace", metavar="TRACE", help="emulated site: the WfFormat trace to replay (site.trace)")
    run.add_argument(
        "--speedup", type=float, metavar="K", help="emulated site: virtual seconds per wall second (site.speedup)"
    )
    run.add_argument("--max-iterations", type=int, metavar="N", help="stop after N decisions (for tests and demos)")
    run.add_argument(
        "--log-level",
        choices=("DEBUG", "INFO", "WARNING", "ERROR"),
        default="INFO",
        type=str.upper,
        help="what the log (stderr, the journal) shows: INFO (default) has one line per decision and event",
    )
    run.set_defaults(handler=_run)

    check = sub.add_parser("check-config", help="validate a config file and print the effective settings")
    check.add_argument("config", metavar="FILE", help=CONFIG_HELP)
    check.add_argument(
        "--probe",
        action="store_true",
        help="also make read-only calls to the cloud with the configured credentials and say, one line each, "
        "what works, what is denied and what is not found",
    )
    check.set_defaults(handler=_check_config)

    status = sub.add_parser("status", help="what the daemon is doing, from its state file (works when it is down)")
    status.add_argument("--config", required=True, metavar="FILE", help=CONFIG_HELP)
    status.add_argument("--json", action="store_true", help=JSON_HELP)
    status.set_defaults(handler=_status)

    decisions = sub.add_parser("decisions", help="the decisions log, one line per decision in plain words")
    decisions.add_argument("--config", required=True, metavar="FILE", help=CONFIG_HELP)
    decisions.add_argument(
        "--since",
        metavar="T",
        help="only from T on: an ISO time (2025-11-05T12:00, UTC unless a zone is given), "
        "a duration back from now (10m, 10m ago, 2h, 1d), or seconds on the loop's clock (360)",
    )
    decisions.add_argument("--follow", action="store_true", help="keep printing new decisions as they come")
    decisions.add_argument("--run", metavar="ID", help=RUN_HELP)
    decisions.add_argument("--json", action="store_true", help="print the records as JSON lines, as logged")
    decisions.add_argument(
        "--verbose",
        action="store_true",
        help="every figure of each decision: tasks, predicted load, the policy's full rule, its estimates, notes",
    )
    decisions.set_defaults(handler=_decisions)

    report = sub.add_parser(
        "report", help="draw a PNG timeline (pool, tasks, predicted load, cost) from a decisions log"
    )
    report.add_argument("decisions_log", nargs="?", help="a decisions log (JSON lines) of the daemon or of a replay")
    report.add_argument(
        "--config", metavar="FILE", help="read the daemon's decisions log (rotated files too) named in this config"
    )
    report.add_argument(
        "--out", default="wire-daemon-report.png", metavar="PNG", help="PNG to write (default: wire-daemon-report.png)"
    )
    report.add_argument("--title", default="", help="title above the plots (default: the run and the log's name)")
    report.add_argument("--run", metavar="ID", help=RUN_HELP)
    report.set_defaults(handler=_report)

    _add_control(sub, "pause", "keep the pool as it is: no launch, no release, until resume")
    _add_control(sub, "resume", "let the scaling policy decide again (ends pause, hold, drain-all, terminate-all)")
    hold = _add_control(sub, "hold", "bring the pool to N instances and keep it there, until resume")
    hold.add_argument("count", type=int, metavar="N", help="the pool size to keep (within safety.max_instances)")
    _add_control(sub, "drain-all", "drain every instance now, terminate each when its paid unit ends; then hold at 0")
    terminate = _add_control(
        sub, "terminate-all", "terminate every instance now (running jobs are killed and rerun); then hold at 0"
    )
    terminate.add_argument("--yes", action="store_true", help="do not ask for confirmation")
    deadline = _add_control(sub, "deadline", "set the workflow's deadline for this run, over the config's")
    deadline.add_argument("argument", metavar="WHEN", help=f"{DEADLINE_FORMS}, or clear")
    budget = _add_control(sub, "budget", "set the workflow's money budget for this run, over the config's")
    budget.add_argument("argument", metavar="AMOUNT", help="money in steering.currency, or clear")


def _add_control(sub: Any, name: str, text: str) -> argparse.ArgumentParser:
    parser = sub.add_parser(name, help=text, description=f"{text}. Recorded in the decisions log.")
    parser.add_argument("--config", required=True, metavar="FILE", help=CONFIG_HELP)
    parser.set_defaults(handler=_control, command=name)
    return parser


def _settings(args: argparse.Namespace) -> Settings:
    speedup = getattr(args, "speedup", None)
    if speedup is not None and not speedup > 0:
        raise ConfigError(f"--speedup must be > 0 virtual seconds per wall second (got {speedup:g})")
    settings = load_settings(args.config)
    site = settings.site
    overrides = {k: getattr(args, k, None) for k in ("site", "trace", "speedup")}
    if any(v is not None for v in overrides.values()):
        from dataclasses import replace

        site = replace(
            site,
            kind=overrides["site"] or site.kind,
            trace=overrides["trace"] or site.trace,
            speedup=site.speedup if speedup is None else speedup,
        )
        settings = replace(settings, site=site)
    return settings


# -- run -------------------------------------------------------------------------------


def _run(args: argparse.Namespace) -> int:
    from wire_daemon.service.daemon import Daemon, configure_logging

    configure_logging(args.log_level)
    daemon = Daemon(_settings(args), config_path=args.config)
    daemon.install_signal_handlers()
    return daemon.run(args.max_iterations)


# -- check-config ------------------------------------------------------------------------


def _check_config(args: argparse.Namespace) -> int:
    settings = load_settings(args.config)
    if settings.site.kind == "condor":  # the cloud sections are only read on a real site
        from wire_daemon.runtime.builders import driver_config, user_data

        driver_config(settings)
        user_data(settings)
    check_paths(settings)
    check_run_needs(settings)
    print(f"{args.config}: OK")
    for warning in run_warnings(settings):
        print(f"WARNING: {warning}", file=sys.stderr)
    print(json.dumps(redacted(as_file(settings)), indent=2, sort_keys=True, default=str))
    if args.probe:
        return _probe(settings)
    return 0


def redacted(settings: dict[str, Any]) -> dict[str, Any]:
    """The effective settings with every secret blanked: the inline pool token and admin key, any key named
    like a secret, any value shaped like one (wherever it was pasted)."""
    return dict(redact(settings))


def _probe(settings: Settings) -> int:
    from wire_daemon.execute.providers import provider
    from wire_daemon.execute.providers.base import Ownership
    from wire_daemon.runtime.builders import driver_config

    if settings.cloud.kind == "emulated":
        print("probe: cloud.kind is emulated: there is no cloud to probe")
        return 0
    config = driver_config(settings)
    daemon_id = _daemon_id(settings)
    token = _token_reference(settings)
    spec = provider(settings.cloud.kind)
    print(f"probe: {settings.cloud.kind}, pool {settings.cloud.pool}, read-only calls with the configured credentials")
    checks = spec.probe_function()(config, Ownership(settings.cloud.pool, daemon_id), token)
    same = {(c.outcome, c.detail) for c in checks}
    if len(checks) > 1 and len(same) == 1 and not checks[0].ok:  # one cause, said once: not once per call
        outcome, detail = same.pop()
        word = "no credentials" if _NO_CREDENTIALS.search(detail) else outcome
        print(f"probe: {word}: {detail} (every one of the {len(checks)} calls)")
        return 1
    for check in checks:
        print(f"  {check.line()}" + ("" if check.needed_by == "the daemon" else f" [needed by {check.needed_by}]"))
    failed = [c for c in checks if c.outcome not in ("works", "not probed")]
    needed = [c for c in failed if c.needed_by == "the daemon"]
    if not failed:
        print("probe: every call works")
        return 0
    print(
        f"probe: {len(failed)} of {len(checks)} call(s) did not work"
        + (f", {len(needed)} of them needed by the daemon itself" if needed else "")
    )
    return 1


_NO_CREDENTIALS = re.compile(r"(?i)NoCredentials|unable to locate credentials|no credentials|missing credentials")


def _daemon_id(settings: Settings) -> str:
    """The running daemon's id if its state file is readable, else a placeholder (listing by pool tag only)."""
    path = Path(settings.state_path)
    if path.exists():
        try:
            store = StateStore(path)
            try:
                return store.daemon_id()
            finally:
                store.close()
        except (InputError, sqlite3.Error, OSError):
            pass
    return "probe"


def _token_reference(settings: Settings) -> Any:
    from wire_daemon.execute.providers import provider
    from wire_daemon.execute.providers.base import TokenReference

    worker = settings.cloud.worker
    if not worker:
        return None
    delivery = str(worker.get("token_delivery") or provider(settings.cloud.kind).default_delivery)
    return TokenReference(delivery, str(worker.get("token_source", "")), str(worker.get("aws_region", "")))


# -- status ------------------------------------------------------------------------------


def _status(args: argparse.Namespace) -> int:
    report = read_status(load_settings(args.config).state_path)
    print(json.dumps(report.to_json(), indent=2, sort_keys=True) if args.json else render_status(report))
    return 0


# -- the operator's controls -------------------------------------------------------------


def _refuse_a_passed_moment(given: str) -> None:
    """A wall-clock deadline already past when given is a typo more often than a wish: the policy would spend
    as if the workflow were late from its first decision. (A duration is from the workflow's start: it may
    have passed, and that is the operator's to say.)"""
    past = parse_deadline(given).passed_s(time.time())
    if past <= 0:
        return
    ago = duration(past) if past < 2 * 86400 else f"{past / 86400:.0f} days"
    raise ConfigError(
        f"deadline WHEN {given} has already passed ({ago} ago): give a later time, "
        "or a duration from the workflow's start (8h)"
    )


def _control(args: argparse.Namespace) -> int:
    settings = load_settings(args.config)
    command = args.command
    count: int | None = getattr(args, "count", None)
    argument: str | None = getattr(args, "argument", None)
    if argument is not None and argument.strip() != CLEAR:
        try:
            steering_value(command, argument.strip())
        except ValueError as exc:
            raise ConfigError(str(exc)) from None
        if command == "deadline":
            _refuse_a_passed_moment(argument.strip())
    if command == "hold" and count is not None:
        cap = min(settings.safety.max_instances, settings.steering.max_instances)
        if count < 0 or count > cap:
            raise ConfigError(f"hold {count}: N must be between 0 and {cap} (safety/steering max_instances)")
    path = Path(settings.state_path)
    status = read_status(path)
    what = command + (f" {count}" if count is not None else "") + (f" {argument}" if argument else "")
    if settings.site.kind == "emulated" and status.daemon != "running" and status.started_wall is not None:
        # Each emulated run replays the workflow from its start: a command belongs to the run it was given to.
        raise ConfigError(
            f"{what}: refused: the emulated run on {path} has stopped, and a command is kept only for the run "
            "it was given to; start a new run, then give it"
        )
    if not path.exists():  # before the first start: the state file is made now, the first run applies it
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise InputError(str(path.parent), f"cannot make the state file's directory ({exc.strerror})") from None
    if command == "terminate-all" and not args.yes and not _confirmed(status):
        print("terminate-all: not confirmed; nothing done", file=sys.stderr)
        return 1
    store = open_state_file(path)
    try:
        try:
            seq = store.request_control(command, count, by=_who(), argument=argument)
        except sqlite3.OperationalError as exc:
            if no_room(exc):
                raise InputError(
                    str(path), f"{command} not recorded: no room on the state file's disk ({exc}); free some and retry"
                ) from None
            raise InputError(
                str(path), f"cannot write the state file ({exc}): run the command as the daemon's user"
            ) from None
        if status.daemon != "running" and status.started_wall is None:
            print(f"{what}: recorded in {path}; the daemon has not started yet: its first run applies it")
            return 0
        if status.daemon != "running":
            print(f"{what}: recorded in {path}; the daemon is down: it applies it when it starts")
            return 0
        applied = _wait_applied(store, seq)
    finally:
        store.close()
    if applied is None:
        if read_status(path).daemon != "running" and settings.site.kind == "emulated":
            print(f"{what}: not applied: the emulated run stopped first, and its commands end with it", file=sys.stderr)
            return 1
        if read_status(path).daemon != "running":
            print(f"{what}: recorded; the daemon stopped before applying it: it applies it when it starts")
        else:
            print(f"{what}: recorded; the daemon (pid {status.pid}) applies it at its next look (it is busy)")
        return 0
    outcome = applied.outcome or "applied"
    if outcome.startswith("refused"):
        print(f"{what}: {outcome}", file=sys.stderr)
        return 1
    # "applied: <what it does>", "done: <what was done>", or "pending: <what it waits for>" (timed out waiting).
    word, _, detail = outcome.partition(": ")
    by = f"{word} by the daemon (pid {status.pid}) at {wall_time(applied.applied_at or 0)}"
    print(f"{what}: {by}: {detail}" if detail else f"{what}: {by}")
    return 0


def _wait_applied(store: StateStore, seq: int, timeout_s: float = CONTROL_WAIT_S) -> Any:
    """The request once the daemon has applied it, and carried it out if it is an action; None if never applied.

    A drain-all or terminate-all is first marked ``pending`` (applied, not carried out yet): it is
    waited for until done, and returned as it stands at the timeout.
    """
    deadline = time.monotonic() + timeout_s
    seen = None
    while time.monotonic() < deadline:
        for request in store.controls(last=50):
            if request.seq == seq and request.applied_at is not None:
                seen = request
        if seen is not None and not (seen.outcome or "").startswith("pending"):
            return seen
        time.sleep(0.2)
    return seen


def _confirmed(status: StatusReport) -> bool:
    pool = [i.instance_id for i in status.snapshot.pool] if status.snapshot is not None else []
    what = f"{len(pool)} instance(s) ({', '.join(pool[:8])}{', ...' if len(pool) > 8 else ''})" if pool else "the pool"
    print(
        f"terminate-all: this terminates {what} now; their running jobs are killed and rerun later. "
        "Type 'yes' to go on: ",
        end="",
        file=sys.stderr,
        flush=True,
    )
    try:
        answer = sys.stdin.readline()
    except (OSError, KeyboardInterrupt):
        return False
    return answer.strip().lower() == "yes"


def _who() -> str:
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return f"uid {os.getuid()}"


# -- report and decisions -------------------------------------------------------------------


def _report(args: argparse.Namespace) -> int:
    from wire_daemon.service.report import check_output, load_decisions, render_report

    if bool(args.decisions_log) == bool(args.config):
        raise ConfigError("report: give either a decisions log or --config, not both or neither")
    out = check_output(Path(args.out))
    path = Path(args.decisions_log) if args.decisions_log else Path(load_settings(args.config).log.decisions_path)
    run = select_run(load_decisions(path, rotated=bool(args.config)), args.run, str(path))
    records = run.records if run is not None else []  # none: render_report says the log has no decision
    title = args.title or (_run_title(run, path) if run is not None else path.name)
    written = render_report(records, out, title, source=path)
    drawn = sum(1 for r in records if r.get("event") is None)
    of_run = f" of run {run.run_id}" if run is not None and run.header is not None else ""
    print(f"wrote {written} ({drawn} decisions{of_run})")
    return 0


def _run_title(run: Run, path: Path) -> str:
    if run.header is None:
        return path.name
    h = run.header
    return f"run {run.run_id}: {h.get('site', '?')}, policy {h.get('policy', '?')} ({path.name})"


def _decisions(args: argparse.Namespace) -> int:
    settings = load_settings(args.config)
    since = parse_since(args.since)
    path = Path(settings.log.decisions_path)
    if not path.exists() and not args.follow:
        raise InputError(str(path), "no decisions log yet (log.decisions_path): the daemon has not decided anything")
    stream = _stream(path, Since(), args.follow)
    logged: list[dict[str, Any]] = []
    for record in stream:  # what the log holds now, up to the first wait
        if record is None:
            break
        logged.append(record)
    run = select_run(logged, args.run, str(path))
    for record in run.records if run is not None else []:
        _print_record(record, args, since)
    for record in stream:  # --follow: every new record, a new run's included
        if record is not None:
            _print_record(record, args, since)
    return 0


def _print_record(record: dict[str, Any], args: argparse.Namespace, since: Since) -> None:
    if since.admits(record):
        print(json.dumps(record, sort_keys=True) if args.json else decision_line(record, args.verbose), flush=True)


def follow_decisions(path: Path, since: Since, follow: bool, poll_s: float = 1.0) -> Iterator[dict[str, Any]]:
    """Decisions from the log (rotated files first), then new ones as they come when following."""
    for record in _stream(path, since, follow, poll_s):
        if record is not None:
            yield record


def _stream(path: Path, since: Since, follow: bool, poll_s: float = 1.0) -> Iterator[dict[str, Any] | None]:
    """``follow_decisions`` with a None where it has read all the log held and starts to wait for more."""
    files = sorted(
        path.parent.glob(path.name + ".*"), key=lambda p: -int(p.suffix[1:]) if p.suffix[1:].isdigit() else 0
    )
    for older in files:
        if older.suffix[1:].isdigit():
            yield from _records(older, since)
    offset = 0
    caught_up = False
    while True:
        if path.exists():
            with path.open(encoding="utf-8") as handle:
                handle.seek(offset)
                for line in iter(handle.readline, ""):
                    if not line.endswith("\n"):
                        break  # half-written: next time
                    offset += len(line.encode("utf-8"))
                    record = _parse(path, line)
                    if record is not None and since.admits(record):
                        yield record
        if not follow:
            return
        if not caught_up:
            caught_up = True
            yield None
        time.sleep(poll_s)


def _records(path: Path, since: Since) -> Iterator[dict[str, Any]]:
    with path.open(encoding="utf-8") as handle:
        for number, line in enumerate(handle, 1):
            record = _parse(path, line, number)
            if record is not None and since.admits(record):
                yield record


def _parse(path: Path, line: str, number: int | None = None) -> dict[str, Any] | None:
    try:
        record = json.loads(line)
    except json.JSONDecodeError:
        where = f":{number}" if number else ""
        print(f"wire-daemon: warning: {path}{where}: not a decision record, skipped", file=sys.stderr)
        return None
    return record if isinstance(record, dict) else None


__all__ = ["add_service_commands", "follow_decisions", "decision_words"]
