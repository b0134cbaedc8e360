"""Optional extras: a missing one is one line saying what to install, never an ImportError."""

from __future__ import annotations

import importlib
from types import ModuleType

from wire_daemon.core.errors import ConfigError


def require(module: str, extra: str, needed_by: str) -> ModuleType:
    """Import ``module``, or say which extra of wire-daemon brings it."""
    try:
        return importlib.import_module(module)
    except ImportError:
        raise ConfigError(f"{needed_by} needs {module}: pip install 'wire-daemon[{extra}]'") from None
