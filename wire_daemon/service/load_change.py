"""Why the predicted load moved: a large swing between two decisions, said with its cause.

The predicted load (``upcoming_load_s``) can move a lot from one decision to
the next: a stage's first tasks finish and its prediction switches from the
default to a measured time, a stage begins, a task runs past its prediction,
or many tasks end. A line that shows 66 min, then 4.0 h, then 7 min without a
word reads as noise; ``LoadWatch`` compares each decision with the one before,
stage by stage, and names the stage that moved the load most and how.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from wire_daemon.service.status import StageStatus
from wire_daemon.service.wording import duration

SWING = 2.0  # a load that grows or shrinks by this factor or more is explained
MIN_MOVE_S = 60.0  # ... when it moves by at least this much slot time


@dataclass(frozen=True)
class _Stage:
    done: int
    running: int
    unfinished: int
    each_s: float | None  # mean predicted occupancy of its unfinished tasks


class LoadWatch:
    """Remembers the last decision's load and stages; ``explain`` words a large move since then."""

    def __init__(self) -> None:
        self._load: float | None = None
        self._stages: dict[str, _Stage] = {}

    def explain(self, load_s: float, stages: Sequence[StageStatus]) -> str:
        """``"mProject took 5.2 min, not 42 s: load 66 min -> 4.0 h"``, or "" when the load did not swing."""
        now = {s.stage: _Stage(s.done, s.running, s.tasks - s.done, s.predicted_occupancy_s) for s in stages}
        before, self._load, previous, self._stages = self._load, load_s, self._stages, now
        if before is None or not _swings(before, load_s):
            return ""
        return f"{_cause(previous, now, load_s > before)}: load {_span(before, load_s)}"


def _span(before: float, after: float) -> str:
    """``66 min -> 4.0 h``; ``97 -> 6 min`` when both are in the same unit."""
    old, new = duration(before, 0), duration(after, 0)
    old_n, _, old_unit = old.partition(" ")
    new_n, _, new_unit = new.partition(" ")
    return f"{old_n} -> {new}" if old_unit == new_unit else f"{old} -> {new}"


def _swings(before: float, after: float) -> bool:
    low, high = sorted((max(before, 0.0), max(after, 0.0)))
    return high - low >= MIN_MOVE_S and (low == 0.0 or high / low >= SWING)


def _cause(before: dict[str, _Stage], now: dict[str, _Stage], grew: bool) -> str:
    """The stage whose predicted work moved most the way the load moved, and what happened to it."""
    typical_before, typical_now = _typical(before), _typical(now)
    sign = 1.0 if grew else -1.0
    moves = {  # a stage never predicted moved nothing the model knows of
        name: sign * (_work(stage, typical_now) - _work(before[name], typical_before))
        for name, stage in now.items()
        if name in before and (stage.each_s is not None or before[name].each_s is not None)
    }
    movers = [name for name, move in moves.items() if move > 0]
    if movers:
        best = max(movers, key=lambda name: moves[name])
        return _what(best.rsplit("/", 1)[-1], before[best], now[best])
    finished = sum(s.done for s in now.values()) - sum(s.done for s in before.values())
    if not grew and finished > 0:
        return f"{finished} task(s) finished"
    return "the queue changed"


def _first_measured(old: _Stage, new: _Stage) -> bool:
    return old.done == 0 and new.done > 0


def _began(old: _Stage, new: _Stage) -> bool:
    return old.running + old.done == 0 and new.running > 0


def _typical(stages: dict[str, _Stage]) -> float:
    """A stage with no prediction yet weighs as the mean predicted stage: the model's default stands in."""
    known = [s.each_s for s in stages.values() if s.each_s is not None and s.unfinished]
    return sum(known) / len(known) if known else 0.0


def _work(stage: _Stage, typical: float) -> float:
    return (typical if stage.each_s is None else stage.each_s) * stage.unfinished


def _what(name: str, old: _Stage, new: _Stage) -> str:
    each = duration(new.each_s) if new.each_s is not None else ""
    was = duration(old.each_s) if old.each_s else ""
    if new.unfinished == 0 < old.unfinished:
        return f"the last {old.unfinished} {name} task(s) done"
    if _first_measured(old, new):
        return f"{name} took {each}" + (f", not {was}" if was else "") if each else f"first {name} tasks done"
    if _began(old, new):
        return f"{name} began" + (f" ({each} a task)" if each else "")
    if new.each_s is not None and old.each_s and new.done == old.done and new.each_s > old.each_s:
        return f"{name} running long ({each}, was {was})"
    if new.done > old.done:
        return f"{new.done - old.done} {name} task(s) done" + (f", now {each} a task" if each else "")
    if each and not was:
        return f"{name} predicted at {each}"
    return f"{name} now {each or 'unpredicted'}" + (f", was {was}" if was else "")
