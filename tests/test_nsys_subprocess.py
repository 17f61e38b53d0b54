"""The nsys command lines (export, profile, recipe) against a fake `nsys` that records its argv.

The fake is a real executable first on PATH, so the code under test goes through
``shutil.which`` and ``subprocess`` exactly as with Nsight Systems; it writes the outputs
the real tool would (a copied SQLite export, a report file, a recipe folder).
"""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import sys
import textwrap
import time
from pathlib import Path

import pytest

from diagnoser.cli import main
from diagnoser.errors import InputError, ToolMissingError
from diagnoser.trace.nsys_export import ProfileOptions, export_sqlite, profile, profile_command
from diagnoser.trace.recipes import read_recipe_output, run_recipe

FAKE = r'''
import json, os, shutil, subprocess, sys, time
args = sys.argv[1:]
with open(os.environ["FAKE_NSYS_LOG"], "a") as log:
    log.write(json.dumps(args) + "\n")
mode = os.environ.get("FAKE_NSYS_MODE", "ok")
if mode == "fail":
    sys.stderr.write("Processing events...\nERROR: the report is corrupt\n")
    sys.exit(3)
if mode == "hang":  # like nsys, leave a helper process behind
    quiet = subprocess.DEVNULL  # holds none of our pipes, so only a group kill can stop it
    helper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], stdin=quiet, stdout=quiet, stderr=quiet)
    with open(os.environ["FAKE_NSYS_HELPER"], "w") as out:
        out.write(str(helper.pid))
    time.sleep(60)
def value(flag):
    return args[args.index(flag) + 1]
if args[0] == "export":
    shutil.copyfile(os.environ["FAKE_NSYS_SQLITE"], value("--output"))
    sys.stderr.write("export done\n")
elif args[0] == "recipe":
    shutil.copytree(os.environ["FAKE_NSYS_RECIPE"], value("--output"), dirs_exist_ok=True)
elif args[0] == "profile":
    rest, i = [], 1
    while i < len(args):
        if args[i] == "--output":
            i += 2
        elif args[i].startswith("--"):
            i += 1
        else:
            rest = args[i:]
            break
    code = subprocess.call(rest)
    if mode != "no-report":
        with open(value("--output") + ".nsys-rep", "wb") as rep:
            rep.write(b"fake report")
    sys.exit(code)
'''


@pytest.fixture
def fake_nsys(tmp_path, monkeypatch):
    """Put a recording `nsys` first on PATH; returns a function giving the argv lists it saw."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    script = bin_dir / "nsys"
    script.write_text(f"#!{sys.executable}\n" + textwrap.dedent(FAKE))
    script.chmod(0o755)
    log = tmp_path / "nsys-calls.jsonl"
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("FAKE_NSYS_LOG", str(log))

    def calls() -> list[list[str]]:
        return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []

    return calls


@pytest.fixture
def real_export(tmp_path, monkeypatch) -> Path:
    """A small real export for the fake to 'produce'."""
    source = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "nsys" / "nsys-ai" / "healthy_1pct.sqlite"
    if not source.is_file():
        pytest.skip(f"shared data absent: {source}")
    monkeypatch.setenv("FAKE_NSYS_SQLITE", str(source))
    return source


def report(tmp_path: Path, name: str = "run.nsys-rep") -> Path:
    path = tmp_path / name
    path.write_bytes(b"fake report")
    return path


# --- export ---------------------------------------------------------------------------------


def test_export_runs_the_documented_command_and_renames_into_place(tmp_path, fake_nsys, real_export):
    rep = report(tmp_path)
    out = export_sqlite(rep, tmp_path / "out")
    assert out == tmp_path / "out" / "run.sqlite"
    assert out.read_bytes() == real_export.read_bytes()
    (argv,) = fake_nsys()
    partial = argv[argv.index("--output") + 1]
    assert argv == ["export", "--type", "sqlite", "--include-blobs=true", "--lazy=false", "--force-overwrite=true",
                    "--output", partial, str(rep)]
    assert Path(partial).parent == tmp_path / "out" and not Path(partial).exists()
    log = (tmp_path / "out" / "run.export.log").read_text()
    assert log.startswith("$ ") and "export done" in log
    assert rep.read_bytes() == b"fake report"  # the input is never touched


def test_an_export_newer_than_its_report_is_reused(tmp_path, fake_nsys, real_export):
    rep = report(tmp_path)
    first = export_sqlite(rep)
    assert first == tmp_path / "run.sqlite"
    assert export_sqlite(rep) == first
    assert len(fake_nsys()) == 1
    os.utime(rep, ns=(first.stat().st_mtime_ns + 10**9,) * 2)  # the report was re-captured
    export_sqlite(rep)
    assert len(fake_nsys()) == 2


def test_failed_export_is_one_line_with_nsys_last_words_and_no_partial_file(tmp_path, fake_nsys, monkeypatch):
    monkeypatch.setenv("FAKE_NSYS_MODE", "fail")
    rep = report(tmp_path)
    with pytest.raises(InputError) as err:
        export_sqlite(rep)
    message = str(err.value)
    assert "\n" not in message
    assert message.startswith(f"{rep}: `nsys export` failed with exit code 3: ERROR: the report is corrupt")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bin", "nsys-calls.jsonl", "run.export.log", "run.nsys-rep"]


def test_export_timeout_is_an_input_error_and_stops_nsys_helpers(tmp_path, fake_nsys, monkeypatch):
    monkeypatch.setenv("FAKE_NSYS_MODE", "hang")
    helper_file = tmp_path / "helper.pid"
    monkeypatch.setenv("FAKE_NSYS_HELPER", str(helper_file))
    with pytest.raises(InputError, match=r"`nsys export` did not finish within 1 s"):
        export_sqlite(report(tmp_path), timeout_s=1)
    helper = int(helper_file.read_text())
    deadline = time.monotonic() + 10
    while _alive(helper) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _alive(helper), "the helper nsys started outlived the timeout"


def _alive(pid: int) -> bool:
    """True while ``pid`` runs (a zombie awaiting its reaper counts as gone)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0]
    except FileNotFoundError:
        return False
    return state != "Z"


def test_missing_nsys_is_one_clear_line(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))  # nothing there
    with pytest.raises(ToolMissingError, match=r"^nsys: not found on PATH"):
        export_sqlite(report(tmp_path))


def test_export_refuses_what_is_not_a_report(tmp_path):
    with pytest.raises(InputError, match="no such file"):
        export_sqlite(tmp_path / "absent.nsys-rep")
    other = tmp_path / "trace.json"
    other.write_text("{}")
    with pytest.raises(InputError, match=r"not an Nsight Systems report"):
        export_sqlite(other)


# --- profile --------------------------------------------------------------------------------


def test_profile_command_flags():
    base = ProfileOptions(output=Path("out/run"))
    assert profile_command(base, ["python", "serve.py"]) == [
        "profile", "--trace=cuda,nvtx,osrt", "--sample=none", "--cpuctxsw=none", "--force-overwrite=true",
        "--output", "out/run", "python", "serve.py",
    ]
    full = ProfileOptions(output=Path("r"), cuda_graph_trace="node", capture_range="nvtx", capture_range_end="repeat:3",
                          nvtx_capture="decode@vllm", fork=True)
    args = profile_command(full, ["vllm", "serve"])
    assert args[-2:] == ["vllm", "serve"]
    for flag in ("--cuda-graph-trace=node", "--capture-range=nvtx", "--capture-range-end=repeat:3",
                 "--nvtx-capture=decode@vllm", "--trace-fork-before-exec=true"):
        assert flag in args
    with pytest.raises(InputError, match="--nvtx-capture"):
        profile_command(ProfileOptions(output=Path("r"), capture_range="nvtx"), ["x"])
    with pytest.raises(InputError, match="no command"):
        profile_command(base, [])


def test_profile_runs_the_program_and_returns_its_report(tmp_path, fake_nsys):
    marker = tmp_path / "ran"
    rep, code = profile(ProfileOptions(output=tmp_path / "cap.nsys-rep"), [sys.executable, "-c", f"open({str(marker)!r}, 'w')"])
    assert (rep, code) == (tmp_path / "cap.nsys-rep", 0)
    assert marker.exists()
    (argv,) = fake_nsys()
    assert argv[argv.index("--output") + 1] == str(tmp_path / "cap")  # nsys adds the suffix itself


def test_profile_keeps_the_report_of_a_failing_program_and_says_so(tmp_path, fake_nsys):
    rep, code = profile(ProfileOptions(output=tmp_path / "cap"), [sys.executable, "-c", "raise SystemExit(5)"])
    assert rep.is_file() and code == 5


def test_profile_without_a_report_is_an_input_error(tmp_path, fake_nsys, monkeypatch):
    monkeypatch.setenv("FAKE_NSYS_MODE", "no-report")
    with pytest.raises(InputError, match=r"cap\.nsys-rep: nsys profile exited with code 0 and wrote no report"):
        profile(ProfileOptions(output=tmp_path / "cap"), [sys.executable, "-c", "pass"])


def test_cli_profile_exports_and_reads_the_capture(tmp_path, fake_nsys, real_export, capsys):
    rc = main(["nsys", "profile", "-o", str(tmp_path / "cap"), "--cuda-graph-trace", "node", "--fork", "--json",
               "--", sys.executable, "-c", "pass"])
    out = capsys.readouterr().out
    assert rc == 0
    doc = json.loads(out)
    assert doc["exports"] == [str(tmp_path / "cap.sqlite")]
    assert [r["kernels"] for r in doc["ranks"]] == [400]
    profile_argv, export_argv = fake_nsys()
    assert profile_argv[0] == "profile" and "--cuda-graph-trace=node" in profile_argv
    assert "--trace-fork-before-exec=true" in profile_argv
    assert export_argv[0] == "export" and export_argv[-1] == str(tmp_path / "cap.nsys-rep")


def test_cli_without_nsys_exits_2_with_one_line(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("PATH", str(tmp_path))
    assert main(["nsys", "profile", "--", "true"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "nsys: not found on PATH" in err


# --- recipe ---------------------------------------------------------------------------------


def test_recipe_runs_nsys_recipe_and_reads_its_folder(tmp_path, fake_nsys, monkeypatch):
    prepared = tmp_path / "prepared"
    prepared.mkdir()
    (prepared / "rank_trace.csv").write_text(
        "Name,Start,End,PID,DeviceID,Communication Overlap,Compute Overlap,Rank\n"
        "ncclDevKernel_AllReduce_Sum_bf16_RING_LL,1000,2000,11,0,0.0,25.0,0\n"
        "ncclDevKernel_AllReduce_Sum_bf16_RING_LL,5000,8000,12,1,0.0,100.0,1\n"
    )
    monkeypatch.setenv("FAKE_NSYS_RECIPE", str(prepared))
    rep = report(tmp_path)
    folder = run_recipe("nccl_gpu_overlap_trace", rep)
    assert folder == tmp_path / "run.nccl_gpu_overlap_trace"
    (argv,) = fake_nsys()
    assert argv == ["recipe", "nccl_gpu_overlap_trace", "--input", str(rep), "--output", str(folder),
                    "--force-overwrite", "--csv"]
    facts = read_recipe_output("nccl_gpu_overlap_trace", folder)
    # 1000 ns at 25% hidden + 3000 ns fully hidden: 750 exposed of 4000.
    assert facts.summary["exposed_nccl_time_ns"] == pytest.approx(750)
    assert facts.summary["exposed_share"] == pytest.approx(750 / 4000)


def test_unknown_recipe_is_refused_before_running_nsys(tmp_path, fake_nsys):
    with pytest.raises(InputError, match="'gpu_gaps' is not one diagnoser reads"):
        run_recipe("gpu_gaps", report(tmp_path))
    assert fake_nsys() == []


def test_recipe_on_an_export_instead_of_a_report(tmp_path, fake_nsys):
    export = tmp_path / "run.sqlite"
    sqlite3.connect(export).close()
    with pytest.raises(InputError, match=r"run\.sqlite: not an Nsight Systems report"):
        run_recipe("cuda_gpu_kern_sum", export)
    assert shutil.which("nsys") is not None and fake_nsys() == []


def test_recipe_over_several_rank_reports_from_the_cli(tmp_path, fake_nsys, monkeypatch, capsys):
    prepared = tmp_path / "prepared"
    prepared.mkdir()
    (prepared / "analysis.csv").write_text("Duration,In-Use,PID,Device ID,Rank\n0,40.0,11,0,0\n0,80.0,12,0,1\n")
    monkeypatch.setenv("FAKE_NSYS_RECIPE", str(prepared))
    ranks = [report(tmp_path, f"run_{r}.nsys-rep") for r in (0, 1)]
    out = tmp_path / "util"
    assert main(["nsys", "recipe", "cuda_gpu_time_util_map", *map(str, ranks), "--out", str(out), "--json"]) == 0
    facts = json.loads(capsys.readouterr().out)
    assert facts["summary"]["mean_busy_percent"] == pytest.approx(60.0)
    (argv,) = fake_nsys()
    assert argv[:5] == ["recipe", "cuda_gpu_time_util_map", "--input", str(ranks[0]), str(ranks[1])]
    assert argv[5:7] == ["--output", str(out)]


def test_export_to_a_folder_that_cannot_exist_says_where_to_write(tmp_path, fake_nsys, real_export, capsys):
    rep = report(tmp_path)
    blocked = tmp_path / "run.nsys-rep" / "sub"  # under a file: no one, root included, can create it
    assert main(["nsys", "export", str(rep), "--out-dir", str(blocked)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"{blocked}: cannot create this folder" in err and "pass --out-dir" in err
    assert fake_nsys() == []
    assert main(["nsys", "export", str(rep), "--out-dir", str(tmp_path / "elsewhere"), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["exports"] == [str(tmp_path / "elsewhere" / "run.sqlite")]
