"""The Observations port of a real Pegasus submit host: every workflow under a submit root.

``SubmitHostObservations`` wraps a ``SubmitRootMonitor``. Each ``refresh``
reads what every workflow appended since the last one. The loop plans one
pool for all of them, so it sees them as one combined DAG
(``workflow.combine``); the set of workflows changes when one is found or
finishes, and then ``refresh`` says so and the caller starts a fresh RunState
and predictor for the new combined DAG, fed with ``history()``.

Choices, written down:

* **History kept in memory.** Every event of every live workflow is kept (a
  ``TaskEvent`` is small) so a rebuilt RunState sees the whole run. The
  models are re-learnt from that history in one step rather than interval
  by interval: Algorithm 1's gradient is then fitted on the same points in a
  different order, which moves its line slightly, once, when a workflow
  starts or ends.
* **Read from the start on every daemon start.** Read positions are not
  persisted (only the root's list of finished workflows is), so a restarted
  daemon re-reads each live workflow's files and rebuilds its RunState from
  them: the files are the source of truth, and no saved state can disagree
  with them. Reading costs about 32 µs per event (docs/results/performance.md).
* **Labels.** Each workflow's tasks and stages are prefixed with a label: the
  workflow's own name, as ``inspect`` and Pegasus's tools show it (the
  ``.dag`` file's name: ``montage-0`` for a first planning of ``montage``).
  A label is unique for the daemon's life: a name seen before (a rescue run
  of the same directory, another submit dir with the same DAG name) gets
  ``.2``, ``.3``... appended.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from wire_daemon.core.events import TaskEvent
from wire_daemon.core.workflow import Workflow
from wire_daemon.monitor.combine import combine_workflows, combined_task_id, split_task_id
from wire_daemon.monitor.problems import Problems
from wire_daemon.monitor.submit_monitor import MemoryPositionStore, PositionStore, SubmitRootMonitor, time_ordered

_LABEL_CHARS = re.compile(r"[^A-Za-z0-9_.-]+")


class FinishedMarkersOnly:
    """A PositionStore that persists the submit root's finished list and nothing else."""

    def __init__(self, store: PositionStore, root_key_prefix: str = "submit-root:") -> None:
        self.store = store
        self.prefix = root_key_prefix
        self.memory = MemoryPositionStore()

    def _target(self, key: str) -> PositionStore:
        return self.store if key.startswith(self.prefix) else self.memory

    def save_position(self, key: str, value: dict[str, Any]) -> None:
        self._target(key).save_position(key, value)

    def load_position(self, key: str) -> dict[str, Any] | None:
        return self._target(key).load_position(key)

    def forget_positions(self, prefix: str) -> None:
        self.memory.forget_positions(prefix)


@dataclass
class TrackedWorkflow:
    label: str
    path: Path
    workflow: Workflow
    wf_uuid: str | None
    events: list[TaskEvent] = field(default_factory=list)  # combined ids, in the order read


class SubmitHostObservations:
    """Observations for all workflows under a submit root, as one combined DAG."""

    def __init__(self, root: SubmitRootMonitor) -> None:
        self.root = root
        self.tracked: dict[str, TrackedWorkflow] = {}
        self.workflow: Workflow = combine_workflows([])
        self._new: list[TaskEvent] = []
        self._labels: set[str] = set()

    @property
    def problems(self) -> Problems:
        return self.root.problems

    def refresh(self) -> bool:
        """Read every workflow; True when the set of workflows changed (the combined DAG is new)."""
        changed = False
        for update in self.root.poll():
            if update.discovered:
                self.tracked[update.key] = self._track(update.monitor)
                changed = True
            tracked = self.tracked[update.key]  # every update's workflow was discovered by an earlier or this poll
            renamed = [_renamed(e, tracked.label) for e in update.events]
            tracked.events.extend(renamed)
            self._new.extend(renamed)
            if update.finished is not None:
                del self.tracked[update.key]
                changed = True
        if changed:
            self.workflow = combine_workflows([(t.label, t.workflow) for t in self.tracked.values()])
            self._new = []
        return changed

    def poll_events(self) -> list[TaskEvent]:
        """Events read by the last refreshes and not handed out yet (the Observations port)."""
        out, self._new = time_ordered(self._new), []
        return out

    def history(self) -> list[TaskEvent]:
        """Every event of the live workflows, for a fresh RunState of the combined DAG."""
        return time_ordered([e for t in self.tracked.values() for e in t.events])

    def locate(self, task_id: str) -> tuple[TrackedWorkflow, str] | None:
        """The workflow and DAG node of a combined task id."""
        label, node = split_task_id(task_id)
        for tracked in self.tracked.values():
            if tracked.label == label:
                return tracked, node
        return None

    def _track(self, monitor: Any) -> TrackedWorkflow:
        braindump = monitor.submit_dir.braindump
        name = _LABEL_CHARS.sub("_", monitor.workflow.name) or "workflow"
        label, n = name, 1
        while label in self._labels:
            n += 1
            label = f"{name}.{n}"
        self._labels.add(label)
        wf_uuid = braindump.wf_uuid if braindump is not None else None
        return TrackedWorkflow(label, Path(os.fspath(monitor.path)), monitor.workflow, wf_uuid)


def _renamed(event: TaskEvent, label: str) -> TaskEvent:
    return replace(event, task_id=combined_task_id(label, event.task_id))
