"""Run the daemon's real-pool test once per HTCondor series: each Debian suite's HTCondor, with bindings of its series.

Usage (as root, from the repository; each suite's chroot is built once, about 3 minutes):

    .venv/bin/python benchmarks/realpool_series.py [SUITE ...] [--test PATH] [--json]

SUITE defaults to ``trixie sid``: Debian trixie packages HTCondor 23.x, sid
25.x. For each suite it builds (or reuses) the chroot, reads the HTCondor
version the chroot holds, installs the bindings of that series (the README's
install rule, ``bindings_requirement``) into a cached directory put first on
PYTHONPATH, and runs ``tests/realpool/test_daemon_on_pool.py`` against that
pool (``WIRE_REALPOOL_SUITE``). The daemon the test starts inherits the same
bindings. It prints one line per series: the suite, the server's and the
bindings' versions, pytest's result and the time taken; it exits non-zero if
any series failed. Each series' pytest output is kept as
``$WIRE_REALPOOL_WORKDIR/series-SUITE.log`` (default /var/tmp/wire-realpool).
The suites run one after the other: they bind the same loopback addresses.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from wire_lab.realpool.chroot import ChrootSpec, bindings_requirement, ensure_chroot, stamp_info
from wire_lab.realpool.errors import RealPoolError

DEFAULT_SUITES = ("trixie", "sid")
DEFAULT_TEST = "tests/realpool/test_daemon_on_pool.py"
TEST_TIMEOUT_S = 3600.0


@dataclass
class SeriesResult:
    suite: str
    server: str
    bindings: str
    requirement: str
    outcome: str  # pytest's closing counts, or what stopped the run
    passed: bool
    duration_s: float


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("suites", nargs="*", default=list(DEFAULT_SUITES), help="Debian suites (default: trixie sid)")
    parser.add_argument("--test", default=DEFAULT_TEST, help=f"the pytest target per series (default {DEFAULT_TEST})")
    parser.add_argument("--json", action="store_true", help="print one JSON object per series")
    return parser.parse_args()


def run_series(suite: str, test: str) -> SeriesResult:
    started = time.monotonic()
    spec = ChrootSpec.from_env()
    spec = ChrootSpec(cache_dir=spec.cache_dir, suite=suite, packages=spec.packages, mirror=spec.mirror)
    try:
        root = ensure_chroot(spec)
        server_line = stamp_info(root).get("condor_version", "")
        requirement = bindings_requirement(server_line)
        bindings_dir = install_bindings(spec.cache_dir, requirement)
    except RealPoolError as exc:
        return SeriesResult(suite, "?", "?", "?", f"setup failed: {exc}", False, time.monotonic() - started)
    env = os.environ | {
        "WIRE_REALPOOL_SUITE": suite,
        "PYTHONPATH": os.pathsep.join(filter(None, [str(bindings_dir), str(REPO), os.environ.get("PYTHONPATH")])),
    }
    bindings = _bindings_version(env)
    argv = [sys.executable, "-m", "pytest", test, "-p", "no:cacheprovider", "-o", "addopts="]
    try:
        done = subprocess.run(argv, cwd=REPO, env=env, capture_output=True, text=True, timeout=TEST_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        outcome, passed = f"timed out after {TEST_TIMEOUT_S:.0f} s", False
    else:
        _keep_log(suite, done.stdout + done.stderr)
        outcome, passed = _outcome(done.stdout), done.returncode == 0
    return SeriesResult(
        suite, _version(server_line), bindings, requirement, outcome, passed, time.monotonic() - started
    )


def install_bindings(cache_dir: Path, requirement: str) -> Path:
    """The bindings of one series in their own directory, installed once: pip --target, no other package."""
    name = re.sub(r"[^A-Za-z0-9.]+", "_", requirement)
    target = cache_dir / "bindings" / name
    if (target / "htcondor2").is_dir():
        return target
    partial = target.with_name(name + ".partial")
    subprocess.run(["rm", "-rf", str(partial)], check=True)
    argv = [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--target", str(partial), requirement]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=900)
    if done.returncode != 0:
        raise RealPoolError(f"pip install {requirement}: {_last_line(done.stderr)}")
    partial.rename(target)
    return target


def _bindings_version(env: dict[str, str]) -> str:
    probe = "import htcondor2; print(htcondor2.version().split()[1])"
    done = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True, timeout=120)
    return done.stdout.strip() or f"unimportable ({_last_line(done.stderr)})"


def _outcome(stdout: str) -> str:
    # pytest's closing line, e.g. "===== 9 passed in 312.40s (0:05:12) =====".
    for line in reversed(stdout.splitlines()):
        if re.search(r"\d+ (passed|failed|error|errors|skipped)", line):
            return line.strip("= ").strip()
    return _last_line(stdout) or "no pytest summary"


def _keep_log(suite: str, text: str) -> None:
    workdir = Path(os.environ.get("WIRE_REALPOOL_WORKDIR", "/var/tmp/wire-realpool"))
    workdir.mkdir(parents=True, exist_ok=True)
    (workdir / f"series-{suite}.log").write_text(text)


def _version(condor_version: str) -> str:
    match = re.search(r"\d+\.\d+\.\d+", condor_version)
    return match.group(0) if match else "?"


def _last_line(text: str) -> str:
    lines = [line for line in text.strip().splitlines() if line.strip()]
    return lines[-1] if lines else ""


def main() -> int:
    args = parse_args()
    if os.geteuid() != 0:
        print("realpool_series: needs root (debootstrap, chroot, mount namespaces)", file=sys.stderr)
        return 2
    failed = 0
    for suite in args.suites:
        result = run_series(suite, args.test)
        failed += not result.passed
        if args.json:
            print(json.dumps(asdict(result)), flush=True)
        else:
            print(
                f"{result.suite:<8} server {result.server:<8} bindings {result.bindings:<9} "
                f"({result.requirement}): {result.outcome} [{result.duration_s:.0f} s]",
                flush=True,
            )
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
