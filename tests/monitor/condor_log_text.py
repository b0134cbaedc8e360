"""Write job events in HTCondor's text format (ISO dates), for tests that need an event log."""

from __future__ import annotations

import time

_USAGE = (
    "\t\tUsr 0 00:00:00, Sys 0 00:00:00  -  Run Remote Usage\n"
    "\t\tUsr 0 00:00:00, Sys 0 00:00:00  -  Run Local Usage\n"
    "\t\tUsr 0 00:00:00, Sys 0 00:00:00  -  Total Remote Usage\n"
    "\t\tUsr 0 00:00:00, Sys 0 00:00:00  -  Total Local Usage\n"
    "\t0  -  Run Bytes Sent By Job\n\t0  -  Run Bytes Received By Job\n"
    "\t0  -  Total Bytes Sent By Job\n\t0  -  Total Bytes Received By Job\n"
)


def stamp(when: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(when))


def submit(cluster: int, when: float, node: str) -> str:
    return (
        f"000 ({cluster:03d}.000.000) {stamp(when)} Job submitted from host: <10.0.0.1:9618?addrs=10.0.0.1-9618>\n"
        f"    DAG Node: {node}\n...\n"
    )


def execute(cluster: int, when: float, host: str = "10.0.0.5", alias: str = "worker1") -> str:
    return (
        f"001 ({cluster:03d}.000.000) {stamp(when)} Job executing on host: "
        f"<{host}:9618?addrs={host}-9618&alias={alias}>\n...\n"
    )


def terminated(cluster: int, when: float, code: int = 0) -> str:
    return (
        f"005 ({cluster:03d}.000.000) {stamp(when)} Job terminated.\n"
        f"\t(1) Normal termination (return value {code})\n{_USAGE}...\n"
    )


def held(cluster: int, when: float, reason: str = "held by test") -> str:
    return f"012 ({cluster:03d}.000.000) {stamp(when)} Job was held.\n\t{reason}\n\tCode 21 Subcode 0\n...\n"


def aborted(cluster: int, when: float) -> str:
    return f"009 ({cluster:03d}.000.000) {stamp(when)} Job was aborted.\n\tvia condor_rm (by user test)\n...\n"
