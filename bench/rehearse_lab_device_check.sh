#!/usr/bin/env bash
# Rehearse bench/lab_device_check.sh here, on the CPU, the way the device machine will run it.
#
# Device minutes are few (15 a session), so the install path, the stages and the output limits
# are checked here first: a venv holding only what the device image has that the lab needs
# (torch, click, rich, PyYAML, httpx, numpy, nvidia-ml-py, prometheus-client, anyio, h11,
# annotated-doc, uvloop, pytest, setuptools, wheel; no pydantic, orjson, experta, FastAPI or
# uvicorn), the wheels of bench/lab_wheels.txt fetched for this Python as the device's are, a
# clean clone of HEAD as the working tree, and the script run from its root with --device cpu
# (the GPU-only faults are then skipped, and said to be). It then checks what the device tool
# would bring back: at most 8 files, plain names, none over 16 MiB, the results written, the
# healthy server measured and its trace under 5 MB.
#
# Usage: bash bench/rehearse_lab_device_check.sh [WORKDIR]   (under 2 minutes once the venv exists)
set -euo pipefail
REPO=$(git -C "$(dirname "$0")/.." rev-parse --show-toplevel)
WORK=${1:-/tmp/diagnoser-lab-device-rehearsal}
PY=$(command -v python3)
mkdir -p "$WORK"
if [ ! -x "$WORK/venv/bin/python3" ]; then
  "$PY" -m venv "$WORK/venv"
  "$WORK/venv/bin/pip" install -q torch==2.13.0 click rich pyyaml httpx numpy nvidia-ml-py prometheus-client anyio h11 \
    annotated-doc uvloop pytest pytest-timeout setuptools wheel 2>/dev/null
fi
rm -rf "$WORK/tree" "$WORK/out" "$WORK/site"
git clone -q "$REPO" "$WORK/tree"
pyver=$("$WORK/venv/bin/python3" -c 'import sys; print(f"{sys.version_info[0]}.{sys.version_info[1]}")')
"$WORK/venv/bin/python3" -m pip download -q --no-deps --only-binary=:all: --python-version "$pyver" --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
  -d "$WORK/tree/.whl" -r "$WORK/tree/bench/lab_wheels.txt" 2>/dev/null
"$WORK/venv/bin/python3" -m pip wheel -q --no-deps -w "$WORK/tree/.whl" frozendict==1.2 2>/dev/null
began=$SECONDS
(cd "$WORK/tree" && PATH="$WORK/venv/bin:$PATH" OUT="$WORK/out" SITE="$WORK/site" bash bench/lab_device_check.sh --device cpu > /dev/null 2>&1) || true
echo "the check ran $((SECONDS - began)) s"

"$WORK/venv/bin/python3" - "$WORK/out" "$REPO/bench" <<'EOF'
import json, re, sys
from pathlib import Path

sys.path.insert(0, sys.argv[2])
from device_limits import files_and_problems

out = Path(sys.argv[1])
files, problems = files_and_problems(out)
log = out / "lab_device_check.log"
print("\n".join(line for line in log.read_text().splitlines() if line.startswith("==")) if log.exists() else "no log")
results = [p for p in files if re.fullmatch(r"\d{4}-\d\d-\d\d-lab-.+\.json", p.name)]
if not results:
    problems.append("no results JSON written")
for result in results:
    doc = json.loads(result.read_text())
    print(f"{result.name}: cases {sorted(doc['cases'])}; graph against eager: {doc['graph_against_eager']}")
    print("\n".join(f"  left out: {note}" for note in doc["notes"]))
    if "none" not in doc["cases"]:
        problems.append("the healthy server was not measured")
    problems += [f"{note}" for note in doc["notes"] if "failed" in note or "stopped" in note or "spent" in note]
traces = [p for p in files if p.name.endswith(".pt.trace.json.gz")]
if not traces:
    problems.append("no trace recorded")
problems += [f"{p.name}: {p.stat().st_size / 1e6:.1f} MB, over the 5 MB to commit" for p in traces if p.stat().st_size > 5e6]
print(f"{len(files)} files: {', '.join(p.name for p in files)}")
print("\n".join(f"FAIL {p}" for p in problems) or "PASS: the lab device check installs, runs and fits the tool's limits")
sys.exit(1 if problems else 0)
EOF
