"""PyYAML with errors that name the file and line.

Pegasus writes YAML (braindump.yml, workflow.yml, catalogs, kickstart records).
``load_yaml`` uses the C loader when PyYAML has it (much faster on large
records) and turns every YAML or read error into ``InputError(file, message,
line)``.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml

from wire_daemon.core.errors import InputError

_Loader: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def load_yaml(path: str | os.PathLike[str]) -> Any:
    source = os.fspath(path)
    try:
        text = Path(source).read_bytes().decode("utf-8", errors="replace")
    except OSError as exc:
        raise InputError(source, f"cannot read ({exc.strerror or exc})") from None
    return load_yaml_text(text, source)


def load_yaml_text(text: str, source: str, first_line: int = 1) -> Any:
    """Parse one YAML document; ``first_line`` is the line ``text`` starts at in ``source``."""
    try:
        return yaml.load(text, Loader=_Loader)
    except yaml.YAMLError as exc:
        raise InputError(source, f"bad YAML: {_describe(exc)}", _line(exc, first_line)) from None
    except (ValueError, TypeError, OverflowError) as exc:  # e.g. a timestamp out of range
        raise InputError(source, f"bad YAML value: {exc}", None) from None


def documents(text: str) -> Iterator[tuple[int, str]]:
    """Split on lines starting with ``---`` (YAML document markers and Pegasus's
    ``---------------pegasus-multipart`` separators): (first line, text) pairs."""
    start = 1
    current: list[str] = []
    for number, line in enumerate(text.splitlines(keepends=True), 1):
        if line.startswith("---"):
            if "".join(current).strip():
                yield start, "".join(current)
            current, start = [], number + 1
            continue
        current.append(line)
    if "".join(current).strip():
        yield start, "".join(current)


def _describe(exc: yaml.YAMLError) -> str:
    problem = getattr(exc, "problem", None)
    context = getattr(exc, "context", None)
    text = " ".join(str(p) for p in (context, problem) if p) or str(exc).splitlines()[0]
    return text.strip()


def _line(exc: yaml.YAMLError, first_line: int) -> str | None:
    mark = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
    return str(mark.line + first_line) if mark is not None else None
