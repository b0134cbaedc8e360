"""PyYAML with errors that name the file and line, and a shape check before the C loader.

Pegasus writes YAML (braindump.yml, workflow.yml, catalogs, kickstart records).
``load_yaml`` uses the C loader when PyYAML has it (much faster on large
records) and turns every YAML or read error into ``InputError(file, message,
line)``.

**Shape limits.** libyaml's loader builds nested collections by recursion in C:
flow nesting about 50,000 deep crashes the process (SIGSEGV), and its scanner
is quadratic in the flow depth well before that. Deep structures also make
Python's ``str()`` and ``repr()`` raise ``RecursionError``. Pegasus nests a few
levels, so a document nested more than ``MAX_DEPTH`` (200) collections deep is
refused before the loader sees it, with one ``InputError``:

* a cheap bound first (C-speed string counts): fewer than 50 ``[``/``{`` in the
  text, no line indented 50 or more, and no line opening 50 or more compact
  ``- ``/``? `` entries bound the depth below 200, whatever the quoting;
* otherwise the exact depth, from libyaml's event stream (its parser keeps its
  own stack, so it neither recurses nor crashes), stopping as soon as it
  passes the limit.

An anchor (``&a``) lets aliases (``*a``) share one collection many times over
(a "billion laughs" document is a few hundred bytes); a reader that walks or
prints such a value would take forever. When the text holds an anchor, the
loaded value's size with every alias expanded is counted (each shared
collection once) and a document that expands more than tenfold (and beyond
100,000 values), or contains itself, is refused.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from typing import Any

import yaml

from wire_daemon.core.errors import InputError
from wire_daemon.monitor.safe_open import YAML_LIMIT, read_regular

_Loader: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)

MAX_DEPTH = 200
_CHEAP = MAX_DEPTH // 4  # below this the cheap bound is enough (see the module docstring)
_DEEP_INDENT = re.compile(rf"(?m)^ {{{_CHEAP}}}")
_COMPACT = re.compile(rf"(?m)^[ \t]*(?:[-?][ \t]+){{{_CHEAP}}}")
_ANCHOR = re.compile(r"(?:^|[\s\[{,:?-])&[^\s\[\]{},]")
_EXPANSION_FACTOR = 10
_EXPANSION_FLOOR = 100_000


def load_yaml(path: str | os.PathLike[str]) -> Any:
    source = os.fspath(path)
    try:
        text = read_regular(source, YAML_LIMIT).decode("utf-8", errors="replace")
    except OSError as exc:
        raise InputError(source, f"cannot read ({exc.strerror or exc})") from None
    return load_yaml_text(text, source)


def load_yaml_text(text: str, source: str, first_line: int = 1) -> Any:
    """Parse one YAML document; ``first_line`` is the line ``text`` starts at in ``source``."""
    try:
        _check_depth(text, source, first_line)
        data = yaml.load(text, Loader=_Loader)
    except yaml.YAMLError as exc:
        raise InputError(source, f"bad YAML: {_describe(exc)}", _line(exc, first_line)) from None
    except (ValueError, TypeError, OverflowError) as exc:  # e.g. a timestamp out of range
        raise InputError(source, f"bad YAML value: {_value_error(exc)}", None) from None
    except RecursionError:  # not expected below MAX_DEPTH; never a traceback all the same
        raise InputError(source, "bad YAML: nested too deeply", None) from None
    if _ANCHOR.search(text):
        _check_expansion(data, source, first_line)
    return data


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


def _check_depth(text: str, source: str, first_line: int) -> None:
    if text.count("[") + text.count("{") < _CHEAP and not _DEEP_INDENT.search(text) and not _COMPACT.search(text):
        return
    depth = 0
    try:
        for event in yaml.parse(text, Loader=_Loader):
            if isinstance(event, yaml.CollectionStartEvent):
                depth += 1
                if depth > MAX_DEPTH:
                    where = str(event.start_mark.line + first_line) if event.start_mark is not None else None
                    raise _too_deep(source, where)
            elif isinstance(event, yaml.CollectionEndEvent):
                depth -= 1
    except yaml.YAMLError as exc:
        # libyaml 0.2.6 (PyYAML 6.0.4's wheels) refuses flow nesting past 1,000 itself, while its scanner
        # reads ahead of the events counted here: the same refusal, in this module's words.
        if "nesting depth" not in _describe(exc):
            raise
        raise _too_deep(source, _line(exc, first_line)) from None


def _too_deep(source: str, where: str | None) -> InputError:
    return InputError(source, f"nested more than {MAX_DEPTH} levels deep; not read", where)


def _check_expansion(data: Any, source: str, first_line: int) -> None:
    """Refuse a value whose aliases expand it more than tenfold, or that contains itself."""
    sizes: dict[int, int] = {}  # id -> expanded size, of every collection done
    open_: set[int] = set()  # collections being counted (a child among them is a cycle)
    unique = 0  # values with each shared collection counted once
    stack: list[Any] = [data]
    while stack:
        node = stack[-1]
        if not isinstance(node, (list, dict)) or id(node) in sizes:
            stack.pop()
            continue
        children = [*node.keys(), *node.values()] if isinstance(node, dict) else node
        if id(node) not in open_:
            open_.add(id(node))
            for child in children:
                if isinstance(child, (list, dict)) and id(child) not in sizes:
                    if id(child) in open_:
                        raise InputError(source, "a YAML value that contains itself (an alias cycle); not read")
                    stack.append(child)
            continue
        open_.discard(id(node))
        size = 1
        for child in children:
            if isinstance(child, (list, dict)):
                size += sizes[id(child)]
            else:
                size += 1
                unique += 1
        sizes[id(node)] = size
        unique += 1
        stack.pop()
    total = sizes.get(id(data), 1)
    if total > max(_EXPANSION_FACTOR * unique, _EXPANSION_FLOOR):
        raise InputError(source, f"aliases expand the document to {total:,} values (from {unique:,}); not read")


def _value_error(exc: Exception) -> str:
    if "integer string conversion" in str(exc):
        return "an integer of more than 4,300 digits"
    return str(exc).splitlines()[0] if str(exc) else type(exc).__name__


def _describe(exc: yaml.YAMLError) -> str:
    problem = getattr(exc, "problem", None)
    context = getattr(exc, "context", None)
    text = " ".join(str(p) for p in (context, problem) if p) or str(exc).splitlines()[0]
    return text.strip()


def _line(exc: yaml.YAMLError, first_line: int) -> str | None:
    mark = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
    return str(mark.line + first_line) if mark is not None else None
