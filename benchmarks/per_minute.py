#!/usr/bin/env python3
"""The default policy against PFA at per-minute billing (issue 12's targets 4a and 4b), alone.

Usage (from the repository root)::

    python3 benchmarks/per_minute.py --traces <traces dir>

The u = 1 min slice of ``benchmarks/target_slowdown.py``'s grid (K = 1, 10,
100; seeds 0 and 1; the paper's setting), with only the policies these
targets read: the default and the peers it must not be dominated by. One
process, a minute or two, where the whole grid takes half an hour of both
cores. It prints, on the tuning traces and on the hold-out families apart,
the runs more than 5 % slower than PFA (target: none), those cheaper than it
(target: >= 60 %) and dearer, the runs a peer dominates and those the default
dominates, then every run more than 5 % slower. Nothing is written: the
figures of record stay those of ``target_slowdown.py``'s page.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # this checkout's wire_daemon and wire_lab, installed or not
sys.path.insert(0, str(REPO / "benchmarks"))

from target_slowdown import (  # noqa: E402
    BEATEN,
    DEFAULT_TRACES,
    PEERS,
    SCALES,
    SEEDS,
    SETTING,
    dominates,
    held_out,
)

from wire_daemon.runtime.policies import DEFAULT_POLICY  # noqa: E402
from wire_daemon.runtime.replay import replay  # noqa: E402
from wire_lab.evaluation.runs import _workflow, replay_config, traces_in  # noqa: E402

UNIT_MIN = 1.0
SLOWER = 1.05  # more than 5 % slower than PFA
POLICIES = (DEFAULT_POLICY, *PEERS)


@dataclass(frozen=True)
class Figures:
    runs: int
    slower: int  # more than 5 % slower than PFA
    cheaper: int  # cheaper than PFA
    dearer: int  # dearer than PFA
    dominated: int  # by PFA, pure-reactive or reactive-conserving
    dominating: int  # PFA or pure-reactive

    def line(self, name: str) -> str:
        share = f"{100 * self.cheaper / self.runs:.1f} %" if self.runs else "-"
        return (
            f"{name}: {self.runs} runs; more than 5 % slower than PFA {self.slower}; cheaper {self.cheaper} "
            f"({share}); dearer {self.dearer}; dominated {self.dominated}; dominating {self.dominating}"
        )


def figures(runs: Sequence[dict[str, dict]]) -> Figures:
    """The figures of a set of runs, each a policy -> row (``cost_units``, ``makespan_s``) mapping."""
    me = DEFAULT_POLICY
    return Figures(
        runs=len(runs),
        slower=sum(r[me]["makespan_s"] > SLOWER * r["pfa"]["makespan_s"] for r in runs),
        cheaper=sum(r[me]["cost_units"] < r["pfa"]["cost_units"] for r in runs),
        dearer=sum(r[me]["cost_units"] > r["pfa"]["cost_units"] for r in runs),
        dominated=sum(any(dominates(r[p], r[me]) for p in PEERS) for r in runs),
        dominating=sum(any(dominates(r[me], r[p]) for p in BEATEN) for r in runs),
    )


def run(trace: str, path: Path, scale: float, seed: int) -> dict[str, dict]:
    workflow = _workflow(str(path))
    config = replay_config(SETTING, UNIT_MIN, scale, seed)
    out = {}
    for name in POLICIES:
        r = replay(workflow, name, config)
        out[name] = {"trace": trace, "scale": scale, "seed": seed}
        out[name] |= {"cost_units": r.cost_units, "makespan_s": r.makespan_s}
    return out


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--traces", type=Path, default=DEFAULT_TRACES, help="folder of WfFormat traces (default: tests/data/traces)"
    )
    args = parser.parse_args(argv)
    traces = traces_in(args.traces)
    if not traces:
        return 2
    runs = [run(name, path, k, s) for name, path in traces for k in SCALES for s in SEEDS]
    tuning = [r for r in runs if not held_out(r["pfa"]["trace"])]
    hold_out = [r for r in runs if held_out(r["pfa"]["trace"])]
    print(f"u = {UNIT_MIN:g} min, K = {', '.join(f'{k:g}' for k in SCALES)}, seeds {', '.join(map(str, SEEDS))}")
    print(figures(runs).line("all"))
    print(figures(tuning).line("tuning"))
    print(figures(hold_out).line("hold-out"))
    for r in runs:
        me, pfa = r[DEFAULT_POLICY], r["pfa"]
        if me["makespan_s"] > SLOWER * pfa["makespan_s"]:
            print(
                f"  slower: {pfa['trace']} K={pfa['scale']:g} seed {pfa['seed']}: {me['cost_units']} units, "
                f"{me['makespan_s'] / pfa['makespan_s']:.3f} x PFA's time (PFA: {pfa['cost_units']} units)"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
