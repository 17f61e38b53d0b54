#!/usr/bin/env bash
# The one prepared GPU check: issue 3's acceptance figures and real decode-loop traces.
#
# Here, once (the device has no package index; these are the pure-Python or cp312 wheels its
# image lacks, see the device tool's KINDS.md):
#   echo /.whl/ >> .git/info/exclude
#   python3 -m pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
#     --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
#     -d .whl pydantic==2.13.4 pydantic-core==2.46.4 annotated-types typing-inspection orjson
# Then through the device tool, from the repo root, with carry [".whl"] and timeout_s 540:
#   bash bench/device_check.sh
# Rehearse it here first, on the CPU, with bench/rehearse_device_check.sh.
# Everything lands in $OUT (the tool brings it back): probe report and tables, both traces,
# their analyses and one log. Commit the small traces under tests/data/ and the tables under bench/results/.
set -uo pipefail
OUT=${OUT:-bench/out/device}
mkdir -p "$OUT" && OUT=$(cd "$OUT" && pwd)
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
  && python3 -m pip install -q --no-index --no-deps --no-build-isolation --no-compile --target /tmp/site . \
  || { echo "device_check: could not install the carried wheels and diagnoser"; exit 2; }
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1

# The device tool brings back at most 8 files from $OUT: one log (the text analyses included),
# the two result files, the two traces and their two JSON analyses.
exec > >(tee "$OUT/device_check.log") 2>&1
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,clocks.mem,power.draw,power.limit --format=csv
timeout 300 python3 bench/gpu_probes.py --out "$OUT"
timeout 150 python3 bench/capture_decode_trace.py --out "$OUT"
# From a scratch folder: `python3 -m` puts the working folder first on sys.path, and this
# checkout's diagnoser/ would shadow the installed package (probes/ is diagnoser.probes only there).
cd /tmp || exit 2
for mode in eager graph; do
  [ -f "$OUT/decode_$mode.json.gz" ] || continue
  echo "== diagnoser analyze decode_$mode.json.gz --step-range decode_step"
  timeout 60 python3 -m diagnoser analyze "$OUT/decode_$mode.json.gz" --step-range decode_step
  timeout 60 python3 -m diagnoser analyze "$OUT/decode_$mode.json.gz" --step-range decode_step --json \
    > "$OUT/analyze_$mode.json"
done
# the same steps cut without their marks: eager from the repeating kernel sequence, replay from the graph launches
for pair in eager:pattern graph:graphs; do
  mode=${pair%%:*} source=${pair##*:}
  [ -f "$OUT/decode_$mode.json.gz" ] || continue
  echo "== diagnoser analyze decode_$mode.json.gz --steps-from $source"
  timeout 60 python3 -m diagnoser analyze "$OUT/decode_$mode.json.gz" --steps-from "$source"
done
ls -la "$OUT"
