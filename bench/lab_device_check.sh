#!/usr/bin/env bash
# The prepared GPU check of the fault lab: its GPU forms served, measured, diagnosed and traced.
#
# Here, once (the device has no package index; bench/lab_wheels.txt lists the wheels its image
# lacks and why):
#   echo /.whl/ >> .git/info/exclude
#   python3 -m pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
#     --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
#     -d .whl -r bench/lab_wheels.txt
#   python3 -m pip wheel -q --no-deps -w .whl frozendict==1.2
# Then through the device tool, from the repo root, with carry [".whl"] and timeout_s 300:
#   bash bench/lab_device_check.sh
# Rehearse it here first, on the CPU, with bench/rehearse_lab_device_check.sh (which runs it with --device cpu).
#
# On the GPU: tests/test_lab_graphs.py (graph replay against eager launches and forward), then
# bench/bench_lab.py on cuda for none, eager-launches and small-experts (straggler too where two GPUs
# give it an NCCL form; otherwise the log and the results say why it was left out), one short trace
# each of none and eager-launches (bench/record_lab_trace.py), and bench/lab_device_report.py's
# results. Every stage has a time limit inside one budget, so the whole check ends within 4 minutes.
# $OUT gets at most 5 files, all to commit: the log, <date>-lab-<card>.md and .json (for bench/results/,
# the measured cases inside the JSON) and the two gzipped traces (for tests/data/lab/).
set -uo pipefail
DEVICE=cuda
while [ $# -gt 0 ]; do
  case $1 in
    --device) DEVICE=${2:-}; shift 2 || shift ;;
    *) echo "lab_device_check: unknown argument $1 (the one option is --device cpu|cuda)"; exit 2 ;;
  esac
done
case $DEVICE in cpu | cuda) ;; *) echo "lab_device_check: --device must be cpu or cuda, not '$DEVICE'"; exit 2 ;; esac
REPO=$(pwd)
OUT=${OUT:-bench/out/lab-device}
SITE=${SITE:-/tmp/site}
mkdir -p "$OUT" && OUT=$(cd "$OUT" && pwd)
WORK=$(mktemp -d)
START=$SECONDS
BUDGET_S=215  # the whole check, under the 4 minutes it is given (a stage may overrun its limit by 10 s)
REPORT_S=30   # kept back for the report, whatever the stages before it took
NOTES=()

exec > >(tee "$OUT/lab_device_check.log") 2>&1

# stage NAME SECONDS COMMAND...: run it for at most SECONDS, or what the budget has left; a stage
# that fails, times out or finds no time left is noted for the report
stage() {
  local name=$1 limit=$2 left
  shift 2
  left=$((BUDGET_S - REPORT_S - (SECONDS - START)))
  [ "$limit" -gt "$left" ] && limit=$left
  if [ "$limit" -lt 10 ]; then
    echo "== $name: not run, the check's $BUDGET_S s are spent"
    NOTES+=("$name: not run, the check's $BUDGET_S s were spent")
    return 1
  fi
  echo "== $name (at most $limit s)"
  local began=$SECONDS rc
  # SIGINT first, so a Python stage unwinds and stops the lab servers it started (they run in
  # sessions of their own); SIGKILL 10 s later if it has not
  timeout -s INT -k 10 "$limit" "$@"
  rc=$?
  echo "== $name: exit $rc after $((SECONDS - began)) s"
  if [ $rc -eq 124 ]; then NOTES+=("$name: stopped at its $limit s limit"); elif [ $rc -ne 0 ]; then NOTES+=("$name: failed (exit $rc, see the log)"); fi
  return $rc
}

stage "install" 60 bash -c "python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target '$SITE' .whl/*.whl \
  && python3 -m pip install -q --no-index --no-deps --no-build-isolation --no-compile --target '$SITE' ." \
  || { echo "lab_device_check: could not install the carried wheels and diagnoser"; exit 2; }
export PYTHONPATH=$SITE PYTHONUNBUFFERED=1
# From a scratch folder: `python3 -m` puts the working folder first on sys.path, and this
# checkout's diagnoser/ would shadow the installed package (probes/ is diagnoser.probes only there).
cd /tmp || exit 2

[ "$DEVICE" = cuda ] && nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv
python3 -c "import torch; print(f'torch {torch.__version__}, CUDA {torch.version.cuda}, {torch.cuda.device_count()} GPU(s)')"

stage "tests/test_lab_graphs.py" 60 python3 -m pytest -q -p no:cacheprovider "$REPO/tests/test_lab_graphs.py"

# has_form FAULT: whether the fault exists on this device (GPU-only ones have no CPU form)
has_form() {
  python3 -c "import sys; from diagnoser.lab.faults import FAULTS; sys.exit(0 if FAULTS['$1'].has_form('$DEVICE') else 1)"
}
TABLES=()
bench() {
  local fault=$1 limit=$2
  if ! has_form "$fault"; then
    echo "== bench_lab $fault: skipped, it has no $DEVICE form (diagnoser lab faults says why)"
    NOTES+=("$fault: not measured, it has no $DEVICE form")
    return
  fi
  stage "bench_lab $fault" "$limit" python3 "$REPO/bench/bench_lab.py" --device "$DEVICE" --cases "$WORK/cases" "$fault" > "$WORK/$fault.md"
  cat "$WORK/$fault.md"
  TABLES+=(--table "$WORK/$fault.md")
}

bench none 60
bench eager-launches 60

TRACED=()
for fault in none eager-launches; do has_form "$fault" && TRACED+=("$fault"); done
stage "traces of ${TRACED[*]}" 60 python3 "$REPO/bench/record_lab_trace.py" --device "$DEVICE" --out "$OUT" "${TRACED[@]}"
[ "$DEVICE" = cuda ] || NOTES+=("eager-launches: no trace, it has no $DEVICE form")

bench small-experts 75

straggler=$(python3 -c "from diagnoser.lab.straggler import backend_for; print('%s: %s' % backend_for('$DEVICE'))")
if [ "${straggler%%:*}" = nccl ]; then
  echo "== straggler over NCCL (${straggler#*: })"
  bench straggler 75
else
  echo "== straggler: skipped, it has no NCCL form here (${straggler#*: }); its gloo form is the CPU fault's, measured on a CPU"
  NOTES+=("straggler: not measured, no NCCL form here (${straggler#*: }); its gloo form is the CPU fault's")
fi

TRACES=()
for trace in "$OUT"/*.pt.trace.json.gz; do [ -f "$trace" ] && TRACES+=(--trace "$trace"); done
NOTE_ARGS=()
for note in "${NOTES[@]}"; do NOTE_ARGS+=(--note "$note"); done
echo "== report"
timeout -k 5 "$REPORT_S" python3 "$REPO/bench/lab_device_report.py" --device "$DEVICE" --cases "$WORK/cases" --out "$OUT" \
  "${TABLES[@]}" "${TRACES[@]}" "${NOTE_ARGS[@]}"
echo "== the check took $((SECONDS - START)) s"
rm -rf "$WORK"
ls -la "$OUT"
