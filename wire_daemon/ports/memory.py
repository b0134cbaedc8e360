"""The memory ports: reading and changing a queued job's request_memory, and the loop's sizer.

``MemoryControl`` is what the rightsizer needs from HTCondor (or the emulated
site): the request a node's queued job has, a new one, and a release for a job
held for memory. Requests are in MiB, HTCondor's unit for ``RequestMemory``.
``JobSizer`` is what the loop calls once an interval, after the run state took
the interval's events; ``analyze.memory.MemoryRightsizer`` is the one we have.
``TaskShapes`` is what the plan reads to know how many tasks fit on an instance
(the emulated site, or the rightsizer on a submit host).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

import numpy as np

from wire_daemon.core.events import TaskEvent
from wire_daemon.core.run_state import RunState


class MemoryControl(Protocol):
    def request_memory_mib(self, task_id: str) -> float | None:
        """RequestMemory of the node's queued job; None when there is none or it is not a number."""

    def set_request_memory(self, task_id: str, mib: int) -> bool:
        """Set RequestMemory of the node's idle or held job (and of later DAGMan retries); True if done."""

    def release_job(self, task_id: str) -> bool:
        """Release the node's held job; True if done."""


class JobSizer(Protocol):
    def step(self, now: float, events: Sequence[TaskEvent], state: RunState) -> list[str]:
        """Learn from this interval's events and resize the queued jobs; one line per change made."""


class TaskShapes(Protocol):
    def task_request_mib(self, tasks: np.ndarray) -> np.ndarray:
        """The request_memory (MiB) each of ``tasks`` has now, or will have once resized; NaN where unknown."""
