#!/bin/sh
# wire-daemon spot worker: hear the cloud's interruption notice and leave the pool cleanly.
# Started by wire-worker-boot on a spot instance. It polls the instance metadata service's
# spot/instance-action (EC2 posts it two minutes before it reclaims the instance). On a notice:
# 1. the startd takes no new job (START = False, then a reconfig by signal: no credentials needed);
# 2. the jobs that run may go on until GRACE_S before the reclaim, and those that end in time are done;
# 3. HTCondor shuts down fast: what still runs is vacated at once and goes back to the schedd's
#    queue (Condor reruns it elsewhere), and the startd leaves the pool. Not a graceful shutdown:
#    that lets running jobs retire for up to MAXJOBRETIREMENTTIME, past the reclaim, and the jobs
#    the cloud then kills come back only when their lease runs out. The master's exit then powers
#    the instance off (the dead-man switch), as the cloud is about to.
set -u
MD="${WIRE_METADATA_URL:-http://169.254.169.254}"
POLL_S="${WIRE_SPOT_POLL_S:-5}"
GRACE_S="${WIRE_SPOT_GRACE_S:-20}"
NOTICE_CONFIG="${WIRE_SPOT_NOTICE_CONFIG:-/etc/condor/config.d/99-wire-spot-notice.conf}"

notice() {  # the notice's JSON on stdout; fails while there is none (404)
    token=$(curl -fsS -m 2 -X PUT "$MD/latest/api/token" -H 'X-aws-ec2-metadata-token-ttl-seconds: 60' 2>/dev/null) \
        || token=
    curl -fsS -m 2 ${token:+-H "X-aws-ec2-metadata-token: $token"} "$MD/latest/meta-data/spot/instance-action" 2>/dev/null
}

until body=$(notice) && [ -n "$body" ]; do
    sleep "$POLL_S"
done
logger -t wire-spot-watch "interruption notice: $body" 2>/dev/null || true
printf 'START = False\n' > "$NOTICE_CONFIG"
pkill -HUP -x condor_master || true  # reconfigure: no new job starts here

when=$(printf '%s' "$body" | sed -n 's/.*"time" *: *"\([^"]*\)".*/\1/p')
end=$(date -u -d "$when" +%s 2>/dev/null) || end=$(($(date +%s) + 120))
wait=$((end - GRACE_S - $(date +%s)))
if [ "$wait" -gt 0 ]; then sleep "$wait"; fi
logger -t wire-spot-watch "leaving the pool: running jobs go back to the queue" 2>/dev/null || true
pkill -QUIT -x condor_master || true  # a fast shutdown vacates what still runs, now
