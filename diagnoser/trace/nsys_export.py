"""Driving the ``nsys`` command line: export a report to SQLite, and profile a command.

nsys is an external tool that may be missing, slow (exports of large reports take minutes)
or fail half-way, so every call has a timeout, keeps nsys's stderr in a log file beside the
output, and turns any failure into one ``InputError`` line. Outputs are written under a
temporary name and renamed into place, so a killed export never leaves a truncated SQLite
that a later run would trust.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
from dataclasses import dataclass, replace
from pathlib import Path

from diagnoser.errors import InputError, ToolMissingError
from diagnoser.fileio import write_atomic

REPORT_SUFFIXES = (".nsys-rep", ".qdrep")
GRAPH_TRACE_MODES = ("node", "graph")
CAPTURE_RANGES = ("none", "cudaProfilerApi", "nvtx")


def nsys_executable() -> str:
    """Path of ``nsys`` on PATH, or one clear line saying it is missing."""
    found = shutil.which("nsys")
    if found is None:
        raise ToolMissingError(
            "nsys: not found on PATH (install Nsight Systems, or pass an exported .sqlite instead of a report)"
        )
    return found


def run_nsys(args: list[str], subject: Path, timeout_s: float, log: Path | None, check: bool = True) -> int:
    """Run ``nsys ARGS`` and return its exit code; with ``check``, a failure is one line naming ``subject``.

    With a ``log``, nsys's output is kept there (the error line quotes the last line of its
    stderr); without one, nsys and the program it runs talk straight to the terminal. nsys runs
    in its own process group because it starts helper processes (and, for ``profile``, the
    user's program): a timeout or Ctrl-C must reach all of them, not leave them running.
    """
    command = [nsys_executable(), *args]
    where = f" (log: {log})" if log else ""
    pipe = subprocess.PIPE if log else None
    try:
        proc = subprocess.Popen(command, stdin=subprocess.DEVNULL if log else None, stdout=pipe, stderr=pipe,
                                text=True, errors="replace", start_new_session=True)
    except OSError as err:
        raise ToolMissingError(f"nsys: cannot run {command[0]} ({err.strerror})") from err
    try:
        _, stderr = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired as err:
        _signal_group(proc, signal.SIGKILL)
        _, stderr = proc.communicate()
        if log:
            _keep_log(log, command, stderr)
        raise InputError(f"{subject}: `nsys {args[0]}` did not finish within {timeout_s:g} s{where}") from err
    except KeyboardInterrupt:
        _signal_group(proc, signal.SIGINT)  # lets nsys profile stop the program and still write its report
        proc.wait()
        raise
    if log:
        _keep_log(log, command, stderr)
    if check and proc.returncode != 0:
        last = _last_line(stderr) if log else ""
        reason = f": {last}" if last else ""
        raise InputError(f"{subject}: `nsys {args[0]}` failed with exit code {proc.returncode}{reason}{where}")
    return proc.returncode


def _signal_group(proc: subprocess.Popen, sig: int) -> None:
    try:
        os.killpg(proc.pid, sig)
    except ProcessLookupError:  # already gone
        pass


def _keep_log(log: Path, command: list[str], stderr: str | None) -> None:
    write_atomic(log, "$ " + " ".join(command) + "\n" + (stderr or ""))


def _last_line(text: str | None) -> str:
    lines = [line.strip() for line in (text or "").splitlines() if line.strip()]
    return lines[-1] if lines else ""


def check_report(report: Path) -> None:
    if not report.is_file():
        raise InputError(f"{report}: no such file")
    if report.suffix not in REPORT_SUFFIXES:
        raise InputError(f"{report}: not an Nsight Systems report (expected {' or '.join(REPORT_SUFFIXES)})")


def writable_dir(folder: Path, hint: str) -> Path:
    """Create ``folder`` if needed; one clear line when outputs cannot go there (a read-only mount)."""
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise InputError(f"{folder}: cannot create this folder ({err.strerror}); {hint}") from err
    if not os.access(folder, os.W_OK):
        raise InputError(f"{folder}: not writable; {hint}")
    return folder


def export_command(report: Path, output: Path) -> list[str]:
    """Arguments of ``nsys export`` for a complete SQLite export.

    ``--lazy=false`` creates every table even when empty (fewer schema holes to guess about);
    ``--include-blobs=true`` keeps NCCL's NVTX payloads (message sizes, peers).
    """
    return [
        "export", "--type", "sqlite", "--include-blobs=true", "--lazy=false", "--force-overwrite=true",
        "--output", str(output), str(report),
    ]


def export_sqlite(report: Path, out_dir: Path | None = None, timeout_s: float = 600) -> Path:
    """``REPORT.nsys-rep`` -> ``OUT_DIR/REPORT.sqlite`` (reused when newer than the report)."""
    report = Path(report)
    check_report(report)
    out_dir = Path(out_dir) if out_dir is not None else report.parent
    target = out_dir / f"{report.stem}.sqlite"
    if target.is_file() and target.stat().st_mtime_ns >= report.stat().st_mtime_ns:
        return target
    writable_dir(out_dir, "pass --out-dir to put the export elsewhere")
    partial = out_dir / f".{report.stem}.{os.getpid()}.partial.sqlite"
    try:
        run_nsys(export_command(report, partial), report, timeout_s, out_dir / f"{report.stem}.export.log")
        if not partial.is_file():
            raise InputError(f"{report}: `nsys export` succeeded but wrote no {partial.name}")
        os.replace(partial, target)
    finally:
        partial.unlink(missing_ok=True)
    return target


@dataclass(frozen=True)
class ProfileOptions:
    """How to capture a decode run: what the flags are for is explained in ``profile_command``."""

    output: Path
    cuda_graph_trace: str | None = None  # "node" to see kernels inside CUDA graphs
    capture_range: str = "none"
    capture_range_end: str = "stop"
    nvtx_capture: str | None = None  # RANGE[@DOMAIN] when capture_range == "nvtx"
    fork: bool = False  # trace worker processes started with fork+exec (vLLM, SGLang)


def profile_command(options: ProfileOptions, command: list[str]) -> list[str]:
    """Arguments of ``nsys profile`` for a decode loop.

    CUDA + NVTX + OS runtime is what the budget needs; CPU sampling and context switches add
    overhead and nothing the budget uses. ``node`` graph tracing records every kernel a graph
    replays (the default records one row per graph). A capture range keeps model load and
    warm-up out of the report.
    """
    if not command:
        raise InputError("nsys profile: no command given (put it after --)")
    if options.cuda_graph_trace is not None and options.cuda_graph_trace not in GRAPH_TRACE_MODES:
        raise InputError(f"nsys profile: --cuda-graph-trace must be one of {', '.join(GRAPH_TRACE_MODES)}")
    if options.capture_range not in CAPTURE_RANGES:
        raise InputError(f"nsys profile: --capture-range must be one of {', '.join(CAPTURE_RANGES)}")
    if (options.capture_range == "nvtx") != (options.nvtx_capture is not None):
        raise InputError("nsys profile: --nvtx-capture RANGE goes with --capture-range nvtx, and only with it")
    args = [
        "profile", "--trace=cuda,nvtx,osrt", "--sample=none", "--cpuctxsw=none",
        "--force-overwrite=true", "--output", str(options.output),
    ]
    if options.cuda_graph_trace:
        args.append(f"--cuda-graph-trace={options.cuda_graph_trace}")
    if options.capture_range != "none":
        args += [f"--capture-range={options.capture_range}", f"--capture-range-end={options.capture_range_end}"]
    if options.nvtx_capture:
        args.append(f"--nvtx-capture={options.nvtx_capture}")
    if options.fork:
        args.append("--trace-fork-before-exec=true")
    return args + list(command)


def report_base(output: Path) -> Path:
    """nsys appends ``.nsys-rep`` to ``--output`` itself; accept a name given with or without it."""
    return output.with_suffix("") if output.suffix == ".nsys-rep" else output


def profile(options: ProfileOptions, command: list[str], timeout_s: float | None = None) -> tuple[Path, int]:
    """Run ``command`` under ``nsys profile``; return the report and the program's exit code.

    The profiled program's own output goes to the terminal: it is the user's program. nsys
    passes on the program's exit code; a failing program may still leave a usable report.
    """
    base = report_base(options.output)
    args = profile_command(replace(options, output=base), command)
    writable_dir(base.parent, "pass --output in a writable folder")
    code = run_nsys(args, base, timeout_s or 24 * 3600, log=None, check=False)
    report = base.with_name(base.name + ".nsys-rep")
    if not report.is_file():
        raise InputError(f"{report}: nsys profile exited with code {code} and wrote no report (did the capture range ever open?)")
    return report, code
