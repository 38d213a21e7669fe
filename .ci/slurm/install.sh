#!/usr/bin/env bash
# Install Debian's SLURM (slurmctld, slurmd, client commands) and MUNGE if they are missing.
# Used by CI (.ci/run) before the tests; tests/test_slurm.py skips when slurmctld is absent.
set -euo pipefail
if command -v slurmctld >/dev/null && command -v slurmd >/dev/null && command -v sbatch >/dev/null \
   && command -v munged >/dev/null; then
  exit 0
fi
if ! command -v apt-get >/dev/null; then
  echo "install.sh: no apt-get; install slurm-wlm and munge yourself (the SLURM test will skip)" >&2
  exit 0
fi
SUDO=""
if [ "$(id -u)" != 0 ]; then SUDO="sudo"; fi
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends slurm-wlm munge >/dev/null
