#!/usr/bin/env bash
# Stop the daemons .ci/slurm/start.sh started (only those: by the pids it recorded).
#   .ci/slurm/stop.sh [DIR]      (default: /tmp/compendium-slurm)
set -uo pipefail
DIR="${1:-/tmp/compendium-slurm}"
for name in slurmd slurmctld munged; do
  f="$DIR/started-$name.pid"
  [ -s "$f" ] || continue
  pid="$(cat "$f")"
  if kill -0 "$pid" 2>/dev/null; then
    kill -TERM "$pid" 2>/dev/null
    for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -0 "$pid" 2>/dev/null && kill -KILL "$pid" 2>/dev/null
  fi
  rm -f "$f"
done
exit 0
