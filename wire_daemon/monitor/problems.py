"""One-line warnings about bad input, naming the file and the place.

Readers never raise on a bad record: they report it here and skip or wait.
Each warning is logged once and kept (up to a bound) so that tests, ``status``
and ``inspect`` can show what was skipped without scraping the log.
"""

from __future__ import annotations

import logging

_DEFAULT_LIMIT = 1000


class Problems:
    """A sink for the warnings of one or more readers."""

    def __init__(self, logger: logging.Logger | None = None, limit: int = _DEFAULT_LIMIT) -> None:
        self._log = logger or logging.getLogger("wire_daemon.monitor")
        self._limit = limit
        self.messages: list[str] = []
        self.count = 0
        self._handed_out = 0  # messages already given to take_new

    def warn(self, source: str, message: str, where: str | int | None = None) -> None:
        text = format_place(source, where) + ": " + message
        self.count += 1
        if len(self.messages) < self._limit:
            self.messages.append(text)
        self._log.warning("%s", text)

    def take_new(self) -> list[str]:
        """The kept warnings not taken before (for the daemon's decisions log)."""
        new = self.messages[self._handed_out :]
        self._handed_out = len(self.messages)
        return new


def format_place(source: str, where: str | int | None = None) -> str:
    """``file`` or ``file:where`` -- the same shape as ``InputError`` messages."""
    return f"{source}:{where}" if where not in (None, "") else source
