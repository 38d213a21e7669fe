#!/usr/bin/env bash
# One prepared GPU check for the compendium's Triton kernels (issue 23).
#
#   bash benchmarks/gpu_check.sh [--dry-run] [--report FILE]
#
# On a CUDA machine, within 8 minutes (480 s: the planned times below sum to it, and each step's
# timeout is its planned time, cut to what is left of the 480 s):
#   1. every kernel test compiled on the GPU (COMPENDIUM_KERNEL_DEVICE=cuda: no interpreter);
#   2. the kernel benchmarks at benchmark sizes, with reference / kernel time ratios;
#   3. one chapter (expert_sample, whose ledger runs the routing kernel on the device) under the
#      gpu profile (device=cuda), in a throw-away project so no results of the checkout change;
# and writes a Markdown report (default: $OUT/gpu_check_report.md if $OUT is set, else
# results/gpu_check_report.md). Every run first prints the plan: each step with its planned seconds
# and the running total. Without CUDA, or with --dry-run, it says so clearly, runs the CPU-only part
# (the benchmark script in its reference-only mode, small sizes) and exits 0.
# Each step has its own timeout; a failing step is recorded in the report and the script goes on;
# the exit status is 1 only if a step failed on a CUDA machine.
set -u
cd "$(dirname "$0")/.."
PY="${PYTHON:-}"
if [ -z "$PY" ]; then
  if [ -x .venv/bin/python ]; then PY=.venv/bin/python; else PY=python3; fi
fi
case "$PY" in
  */*) PY="$(cd "$(dirname "$PY")" && pwd)/$(basename "$PY")" ;;
  *) PY="$(command -v "$PY")" ;;
esac
DRY=0
REPORT="${OUT:+$OUT/gpu_check_report.md}"
REPORT="${REPORT:-results/gpu_check_report.md}"
while [ $# -gt 0 ]; do
  case "$1" in
    --dry-run) DRY=1 ;;
    --report) shift; REPORT="$1" ;;
    *) echo "usage: $0 [--dry-run] [--report FILE]" >&2; exit 2 ;;
  esac
  shift
done
mkdir -p "$(dirname "$REPORT")"
LOG="$(mktemp -d)"
FAILED=0

has_cuda() {
  "$PY" -c "import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)" 2>/dev/null
}

BUDGET_S=480   # the whole check on a CUDA machine (a lent machine gives 15 minutes, start-up included)
T0=$(date +%s)
# name:planned seconds, in the order they run on a CUDA machine (their sum is BUDGET_S)
PLAN=(kernel-tests-compiled:110 kernel-benchmarks:80 kernel-benchmarks-online_spec:30
      kernel-benchmarks-c2_gmae:40 kernel-benchmarks-on_policy_sft:30 kernel-benchmarks-matryoshka_3d:30
      kernel-benchmarks-event2vec:30 chapter-gpu-expert_sample:130)

print_plan() {
  local total=0 entry name secs
  echo "plan (CUDA machine; budget ${BUDGET_S} s):"
  for entry in "${PLAN[@]}"; do
    name="${entry%%:*}"; secs="${entry##*:}"; total=$(( total + secs ))
    printf '  %-34s %4d s   (running total %4d s)\n' "$name" "$secs" "$total"
  done
  echo "  planned total: ${total} s"
}

planned() {  # planned NAME -> its planned seconds
  local entry
  for entry in "${PLAN[@]}"; do
    [ "${entry%%:*}" = "$1" ] && { echo "${entry##*:}"; return; }
  done
  echo 60
}

step() {  # step NAME TIMEOUT_S COMMAND...  (on a CUDA machine the timeout is cut to the budget left)
  local name="$1" limit="$2"; shift 2
  local start rc left
  left=$(( BUDGET_S - ($(date +%s) - T0) ))
  if [ "$limit" -gt "$left" ]; then limit=$left; fi
  if [ "$limit" -le 0 ]; then
    { echo "## $name"; echo; echo "not run: the ${BUDGET_S} s budget is spent"; echo; } >> "$REPORT"
    FAILED=1; echo "[$name] not run (budget spent)"; return
  fi
  start=$(date +%s)
  timeout "$limit" "$@" > "$LOG/$name.txt" 2>&1
  rc=$?
  {
    echo "## $name"
    echo
    echo "command: \`$*\`  exit status: $rc  seconds: $(( $(date +%s) - start )) (limit $limit)"
    echo
    echo '```'
    tail -n 60 "$LOG/$name.txt"
    echo '```'
    echo
  } >> "$REPORT"
  [ "$rc" -eq 0 ] || FAILED=1
  echo "[$name] exit $rc"
}

print_plan
{
  echo "# GPU check report"
  echo
  echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)  commit: $(git rev-parse --short HEAD 2>/dev/null || echo unknown)"
  "$PY" -c "import torch; print('torch', torch.__version__, '| cuda', torch.version.cuda, '| device', torch.cuda.get_device_name(0) if torch.cuda.is_available() else 'none')" 2>/dev/null || true
  "$PY" -c "import triton; print('triton', triton.__version__)" 2>/dev/null || echo "triton: not installed"
  echo
  echo '```'
  print_plan
  echo '```'
  echo
} > "$REPORT"

if [ "$DRY" -eq 1 ] || ! has_cuda; then
  MSG="No CUDA device found (or --dry-run): the Triton kernels were NOT run compiled; they are tested under Triton's interpreter only (tests/test_kernels_*.py). Running the CPU-only part."
  echo "$MSG"
  { echo "**$MSG**"; echo; } >> "$REPORT"
  BUDGET_S=120; T0=$(date +%s)
  step benchmark-cpu-reference 120 env CUDA_VISIBLE_DEVICES="" "$PY" benchmarks/async_spade_kernels.py --reps 2 --batch 1 --heads 4 --kv-heads 2 --head-dim 32 --context 512 --budget 64
  echo "report: $REPORT"
  exit 0
fi

echo "CUDA device found: running the kernel tests compiled, the benchmarks and one chapter on the GPU."
T0=$(date +%s)
step kernel-tests-compiled "$(planned kernel-tests-compiled)" env COMPENDIUM_KERNEL_DEVICE=cuda "$PY" -m pytest -q tests/test_kernels_async_spade.py tests/test_kernels_expert_sample.py tests/test_kernels_online_spec.py tests/test_kernels_graph_alignment.py tests/test_kernels_c2_gmae.py tests/test_kernels_on_policy_sft.py tests/test_kernels_event2vec.py tests/test_kernels_matryoshka_3d.py tests/test_kernels_top_adapter.py
step kernel-benchmarks "$(planned kernel-benchmarks)" "$PY" benchmarks/async_spade_kernels.py
step kernel-benchmarks-online_spec "$(planned kernel-benchmarks-online_spec)" "$PY" benchmarks/online_spec_kernels.py
step kernel-benchmarks-c2_gmae "$(planned kernel-benchmarks-c2_gmae)" "$PY" benchmarks/c2_gmae_kernels.py
step kernel-benchmarks-on_policy_sft "$(planned kernel-benchmarks-on_policy_sft)" "$PY" benchmarks/on_policy_sft_kernels.py
step kernel-benchmarks-matryoshka_3d "$(planned kernel-benchmarks-matryoshka_3d)" "$PY" benchmarks/matryoshka_3d_kernels.py
step kernel-benchmarks-event2vec "$(planned kernel-benchmarks-event2vec)" "$PY" benchmarks/event2vec_kernels.py
PROJ="$(mktemp -d)/project"
step chapter-gpu-expert_sample "$(planned chapter-gpu-expert_sample)" bash -c "'$PY' -c \"import sys; sys.path.insert(0, 'tests'); from conftest import make_project; from pathlib import Path; make_project(Path('$PROJ'), fixture=False)\" && cd '$PROJ' && COMPENDIUM_ROOT='$PROJ' HF_HUB_OFFLINE=1 '$PY' -m compendium.cli execute expert_sample --set device=cuda"
echo "report: $REPORT"
exit "$FAILED"
