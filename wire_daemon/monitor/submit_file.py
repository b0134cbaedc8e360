"""Read an HTCondor submit description (a node's ``.sub`` file) as Pegasus writes it.

Syntax read: ``key = value`` commands (keys case-insensitive, kept raw: no
``$(macro)`` expansion), ClassAd attributes as ``+Name = value`` or
``MY.Name = value`` (quoted strings unquoted; integers, reals and booleans
converted; anything else kept as the expression text), ``#`` comments,
trailing-backslash continuation lines, and the ``queue`` statement. A line
that is none of these gives one warning naming file:line and is skipped; an
unreadable file gives one warning and ``None``.

The Pegasus attributes the daemon uses are exposed as properties
(``xformation``, ``job_class``, ``dag_job_id``, ``dax_job_id``, ``site``).
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from wire_daemon.monitor.problems import Limited, Problems
from wire_daemon.monitor.safe_open import SUBMIT_FILE_LIMIT, read_regular

_ATTRIBUTE = re.compile(r"^(?:\+|MY\.)([A-Za-z_][\w.]*)\s*=\s*(.*)$", re.IGNORECASE)
_COMMAND = re.compile(r"^([A-Za-z_][\w.+-]*)\s*=\s*(.*)$")
_QUEUE = re.compile(r"^queue\b\s*(.*)$", re.IGNORECASE)
_MACRO = re.compile(r"\$\(([A-Za-z_][\w.]*)\)")
_ESCAPE = re.compile(r"\\(.)")  # a ClassAd string's \" and \\
_MEMORY = re.compile(r"^\s*(\d+(?:\.\d*)?)\s*([KMGT]?)B?\s*$", re.IGNORECASE)
_MEMORY_UNITS = {"": 1.0, "K": 1.0 / 1024, "M": 1.0, "G": 1024.0, "T": 1024.0 * 1024}

# Pegasus job classes (+pegasus_job_class), as the planner numbers them.
JOB_CLASSES = {
    0: "unassigned",
    1: "compute",
    2: "stage_in",
    3: "stage_out",
    4: "register",
    5: "inter_site",
    6: "create_dir",
    7: "staged_compute",
    8: "cleanup",
    9: "chmod",
    10: "sub_workflow",
    11: "dagman",
}


@dataclass(frozen=True)
class SubmitFile:
    path: str
    commands: dict[str, str] = field(default_factory=dict)  # lower-case key -> raw value
    attributes: dict[str, Any] = field(default_factory=dict)  # ClassAd attribute (lower-case) -> value
    queue: str | None = None  # arguments of the queue statement ("" for a bare ``queue``)

    def get(self, key: str) -> str | None:
        return self.commands.get(key.lower())

    @property
    def universe(self) -> str:
        return (self.get("universe") or "vanilla").strip().lower()

    @property
    def executable(self) -> str | None:
        return self.get("executable")

    @property
    def arguments(self) -> str | None:
        value = self.get("arguments")
        return _unquote(value) if value is not None else None

    @property
    def log(self) -> str | None:
        return self.get("log")

    @property
    def output(self) -> str | None:
        return self.get("output")

    @property
    def initialdir(self) -> str | None:
        return self.get("initialdir")

    @property
    def priority(self) -> int | None:
        return _to_int(self.get("priority"))

    @property
    def request_memory_mib(self) -> float | None:
        """``request_memory`` in MiB (HTCondor's default unit); None if absent or an expression."""
        return _memory_mib(self.get("request_memory"))

    @property
    def xformation(self) -> str | None:
        return _text(self.attributes.get("pegasus_wf_xformation"))

    @property
    def job_class(self) -> int | None:
        value = self.attributes.get("pegasus_job_class")
        return value if isinstance(value, int) and not isinstance(value, bool) else None

    @property
    def dag_job_id(self) -> str | None:
        return _text(self.attributes.get("pegasus_wf_dag_job_id"))

    @property
    def dax_job_id(self) -> str | None:
        value = _text(self.attributes.get("pegasus_wf_dax_job_id"))
        return None if value in (None, "null") else value

    @property
    def site(self) -> str | None:
        return _text(self.attributes.get("pegasus_site"))


def parse_submit_file(path: str | os.PathLike[str], problems: Problems | None = None) -> SubmitFile | None:
    problems = problems or Problems()
    source = os.fspath(path)
    try:
        text = read_regular(source, SUBMIT_FILE_LIMIT).decode("utf-8", errors="replace")
    except OSError as exc:
        problems.warn(source, f"cannot read the submit file ({exc.strerror or exc})")
        return None
    return parse_submit_text(text, source, problems)


def parse_submit_text(text: str, source: str, problems: Problems) -> SubmitFile:
    with Limited(problems) as limited:  # a file of a million bad lines: 100 warnings and a count
        return _parse_submit_text(text, source, limited)


def _parse_submit_text(text: str, source: str, problems: Problems) -> SubmitFile:
    commands: dict[str, str] = {}
    attributes: dict[str, Any] = {}
    queue: str | None = None
    for number, line in _logical_lines(text):
        attribute = _ATTRIBUTE.match(line)
        if attribute:
            attributes[attribute.group(1).lower()] = classad_value(attribute.group(2))
            continue
        queued = _QUEUE.match(line)
        if queued and "=" not in line.split(None, 1)[0]:
            queue = queued.group(1).strip()
            continue
        command = _COMMAND.match(line)
        if command:
            commands[command.group(1).lower()] = command.group(2).strip()
            continue
        problems.warn(source, f"not a submit command: {line[:60]!r}; skipped", number)
    return SubmitFile(source, commands, attributes, queue)


def expand_macros(text: str, macros: Mapping[str, str]) -> str:
    """``$(NAME)`` replaced by ``macros[NAME]`` (names case-insensitive, as HTCondor's); others kept.

    DAGMan passes a node's ``VARS`` (and ``JOB``, the node name) to its submit
    file as macros, so one ``.sub`` can serve many nodes.
    """
    lowered = {k.lower(): v for k, v in macros.items()}
    return _MACRO.sub(lambda m: lowered.get(m.group(1).lower(), m.group(0)), text)


def classad_value(text: str) -> Any:
    """A literal ClassAd value as Python (string, int, float, bool); other expressions as text.

    Numbers HTCondor could not hold stay text: an integer beyond 64 bits, a real that is not finite."""
    text = text.strip()
    if len(text) >= 2 and text[0] == text[-1] == '"':
        return _ESCAPE.sub(r"\1", text[1:-1])
    lowered = text.lower()
    if lowered in ("true", "false"):
        return lowered == "true"
    number = _to_int(text)
    if number is not None:
        return number if -(2**63) <= number < 2**63 else text
    try:
        real = float(text)
    except ValueError:
        return text
    return real if math.isfinite(real) else text


def _logical_lines(text: str) -> list[tuple[int, str]]:
    out: list[tuple[int, str]] = []
    physical = text.splitlines()
    i = 0
    while i < len(physical):
        number = i + 1
        line = physical[i].strip()
        i += 1
        if not line or line.startswith("#"):
            continue
        while line.endswith("\\") and i < len(physical):
            line = line[:-1].rstrip() + " " + physical[i].strip()
            i += 1
        out.append((number, line))
    return out


def _memory_mib(value: str | None) -> float | None:
    match = _MEMORY.match(value) if value else None
    if not match:
        return None
    mib = float(match.group(1)) * _MEMORY_UNITS[match.group(2).upper()]
    return mib if math.isfinite(mib) else None


def _to_int(value: str | None) -> int | None:
    if value is None:
        return None
    try:
        return int(value.strip())
    except ValueError:
        return None


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None


def _unquote(text: str) -> str:
    text = text.strip()
    if len(text) >= 2 and text[0] == text[-1] == '"':
        return text[1:-1]
    return text
