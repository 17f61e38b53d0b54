"""The prepared decode-loop capture runs (on the CPU here) and writes a trace diagnoser reads."""

import subprocess
import sys

from conftest import REPO, needs_torch


@needs_torch
def test_capture_script_writes_a_readable_trace_with_one_range_per_step(tmp_path):
    out = subprocess.run(
        [sys.executable, str(REPO / "bench" / "capture_decode_trace.py"), "--out", str(tmp_path), "--device", "cpu",
         "--layers", "2", "--hidden", "256", "--vocab", "1000", "--batch", "2", "--context", "64", "--steps", "4"],
        capture_output=True, text=True, timeout=240,
    )
    assert out.returncode == 0, out.stderr
    assert "eager: median step" in out.stdout and "skipped (CUDA graphs need a GPU)" in out.stdout
    from diagnoser.trace.load import load_traces

    (trace,) = load_traces([tmp_path / "decode_eager.json.gz"])
    names = [trace.strings[i] for i in trace.ranges["name"]]
    assert names.count("decode_step") == 4
