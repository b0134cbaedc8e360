"""The executable every job of a trace-made submit dir runs: a stand-in for pegasus-kickstart + the task.

It sleeps the trace's runtime (already multiplied by the time scale) and then
prints to stdout a Pegasus 5 (kickstart 3.0) YAML invocation record. HTCondor
brings stdout back as the job's ``<job>.out``, where wire-daemon's monitor
looks for the record of a finished job: it takes the executable's own
duration (``mainjob.duration``), the input bytes (files flagged ``input``) and
the peak memory (``mainjob.usage.maxrss``) from it. A second script stands in
for Pegasus' POST script ``pegasus-exitcode``.

**Why /bin/sh and not Python.** The jobs run inside a minimal Debian trixie
chroot (debootstrap minbase plus HTCondor). python3 is there today only as a
dependency of the condor package, which nobody here controls, whereas
``/bin/sh`` (dash), coreutils (``date``, ``sleep``, ``uname``; ``head`` and ``dd`` for ``-M``), ``sed`` and
``grep`` are Essential packages, present in every Debian system. A shell
script also starts in a millisecond (an interpreter takes tens, per job, on
every slot), so the measured duration is the sleep, not a start-up. The record is plain text the script can
``printf``; the values that could break YAML or the shell (the transformation
and file names) are checked on the Python side (``EmulatedTask.argv``).

The emulator (``wire-task-emulator.sh``)::

    wire-task-emulator.sh -n TRANSFORMATION -N DAX_ID -R SITE -s SECONDS
                          [-m MAXRSS_KIB] [-M HOLD_MIB] [-F FAILED_ATTEMPTS] [-i LFN=BYTES]... [-o LFN=BYTES]...

* ``-s``: seconds to sleep (GNU ``sleep`` takes fractions);
* ``-m``: the task's peak memory from the trace, reported as kickstart's
  ``maxrss`` (KiB, as Linux reports it): the sleep itself uses ~2 MiB, the task
  it stands for used this much;
* ``-M``: really hold this many MiB of memory for the whole sleep, so that
  HTCondor measures it (the job's ResidentSetSize): ``head -c`` writes that
  many zero bytes into a pipe that ``dd`` reads into one buffer a MiB larger
  (``iflag=fullblock``: it waits for the rest), while the sleep keeps the pipe
  open; at the end of the sleep dd gets EOF and exits. Only the pages written
  are resident, so the job's RSS is HOLD_MIB plus a few MiB, the same on
  every run. Coreutils only, as for the rest;
* ``-F N``: the first N DAGMan attempts fail (exit 1), to exercise retries. The
  attempt is ``DAGNodeRetry`` from the job ad (``$_CONDOR_JOB_AD``, which the
  starter writes; the DAG sets it with ``VARS node +DAGNodeRetry="$(RETRY)"``,
  as Pegasus does); without a job ad the attempt is 0;
* ``-i`` / ``-o``: input / output files and their sizes, listed in the record
  (outputs only when the task succeeded, as kickstart stats them at the end).
  No data is read or written: sizes come from the trace.

Times: ``date +%s%N`` (GNU) in nanoseconds, 64-bit shell arithmetic; where
``%N`` is not supported the duration falls back to whole seconds.

The POST script (``wire-exitcode.sh -r $RETURN OUTFILE``) does what
pegasus-exitcode does that the monitor relies on: it renames ``<job>.out`` /
``<job>.err`` to the next free ``.out.NNN`` / ``.err.NNN`` (so each attempt's
record is kept; the monitor reads the k-th ended attempt's record from
``.out.<k>``), fails when the ``.out`` is missing, and fails the node unless
the job returned 0 and its record holds ``raw: 0``.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

EMULATOR_NAME = "wire-task-emulator.sh"
EXITCODE_NAME = "wire-exitcode.sh"

# Characters a transformation or file name may hold: they go unescaped into a YAML
# double-quoted scalar and a shell variable. No quote, backslash or control character.
_RECORD_SAFE = re.compile(r"^[^\"\\\x00-\x1f\x7f]+$")

EMULATOR_SH = r"""#!/bin/sh
# wire-lab task emulator: sleeps a trace task's runtime, then prints a Pegasus 5
# kickstart YAML record on stdout (see wire_lab/realpool/task_emulator.py).
set -u
PATH=${PATH:-/usr/bin:/bin}  # HTCondor gives a job no PATH unless its submit file does
export PATH
started_ns=$(date +%s%N)
xform=unknown daxid=null site=local seconds=0 maxrss= hold= failing=0 inputs= outputs=
nl='
'
while getopts n:N:R:s:m:M:F:i:o: opt; do
  case $opt in
    n) xform=$OPTARG ;;
    N) daxid=$OPTARG ;;
    R) site=$OPTARG ;;
    s) seconds=$OPTARG ;;
    m) maxrss=$OPTARG ;;
    M) hold=$OPTARG ;;
    F) failing=$OPTARG ;;
    i) inputs="$inputs$OPTARG$nl" ;;
    o) outputs="$outputs$OPTARG$nl" ;;
    *) echo "usage: $0 -n XFORM -N DAXID -R SITE -s SECONDS [-m KIB] [-M MIB] [-F N]" \
            "[-i LFN=BYTES]... [-o LFN=BYTES]..." >&2
       exit 64 ;;
  esac
done

now_ns() {  # nanoseconds since the epoch; whole seconds where date has no %N
  t=$(date +%s%N)
  case $t in *[!0-9]*|'') t=$(( $(date +%s) * 1000000000 )) ;; esac
  echo "$t"
}
case $started_ns in *[!0-9]*|'') started_ns=$(now_ns) ;; esac
seconds_of() { printf '%d.%03d' $(( $1 / 1000000000 )) $(( $1 / 1000000 % 1000 )); }
iso_now() { date +%Y-%m-%dT%H:%M:%S.%3N%:z; }

attempt=0  # DAGMan's retry number of this node, from the job ad
if [ -n "${_CONDOR_JOB_AD:-}" ] && [ -r "$_CONDOR_JOB_AD" ]; then
  found=$(sed -n 's/^DAGNodeRetry *= *"\{0,1\}\([0-9][0-9]*\)"\{0,1\} *$/\1/p' "$_CONDOR_JOB_AD" | head -n 1)
  [ -n "$found" ] && attempt=$found
fi
code=0
[ "$attempt" -lt "$failing" ] && code=1

main_iso=$(iso_now)
main_ns=$(now_ns)
if [ -n "$hold" ]; then  # dd holds the bytes in its buffer until the sleep closes the pipe
  { head -c "${hold}M" /dev/zero; sleep "$seconds"; } |
    dd bs="$(( hold + 1 ))M" count=1 iflag=fullblock of=/dev/null status=none
else
  sleep "$seconds"
fi
ended_ns=$(now_ns)
main_s=$(seconds_of $(( ended_ns - main_ns )))
total_s=$(seconds_of $(( ended_ns - started_ns )))
host=$(uname -n)

files() {  # $1: LFN=BYTES lines; $2: input | output
  printf '%s' "$1" | while IFS= read -r entry; do
    [ -n "$entry" ] || continue
    printf '    "%s":\n      lfn: "%s"\n      size: %s\n      %s: True\n' \
      "${entry%=*}" "${entry%=*}" "${entry##*=}" "$2"
  done
}

{
  printf '%s\n' '- invocation: True' '  version: 3.0'
  printf '  start: %s\n  duration: %s\n' "$main_iso" "$total_s"
  printf '  transformation: "%s"\n  derivation: "%s"\n  resource: "%s"\n' "$xform" "$daxid" "$site"
  printf '  wf-label: "%s"\n  hostname: %s\n  pid: %s\n' "${PEGASUS_WF_LABEL:-wire-lab}" "$host" "$$"
  printf '  mainjob:\n    start: %s\n    duration: %s\n    usage:\n      utime: 0.000\n      stime: 0.000\n' \
    "$main_iso" "$main_s"
  [ -n "$maxrss" ] && printf '      maxrss: %s\n' "$maxrss"
  printf '    status:\n      raw: %s\n      regular_exitcode: %s\n' $(( code * 256 )) "$code"
  printf '    executable:\n      file_name: "%s"\n    argument_vector: []\n' "$0"
  printf '  jobids:\n    condor: %s\n  cwd: "%s"\n' "${CONDOR_JOBID:-local}" "$(pwd)"
  printf '  machine:\n    page-size: 4096\n    uname_system: linux\n    uname_nodename: %s\n  files:\n' "$host"
  files "$inputs" input
  [ "$code" -eq 0 ] && files "$outputs" output
  printf '    stdin:\n      file_name: /dev/null\n      size: 0\n'
}
exit "$code"
"""

EXITCODE_SH = r"""#!/bin/sh
# wire-lab POST script, standing in for pegasus-exitcode: keep each attempt's
# kickstart record as <job>.out.NNN, then fail the node unless the job succeeded.
# Usage: wire-exitcode.sh -r $RETURN OUTFILE
set -u
ret=
while getopts r: opt; do
  case $opt in
    r) ret=$OPTARG ;;
    *) echo "usage: $0 -r RETURN OUTFILE" >&2; exit 2 ;;
  esac
done
shift $(( OPTIND - 1 ))
[ $# -eq 1 ] || { echo "usage: $0 -r RETURN OUTFILE" >&2; exit 2; }
out=$1
case $out in *.out) ;; *) echo "$out does not look like a kickstart .out file" >&2; exit 1 ;; esac
[ -f "$out" ] || { echo "$out does not exist" >&2; exit 1; }
n=0
while [ -e "$out.$(printf '%03d' "$n")" ]; do
  n=$(( n + 1 ))
  [ "$n" -lt 1000 ] || { echo "$out has been renamed too many times" >&2; exit 1; }
done
seq=$(printf '%03d' "$n")
mv "$out" "$out.$seq"
err="${out%.out}.err"
[ -f "$err" ] && mv "$err" "$err.$seq"
case $ret in ''|*[!0-9]*) echo "job did not exit normally (DAGMan return $ret)" >&2; exit 1 ;; esac
[ "$ret" -eq 0 ] || { echo "job exited with $ret" >&2; exit 1; }
grep -q '^ *raw: 0 *$' "$out.$seq" || { echo "no successful kickstart record in $out.$seq" >&2; exit 1; }
exit 0
"""


@dataclass(frozen=True)
class EmulatorScripts:
    emulator: Path
    exitcode: Path


@dataclass(frozen=True)
class EmulatedTask:
    """What one job's emulator run reports; ``argv`` renders its command-line options."""

    transformation: str
    dax_id: str
    site: str
    seconds: float  # runtime x time scale
    maxrss_kib: int | None = None
    hold_mib: int | None = None  # memory the emulator really holds while it sleeps
    failed_attempts: int = 0
    inputs: tuple[tuple[str, int], ...] = ()  # (lfn, bytes)
    outputs: tuple[tuple[str, int], ...] = ()

    def argv(self) -> list[str]:
        for text in (self.transformation, self.dax_id, self.site, *(lfn for lfn, _ in self.inputs + self.outputs)):
            if not _RECORD_SAFE.match(text):
                raise ValueError(f"{text!r} cannot go into a kickstart record (quote, backslash or control character)")
        args = ["-n", self.transformation, "-N", self.dax_id, "-R", self.site, "-s", f"{max(self.seconds, 0.0):.3f}"]
        if self.maxrss_kib is not None:
            args += ["-m", str(self.maxrss_kib)]
        if self.hold_mib:
            args += ["-M", str(self.hold_mib)]
        if self.failed_attempts:
            args += ["-F", str(self.failed_attempts)]
        args += [item for lfn, size in self.inputs for item in ("-i", f"{lfn}={size}")]
        args += [item for lfn, size in self.outputs for item in ("-o", f"{lfn}={size}")]
        return args


def install(bin_dir: str | os.PathLike[str]) -> EmulatorScripts:
    """Write both scripts into ``bin_dir``, executable (local-universe jobs run them in place)."""
    directory = Path(bin_dir)
    directory.mkdir(parents=True, exist_ok=True)
    paths = EmulatorScripts(directory / EMULATOR_NAME, directory / EXITCODE_NAME)
    for path, text in ((paths.emulator, EMULATOR_SH), (paths.exitcode, EXITCODE_SH)):
        path.write_text(text, encoding="utf-8")
        path.chmod(0o755)
    return paths
