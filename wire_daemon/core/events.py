"""Task events: what the monitor reads from DAGMan, HTCondor and kickstart, in one vocabulary.

Every observation source (a submit directory, the emulated site) turns what it
reads into these, and the run state is built from nothing else.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum


class EventKind(str, Enum):
    SUBMITTED = "submitted"  # DAGMan handed the node to the schedd: the task is idle, ready to run
    STARTED = "started"  # Condor execute event: slot occupancy begins on ``host``
    TRANSFERRED = "transferred"  # input transfer finished
    FINISHED = "finished"  # terminate event: slot occupancy ends
    EVICTED = "evicted"  # the job lost its slot (e.g. the instance went away); it is idle again
    HELD = "held"
    RELEASED = "released"
    ABORTED = "aborted"


@dataclass(frozen=True)
class TaskEvent:
    time: float
    kind: EventKind
    task_id: str
    host: str | None = None  # instance id, for STARTED
    exec_runtime_s: float | None = None  # the executable's own duration (kickstart), for FINISHED
    exit_code: int | None = None
    input_bytes: int | None = None
    peak_memory_bytes: int | None = None
    # HELD: HTCondor held the job because it used more memory than it requested (the memory rightsizer doubles it).
    memory_exceeded: bool = False
    condor_job: str | None = None  # "cluster.proc" of the attempt, for FINISHED: finds its kickstart record
