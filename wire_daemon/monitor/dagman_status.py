"""Has a workflow's DAGMan finished? Read from the tails of ``<dag>.dagman.out`` and ``jobstate.log``.

* ``<dag>.dagman.out``: DAGMan's last line is
  ``... (condor_DAGMAN) pid N EXITING WITH STATUS s``; a DAGMan started again
  on the same DAG (rescue, ``pegasus-run`` after a failure) appends
  ``... (CONDOR_DAGMAN) STARTING UP`` after it.
* ``jobstate.log`` (pegasus-monitord): ``INTERNAL *** DAGMAN_FINISHED s ***``,
  and ``DAGMAN_STARTED`` again when DAGMan is restarted.

Rule (ours): a file says "finished with status s" when its last DAGMan start or
exit mark within the last ``TAIL_BYTES`` is an exit mark, and s is not 3.
DAGMan exits with 3 when its schedd shuts down (a ``condor_restart``):
``condor_submit_dag``'s job removes itself only on 0 to 2, so the schedd
starts DAGMan again in recovery mode, and the workflow is still running. Either file saying so
is enough (monitord may lag or not run; dagman.out may be elsewhere). Only the
tail is read, so the check costs the same however long the run.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

from wire_daemon.monitor.problems import Problems
from wire_daemon.monitor.safe_open import NotRegularFile, describe, open_regular

TAIL_BYTES = 16 << 10
DAGMAN_RESTARTS = 3  # DAGMan's exit status when it stopped with its schedd and will be started again
_DAGMAN_OUT = re.compile(rb"\(condor_DAGMAN\)\s+(?:pid\s+\d+\s+EXITING WITH STATUS\s+(-?\d+)|STARTING UP)", re.I)
_JOBSTATE = re.compile(rb"^\S+\s+INTERNAL\s+\*\*\*\s+DAGMAN_(?:FINISHED\s+(-?\d+)|STARTED)\b", re.M)


@dataclass(frozen=True)
class DagStatus:
    finished: bool
    exit_code: int | None = None  # DAGMan's exit status once finished (0: every node succeeded)
    source: str | None = None  # the file that said so


def dag_status(dagman_out: Path | None, jobstate: Path | None, problems: Problems | None = None) -> DagStatus:
    for path, pattern in ((dagman_out, _DAGMAN_OUT), (jobstate, _JOBSTATE)):
        if path is None:
            continue
        code = _last_exit(_tail(path, problems), pattern)
        if code is not None:
            return DagStatus(True, code, os.fspath(path))
    return DagStatus(False)


def file_signature(*paths: str | os.PathLike[str] | None) -> list[list[int]]:
    """(size, mtime_ns) of each file, [0, 0] when absent: tells whether a finished run was restarted."""
    out = []
    for path in paths:
        try:
            st = os.stat(path) if path is not None else None
        except OSError:
            st = None
        out.append([st.st_size, st.st_mtime_ns] if st else [0, 0])
    return out


def _tail(path: Path, problems: Problems | None) -> bytes:
    try:
        with open_regular(path) as f:
            size = os.fstat(f.fileno()).st_size
            f.seek(max(0, size - TAIL_BYTES))
            return f.read(TAIL_BYTES)
    except NotRegularFile as exc:  # re-seen at every poll: said once
        if problems is not None:
            problems.warn_once(os.fspath(path), describe(exc))
        return b""
    except OSError:  # absent (not written yet) or unreadable now: not finished as far as we know
        return b""


def _last_exit(data: bytes, pattern: re.Pattern[bytes]) -> int | None:
    last: re.Match[bytes] | None = None
    for match in pattern.finditer(data):
        last = match
    if last is None or last.group(1) is None:
        return None  # never finished, or started again after its last exit
    code = int(last.group(1))
    return None if code == DAGMAN_RESTARTS else code
