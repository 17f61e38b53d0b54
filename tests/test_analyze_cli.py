"""``diagnoser analyze`` end to end, in a fresh interpreter as a user runs it."""

import gzip
import json
import shutil
import sqlite3
from pathlib import Path

import click
import pytest
from conftest import run_cli

from diagnoser.models.case import load_case

SYNTH = Path(__file__).resolve().parent / "data" / "trace" / "synthetic"


def test_report_json_case_and_perfetto(tmp_path):
    case, perfetto = tmp_path / "case.json", tmp_path / "budget.trace.json"
    case.write_text(json.dumps({"title": "kept title", "observations": {"claimed_step_ms": 5.0}}))
    before = case.read_bytes()
    done = run_cli("analyze", str(SYNTH), "--json", "--case", str(case), "--perfetto", str(perfetto))
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    rank1 = next(r for r in out["analysis"]["rank_steps"] if r["rank"] == 1 and r["key"] == "ProfilerStep#1")
    assert rank1["parts_ns"] == {"device": 48000, "exposed_comm": 10000, "launch": 8000, "queue": 9000, "host": 25000}

    assert case.read_bytes() == before  # the facts go beside the case, never into it
    written = load_case(tmp_path / "case.analyzed.json")
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
    assert "median µs" in done.stdout and " us " not in done.stdout  # one spelling of the unit


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
        (  # step marks and nothing else: no GPU work, and no CPU ops to read as a CPU run (cpu_steps)
            _file("cpu.json", b'{"traceEvents": [{"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#1", "pid": 1, '
                  b'"tid": 1, "ts": 1, "dur": 100}]}'),
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


# --- outputs: never an input, the case left as it was ------------------------------------------


def _trace_copy(tmp_path: Path) -> Path:
    folder = tmp_path / "ranks"
    shutil.copytree(SYNTH, folder)
    return folder


def _one_line_error(done, *needles: str) -> None:
    assert done.returncode == 2, done.stdout + done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in done.stderr, done.stderr
    assert all(n in lines[0] for n in needles), lines[0]


@pytest.mark.parametrize("flag", ["--perfetto", "-o", "--case-out"])
def test_an_output_that_is_the_input_trace_is_refused_and_the_trace_kept(tmp_path, flag):
    trace = _trace_copy(tmp_path) / "rank0.json"
    before = trace.read_bytes()
    _one_line_error(run_cli("analyze", str(trace), flag, str(trace)), flag, "is an input")
    assert trace.read_bytes() == before


def test_an_output_inside_a_trace_folder_is_fine_the_folder_itself_is_not(tmp_path):
    folder = _trace_copy(tmp_path)
    _one_line_error(run_cli("analyze", str(folder), "--perfetto", str(folder)), "--perfetto")
    done = run_cli("analyze", str(folder), "--perfetto", str(folder / "budget.json"))
    assert done.returncode == 0, done.stderr
    assert done.stderr.strip() == f"diagnoser: wrote the budget trace to {folder / 'budget.json'}"


def test_the_case_and_a_symlink_to_it_stay_as_they_were(tmp_path):
    trace = _trace_copy(tmp_path)
    case = tmp_path / "case.yaml"
    case.write_text("# the reporter's notes\ntitle:   kept title\nobservations: {claimed_step_ms: 5.0}\n")
    case.chmod(0o640)
    link = tmp_path / "link.yaml"
    link.symlink_to(case)
    before = case.read_bytes()

    for named in (case, link):
        done = run_cli("analyze", str(trace), "--case", str(named))
        assert done.returncode == 0, done.stderr
        merged = named.with_name(f"{named.stem}.analyzed.yaml")
        assert done.stderr.strip() == f"diagnoser: wrote the case with the trace facts to {merged} ({named} is unchanged)"
        written = load_case(merged)
        assert written.title == "kept title" and written.observations.claimed_step_ms == 5.0
        assert written.observations.budget is not None and not merged.is_symlink()
    assert case.read_bytes() == before and (case.stat().st_mode & 0o777) == 0o640
    assert link.is_symlink() and link.resolve() == case.resolve()


def test_case_out_and_a_case_created_where_named(tmp_path):
    trace = _trace_copy(tmp_path)
    new_case = tmp_path / "new.yaml"
    assert run_cli("analyze", str(trace), "--case", str(new_case)).returncode == 0
    assert load_case(new_case).observations.budget is not None  # nothing to keep: created where named
    chosen = tmp_path / "out" / "merged.json"
    done = run_cli("analyze", str(trace), "--case", str(new_case), "--case-out", str(chosen))
    assert done.returncode == 0, done.stderr
    assert load_case(chosen).observations.budget is not None and str(chosen) in done.stderr


def test_nothing_is_written_when_no_step_has_device_work(tmp_path):
    events = [  # the only kernel runs after the only marked step
        {"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#1", "pid": 1, "tid": 1, "ts": 0, "dur": 10},
        {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": 900, "dur": 5,
         "args": {"correlation": 1}},
        {"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 1000, "dur": 10,
         "args": {"device": 0, "stream": 7, "correlation": 1}},
    ]
    trace = tmp_path / "t.json"
    trace.write_text(json.dumps({"traceEvents": events}))
    case, perfetto = tmp_path / "case.yaml", tmp_path / "p.json"
    done = run_cli("analyze", str(trace), "--case", str(case), "--perfetto", str(perfetto))
    assert done.returncode == 0, done.stderr
    assert "nothing to budget" in done.stdout and "nothing written" in done.stderr
    assert not case.exists() and not perfetto.exists()


@pytest.mark.parametrize("as_json", [False, True])
def test_the_report_goes_to_output_instead_of_stdout(tmp_path, as_json):
    report = tmp_path / "report.txt"
    done = run_cli("analyze", str(SYNTH), "-o", str(report), *(["--json"] if as_json else []))
    assert done.returncode == 0, done.stderr
    assert done.stdout == "" and done.stderr.strip() == f"diagnoser: wrote the report to {report}"
    text = report.read_text()
    if as_json:
        assert json.loads(text)["analysis"]["ranks"] == [0, 1]
    else:
        assert "exposed communication" in text and "\x1b[" not in text  # plain text, no terminal codes


def test_every_option_has_help():
    from diagnoser.cli.analyze_cmd import analyze
    from diagnoser.cli.nsys_cmd import nsys

    commands = [analyze, *nsys.commands.values()]
    missing = [f"{c.name} {o.opts[0]}" for c in commands for o in c.params if isinstance(o, click.Option) and not o.help]
    assert missing == []
