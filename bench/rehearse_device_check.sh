#!/usr/bin/env bash
# Rehearse bench/device_check.sh here, on the CPU, the way the device machine will run it.
#
# Device minutes are few (15 a session), so the install path and the output limits are
# checked here first: a venv holding only what the device image has that diagnoser needs
# (torch, click, rich, PyYAML, httpx, numpy, nvidia-ml-py, setuptools, wheel; no pydantic,
# orjson, experta or textual), the carried wheels fetched for this Python, a clean clone of
# HEAD as the working tree, and the script run from its root with OUT set. It then checks what
# the device tool would bring back: at most 8 files, plain names, and every probe ok or
# skipped for a stated reason (none failed).
#
# Usage: bash bench/rehearse_device_check.sh [WORKDIR]   (about a minute once the venv exists)
set -euo pipefail
REPO=$(git -C "$(dirname "$0")/.." rev-parse --show-toplevel)
WORK=${1:-/tmp/diagnoser-device-rehearsal}
PY=$(command -v python3)
mkdir -p "$WORK"
if [ ! -x "$WORK/venv/bin/python3" ]; then
  "$PY" -m venv "$WORK/venv"
  "$WORK/venv/bin/pip" install -q torch==2.13.0 click rich pyyaml httpx numpy nvidia-ml-py setuptools wheel 2>/dev/null
fi
rm -rf "$WORK/tree" "$WORK/out" /tmp/site
git clone -q "$REPO" "$WORK/tree"
pyver=$("$WORK/venv/bin/python3" -c 'import sys; print(f"{sys.version_info[0]}.{sys.version_info[1]}")')
"$WORK/venv/bin/python3" -m pip download -q --no-deps --only-binary=:all: --python-version "$pyver" --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
  -d "$WORK/tree/.whl" pydantic==2.13.4 pydantic-core==2.46.4 annotated-types typing-inspection orjson 2>/dev/null
(cd "$WORK/tree" && PATH="$WORK/venv/bin:$PATH" OUT="$WORK/out" bash bench/device_check.sh > /dev/null 2>&1) || true

"$WORK/venv/bin/python3" - "$WORK/out" "$REPO/bench" <<'EOF'
import json, re, sys
from pathlib import Path

sys.path.insert(0, sys.argv[2])
from device_limits import files_and_problems

out = Path(sys.argv[1])
files, problems = files_and_problems(out)
reports = [p for p in files if p.suffix == ".json" and not p.name.startswith("analyze_")]
if not reports:
    problems.append("no probe report written")
for report in reports:
    for result in json.loads(report.read_text())["results"]:
        print(f"{result['name']:14s} {result['status']:8s} {result.get('reason') or ''}")
        if result["status"] == "failed":
            problems.append(f"probe {result['name']} failed: {result['reason']}")
if not (out / "decode_eager.json.gz").exists():
    problems.append("no eager decode trace")
print(f"{len(files)} files: {', '.join(p.name for p in files)}")
print("\n".join(f"FAIL {p}" for p in problems) or "PASS: the device check installs, runs and fits the tool's limits")
sys.exit(1 if problems else 0)
EOF
