"""Every wire_daemon name the trace-to-submit-dir tools and their tests use, imported here and only here.

When a daemon module moves, this is the one file to change (submitdir.py and
tests/realpool/test_submitdir.py import from it).
"""

from __future__ import annotations

from wire_daemon.core.errors import InputError, WorkflowError
from wire_daemon.core.workflow import Workflow
from wire_daemon.emulated.traces import bundled_trace_path, load_trace
from wire_daemon.monitor.dag import parse_dag
from wire_daemon.monitor.kickstart import KickstartRecord, read_kickstart
from wire_daemon.monitor.problems import Problems
from wire_daemon.monitor.submit_dir import SubmitDir, read_submit_dir
from wire_daemon.monitor.submit_monitor import MemoryPositionStore, SubmitDirMonitor

__all__ = [
    "InputError",
    "KickstartRecord",
    "MemoryPositionStore",
    "Problems",
    "SubmitDir",
    "SubmitDirMonitor",
    "Workflow",
    "WorkflowError",
    "bundled_trace_path",
    "load_trace",
    "parse_dag",
    "read_kickstart",
    "read_submit_dir",
]
