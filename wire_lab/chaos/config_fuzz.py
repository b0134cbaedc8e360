"""Fuzz the daemon's config file reader (``runtime.settings.load_settings``) with Hypothesis.

    python -m wire_lab.chaos.config_fuzz --examples 10000 [--seed 14] [--json]

Inputs, drawn in equal shares (deep nesting in one input in ten):

* random YAML: documents of random scalars, lists and mappings (keys from the
  real config's and random ones), written back with ``yaml.safe_dump``;
* mutated valid configs: the example configs in ``docs/`` parsed, one to
  three values replaced by hostile ones (NaN, inf, 10**400, negative, huge
  strings, deep lists, wrong types) or keys added, written back;
* mangled bytes: an example config with byte flips, deletions, truncations
  and insertions (NUL, Latin-1, a BOM, tabs, YAML aliases, long lines);
* deep nesting: flow or block nesting thousands deep, and huge numbers.

Each input is read in a forked child. The property: ``load_settings`` returns
settings or raises the project's error type (``WireError``) naming the file;
anything else is "foreign", a signal a "death", still reading after
``HANG_S`` a "hang". The report counts them and names the slowest input.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import select
import signal
import sys
import tempfile
import time
import traceback
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import yaml
from hypothesis import HealthCheck, given, seed, settings
from hypothesis import strategies as st

from wire_lab.chaos.mutations import mangled_bytes, value_slots

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
SEEDS = ("config.example.yaml", "submit-host.example.yaml", "openstack.example.yaml")
HANG_S = 30.0
KEYS = [
    "site", "cloud", "condor", "prediction", "steering", "emulation", "safety", "policy", "pfa", "state_path",
    "log", "metrics", "scale_to_zero_on_exit", "kind", "submit_root", "ec2", "worker", "interval_s",
    "max_instances", "charging_unit_s", "slots_per_instance", "dry_run", "region", "endpoint_url",
]  # fmt: skip


@dataclass(frozen=True)
class Outcome:
    status: str  # ok | error | foreign | death | hang
    detail: str = ""
    seconds: float = 0.0

    @property
    def failed(self) -> bool:
        return self.status not in ("ok", "error")


def read_config(path: Path) -> Outcome:
    """``load_settings`` on one file, in this process: ok, the project's error, or foreign."""
    from wire_daemon.core.errors import WireError
    from wire_daemon.runtime.settings import load_settings

    start = time.perf_counter()
    try:
        load_settings(path)
    except WireError as exc:
        seconds = time.perf_counter() - start
        if not str(exc).startswith(str(path)):
            return Outcome("foreign", f"error does not name the file: {str(exc)[:200]}", seconds)
        return Outcome("error", str(exc)[:200], seconds)
    except BaseException as exc:  # noqa: BLE001 -- what the fuzzing looks for
        detail = "".join(traceback.format_exception_only(exc)).strip()[:300]
        return Outcome("foreign", detail, time.perf_counter() - start)
    return Outcome("ok", "", time.perf_counter() - start)


def check(data: bytes) -> Outcome:
    """``read_config`` on ``data`` in a forked child: its crash or hang is an outcome, not ours."""
    directory = Path(tempfile.mkdtemp(prefix="wire-cfgfuzz-"))
    path = directory / "wire-daemon.yaml"
    path.write_bytes(data)
    read_fd, write_fd = os.pipe()
    started = time.perf_counter()
    pid = os.fork()
    if pid == 0:  # the child
        os.close(read_fd)
        try:
            os.write(write_fd, json.dumps(asdict(read_config(path))).encode())
        finally:
            os._exit(0)
    os.close(write_fd)
    try:
        return _collect(pid, read_fd, started)
    finally:
        path.unlink()
        directory.rmdir()


def _collect(pid: int, fd: int, started: float) -> Outcome:
    chunks: list[bytes] = []
    deadline = time.monotonic() + HANG_S
    with os.fdopen(fd, "rb", buffering=0) as pipe:
        while True:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([pipe], [], [], left)[0]:
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
                return Outcome("hang", f"still reading after {HANG_S:g} s", time.perf_counter() - started)
            chunk = pipe.read(1 << 16)
            if not chunk:
                break
            chunks.append(chunk)
    _, status = os.waitpid(pid, 0)
    if os.WIFSIGNALED(status):
        name = signal.Signals(os.WTERMSIG(status)).name
        return Outcome("death", f"the reader's process died ({name})", time.perf_counter() - started)
    if not chunks:
        return Outcome("death", f"the reader's process exited with status {os.WEXITSTATUS(status)}")
    return Outcome(**json.loads(b"".join(chunks)))


# -- inputs -------------------------------------------------------------------------------


def seed_texts() -> list[bytes]:
    return [(DOCS / name).read_bytes() for name in SEEDS if (DOCS / name).exists()]


def _nested(depth: int) -> Any:
    value: Any = []
    for _ in range(depth):
        value = [value]
    return value


HOSTILE: list[Any] = [
    float("nan"), float("inf"), float("-inf"), -1, -0.5, 0, 10**30, 10**400, -(10**400), 2**63, 1e308,
    "", "x" * 10_000, "9" * 5000, "\x00", "é", None, True, [], {}, [1, 2], {"a": 1}, _nested(200),
    {"kind": _nested(50)}, "ec2", "condor", "emulated",
]  # fmt: skip
JUNK = [
    b"\x00", b"\xe9", b"\xef\xbb\xbf", b"\xff\xfe", b"\t", b"\n", b": ", b"- ", b"&a ", b"*a", b"!!python/object ",
    b"!!binary ", b"nan", b".inf", b"-1", b"9" * 400, b"[" * 400, b"{a: " * 200, b"x" * 5000, b"---\n", b"%YAML 1.1\n",
]  # fmt: skip


@st.composite
def random_yaml(draw: st.DrawFn) -> bytes:
    scalars = (
        st.none()
        | st.booleans()
        | st.integers(min_value=-(10**30), max_value=10**30)
        | st.floats(allow_nan=True, allow_infinity=True)
        | st.text(max_size=30)
    )
    keys = st.sampled_from(KEYS) | st.text(min_size=1, max_size=12)
    doc = draw(
        st.recursive(
            scalars, lambda inner: st.lists(inner, max_size=4) | st.dictionaries(keys, inner, max_size=5), max_leaves=25
        )
    )
    return yaml.safe_dump(doc, allow_unicode=True).encode("utf-8", "surrogatepass")


@st.composite
def mutated_config(draw: st.DrawFn, docs: list[Any]) -> bytes:
    doc = copy.deepcopy(draw(st.sampled_from(docs)))
    for _ in range(draw(st.integers(1, 3))):
        slots = value_slots(doc)
        container, key = draw(st.sampled_from(slots))
        if isinstance(container, dict) and draw(st.booleans()):
            container[draw(st.sampled_from(KEYS))] = copy.deepcopy(draw(st.sampled_from(HOSTILE)))
        else:
            container[key] = copy.deepcopy(draw(st.sampled_from(HOSTILE)))
    return yaml.safe_dump(doc, allow_unicode=True, width=10_000).encode()


def mangled_config(texts: list[bytes]) -> st.SearchStrategy[bytes]:
    return mangled_bytes(texts, JUNK, random_junk_max=16)


@st.composite
def deep_or_huge(draw: st.DrawFn) -> bytes:
    depth = draw(st.sampled_from([100, 1000, 3000, 10_000]))  # 50,000 deep: a regression example
    key = draw(st.sampled_from(["steering", "cloud", "site", "safety", "log"]))
    kind = draw(st.sampled_from(["flow-list", "flow-map", "block", "number", "alias"]))
    if kind == "flow-list":
        return f"{key}: ".encode() + b"[" * depth + b"]" * depth + b"\n"
    if kind == "flow-map":
        return f"{key}: ".encode() + b"{a: " * depth + b"}" * depth + b"\n"
    if kind == "block":
        return "".join(f"{' ' * i}k{i}:\n" for i in range(min(depth, 3000))).encode()
    if kind == "number":
        return f"steering: {{interval_s: {'9' * min(depth, 20_000)}, max_instances: 1e{depth}}}\n".encode()
    return b"a: &a [" + b"*a, " * min(depth, 2000) + b"1]\nsteering: *a\n"


def weighted(texts: list[bytes], docs: list[Any]) -> st.SearchStrategy[bytes]:
    """Deep nesting is slow to parse: one input in ten, the rest split between the other three."""
    common = st.one_of(random_yaml(), mutated_config(docs), mangled_config(texts))
    return st.integers(0, 9).flatmap(lambda k: deep_or_huge() if k == 0 else common)


def seed_docs(texts: list[bytes]) -> list[Any]:
    return [d for d in (yaml.safe_load(t) for t in texts) if isinstance(d, dict)]


REGRESSIONS = [
    b"steering: {interval_s: 2}\n# caf\xe9\n",  # one Latin-1 byte (issue 14)
    b"steering: " + b"[" * 50_000 + b"]" * 50_000 + b"\n",  # libyaml's deep flow nesting
    b"steering: {max_instances: " + b"9" * 5000 + b"}\n",  # an over-long integer
    b"steering: {interval_s: 1e999}\n",
    b"steering: {interval_s: .nan}\n",
    b"\xef\xbb\xbfsteering: {interval_s: 2}\n",
    b"",
]


# -- the tally ------------------------------------------------------------------------------


@dataclass
class Tally:
    inputs: int = 0
    counts: dict[str, int] = field(default_factory=dict)
    slowest_s: float = 0.0
    slowest_gave: str = ""
    slowest_input: str = ""
    failures: list[str] = field(default_factory=list)
    wall_s: float = 0.0

    def add(self, data: bytes, outcome: Outcome) -> None:
        self.inputs += 1
        self.counts[outcome.status] = self.counts.get(outcome.status, 0) + 1
        if outcome.seconds > self.slowest_s:
            self.slowest_s, self.slowest_gave = outcome.seconds, outcome.status
            self.slowest_input = f"{len(data):,} bytes: {data[:120]!r}"
        if outcome.failed and len(self.failures) < 10:
            self.failures.append(f"{outcome.status}: {outcome.detail} on {data[:200]!r}")

    @property
    def failed(self) -> int:
        return sum(self.counts.get(k, 0) for k in ("foreign", "death", "hang"))

    def row(self) -> dict[str, Any]:
        row = asdict(self)
        row.update({k: self.counts.get(k, 0) for k in ("ok", "error", "foreign", "death", "hang")})
        return row


def fuzz(examples: int, rng_seed: int = 14) -> Tally:
    import wire_daemon.runtime.settings  # noqa: F401 -- imported once here, not in every forked child

    texts = seed_texts()
    docs = seed_docs(texts)
    tally = Tally()
    start = time.perf_counter()

    def record(data: bytes) -> None:
        tally.add(data, check(data))

    for case in REGRESSIONS:
        record(case)
    options = settings(max_examples=examples, deadline=None, database=None, suppress_health_check=list(HealthCheck))
    seed(rng_seed)(options(given(weighted(texts, docs))(record)))()
    tally.wall_s = time.perf_counter() - start
    return tally


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--examples", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=14)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    tally = fuzz(args.examples, args.seed)
    row = tally.row()
    if args.json:
        print(json.dumps(row, indent=2))
    else:
        print(
            f"config: {tally.inputs:,} inputs, ok {row['ok']:,}, own error {row['error']:,}, foreign {row['foreign']}, "
            f"deaths {row['death']}, hangs {row['hang']}; slowest {tally.slowest_s * 1000:.1f} ms "
            f"({tally.slowest_gave}) on {tally.slowest_input}"
        )
        for failure in tally.failures:
            print("FAILED", failure)
    return 1 if tally.failed else 0


if __name__ == "__main__":
    sys.exit(main())
