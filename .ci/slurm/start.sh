#!/usr/bin/env bash
# Start a single-node SLURM cluster on loopback: munged (unless one already answers), slurmctld
# and slurmd, all with their state, logs and pid files under one directory.
#
#   .ci/slurm/start.sh [DIR]      (default: /tmp/compendium-slurm)
#
# Prints `export SLURM_CONF=DIR/slurm.conf` on its last line; stop with .ci/slurm/stop.sh DIR.
# Needs root (slurmd runs jobs as their user). Exits 3 if SLURM is not installed.
set -euo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
DIR="${1:-/tmp/compendium-slurm}"
TIMEOUT="${SLURM_START_TIMEOUT:-60}"
for exe in slurmctld slurmd sinfo munged munge; do
  command -v "$exe" >/dev/null || { echo "start.sh: $exe not found (run .ci/slurm/install.sh)" >&2; exit 3; }
done
mkdir -p "$DIR/state" "$DIR/spool" "$DIR/munge"
DIR="$(cd "$DIR" && pwd)"
HOST="$(hostname -s)"
export SLURM_CONF="$DIR/slurm.conf"

# MUNGE on its default socket (slurmd fetches its configuration before it could be told another
# one): reuse a daemon that already answers there, else start one with the system key (or a new one).
MUNGE_SOCKET=/run/munge/munge.socket.2
if ! munge -n 2>/dev/null | unmunge >/dev/null 2>&1; then
  KEY=/etc/munge/munge.key
  if [ ! -s "$KEY" ]; then
    KEY="$DIR/munge/munge.key"
    [ -s "$KEY" ] || dd if=/dev/urandom of="$KEY" bs=1024 count=1 status=none
    chmod 400 "$KEY"
  fi
  mkdir -p /run/munge; chmod 755 /run/munge; chmod 700 "$DIR/munge"
  munged --force --key-file="$KEY" --socket="$MUNGE_SOCKET" --pid-file="$DIR/munge/munged.pid" \
         --log-file="$DIR/munge/munged.log" --seed-file="$DIR/munge/munged.seed"
  cp "$DIR/munge/munged.pid" "$DIR/started-munged.pid"
  for _ in $(seq 50); do munge -n 2>/dev/null | unmunge >/dev/null 2>&1 && break; sleep 0.1; done
fi

# slurm.conf from the template, with this machine's CPUs and memory (slurmd -C).
NODE_LINE="$(slurmd -C | head -1 | sed -E "s/^NodeName=[^ ]+/NodeName=$HOST NodeAddr=127.0.0.1/") State=UNKNOWN"
sed -e "s|@HOST@|$HOST|g" -e "s|@DIR@|$DIR|g" -e "s|@USER@|$(id -un)|g" \
    -e "s|@NODE_LINE@|$NODE_LINE|" \
    -e "s|@CTLD_PORT@|${SLURMCTLD_PORT:-6817}|" -e "s|@SLURMD_PORT@|${SLURMD_PORT:-6818}|" \
    "$HERE/slurm.conf.in" > "$SLURM_CONF"

slurmctld -f "$SLURM_CONF" -c -i
for _ in $(seq 50); do [ -s "$DIR/slurmctld.pid" ] && break; sleep 0.1; done
cp "$DIR/slurmctld.pid" "$DIR/started-slurmctld.pid"
slurmd --conf-server "127.0.0.1:${SLURMCTLD_PORT:-6817}" -N "$HOST"
for _ in $(seq 50); do [ -s "$DIR/slurmd.pid" ] && break; sleep 0.1; done
cp "$DIR/slurmd.pid" "$DIR/started-slurmd.pid"

deadline=$(( $(date +%s) + TIMEOUT ))
until sinfo -h -N -o '%T' 2>/dev/null | grep -qx 'idle'; do
  if [ "$(date +%s)" -ge "$deadline" ]; then
    echo "start.sh: node not idle after ${TIMEOUT}s; sinfo says: $(sinfo -h -N -o '%N %T %E' 2>&1)" >&2
    tail -n 20 "$DIR/slurmctld.log" "$DIR/slurmd.log" >&2 || true
    exit 1
  fi
  sleep 0.5
done
echo "export SLURM_CONF=$SLURM_CONF"
