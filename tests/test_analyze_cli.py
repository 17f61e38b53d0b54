"""``diagnoser analyze`` end to end, in a fresh interpreter as a user runs it."""

import gzip
import json
import sqlite3
from pathlib import Path

import pytest
from conftest import run_cli

from diagnoser.models.case import load_case

SYNTH = Path(__file__).resolve().parent / "data" / "trace" / "synthetic"


def test_report_json_case_and_perfetto(tmp_path):
    case, perfetto = tmp_path / "case.json", tmp_path / "budget.trace.json"
    case.write_text(json.dumps({"title": "kept title", "observations": {"claimed_step_ms": 5.0}}))
    done = run_cli("analyze", str(SYNTH), "--json", "--case", str(case), "--perfetto", str(perfetto))
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    rank1 = next(r for r in out["analysis"]["rank_steps"] if r["rank"] == 1 and r["key"] == "ProfilerStep#1")
    assert rank1["parts_ns"] == {"device": 48000, "exposed_comm": 10000, "launch": 8000, "queue": 9000, "host": 25000}

    written = load_case(case)
    assert written.title == "kept title" and written.observations.claimed_step_ms == 5.0  # other facts kept
    assert written.observations.budget.step_ms == pytest.approx(0.030)
    assert len(written.observations.rank_budgets) == 2

    events = json.loads(perfetto.read_text())["traceEvents"]
    steps = [e for e in events if e.get("tid") == "steps" and e["ph"] == "X"]
    assert {e["name"] for e in steps} >= {"ProfilerStep#1 (critical rank)", "ProfilerStep#1"}
    host = [e for e in events if e.get("tid") == "host" and e["ph"] == "X" and e["pid"] == "diagnoser rank 0"]
    assert sum(e["dur"] for e in host if e["args"]["step"] == "ProfilerStep#1") == pytest.approx(12)


def test_human_report_has_waterfall_and_labelled_kernel_sum():
    done = run_cli("analyze", str(SYNTH / "rank0.json"), str(SYNTH / "rank1.json"))
    assert done.returncode == 0, done.stderr
    assert "exposed communication" in done.stdout and "not elapsed time" in done.stdout
    assert "critical rank 0" in done.stdout  # representative step 2


def _file(name: str, data: bytes):
    def make(directory: Path) -> Path:
        (directory / name).write_bytes(data)
        return directory / name

    return make


def _sqlite_without_kernels(directory: Path) -> Path:
    path = directory / "x.sqlite"
    with sqlite3.connect(path) as db:
        db.execute("CREATE TABLE StringIds (id INTEGER PRIMARY KEY, value TEXT)")
    return path


@pytest.mark.parametrize(
    "make, message",
    [
        (_file("t.json.gz", gzip.compress((SYNTH / "rank0.json").read_bytes())[:300]), "truncated or corrupt gzip"),
        (_file("t.json", b'{"traceEvents": ['), "not valid JSON"),
        (_file("e.json", b""), "empty"),
        (_sqlite_without_kernels, "KERNEL"),
        (_file("report.sqlite", b"not a database"), "not an SQLite database"),
        (  # a profile of the CPU alone: ProfilerActivity.CUDA was not asked for
            _file("cpu.json", b'{"traceEvents": [{"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#1", "pid": 1, '
                  b'"tid": 1, "ts": 1, "dur": 100}, {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": 5, "dur": 50}]}'),
            "no GPU kernels or copies in the trace (record CUDA activity",
        ),
    ],
)
def test_bad_inputs_exit_2_with_one_line(tmp_path, make, message):
    path = make(tmp_path)
    done = run_cli("analyze", str(path))
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and message in lines[0] and str(path) in lines[0]


def test_unknown_step_range_is_an_input_error():
    done = run_cli("analyze", str(SYNTH), "--step-range", "no_such_range")
    assert done.returncode == 2 and "no_such_range" in done.stderr
