"""The observations port over real submit directories.

``SubmitDirMonitor`` follows one Pegasus (or plain DAGMan) submit directory and
hands out its task events; ``SubmitRootMonitor`` finds every workflow under a
root as it appears and lets it go when DAGMan has finished it.

Decisions (ours; docs/monitor.md has the longer story):

* **One event source per workflow.** DAGMan writes every node event twice: to
  ``<dag>.nodes.log`` and to the job's own ``log =`` (Pegasus: ``<wf>-0.log``,
  also the braindump's ``condor_log``). Following two would count each event
  twice, so we follow the first that exists, in that order. Without any event
  log (submit dirs copied without it, like the fixtures) we fall back to
  ``jobstate.log`` -- but only once it holds a job line, because DAGMan creates
  the event log (schedd submit event) before monitord writes its first job line:
  a live run is never mistaken for a log-less one. The choice is kept in the
  checkpoint and never changes afterwards (switching would replay events).
* **Kickstart.** A FINISHED event gets the executable's own duration (the main
  job's, summed over the records of a clustered job), the input bytes and the
  peak memory (the larger of Condor's and kickstart's) from the job's record.
  The record of the k-th ended attempt (terminated or aborted: DAGMan runs the
  POST script, which rotates ``<job>.out`` to ``<job>.out.NNN``, after both) is
  ``<job>.out.<k>``; before the POST script has run it is still ``<job>.out``.
  Records that name their Condor job (``jobids``) are matched by it, so a
  rotation too many or too few does not shift every later attempt's record.
  If neither is readable yet we do not wait: the event goes out with
  ``exec_runtime_s`` None, and ``RunState`` takes the whole occupancy as
  execution. Waiting would delay every completion by a POST script and a poll;
  the predictors add transfer back to execution, so only the split is lost.
* **Hosts.** STARTED events carry the execute host's sinful string; the
  ``HostMap`` the caller keeps up to date turns it into an instance id.
* **Positions.** After every poll that read something, one dict (event-source
  choice, read position, cluster -> node map, attempt counters) is saved under
  one key in a ``PositionStore``: events handed out are never read again
  (at most once). A failure in the middle of a poll rolls back to the last saved
  checkpoint, so nothing read in that poll is lost or counted twice.
* **Order.** Events go out in time order; a task's own events keep their file
  order even when the writer's clock stepped back.
"""

from __future__ import annotations

import glob
import hashlib
import json
import logging
import os
import re
import stat
import time
from collections import Counter, deque
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Protocol

from wire_daemon.core.errors import InputError
from wire_daemon.core.events import EventKind, TaskEvent
from wire_daemon.monitor.braindump import BRAINDUMP_NAMES, find_braindump
from wire_daemon.monitor.dagman_status import DagStatus, dag_status, file_signature
from wire_daemon.monitor.eventmap import EventLogFollower
from wire_daemon.monitor.hosts import HostMap
from wire_daemon.monitor.jobstate import JobstateMapper, JobstateReader
from wire_daemon.monitor.kickstart import KickstartRecord, read_kickstart
from wire_daemon.monitor.position import ReadPosition
from wire_daemon.monitor.problems import Problems, shown
from wire_daemon.monitor.safe_open import NotRegularFile, describe, file_kind, open_regular
from wire_daemon.monitor.submit_dir import SUBDAG_TRANSFORMATION, SubmitDir, read_submit_dir, sub_workflow_refs

log = logging.getLogger(__name__)
CHECKPOINT_VERSION = 1
_PEEK_BYTES = 64 << 10
_STATUS_SUFFIXES = (".dag", ".dagman.out", ".nodes.log")
_JOB_LINE = re.compile(rb"^\s*\d+(?:\.\d+)?\s+(?!INTERNAL\s)\S+\s+\S+", re.M)


class PositionStore(Protocol):
    """Where read positions live across restarts (``wire_daemon.persist.store.StateStore`` is one)."""

    def save_position(self, key: str, value: dict[str, Any]) -> None: ...

    def load_position(self, key: str) -> dict[str, Any] | None: ...

    def forget_positions(self, prefix: str) -> None: ...


class MemoryPositionStore:
    """A ``PositionStore`` in a dict, JSON round-tripped like the SQLite one (tests, ``inspect``)."""

    def __init__(self) -> None:
        self.values: dict[str, str] = {}

    def save_position(self, key: str, value: dict[str, Any]) -> None:
        self.values[key] = json.dumps(value, sort_keys=True)

    def load_position(self, key: str) -> dict[str, Any] | None:
        text = self.values.get(key)
        return json.loads(text) if text is not None else None

    def forget_positions(self, prefix: str) -> None:
        for key in [k for k in self.values if k.startswith(prefix)]:
            del self.values[key]


def position_prefix(path: Path) -> str:
    """Prefix of a submit dir's keys; the digest keeps it from matching a nested dir's keys.

    The digest is of the name's bytes, so a name that is not UTF-8 has a key too
    (the escaped name after it is for people; the digest keeps two names apart).
    """
    name = os.fsencode(path.resolve())
    return f"submit-dir:{hashlib.sha1(name).hexdigest()[:12]}:"


def position_key(path: Path) -> str:
    return position_prefix(path) + shown(os.fspath(path.resolve()))


@dataclass(frozen=True)
class KickstartFacts:
    exec_s: float | None
    input_bytes: int | None
    peak_memory_bytes: int | None


def kickstart_facts(records: Sequence[KickstartRecord], transformation: str) -> KickstartFacts:
    """What one job's records say; a clustered job's tasks ran one after the other, so durations add up."""
    chosen = [r for r in records if r.transformation == transformation] or list(records)
    durations = [r.main_duration for r in chosen if r.main_duration is not None]
    memory = [r.maxrss_bytes for r in chosen if r.maxrss_bytes is not None]
    has_inputs = any(f.input for r in chosen for f in r.files)
    return KickstartFacts(
        exec_s=sum(durations) if durations else None,
        input_bytes=sum(r.input_bytes for r in chosen) if has_inputs else None,
        peak_memory_bytes=max(memory) if memory else None,
    )


def time_ordered(events: list[TaskEvent]) -> list[TaskEvent]:
    """Stable sort by time; a task's event never moves before an earlier one of the same task."""
    if len(events) < 2:
        return events
    latest: dict[str, float] = {}
    keys = []
    for event in events:
        key = max(event.time, latest.get(event.task_id, event.time))
        latest[event.task_id] = key
        keys.append(key)
    return [events[i] for i in sorted(range(len(events)), key=keys.__getitem__)]


class SubmitDirMonitor:
    """``Observations`` for one submit directory (see the module docstring).

    Raises ``InputError`` only from the constructor, when the directory has no
    usable ``.dag``; ``poll_events`` never raises.
    """

    source: str | None  # "eventlog" | "jobstate" | None (no event file yet)
    # reading state, (re)set by _restore
    _source_file: Path | None
    _follower: EventLogFollower | None
    _jobstate: JobstateReader | None
    _jsmapper: JobstateMapper
    _ended: dict[str, int]

    def __init__(
        self,
        path: str | os.PathLike[str],
        store: PositionStore | None = None,
        hosts: HostMap | None = None,
        problems: Problems | None = None,
        submit_dir: SubmitDir | None = None,
        year_reference: float | None = None,
    ) -> None:
        self.path = Path(path)
        self.problems = problems or Problems()
        self.submit_dir = submit_dir or read_submit_dir(self.path, self.problems)
        self.workflow = self.submit_dir.workflow
        self.store = store
        self.hosts = hosts
        self.key = position_key(self.path)
        self.prefix = position_prefix(self.path)
        self._year_reference = year_reference
        self._dag_dir = Path(self.submit_dir.dag.path).parent
        self.event_logs = event_log_candidates(self.submit_dir)
        self.jobstate_path = jobstate_path(self.submit_dir)
        self.dagman_out_path = Path(self.submit_dir.dag.path + ".dagman.out")
        self.events_read = 0
        # Per task, the time of the latest event handed out and how many had that time: after the
        # event log is read again from the start, what is at or below it was handed out already.
        self._high: dict[str, tuple[float, int]] = {}
        self._replay: dict[str, int] | None = None  # while re-reading a cut log: events seen at the mark
        self.kickstart_found = 0
        self.kickstart_missing = 0
        self._waiting_reported = False
        self._saved: dict[str, Any] = self._restore(store.load_position(self.key) if store else None)
        # Resumed from saved positions: the events before them were handed out to an earlier
        # run, so the caller must still hold (or have persisted) the RunState they built.
        self.resumed = self.source is not None or bool(self._ended)

    # -- the port -------------------------------------------------------------

    def poll_events(self) -> list[TaskEvent]:
        """Task events appended since the previous call, in time order."""
        try:
            events = self._read_events()
            self._save()
            self._mark_handed_out(events)
        except Exception as exc:  # never kill the loop; roll back so nothing is lost or counted twice
            self.problems.warn(
                os.fspath(self.path), f"events not read this time ({type(exc).__name__}: {exc}); will retry"
            )
            self._restore(self._saved)
            return []
        return events

    def checkpoint(self) -> dict[str, Any]:
        """Everything needed to resume: JSON-serialisable."""
        reader: dict[str, Any] = {}
        if self._follower is not None:
            reader = self._follower.checkpoint()
        elif self._jobstate is not None:
            reader = {"position": self._jobstate.position.to_dict(), "mapper": self._jsmapper.to_dict()}
        return {
            "version": CHECKPOINT_VERSION,
            "source": self.source,
            "file": os.path.relpath(self.source_file, self.path) if self.source_file else None,
            "reader": reader,
            "ended": dict(self._ended),
        }

    def rewind(self) -> None:
        """Forget the saved positions and read everything again (for a caller that lost its RunState)."""
        if self.store is not None:
            self.store.forget_positions(self.prefix)
        self._saved = self._restore(None)
        self.resumed = False

    def dag_status(self) -> DagStatus:
        return dag_status(self.dagman_out_path, self.jobstate_path, self.problems)

    @property
    def source_file(self) -> Path | None:
        return self._source_file

    # -- reading --------------------------------------------------------------

    def _read_events(self) -> list[TaskEvent]:
        if self.source is None and not self._choose_source():
            return []
        if self._follower is not None:
            restarts = self._follower.restarts
            raw = self._follower.poll()
            raw = self._screened(raw, self._follower.restarts > restarts, reconcile=True)
        else:
            assert self._jobstate is not None
            restarts = self._jobstate.restarts
            raw = self._jsmapper.map(self._jobstate.read())
            # jobstate.log is the source itself: nothing to reconcile it with
            raw = self._screened(raw, self._jobstate.restarts > restarts, reconcile=False)
        events = [self._enrich(event) for event in raw]
        self.events_read += len(events)
        return time_ordered(events)

    def _choose_source(self) -> bool:
        for log in self.event_logs:
            if _regular_or_warn(log, self.problems):
                self._use_eventlog(log, {})
                return True
        if _has_job_line(self.jobstate_path, self.problems):
            self._use_jobstate(self.jobstate_path, {})
            return True
        if not self._waiting_reported:
            names = ", ".join(p.name for p in self.event_logs[:3])
            self.problems.warn(
                os.fspath(self.path),
                f"no job event log ({names}) and no job line in "
                f"{self.jobstate_path.name} yet; task states unknown until one appears",
            )
            self._waiting_reported = True
        return False

    # -- a log read again from the start -----------------------------------------

    def _mark_handed_out(self, events: list[TaskEvent]) -> None:
        for event in events:
            high = self._high.get(event.task_id)
            if high is None or event.time > high[0]:
                self._high[event.task_id] = (event.time, 1)
            elif event.time == high[0]:
                self._high[event.task_id] = (high[0], high[1] + 1)

    def _screened(self, raw: list[TaskEvent], restarted: bool, reconcile: bool) -> list[TaskEvent]:
        """``raw`` without what was handed out before the source was read again from the start."""
        if restarted and self._high:
            self._replay = {}
        if self._replay is None:
            return raw
        if raw:
            return self._unseen(raw)
        self._replay = None  # caught up with the end of the file
        return self._reconcile_ends() if reconcile else []

    def _unseen(self, raw: list[TaskEvent]) -> list[TaskEvent]:
        """The events of a re-read log that were not handed out before the cut (by each task's mark)."""
        assert self._replay is not None
        out = []
        for event in raw:
            high = self._high.get(event.task_id)
            if high is None or event.time > high[0]:
                out.append(event)
            elif event.time == high[0]:
                seen = self._replay[event.task_id] = self._replay.get(event.task_id, 0) + 1
                if seen > high[1]:
                    out.append(event)
        return out

    def _reconcile_ends(self) -> list[TaskEvent]:
        """Once a re-read log is caught up: the task ends ``jobstate.log`` holds and the log lost.

        A log cut (or rotated) after events were written to it and before we
        read them has lost those events; pegasus-monitord copied them to
        ``jobstate.log`` already, or will. Ends are what the counts rest on:
        each task's ends there beyond those handed out are handed out now.
        """
        quiet = Problems(logging.getLogger("wire_daemon.monitor.reconcile"))  # its lines were read before
        reader, mapper = JobstateReader(self.jobstate_path, None, quiet), JobstateMapper()
        ends: dict[str, list[TaskEvent]] = {}
        while lines := reader.read():
            for event in mapper.map(lines):
                if event.kind in (EventKind.FINISHED, EventKind.ABORTED):
                    ends.setdefault(event.task_id, []).append(event)
        missing = [e for task, found in ends.items() for e in found[self._ended.get(task, 0) :]]
        if missing:
            self.problems.warn(
                os.fspath(self.source_file or self.path),
                f"{len(missing)} task end(s) the re-read log no longer holds taken from {self.jobstate_path.name}",
            )
        return missing

    def _use_eventlog(self, path: Path, reader: dict[str, Any]) -> None:
        self.source, self._source_file = "eventlog", path
        self._follower = EventLogFollower(path, reader, problems=self.problems, year_reference=self._year_reference)

    def _use_jobstate(self, path: Path, reader: dict[str, Any]) -> None:
        self.source, self._source_file = "jobstate", path
        position = ReadPosition.from_dict(reader["position"]) if "position" in reader else None
        self._jobstate = JobstateReader(path, position, self.problems)
        self._jsmapper = JobstateMapper.from_dict(reader.get("mapper", {}))

    def _enrich(self, event: TaskEvent) -> TaskEvent:
        if event.kind == EventKind.STARTED and self.hosts is not None:
            return self.hosts.resolve_event(event)
        if event.kind in (EventKind.FINISHED, EventKind.ABORTED):
            attempt = self._ended.get(event.task_id, 0)
            self._ended[event.task_id] = attempt + 1
            if event.kind == EventKind.FINISHED:
                return self._with_kickstart(event, attempt)
        return event

    # -- kickstart ------------------------------------------------------------

    def _with_kickstart(self, event: TaskEvent, attempt: int) -> TaskEvent:
        facts = self._kickstart(event.task_id, attempt, _cluster_of(event.condor_job))
        if facts is None:
            self.kickstart_missing += 1
            return event
        self.kickstart_found += 1
        memory = [m for m in (event.peak_memory_bytes, facts.peak_memory_bytes) if m]
        return replace(
            event,
            exec_runtime_s=facts.exec_s,
            input_bytes=facts.input_bytes,
            peak_memory_bytes=max(memory) if memory else None,
        )

    def _kickstart(self, task: str, attempt: int, cluster: int | None) -> KickstartFacts | None:
        base = self._output_path(task)
        if base is None:
            return None
        records = self._records_of_attempt(base, attempt, cluster)
        if not records:
            return None
        return kickstart_facts(records, self.submit_dir.submit_files[task].xformation or "")

    def _records_of_attempt(self, base: Path, attempt: int, cluster: int | None) -> list[KickstartRecord]:
        """The records of the attempt whose Condor cluster is ``cluster``.

        Counting ended attempts names the right ``.out.NNN`` only while every
        ended attempt was rotated once; a job removed while held can end with
        no rotation, and from then on the count points at a neighbour's record.
        Records that name their Condor job settle it: the counted file first
        (nearly always right), then every other rotation. Records that name no
        job (XML, older kickstart) fall back to the count.
        """
        counted = (base.with_name(f"{base.name}.{attempt:03d}"), base)
        for path in counted:
            if _regular_or_warn(path, self.problems):
                records = self._records(path)
                named = {r.condor_cluster for r in records if r.condor_cluster is not None}
                if cluster is None or not named or cluster in named:
                    return records
                break  # another attempt's record: the count is off
        if cluster is None:
            return []
        # Listed only now: a directory of thousands of jobs is not scanned for every finished one.
        rotated = sorted(base.parent.glob(f"{glob.escape(base.name)}.[0-9][0-9][0-9]"))
        for path in rotated:
            if path not in counted:
                records = self._records(path)
                if any(r.condor_cluster == cluster for r in records):
                    return records
        return []

    def _records(self, path: Path) -> list[KickstartRecord]:
        output = read_kickstart(path, self.problems)  # warns on garbage, never raises
        return output.records if output is not None else []

    def _output_path(self, task: str) -> Path | None:
        """``<job>.out`` beside the node's submit file (Pegasus jobs only: others have no kickstart)."""
        sub = self.submit_dir.submit_files.get(task)
        if sub is None or sub.xformation in (None, SUBDAG_TRANSFORMATION) or task not in self.submit_dir.dag.index:
            return None  # a sub-workflow's DAGMan job writes DAGMan's output, not a kickstart record
        node = self.submit_dir.dag.node(task)
        relative = Path(node.submit_path or "")
        name = relative.stem + ".out"
        if sub.output and "$(" not in sub.output:
            name = Path(sub.output).name
        return self._dag_dir / relative.parent / name

    # -- positions ------------------------------------------------------------

    def _save(self) -> None:
        current = self.checkpoint()
        if current != self._saved:
            if self.store is not None:
                self.store.save_position(self.key, current)
            self._saved = current

    def _restore(self, data: dict[str, Any] | None) -> dict[str, Any]:
        self.source = None
        self._source_file = None
        self._follower = None
        self._jobstate = None
        self._jsmapper = JobstateMapper()
        self._ended = {}
        if not data:
            return self.checkpoint()
        try:
            self._restore_from(data)
        except (ValueError, TypeError, KeyError, AttributeError) as exc:
            self.problems.warn(
                self.key,
                f"saved read position unusable ({type(exc).__name__}: {exc}); reading the submit dir from the start",
            )
            return self._restore(None)
        return self.checkpoint()

    def _restore_from(self, data: dict[str, Any]) -> None:
        if data.get("version") != CHECKPOINT_VERSION:
            raise ValueError(f"checkpoint version {data.get('version')!r}, expected {CHECKPOINT_VERSION}")
        self._ended = {str(k): int(v) for k, v in dict(data.get("ended") or {}).items()}
        source, name = data.get("source"), data.get("file")
        if source is None:
            return
        path = self.path / str(name)
        if source == "eventlog":
            self._use_eventlog(path, dict(data.get("reader") or {}))
        elif source == "jobstate":
            self._use_jobstate(path, dict(data.get("reader") or {}))
        else:
            raise ValueError(f"unknown event source {source!r}")


def event_log_candidates(submit_dir: SubmitDir) -> list[Path]:
    """Job event logs of a submit dir, the preferred first (see the module docstring)."""
    dag_path = Path(submit_dir.dag.path)
    found = [dag_path.with_name(dag_path.name + ".nodes.log")]
    if submit_dir.braindump and submit_dir.braindump.condor_log:
        found.append(submit_dir.path / submit_dir.braindump.condor_log)
    logs = Counter(sub.log for sub in submit_dir.submit_files.values() if sub.log and "$(" not in sub.log)
    found += [_local_path(submit_dir, dag_path.parent, log) for log, _ in logs.most_common()]
    return list(dict.fromkeys(found))


def jobstate_path(submit_dir: SubmitDir) -> Path:
    name = (
        (submit_dir.braindump.jobstate_log if submit_dir.braindump else None)
        or submit_dir.dag.settings.get("jobstate_log")
        or "jobstate.log"
    )
    return submit_dir.path / name


def _local_path(submit_dir: SubmitDir, dag_dir: Path, text: str) -> Path:
    """A path written on the planning host, as it is here (the submit dir may have moved)."""
    planned = (submit_dir.braindump.submit_dir or "").rstrip("/") if submit_dir.braindump else ""
    if planned and text.startswith(planned + "/"):
        return submit_dir.path / os.path.normpath(text[len(planned) + 1 :].lstrip("/"))
    if os.path.isabs(text):
        return dag_dir / Path(text).name
    return dag_dir / text


def _has_job_line(path: Path, problems: Problems) -> bool:
    try:
        with open_regular(path) as f:
            return _JOB_LINE.search(f.read(_PEEK_BYTES)) is not None
    except NotRegularFile as exc:  # looked at every poll until a source is chosen: said once
        problems.warn_once(os.fspath(path), describe(exc))
        return False
    except OSError:
        return False


def _regular_or_warn(path: Path, problems: Problems) -> bool:
    """True for a regular file; a FIFO, device or socket under that name costs one warning, never a read."""
    try:
        mode = os.stat(path).st_mode
    except (OSError, ValueError):
        return False
    if stat.S_ISREG(mode):
        return True
    if not stat.S_ISDIR(mode):
        problems.warn_once(os.fspath(path), f"{file_kind(mode)}, not a regular file: not read")
    return False


# -- many workflows ---------------------------------------------------------------


@dataclass
class WorkflowUpdate:
    """What one poll of a ``SubmitRootMonitor`` learnt about one workflow."""

    key: str  # the submit dir's resolved path
    monitor: SubmitDirMonitor
    events: list[TaskEvent]
    discovered: bool  # first poll of this workflow: start a new RunState for it
    finished: DagStatus | None = None  # DAGMan finished: the workflow is forgotten after this poll


class SubmitRootMonitor:
    """Every workflow (and sub-workflow) under ``root``, found as it appears, forgotten when finished.

    A workflow is found when a directory holds a braindump and a ``.dag`` that
    DAGMan has started on (``jobstate.log``, ``*.dagman.out`` or ``*.nodes.log``
    present) or that has not changed for ``settle_s`` (so a half-written
    ``.dag`` is not read). The walk stops at each submit dir and at
    ``max_depth``; sub-workflows are found through their parent's
    ``pegasus-plan_*`` / SUBDAG nodes. A workflow is forgotten (monitor and
    saved positions) after the poll in which DAGMan is seen finished; a
    marker keeps it from being found again, unless its ``dagman.out`` or
    ``jobstate.log`` changes and DAGMan runs again (a rescue run): then it is
    a new workflow, read from the start into a new RunState.
    """

    def __init__(
        self,
        root: str | os.PathLike[str],
        store: PositionStore | None = None,
        hosts: HostMap | None = None,
        problems: Problems | None = None,
        max_depth: int = 6,
        settle_s: float = 5.0,
        clock: Callable[[], float] = time.time,
        read_finished: bool = True,
    ) -> None:
        self.root = Path(root)
        # False: a workflow DAGMan had finished before it was first seen is marked finished unread
        # (a root of thousands of old runs costs a few stats each, not a parse of every file).
        self.read_finished = read_finished
        self.skipped_finished = 0
        self.store = store
        self.hosts = hosts
        self.problems = problems or Problems()
        self.max_depth = max_depth
        self.settle_s = settle_s
        self.clock = clock
        self.workflows: dict[str, SubmitDirMonitor] = {}
        self._key = "submit-root:" + shown(os.fspath(self.root.resolve()))
        self._reported: set[tuple[str, str]] = set()
        self._refused: dict[str, list[tuple[str, int, int, int]]] = {}  # dir -> its inputs when refused
        self.finished: dict[str, dict[str, Any]] = self._load_markers()
        self._markers_changed = False  # the finished list differs from what the store holds
        self._seen: set[str] = set()  # the directories this poll's walk went through

    def _load_markers(self) -> dict[str, dict[str, Any]]:
        saved = self.store.load_position(self._key) if self.store else None
        markers = (saved or {}).get("finished", {})
        if not isinstance(markers, dict) or not all(isinstance(v, dict) for v in markers.values()):
            self.problems.warn(self._key, "saved list of finished workflows unusable; forgotten")
            return {}
        return dict(markers)

    def poll(self) -> list[WorkflowUpdate]:
        skipped = self.skipped_finished
        new = self._discover()
        if self.skipped_finished > skipped:
            log.info(
                "%d workflow(s) under %s had finished before they were first seen: marked finished, not read",
                self.skipped_finished - skipped,
                shown(os.fspath(self.root)),
            )
        updates = []
        for key, monitor in list(self.workflows.items()):
            try:
                status = monitor.dag_status()  # before reading: every event written before the end is read now
            except Exception as exc:  # one bad directory costs a warning for that directory, never the site
                self._warn_once(key, f"DAGMan's status not read this time ({type(exc).__name__}: {exc})")
                continue
            events = monitor.poll_events()
            done = status if status.finished else None
            updates.append(WorkflowUpdate(key, monitor, events, key in new, done))
            if done is not None:
                self._forget(key, monitor, done)
        self._prune_markers()
        self._save_markers()
        return updates

    def finished_now(self) -> set[str]:
        """The followed workflows DAGMan says finished, from the tails of their status files only: cheap enough
        to ask every few seconds between polls (the next ``poll`` reads their last events and forgets them)."""
        ended = set()
        for key, monitor in list(self.workflows.items()):
            try:
                if monitor.dag_status().finished:
                    ended.add(key)
            except Exception:  # the next poll says what is wrong with this directory; a glance only looks
                continue
        return ended

    def _save_markers(self) -> None:
        """Write the finished list when it changed: thousands of markers are not rewritten every poll."""
        if self.store is not None and self._markers_changed:
            self.store.save_position(self._key, {"finished": self.finished})
        self._markers_changed = False

    # -- discovery --------------------------------------------------------------

    def _discover(self) -> set[str]:
        new: set[str] = set()
        # The walk's paths are canonical already (it starts at the resolved root and follows no link):
        # resolving thousands of them at every poll was most of a steady poll's time.
        queue: deque[tuple[Path, str | None]] = deque((path, os.fspath(path)) for path in self._walk())
        for monitor in self.workflows.values():
            queue.extend((path, None) for path in self._sub_dirs(monitor))
        self._seen.clear()
        while queue:
            path, known = queue.popleft()
            key = known or os.fspath(path.resolve())
            self._seen.add(key)
            if key in self.workflows or (key in self.finished and not self._runs_again(key)):
                continue
            if not self.read_finished and key not in self._refused and self._finished_unseen(key, path):
                continue
            opened = self._open(path)
            if opened is not None:
                self.workflows[key] = opened
                new.add(key)
                queue.extend((path, None) for path in self._sub_dirs(opened))
        return new

    def _walk(self) -> Iterator[Path]:
        """Directories holding a braindump, not descending into them (their sub-workflows come from the DAG)."""
        level = [self.root.resolve()]
        for _ in range(self.max_depth + 1):
            below: list[Path] = []
            for directory in level:
                if find_braindump(directory) is not None:
                    yield directory
                    continue
                below.extend(self._subdirectories(directory))
            level = below

    def _sub_dirs(self, monitor: SubmitDirMonitor) -> list[Path]:
        try:
            refs = sub_workflow_refs(monitor.submit_dir)
        except OSError as exc:
            self._warn_once(os.fspath(monitor.path), f"sub-workflows not looked for this time ({exc})")
            return []
        return [ref.submit_dir for ref in refs if ref.submit_dir is not None]

    def _open(self, path: Path) -> SubmitDirMonitor | None:
        if not self._ready(path):
            return None
        key = os.fspath(path)
        inputs = _input_signature(path)
        if key in self._refused and self._refused[key] == inputs:
            return None  # refused before and none of its inputs changed: parsing it again would say the same
        try:
            monitor = SubmitDirMonitor(path, self.store, self.hosts, self.problems)
        except InputError as exc:  # e.g. several .dag files, a DAG with a cycle: retried once its files change
            self._warn_once(exc.source, f"workflow not monitored: {exc.detail}", exc.where)
            self._refused[key] = inputs
            return None
        except Exception as exc:  # one bad directory costs a warning for that directory, never the site
            self._warn_once(
                os.fspath(path), f"workflow not monitored: {type(exc).__name__}: {exc}; retried when its files change"
            )
            self._refused[key] = inputs
            return None
        self._refused.pop(key, None)
        return monitor

    def _ready(self, path: Path) -> bool:
        try:
            entries = list(os.scandir(path))
        except OSError:
            return False
        self._warn_special(entries)
        dags = [e for e in entries if e.name.endswith(".dag") and e.is_file()]
        if not dags or find_braindump(path) is None:
            return False
        if any(e.name == "jobstate.log" or e.name.endswith((".dagman.out", ".nodes.log")) for e in entries):
            return True
        try:
            newest = max(e.stat().st_mtime for e in dags)
        except OSError:
            return False
        return self.clock() - newest >= self.settle_s

    def _finished_unseen(self, key: str, path: Path) -> bool:
        """Mark a workflow DAGMan had finished before we first saw it; read only the tails of its status files.

        Only the plain layout (one ``.dag``, ``jobstate.log`` beside it) is
        judged here, without parsing anything; any other is opened and read.
        """
        dags = [e.name for e in _entries(path) if e.name.endswith(".dag")]
        if len(dags) != 1:
            return False
        files = [path / (dags[0] + ".dagman.out"), path / "jobstate.log"]
        status = dag_status(files[0], files[1], self.problems)
        if not status.finished:
            return False
        self.finished[key] = {
            "files": [os.fspath(f) for f in files],
            "signature": file_signature(*files),
            "exit_code": status.exit_code,
        }
        self._markers_changed = True
        self.skipped_finished += 1
        return True

    # -- forgetting ---------------------------------------------------------------

    def _forget(self, key: str, monitor: SubmitDirMonitor, status: DagStatus) -> None:
        if self.store is not None:
            self.store.forget_positions(monitor.prefix)
        files = [os.fspath(monitor.dagman_out_path), os.fspath(monitor.jobstate_path)]
        self.finished[key] = {
            "files": files,
            "signature": file_signature(*map(Path, files)),
            "exit_code": status.exit_code,
        }
        self._markers_changed = True
        del self.workflows[key]

    def _runs_again(self, key: str) -> bool:
        """A finished workflow whose status files changed and no longer say finished (a rescue run)."""
        marker = self.finished[key]
        names = marker.get("files", [])
        signature = file_signature(*names)
        if signature == marker.get("signature"):
            return False
        files = [Path(f) for f in names]
        status = dag_status(files[0], files[1], self.problems) if len(files) >= 2 else DagStatus(False)
        self._markers_changed = True
        if status.finished:
            marker["signature"] = signature
            return False
        del self.finished[key]
        return True

    def _prune_markers(self) -> None:
        for key in [k for k in self.finished if k not in self._seen and not os.path.isdir(k)]:
            del self.finished[key]
            self._markers_changed = True
        for key in [k for k in self._refused if not os.path.isdir(k)]:  # a refused directory removed
            del self._refused[key]

    def _subdirectories(self, directory: Path) -> list[Path]:
        try:
            with os.scandir(directory) as scanned:
                entries = list(scanned)
        except OSError:
            return []
        self._warn_special(entries)
        names = sorted(e.path for e in entries if e.is_dir(follow_symlinks=False) and not e.name.startswith("."))
        return [Path(name) for name in names]

    def _warn_special(self, entries: list[os.DirEntry[str]]) -> None:
        """A FIFO, device or socket under a name that makes a directory a workflow: one warning, never a read."""
        for entry in entries:
            if entry.name in BRAINDUMP_NAMES or entry.name == "jobstate.log" or entry.name.endswith(_STATUS_SUFFIXES):
                try:
                    mode = entry.stat().st_mode
                except OSError:
                    continue
                if not (stat.S_ISREG(mode) or stat.S_ISDIR(mode)):
                    self.problems.warn_once(entry.path, f"{file_kind(mode)}, not a regular file: not read")

    def _warn_once(self, source: str, message: str, where: str | None = None) -> None:
        if (source, message) not in self._reported:
            self._reported.add((source, message))
            self.problems.warn(source, message, where)


def _entries(directory: Path) -> list[os.DirEntry[str]]:
    try:
        with os.scandir(directory) as entries:
            return list(entries)
    except OSError:
        return []


def _input_signature(directory: Path) -> list[tuple[str, int, int, int]]:
    """(name, size, mtime_ns, inode) of each ``.dag`` and braindump in a submit dir (what a refusal
    comes from): a refused dir is parsed again only when one of them changed (a 100k-node DAG costs
    seconds per parse, and the monitor polls every few)."""
    out = []
    try:
        with os.scandir(directory) as entries:
            for entry in entries:
                if not (entry.name.endswith(".dag") or entry.name in BRAINDUMP_NAMES):
                    continue
                try:
                    st = entry.stat()
                except OSError:
                    continue
                if stat.S_ISREG(st.st_mode):
                    out.append((entry.name, st.st_size, st.st_mtime_ns, st.st_ino))
    except OSError:
        return []
    return sorted(out)


def _cluster_of(condor_job: str | None) -> int | None:
    """``"1234.0"`` -> 1234."""
    if not condor_job:
        return None
    head = condor_job.split(".", 1)[0]
    return int(head) if head.lstrip("-").isdigit() else None
