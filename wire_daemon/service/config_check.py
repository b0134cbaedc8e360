"""What ``check-config`` checks beyond the file itself: what ``run`` would otherwise fail on at its start.

Errors (``ConfigError``, one line naming the key): the configured cloud's
extra is not installed; the state file's directory is missing or not
writable (``run`` does not make it: the systemd unit's ``StateDirectory``
does); the decisions log's file or directory cannot be written or made.
Warnings (lines the caller prints, the config is still OK): the schedd
cannot be reached now, with HTCondor control on. Condor may start after the
daemon, which then waits for it.
"""

from __future__ import annotations

import os
import threading
import time
import warnings
from pathlib import Path

from wire_daemon.core.errors import ConfigError
from wire_daemon.core.pricing import SECONDS_PER_HOUR
from wire_daemon.execute.providers import provider
from wire_daemon.runtime.builders import idle_shutdown_for
from wire_daemon.runtime.policies import buys_spot, policy_entry
from wire_daemon.runtime.settings import Settings

SCHEDD_TIMEOUT_S = 10.0  # a collector that does not answer: the check gives up, it does not hang


def check_run_needs(settings: Settings) -> None:
    """The errors: a missing extra, a state or log place this user cannot write."""
    if settings.site.kind == "condor":
        provider(settings.cloud.kind).require_sdk()
    _state_place(settings)
    _log_place(settings)


def _who() -> str:
    return f"this user (uid {os.geteuid()})"


def _state_place(settings: Settings) -> None:
    state = Path(settings.state_path)
    where = f"{settings.source}: state_path {settings.state_path!r}"
    folder = state.parent
    if not folder.is_dir():
        raise ConfigError(
            f"{where}: its directory {folder} does not exist; create it, writable by the daemon's user "
            "(the systemd unit's StateDirectory does), or set state_path"
        )
    for path in (state, Path(f"{state}.lock")):  # the daemon holds a lock file beside the state file
        if path.exists() and not os.access(path, os.R_OK | os.W_OK):
            raise ConfigError(f"{where}: {path} is not writable by {_who()}")
    if not state.exists() and not os.access(folder, os.W_OK | os.X_OK):
        raise ConfigError(f"{where}: its directory {folder} is not writable by {_who()}")


def _log_place(settings: Settings) -> None:
    log = Path(settings.log.decisions_path)
    where = f"{settings.source}: log.decisions_path {settings.log.decisions_path!r}"
    if log.exists():
        if not os.access(log, os.W_OK):
            raise ConfigError(f"{where}: {log} is not writable by {_who()}")
        return
    nearest = log.parent
    while not nearest.exists() and nearest != nearest.parent:  # run makes the missing directories
        nearest = nearest.parent
    if not nearest.is_dir() or not os.access(nearest, os.W_OK | os.X_OK):
        made = "" if nearest == log.parent else f" (run would make {log.parent} in it)"
        raise ConfigError(f"{where}: {nearest} is not a directory writable by {_who()}{made}")


def run_warnings(settings: Settings) -> list[str]:
    """What may fail later or cost money but need not: prices per second that look hourly, the schedd, a worker
    that leaves before its unit ends, a deadline already past; on the emulated site, reclaims set where nothing
    buys spot."""
    if settings.site.kind != "condor":
        return _per_second_prices(settings) + _reclaims_without_spot(settings)
    found = _per_second_prices(settings) + _idle_shutdown_problem(settings) + _passed_deadline(settings)
    if settings.condor.control != "htcondor":
        return found
    problem = _schedd_problem(settings)
    if problem:
        found.append(
            f"condor: the schedd cannot be reached now ({problem}); the daemon needs it to steer the pool "
            "(Condor may start later: the daemon waits for it)"
        )
    return found


def _per_second_prices(settings: Settings) -> list[str]:
    """Billed per second, a type's ``price`` is per second: an hourly figure there is 3600 times the bill."""
    steering = settings.steering
    if steering.billing_model != "second":
        return []
    return [
        f"{settings.source}: steering.instance_types {t.name}: price {t.price:g} is per charging unit, here a "
        f"second: {t.price * SECONDS_PER_HOUR:g} {steering.currency} an hour; give an hourly price as price_per_hour"
        for t in steering.instance_types
        if t.price_per_hour is None
    ]


def _reclaims_without_spot(settings: Settings) -> list[str]:
    emulation, steering = settings.emulation, settings.steering
    if not (emulation.spot_interruptions_per_hour > 0 or emulation.storm):
        return []
    if buys_spot(policy_entry(settings.policy), steering):
        return []
    return [
        f"{settings.source}: emulation reclaims spot instances (spot_interruptions_per_hour "
        f"{emulation.spot_interruptions_per_hour:g}, storm {str(emulation.storm).lower()}), and steering.market "
        f"{steering.market} buys none: nothing will be reclaimed; set steering.market: spot or auto"
    ]


def _passed_deadline(settings: Settings) -> list[str]:
    given = settings.steering.operator_deadline()
    if given is None or given.passed_s(time.time()) <= 0:
        return []
    return [
        f"{settings.source}: steering.deadline {given.text} has already passed: every workflow is late from its "
        "first decision, and the policy buys the fastest pool; set a later time, or a duration from the "
        "workflow's start (8h)"
    ]


def _idle_shutdown_problem(settings: Settings) -> list[str]:
    given = settings.cloud.worker.get("idle_shutdown_s")
    unit = settings.steering.planning_unit_s
    if not isinstance(given, int | float) or isinstance(given, bool) or given >= unit:
        return []
    return [
        f"{settings.source}: cloud.worker.idle_shutdown_s {given:g} s is shorter than the {unit:g} s unit the pool "
        "pays: a worker the daemon keeps for the rest of its paid unit powers itself off first (on spot it reads "
        f"as a reclaim); set it to {idle_shutdown_for(settings.steering)} or more, or leave it out"
    ]


def _schedd_problem(settings: Settings) -> str:
    """ "" when the schedd answers its address lookup; else why not, in a few words."""
    outcome: list[str] = []

    def locate() -> None:
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # the bindings warn when no condor_config is found
                import htcondor2

            condor = settings.condor
            collector = htcondor2.Collector(condor.collector) if condor.collector else htcondor2.Collector()
            if condor.schedd:
                collector.locate(htcondor2.DaemonType.Schedd, condor.schedd)
            else:
                htcondor2.Schedd()
            outcome.append("")
        except Exception as exc:  # whatever the bindings raise: the warning names its type and first line
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
            outcome.append(f"{type(exc).__name__}: {first}" if first else type(exc).__name__)

    worker = threading.Thread(target=locate, daemon=True)
    worker.start()
    worker.join(SCHEDD_TIMEOUT_S)
    return outcome[0] if outcome else f"no answer within {SCHEDD_TIMEOUT_S:g} s"
