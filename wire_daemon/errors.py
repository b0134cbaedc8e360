"""Errors that name the file and the place, so an operator can act on one line."""

from __future__ import annotations


class WireError(Exception):
    """Base for every error the daemon reports to a user instead of a traceback."""


class InputError(WireError):
    """Bad input: a file, and where in it, and what is wrong."""

    def __init__(self, source: str, message: str, where: str | None = None) -> None:
        self.source = source
        self.where = where
        self.detail = message
        place = f"{source}:{where}" if where else source
        super().__init__(f"{place}: {message}")


class WorkflowError(InputError):
    """A workflow description (trace, DAG) that cannot be used."""


class ConfigError(WireError):
    """A configuration value that is missing or out of range."""
