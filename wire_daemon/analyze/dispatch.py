"""What a job costs the pool beyond its own runtime, learned online from the event stream.

A slot that finishes a job does not start the next one at once: HTCondor
matches idle jobs once per negotiation cycle (or reuses the claim after the
shadow and starter restart), and DAGMan submits a node some time after its
last parent ends. With many short jobs these gaps, not the runtimes, decide
how many jobs a slot gets through; on the critical path they add up level by
level. WIRE's projection counts only slot occupancy, so a workflow of
thousands of half-second jobs looks like no load at all.

Every interval ``update`` reads the starts and ends that RunState recorded
since the previous call (start and finish times, the host of each start,
submit times) and pairs them per host, in time order: a start on host H takes
the oldest slot of H freed by an end and not yet reused.

* If the job was already submitted when that slot freed, the wait from the
  slot's end to the job's start is a **slot gap**: slot time lost between two
  jobs while work waited. It is kept per stage of the job that ended (a
  short job's gap depends on where it ends within the negotiation cycle) and
  pooled.
* If the job came later than the slot freed, the wait from its submit to its
  start is a **start latency**: how long a ready job waits for a free slot.
* From a node's last parent end to its submit is DAGMan's **submit latency**.

Each estimate is the mean of the latest ``window`` observations (a mean, not
a median: gaps add up). Before any observation the prior
(``prediction.dispatch_prior_s``) stands for a gap, half of it for the start
latency, and 0 for the submit latency. A start on a host with no freed slot
on record (a new instance) says nothing about dispatch and is skipped; so are
jobs that run on the submit host.

Work per call is proportional to the starts and ends since the previous call,
and on a large pool only a fixed sample of the hosts is followed (``_watched``).
"""

from __future__ import annotations

from collections import deque

import numpy as np

from wire_daemon.core.run_state import RunState
from wire_daemon.core.workflow import Workflow
from wire_daemon.ports.prediction import DispatchEstimate

_WINDOW = 64  # observations kept per estimate
_MIN_STAGE_OBSERVATIONS = 3  # below this a stage uses the pooled gap
_MAX_FREE_PER_HOST = 64  # freed slots remembered per host (more than any instance has slots)
_SUBMIT_SAMPLE = 256  # starts per call whose submit latency is measured (the latest)


def _watched(hosts: np.ndarray) -> np.ndarray:
    """Whether each host's slots are followed: the first 16 hosts seen and every 8th after.

    A fixed rule, so a followed host is followed from its first job on; it
    bounds the work per call on a pool of hundreds of instances.
    """
    return (hosts >= 0) & ((hosts < 16) | (hosts % 8 == 0))


class DispatchLearner:
    """Slot gaps, start and submit latencies, from RunState's timestamps."""

    def __init__(self, workflow: Workflow, prior_s: float, window: int = _WINDOW) -> None:
        self.workflow = workflow
        self.prior_s = prior_s
        self.window = window
        self._cursor = 0  # into RunState.completion_order
        self._seen_start: dict[int, float] = {}  # running task -> the start already counted
        self._free: dict[int, deque[tuple[float, int]]] = {}  # host code -> (slot freed at, stage of the job)
        self._stage_gaps: dict[int, deque[float]] = {}
        self._gaps: deque[float] = deque(maxlen=window)
        self._start_latency: deque[float] = deque(maxlen=window)
        self._submit_latency: deque[float] = deque(maxlen=window)
        self.observations = 0

    def update(self, state: RunState, now: float) -> None:
        done = np.asarray(state.completion_order[self._cursor :], dtype=np.int64)
        self._cursor = len(state.completion_order)
        running = state.running()
        on_pool, host_of = self.workflow.on_pool, state.start_host
        done = done[on_pool[done]]
        running = running[on_pool[running]]
        # Submit latencies: a sample of the latest starts, in one vectorised pass.
        self._observe_submits(state, np.concatenate([done, running])[-_SUBMIT_SAMPLE:])
        # Slot gaps and start latencies: the followed hosts only, one event at a time.
        done = done[_watched(host_of[done])]
        running = running[_watched(host_of[running])]
        events: list[tuple[float, int, int]] = []  # (time, 0 = end / 1 = start, task)
        starts_of, ends_of = state.start_time[done].tolist(), state.finish_time[done].tolist()
        for task, start, finish in zip(done.tolist(), starts_of, ends_of):
            if self._seen_start.pop(task, None) != start:
                events.append((start, 1, task))
            events.append((finish, 0, task))
        for task, start in zip(running.tolist(), state.start_time[running].tolist()):
            if self._seen_start.get(task) != start:
                self._seen_start[task] = start
                events.append((start, 1, task))
        events.sort()
        stage_of = self.workflow.stage_of
        for when, kind, task in events:
            host = host_of.item(task)
            if kind == 0:
                free = self._free.setdefault(host, deque(maxlen=_MAX_FREE_PER_HOST))
                free.append((when, stage_of.item(task)))
            else:
                self._started(state, task, host, when)

    def _started(self, state: RunState, task: int, host: int, start: float) -> None:
        submitted = state.submit_time.item(task)
        free = self._free.get(host)
        if not free or submitted != submitted:  # no slot of this host seen free, or no submit time (NaN)
            return
        freed, stage = free.popleft()
        if submitted <= freed:
            gap = max(start - freed, 0.0)
            self._gaps.append(gap)
            self._stage_gaps.setdefault(stage, deque(maxlen=self.window)).append(gap)
        else:
            self._start_latency.append(max(start - submitted, 0.0))
        self.observations += 1

    def _observe_submits(self, state: RunState, tasks: np.ndarray) -> None:
        """DAGMan's delay from each task's last parent end to its submit (roots have none)."""
        wf = self.workflow
        first, last = wf.parent_ptr[tasks], wf.parent_ptr[tasks + 1]
        has = last > first
        tasks, first, last = tasks[has], first[has], last[has]
        if tasks.size == 0:
            return
        parents = np.concatenate([wf.parent_idx[a:b] for a, b in zip(first.tolist(), last.tolist())])
        offsets = np.concatenate(([0], np.cumsum(last - first)[:-1]))
        parents_end = np.maximum.reduceat(state.finish_time[parents], offsets)
        submitted = state.submit_time[tasks]
        ok = (parents_end <= submitted) & ~np.isnan(submitted)  # NaN compares False
        self._submit_latency.extend((submitted[ok] - parents_end[ok]).tolist()[-self.window :])

    def estimate(self) -> DispatchEstimate:
        gaps = np.full(len(self.workflow.stages), np.nan)
        for stage, values in self._stage_gaps.items():
            if len(values) >= _MIN_STAGE_OBSERVATIONS:
                gaps[stage] = sum(values) / len(values)
        return DispatchEstimate(
            gap_s=gaps,
            default_gap_s=_mean(self._gaps, self.prior_s),
            submit_latency_s=_mean(self._submit_latency, 0.0),
            start_latency_s=_mean(self._start_latency, self.prior_s / 2),
            observations=self.observations,
            gap_observations=len(self._gaps),
        )


def _mean(values: deque[float], default: float) -> float:
    return sum(values) / len(values) if values else default
