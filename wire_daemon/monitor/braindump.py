"""Read a Pegasus ``braindump.yml`` (or the older ``braindump.txt``).

The braindump names the workflow (``wf_uuid``, ``root_wf_uuid``,
``pegasus_wf_name``), its files relative to the submit directory (``dag``,
``condor_log``, ``jsd`` = jobstate.log, ``dax`` = the abstract workflow) and
where it was planned (``submit_dir``, an absolute path on the planning host).
A braindump that cannot be read raises ``InputError`` naming the file (and the
line, for YAML errors: a document nested too deeply or whose aliases expand it
is one, see ``yamlio``); a missing key is ``None``, and so is a value that is
not a single string or number (a list or a mapping where a path belongs).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from wire_daemon.core.errors import InputError
from wire_daemon.monitor.safe_open import BRAINDUMP_LIMIT, read_regular
from wire_daemon.monitor.yamlio import load_yaml

BRAINDUMP_NAMES = ("braindump.yml", "braindump.txt")


@dataclass(frozen=True)
class Braindump:
    path: str
    values: dict[str, Any] = field(default_factory=dict)

    def _get(self, key: str) -> str | None:
        value = self.values.get(key)
        if value is None or isinstance(value, (dict, list, set, tuple)):
            return None
        return str(value)

    @property
    def wf_uuid(self) -> str | None:
        return self._get("wf_uuid")

    @property
    def root_wf_uuid(self) -> str | None:
        return self._get("root_wf_uuid")

    @property
    def dax_label(self) -> str | None:
        return self._get("dax_label")

    @property
    def wf_name(self) -> str | None:
        return self._get("pegasus_wf_name")

    @property
    def dag(self) -> str | None:
        return self._get("dag")

    @property
    def submit_dir(self) -> str | None:
        return self._get("submit_dir")

    @property
    def condor_log(self) -> str | None:
        return self._get("condor_log")

    @property
    def jobstate_log(self) -> str | None:
        return self._get("jsd")

    @property
    def dax(self) -> str | None:
        return self._get("dax")

    @property
    def planner_version(self) -> str | None:
        return self._get("planner_version")

    @property
    def is_root(self) -> bool:
        return self.wf_uuid is not None and self.wf_uuid == self.root_wf_uuid


def find_braindump(submit_dir: str | os.PathLike[str]) -> Path | None:
    for name in BRAINDUMP_NAMES:
        candidate = Path(submit_dir) / name
        if candidate.is_file():
            return candidate
    return None


def read_braindump(path: str | os.PathLike[str]) -> Braindump:
    source = os.fspath(path)
    if source.endswith(".txt"):
        return Braindump(source, _read_text_pairs(source))
    data = load_yaml(source)
    if not isinstance(data, dict):
        raise InputError(source, "a braindump must be a mapping of keys to values")
    return Braindump(source, {str(k): v for k, v in data.items()})


def _read_text_pairs(source: str) -> dict[str, Any]:
    try:
        text = read_regular(source, BRAINDUMP_LIMIT).decode("utf-8", errors="replace")
    except OSError as exc:
        raise InputError(source, f"cannot read ({exc.strerror or exc})") from None
    values: dict[str, Any] = {}
    for line in text.splitlines():
        key, _, value = line.strip().partition(" ")
        if key and not key.startswith("#"):
            values[key] = value.strip().strip('"')
    return values
