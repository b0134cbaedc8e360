"""One-line warnings about bad input, naming the file and the place.

Readers never raise on a bad record: they report it here and skip or wait.
Each warning is logged once and kept (up to a bound) so that tests, ``status``
and ``inspect`` can show what was skipped without scraping the log.

``Limited`` caps what one pass over one file may say: a file of a million bad
lines gives a hundred warnings and one line counting the rest, not a million
log lines.
"""

from __future__ import annotations

import logging
from types import TracebackType

_DEFAULT_LIMIT = 1000


class Problems:
    """A sink for the warnings of one or more readers."""

    def __init__(self, logger: logging.Logger | None = None, limit: int = _DEFAULT_LIMIT) -> None:
        self._log = logger or logging.getLogger("wire_daemon.monitor")
        self._limit = limit
        self.messages: list[str] = []
        self.count = 0
        self._handed_out = 0  # messages already given to take_new
        self._once: set[tuple[str, str]] = set()

    def warn(self, source: str, message: str, where: str | int | None = None) -> None:
        text = format_place(source, where) + ": " + message
        self.count += 1
        if len(self.messages) < self._limit:
            self.messages.append(text)
        self._log.warning("%s", text)

    def warn_once(self, source: str, message: str, where: str | int | None = None) -> None:
        """``warn``, but only the first time this source says this message (a state re-seen every poll)."""
        if (source, message) not in self._once:
            self._once.add((source, message))
            self.warn(source, message, where)

    def take_new(self) -> list[str]:
        """The kept warnings not taken before (for the daemon's decisions log)."""
        new = self.messages[self._handed_out :]
        self._handed_out = len(self.messages)
        return new


class Limited(Problems):
    """A ``Problems`` passing warnings on to ``problems``, at most ``limit`` per file; ``finish()`` (or
    the end of a ``with`` block) then says in one line how many more there were and where the first was."""

    def __init__(self, problems: Problems, limit: int = 100) -> None:
        super().__init__()
        self.problems = problems
        self.limit = limit
        self._counts: dict[str, int] = {}
        self._first_hidden: dict[str, str | int | None] = {}

    def warn(self, source: str, message: str, where: str | int | None = None) -> None:
        count = self._counts.get(source, 0) + 1
        self._counts[source] = count
        if count <= self.limit:
            self.problems.warn(source, message, where)
        elif count == self.limit + 1:
            self._first_hidden[source] = where

    def finish(self) -> None:
        for source, count in self._counts.items():
            if count > self.limit:
                hidden = count - self.limit
                self.problems.warn(source, f"{hidden:,} more warnings like these not shown", self._first_hidden[source])
        self._counts.clear()
        self._first_hidden.clear()

    def __enter__(self) -> Limited:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, value: BaseException | None, traceback: TracebackType | None
    ) -> None:
        self.finish()


def format_place(source: str, where: str | int | None = None) -> str:
    """``file`` or ``file:where`` -- the same shape as ``InputError`` messages."""
    source = shown(source)
    return f"{source}:{where}" if where not in (None, "") else source


def shown(name: str) -> str:
    """A file name as text any log or JSON writer takes: bytes that are not UTF-8 as ``\\xff``.

    Names come from the file system as ``str`` with those bytes smuggled in as
    lone surrogates (``os.fsdecode``); they stay that way for every file
    operation, and are escaped only here, where they are shown.
    """
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:
        pass
    else:
        return name
    try:
        return name.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
    except UnicodeEncodeError:  # a surrogate no file system byte maps to
        return name.encode("utf-8", "backslashreplace").decode("utf-8")
