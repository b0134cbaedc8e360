#!/usr/bin/env python3
"""How well a stage never measured is timed before its first task ends: four priors against the traces.

Usage (from the repository root)::

    python3 benchmarks/stage_priors.py --traces <traces dir>

Until one of a stage's tasks ends, the default policy times the stage from
the tasks measured so far (``analyze/distribution.py``: the workflow's prior,
``prior-wf`` in a decision line). This study asks whether anything a daemon
knows at that moment would do better. For each trace, stages are taken in
the order the DAG reaches them (the top-down level of a stage's first task);
a stage is timed from every stage reached before it, and the prior is judged
against the stage's own median runtime:

* ``workflow median``: the median of every earlier task (the prior's centre);
* ``median of stages``: the median of the earlier stages' medians, each stage
  one vote;
* ``bytes x rate``: the stage's median input size times the earlier tasks'
  median seconds per input byte (sizes are in the DAG before a task runs);
* ``sqrt bytes``: the workflow median scaled by the square root of the ratio
  of input sizes.

For each it prints the median of |ln(prior / truth)| over the stages judged
and the share within a factor of 2, per trace and for the tuning and hold-out
families apart (the policy grid's split); then, over all traces, the share of
stages each prior times more than 2 times too short and too long (whether a
prior errs one way, which a rule could lean against). Nothing is written.
"""

from __future__ import annotations

import argparse
import math
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # this checkout's wire_daemon and wire_lab, installed or not
sys.path.insert(0, str(REPO / "benchmarks"))

from target_slowdown import DEFAULT_TRACES, held_out  # noqa: E402

from wire_daemon.core.workflow import Workflow  # noqa: E402
from wire_daemon.emulated.traces import load_trace  # noqa: E402
from wire_daemon.plan.makespan import top_down_levels  # noqa: E402
from wire_lab.evaluation.runs import traces_in  # noqa: E402

LOG2 = math.log(2.0)  # "more than 2 times off", in |ln(prior / truth)|


@dataclass(frozen=True)
class Known:
    """What is measured when a stage is first reached: the earlier stages' tasks, and the stage's inputs."""

    times: np.ndarray  # runtimes of every earlier task
    inputs: np.ndarray  # their input bytes
    stage_medians: list[float]
    stage_input: float  # the stage's median input bytes


def _workflow_median(k: Known) -> float:
    return float(np.median(k.times))


def _median_of_stages(k: Known) -> float:
    return float(np.median(k.stage_medians))


def _bytes_rate(k: Known) -> float:
    sized = k.inputs > 0
    if not sized.any() or k.stage_input <= 0:
        return _workflow_median(k)
    return float(np.median(k.times[sized] / k.inputs[sized])) * k.stage_input


def _sqrt_bytes(k: Known) -> float:
    earlier = float(np.median(k.inputs))
    if earlier <= 0 or k.stage_input <= 0:
        return _workflow_median(k)
    return _workflow_median(k) * math.sqrt(k.stage_input / earlier)


PRIORS: dict[str, Callable[[Known], float]] = {
    "workflow median": _workflow_median,
    "median of stages": _median_of_stages,
    "bytes x rate": _bytes_rate,
    "sqrt bytes": _sqrt_bytes,
}


def prior_errors(workflow: Workflow) -> dict[str, list[float]]:
    """Per prior, ln(prior / the stage's median runtime) for every stage reached after another (< 0: too short)."""
    level = top_down_levels(workflow)
    timed = np.isfinite(workflow.runtime_s) & workflow.on_pool
    runtime, inputs = workflow.runtime_s, workflow.input_bytes.astype(np.float64)
    members = {s: timed & (workflow.stage_of == s) for s in np.unique(workflow.stage_of[timed]).tolist()}
    reached = {s: int(level[m].min()) for s, m in members.items()}
    errors: dict[str, list[float]] = {name: [] for name in PRIORS}
    for stage, mine in members.items():
        before = [s for s in members if reached[s] < reached[stage]]
        truth = float(np.median(runtime[mine]))
        if not before or truth <= 0:
            continue
        earlier = np.logical_or.reduce([members[s] for s in before])
        known = Known(
            runtime[earlier],
            inputs[earlier],
            [float(np.median(runtime[members[s]])) for s in before],
            float(np.median(inputs[mine])),
        )
        for name, prior in PRIORS.items():
            errors[name].append(math.log(max(prior(known), 1e-3) / truth))
    return errors


def summary(errors: dict[str, list[float]]) -> str:
    """``prior: median |ln error| / share within 2x`` for each prior."""
    cells = []
    for name, e in errors.items():
        if not e:
            cells.append(f"{name}: -")
            continue
        size = np.abs(np.array(e))
        cells.append(f"{name}: {float(np.median(size)):.2f} / {100 * float(np.mean(size < LOG2)):.0f} %")
    return "; ".join(cells)


def direction(errors: dict[str, list[float]]) -> str:
    """``prior: a % more than 2 x too short, b % too long`` for each prior."""
    cells = []
    for name, e in errors.items():
        signed = np.array(e) if e else np.zeros(1)
        short, long = float(np.mean(signed < -LOG2)), float(np.mean(signed > LOG2))
        cells.append(f"{name}: {100 * short:.0f} % too short, {100 * long:.0f} % too long")
    return "; ".join(cells)


def _merged(parts: Sequence[dict[str, list[float]]]) -> dict[str, list[float]]:
    return {name: [x for p in parts for x in p[name]] for name in PRIORS}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--traces", type=Path, default=DEFAULT_TRACES, help="folder of WfFormat traces (default: tests/data/traces)"
    )
    args = parser.parse_args(argv)
    traces = traces_in(args.traces)
    if not traces:
        return 2
    print("median |ln(prior / truth)| / share of stages within a factor of 2")
    per_trace = {name: prior_errors(load_trace(path)) for name, path in traces}
    for name, errors in per_trace.items():
        print(f"  {name} ({len(errors['workflow median'])} stages): {summary(errors)}")
    tuning = [e for n, e in per_trace.items() if not held_out(n)]
    hold_out = [e for n, e in per_trace.items() if held_out(n)]
    print(f"tuning: {summary(_merged(tuning))}")
    print(f"hold-out: {summary(_merged(hold_out))}")
    every = _merged(list(per_trace.values()))
    print(f"all: {summary(every)}")
    print(f"more than 2 x off, all traces: {direction(every)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
