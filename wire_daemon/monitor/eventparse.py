"""Run htcondor2's job event parser where its crashes and stalls cannot reach the daemon.

``JobEventLog`` is native code. Some malformed events crash it (htcondor 25.14:
a ``014`` node-execute event carrying a NUL byte, or cut after ``Node 0``,
dereferences a null pointer), and every event it cannot parse costs a
one-second sleep (its reader assumes a writer may still be busy, waits and
tries again). ``eventscreen`` keeps the events we know it cannot take away from
it; this module contains whatever is left:

* **A child process.** ``IsolatedParser`` hands events to a worker process
  (``python -c ... worker_main()``), started on first use and shared by every
  reader of the process. The worker imports only the standard library and
  htcondor2. If it dies while parsing an event (a signal, a non-zero exit),
  that one event is reported as lost and the worker is started again for the
  events after it. If it makes no progress on one event for ``event_budget_s``
  (2 s: longer than the library's own one-second retry, so only a real hang is
  cut short), it is killed and the event is reported the same way.
  A worker killed from outside (SIGTERM, SIGKILL: a service stop, the OOM
  killer) is not blamed on the event: the call raises ``ParserUnavailable``
  and the reader reads the same bytes again at its next call.
* **One event at a time.** The worker appends the events one by one to an
  anonymous in-memory file (``memfd_create``; no file is ever created on disk,
  so a crash leaves nothing behind) and asks the library for what each append
  produced. Every answer therefore belongs to exactly one event: a bad event
  never shifts the attribution of the events after it.
* **Plain data back.** Answers are JSON lines carrying only the event
  attributes the daemon reads (strings, numbers, booleans), never pickles: a
  worker whose memory the parser corrupted cannot make the daemon run code.

``InProcessParser`` does the same work in the calling process (for
measurements, and as the reference the isolation is compared against). Both
return one ``Parsed`` per event given, in order.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import select
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import deque
from collections.abc import Generator, Sequence
from dataclasses import dataclass, field
from typing import IO, Any

# The event attributes the daemon reads (see eventlog._EXTRACTORS); the worker sends only these.
WANTED_ATTRIBUTES = (
    "EventTypeNumber",
    "Cluster",
    "Proc",
    "EventTime",
    "LogNotes",
    "ExecuteHost",
    "TerminatedNormally",
    "TerminatedBySignal",
    "ReturnValue",
    "ResidentSetSize",
    "MemoryUsage",
    "HoldReason",
    "HoldReasonCode",
    "HoldReasonSubCode",
    "Reason",
    "Message",
    "StartdAddr",
    "DisconnectReason",
    "Type",
    "Host",
)
DAG_NODE_NAME = "DAGNodeName"  # taken out of the submit event's StructuredNotes ClassAd
_WANTED = frozenset(WANTED_ATTRIBUTES)

DEFAULT_EVENT_BUDGET_S = 2.0
_BATCH_EVENTS = 200
_BATCH_BYTES = 48 << 10
_PIPE_SAFE = 56 << 10  # a request this small fits the pipe (64 KiB) while the worker is busy
_NEVER_WAIT = -2  # see eventlog: a deadline already past never sleeps at the end of the data
_CRASH_SIGNALS = frozenset(
    int(s)
    for s in (
        signal.SIGSEGV,
        signal.SIGBUS,
        signal.SIGABRT,
        signal.SIGFPE,
        signal.SIGILL,
        getattr(signal, "SIGSYS", signal.SIGSEGV),
        getattr(signal, "SIGTRAP", signal.SIGSEGV),
    )
)
_BOOT = (
    "import sys; sys.path[0] = sys.argv[1]; "
    "from wire_daemon.monitor.eventparse import worker_main; sys.exit(worker_main())"
)


class ParserUnavailable(RuntimeError):
    """The parser could not run now (worker not started, or killed from outside); nothing was consumed."""


@dataclass(frozen=True)
class Parsed:
    """What the library made of one event: its attribute dicts, or why it has none.

    ``lost`` is set when the event took the parser down (a crash) or hung it
    (past the budget); ``error`` then says which.
    """

    events: list[dict[str, Any]] = field(default_factory=list)
    error: str | None = None
    lost: bool = False
    seconds: float = 0.0


# -- the work itself (worker side, and InProcessParser) --------------------------------


class _Stage:
    """An in-memory file the library reads events from, appended to one event at a time.

    Without ``memfd_create`` (not Linux): a file in ``directory``, a private one the worker's
    parent made and cleans after a crash, or one of our own, removed by ``close()``."""

    def __init__(self, directory: str | None = None) -> None:
        self._dir: str | None = None
        if hasattr(os, "memfd_create"):
            self.fd = os.memfd_create("wire-eventlog", os.MFD_CLOEXEC)
            self.path = f"/proc/self/fd/{self.fd}"
            return
        if directory is None:
            directory = self._dir = tempfile.mkdtemp(prefix="wire-eventlog-")
        fd, self.path = tempfile.mkstemp(prefix="events-", suffix=".log", dir=directory)
        self.fd = fd

    def append(self, data: bytes) -> None:
        view = memoryview(data)
        while view:
            view = view[os.write(self.fd, view) :]

    def close(self) -> None:
        with contextlib.suppress(OSError):
            os.close(self.fd)
        if not self.path.startswith("/proc/self/fd/"):
            with contextlib.suppress(OSError):
                os.unlink(self.path)
        if self._dir is not None:
            with contextlib.suppress(OSError):
                os.rmdir(self._dir)


class _Session:
    """One JobEventLog over one stage; ``feed`` parses one event."""

    def __init__(self, htcondor2: Any, stage_dir: str | None = None) -> None:
        self._htcondor2 = htcondor2
        self._stage = _Stage(stage_dir)
        self._log = htcondor2.JobEventLog(self._stage.path)
        self._iterator = self._log.events(stop_after=_NEVER_WAIT)
        self._size = 0
        self.aligned = True  # the library stands at the end of what it was given

    def feed(self, data: bytes) -> tuple[list[dict[str, Any]], str | None]:
        """The event of ``data`` (one complete event)."""
        self._stage.append(data)
        self._size += len(data)
        try:
            raw = next(self._iterator)
        except StopIteration:
            return [], None
        except Exception as exc:  # HTCondorException (ULOG_RD_ERROR) and friends
            return [], str(exc) or type(exc).__name__
        # After a good event the library has read through its "..." line, unless the event
        # fooled it (a submit host written as "...host" ends the event for it): then the
        # rest would be read as the next event. The pickling state gives its offset.
        try:
            self.aligned = self._log.__getstate__()[1] == self._size
        except Exception:
            self.aligned = True
        return [attributes(raw)], None

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self._log.close()
        self._stage.close()


def attributes(raw: Any) -> dict[str, Any]:
    """The attributes the daemon reads, as plain JSON values; unreadable ones are left out."""
    out: dict[str, Any] = {}
    try:
        present = set(raw.keys())
    except Exception:
        return out
    for key in _WANTED.intersection(present):
        try:
            value = raw[key]
        except Exception:  # e.g. a string that is not UTF-8
            continue
        if isinstance(value, (str, int, float, bool)):
            out[key] = value
    if "StructuredNotes" in present:
        try:
            notes = raw["StructuredNotes"]
            name = notes.get(DAG_NODE_NAME) if hasattr(notes, "get") else None
        except Exception:
            name = None
        if isinstance(name, str):
            out[DAG_NODE_NAME] = name
    return out


def _parse_all(htcondor2: Any, events: Sequence[bytes], stage_dir: str | None = None) -> Generator[Parsed, None, None]:
    """One ``Parsed`` per event; ``ParserUnavailable`` if the library cannot even open an empty log."""
    session = _open_session(htcondor2, stage_dir)
    try:
        for data in events:
            start = time.perf_counter()
            found, error = session.feed(data)
            if not found or not session.aligned:
                # the library stopped inside this event: start afresh, so that its idea of where
                # the next event begins cannot drift
                session.close()
                session = _open_session(htcondor2, stage_dir)
                if not found:
                    error = error or "no event read"
            yield Parsed(found, error, seconds=time.perf_counter() - start)
    finally:
        session.close()


def _open_session(htcondor2: Any, stage_dir: str | None) -> _Session:
    try:
        return _Session(htcondor2, stage_dir)
    except Exception as exc:  # not about any event: e.g. no memfd, the library not initialised
        raise ParserUnavailable(f"{type(exc).__name__}: {exc}") from None


class InProcessParser:
    """The library in this process: no isolation (measurements, and the reference for tests)."""

    def __init__(self) -> None:
        import htcondor2

        self._htcondor2 = htcondor2
        self._lock = threading.Lock()

    def parse(self, events: Sequence[bytes], deadline: float | None = None) -> list[Parsed]:
        with contextlib.closing(self.parse_iter(events, deadline)) as results:
            return list(results)

    def parse_iter(self, events: Sequence[bytes], deadline: float | None = None) -> Generator[Parsed, None, None]:
        with self._lock, contextlib.closing(_parse_all(self._htcondor2, events)) as results:
            for parsed in results:
                yield parsed
                if _past(deadline):
                    return

    def close(self) -> None:
        pass


# -- the worker --------------------------------------------------------------------------


def worker_main() -> int:
    """The worker's loop: requests on stdin, one JSON line per event on stdout."""
    with contextlib.suppress(ValueError, OSError):
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # a terminal's ^C is for the daemon, not for us
    _die_with_parent()
    out = sys.stdout.buffer
    try:
        import htcondor2
    except Exception as exc:  # e.g. no bindings: say so, the parent reports it
        out.write(json.dumps(["fatal", f"{type(exc).__name__}: {exc}"]).encode() + b"\n")
        out.flush()
        return 3
    out.write(b'["ready"]\n')
    out.flush()
    stage_dir = sys.argv[2] if len(sys.argv) > 2 else None
    source = sys.stdin.buffer
    while True:
        events = _read_request(source)
        if events is None:
            return 0
        try:
            for parsed in _parse_all(htcondor2, events, stage_dir):
                out.write(json.dumps([parsed.events, parsed.error]).encode() + b"\n")
                out.flush()  # per event: if the next one takes the worker down, this one is already out
        except ParserUnavailable as exc:
            out.write(json.dumps(["fatal", str(exc)]).encode() + b"\n")
            out.flush()
            return 3


def _die_with_parent() -> None:
    """Linux: be killed when the daemon dies, even if the library hangs and never reads stdin's EOF."""
    parent = os.getppid()
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, int(signal.SIGKILL), 0, 0, 0)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        return
    if os.getppid() != parent:  # the daemon died before prctl: nobody to work for
        os._exit(0)


def _read_request(source: IO[bytes]) -> list[bytes] | None:
    header = source.readline()
    if not header:
        return None
    events = []
    for _ in range(int(header)):
        size = int(source.readline())
        data = source.read(size)
        if len(data) != size:
            return None
        events.append(data)
    return events


# -- the parent side -----------------------------------------------------------------------


class IsolatedParser:
    """The library in a worker process (see the module docstring). Thread-safe."""

    def __init__(self, event_budget_s: float = DEFAULT_EVENT_BUDGET_S, start_budget_s: float = 30.0) -> None:
        self.event_budget_s = event_budget_s
        self.start_budget_s = start_budget_s
        self._proc: subprocess.Popen[bytes] | None = None
        self._buffer = b""
        self._answers: deque[Parsed] = deque()  # decoded, not handed out yet
        self._stage_dir: str | None = None  # without memfd_create: where the worker stages events
        self._lock = threading.Lock()
        self.starts = 0  # workers started (the first one included)
        self.lost = 0  # events that took a worker down

    def parse(self, events: Sequence[bytes], deadline: float | None = None) -> list[Parsed]:
        """One ``Parsed`` per event, in order; fewer when ``deadline`` (``time.monotonic()``) passes.

        Raises ``ParserUnavailable`` (before any result) when no worker can run.
        """
        with contextlib.closing(self.parse_iter(events, deadline)) as results:
            return list(results)

    def parse_iter(self, events: Sequence[bytes], deadline: float | None = None) -> Generator[Parsed, None, None]:
        """``parse`` as the answers come: two batches are kept in flight, so the caller's work on
        one batch's answers overlaps the worker's on the next. Close it if you stop early."""
        with self._lock:
            done = sent = 0
            flight: deque[int] = deque()  # sizes of the batches sent and not answered yet
            try:
                while done < len(events):
                    while len(flight) < 2 and sent < len(events) and not (done and _past(deadline)):
                        batch = _batch(events, sent)
                        if flight and (sum(len(e) for e in batch) > _PIPE_SAFE or not self._alive()):
                            break  # send it alone, later (the worker may be busy writing answers, or gone)
                        try:
                            self._send(batch)
                        except ParserUnavailable:
                            if done:
                                return  # keep what was parsed; the rest is read again at the next call
                            raise
                        flight.append(len(batch))
                        sent += len(batch)
                    if not flight:
                        return
                    for _ in range(flight.popleft()):
                        parsed = self._receive()
                        done += 1
                        yield parsed
                        if parsed.lost:  # the worker is gone with the batches in flight: send them again
                            flight.clear()
                            sent = done
                            break
            finally:
                if flight:  # stopped early with answers still coming: they would be read as the next ones
                    self._stop()

    def close(self) -> None:
        with self._lock:
            self._stop()
            if self._stage_dir is not None:
                with contextlib.suppress(OSError):
                    os.rmdir(self._stage_dir)
                self._stage_dir = None

    # -- internals ------------------------------------------------------------

    def _alive(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def _send(self, batch: Sequence[bytes]) -> None:
        proc = self._ensure_started()
        assert proc.stdin is not None
        request = [b"%d\n" % len(batch)]
        for data in batch:
            request += [b"%d\n" % len(data), data]
        try:
            proc.stdin.write(b"".join(request))
            proc.stdin.flush()
        except OSError:
            self._stop()
            raise ParserUnavailable("the event parser process went away") from None

    def _receive(self) -> Parsed:
        if self._answers:
            return self._answers.popleft()
        proc = self._proc
        start = time.perf_counter()
        if proc is None:
            line, why = None, "the event parser process went away"
        else:
            line, why = self._reply(proc, self.event_budget_s)
        if line is None:
            self.lost += 1
            return Parsed(error=why, lost=True, seconds=time.perf_counter() - start)
        if line.startswith(b'["fatal"'):
            self._stop()
            raise ParserUnavailable(f"the event parser cannot work ({_fatal(line)})")
        # decode every complete answer at hand in one go (json.loads is per call, not per byte)
        end = self._buffer.rfind(b"\n")
        lines = [line]
        if end >= 0 and b'["fatal"' not in self._buffer[: end + 1]:
            lines += self._buffer[:end].split(b"\n")
            self._buffer = self._buffer[end + 1 :]
        seconds = (time.perf_counter() - start) / len(lines)
        self._answers.extend(Parsed(events, error, seconds=seconds) for events, error in _decode_many(lines))
        return self._answers.popleft()

    def _reply(self, proc: subprocess.Popen[bytes], budget: float) -> tuple[bytes | None, str]:
        """The next line, or None and why the worker was lost on this event (it is stopped then)."""
        line = self._read_line(proc, budget)
        if line is not None:
            return line, ""
        if proc.poll() is None:  # alive but silent: hung on this event
            self._stop()
            return None, f"the event parser made no progress for {budget:g} s (killed)"
        code = proc.returncode
        self._stop()
        if code is not None and code < 0 and -code not in _CRASH_SIGNALS:
            raise ParserUnavailable(f"the event parser was stopped from outside ({_signal_name(-code)})")
        what = f"crashed ({_signal_name(-code)})" if code is not None and code < 0 else f"exited with status {code}"
        return None, f"the event parser {what} on this event"

    def _read_line(self, proc: subprocess.Popen[bytes], budget: float) -> bytes | None:
        assert proc.stdout is not None
        fd = proc.stdout.fileno()
        limit = time.monotonic() + budget
        while True:
            end = self._buffer.find(b"\n")
            if end >= 0:
                line, self._buffer = self._buffer[:end], self._buffer[end + 1 :]
                return line
            left = limit - time.monotonic()
            if left <= 0:
                return None
            ready, _, _ = select.select([fd], [], [], left)
            if not ready:
                return None
            chunk = os.read(fd, 1 << 16)
            if not chunk:
                with contextlib.suppress(subprocess.TimeoutExpired):
                    proc.wait(timeout=budget)
                return None
            self._buffer += chunk

    def _ensure_started(self) -> subprocess.Popen[bytes]:
        if self._proc is not None and self._proc.poll() is None:
            return self._proc
        self._stop()
        root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
        try:
            proc = subprocess.Popen(
                [sys.executable, "-c", _BOOT, root, *self._worker_stage_dir()],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
                close_fds=True,
                start_new_session=True,  # a terminal's signals go to the daemon only
            )
        except OSError as exc:
            raise ParserUnavailable(f"cannot start the event parser process ({exc})") from None
        self._proc, self._buffer = proc, b""
        self._answers.clear()
        self.starts += 1
        line = self._read_line(proc, self.start_budget_s)
        if line != b'["ready"]':
            self._stop()
            raise ParserUnavailable(f"the event parser process did not start ({_fatal(line) or 'no answer'})")
        return proc

    def _worker_stage_dir(self) -> list[str]:
        if hasattr(os, "memfd_create"):
            return []
        if self._stage_dir is None:
            self._stage_dir = tempfile.mkdtemp(prefix="wire-eventlog-")
        return [self._stage_dir]

    def _stop(self) -> None:
        proc, self._proc, self._buffer = self._proc, None, b""
        self._answers.clear()
        self._stop_process(proc)
        if self._stage_dir is not None:  # what a crashed worker left behind
            for name in os.listdir(self._stage_dir):
                with contextlib.suppress(OSError):
                    os.unlink(os.path.join(self._stage_dir, name))

    @staticmethod
    def _stop_process(proc: subprocess.Popen[bytes] | None) -> None:
        if proc is None:
            return
        if proc.poll() is None:
            with contextlib.suppress(OSError):
                proc.kill()
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=5)
        for stream in (proc.stdin, proc.stdout):
            with contextlib.suppress(OSError):
                if stream is not None:
                    stream.close()


def _past(deadline: float | None) -> bool:
    return deadline is not None and time.monotonic() > deadline


def _batch(events: Sequence[bytes], start: int) -> Sequence[bytes]:
    end, size = start, 0
    while end < len(events) and end - start < _BATCH_EVENTS and (size < _BATCH_BYTES or end == start):
        size += len(events[end])
        end += 1
    return events[start:end]


def _decode_many(lines: list[bytes]) -> list[tuple[list[dict[str, Any]], str | None]]:
    try:
        answers = json.loads(b"[" + b",".join(lines) + b"]")
    except (ValueError, TypeError):
        return [_decode(line) for line in lines]
    return [_checked_answer(answer) for answer in answers]


def _decode(line: bytes) -> tuple[list[dict[str, Any]], str | None]:
    try:
        return _checked_answer(json.loads(line))
    except (ValueError, TypeError):
        return [], "unreadable answer from the event parser"


def _checked_answer(answer: Any) -> tuple[list[dict[str, Any]], str | None]:
    if not (isinstance(answer, list) and len(answer) == 2 and isinstance(answer[0], list)):
        return [], "unreadable answer from the event parser"
    events, error = answer
    if not all(isinstance(e, dict) for e in events):
        return [], "unreadable answer from the event parser"
    return events, error if isinstance(error, str) else None


def _fatal(line: bytes | None) -> str:
    try:
        return str(json.loads(line or b"[]")[1])
    except (ValueError, TypeError, IndexError):
        return ""


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


_shared: IsolatedParser | None = None
_shared_lock = threading.Lock()


def shared_parser() -> IsolatedParser:
    """The process's one isolated parser (one worker process for every reader)."""
    global _shared
    with _shared_lock:
        if _shared is None:
            _shared = IsolatedParser()
        return _shared


def _close_shared() -> None:
    if _shared is not None:
        _shared.close()


atexit.register(_close_shared)
