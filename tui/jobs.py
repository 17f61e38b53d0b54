"""Long evidence work (trace analysis, probes) in child processes the TUI can watch and stop.

A thread cannot be stopped in the middle of parsing 300 MB of JSON, and a parse that holds
the GIL stalls the interface; a child process can be killed at once and leaves the
interface's process free. Each job reports ``Progress`` as it goes and ends with exactly one
``Finished`` or ``Failed``; ``cancel`` kills the child and its own workers (it leads a
process group of its own). Nothing here imports Textual.
"""

from __future__ import annotations

import os
import queue
import signal
import subprocess
import sys
import tempfile
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

POLL_S = 0.1


@dataclass(frozen=True)
class Progress:
    done: int
    total: int
    text: str


@dataclass(frozen=True)
class Finished:
    result: Any


@dataclass(frozen=True)
class Failed:
    message: str


Event = Progress | Finished | Failed


class Job(Protocol):
    def events(self) -> Iterator[Event]: ...

    def cancel(self) -> None: ...


def _kill_group(pid: int) -> None:
    """SIGTERM to the child's process group (it called setsid), else to the child alone."""
    try:
        os.killpg(pid, signal.SIGTERM)
    except (ProcessLookupError, PermissionError):
        try:
            os.kill(pid, signal.SIGTERM)
        except ProcessLookupError:
            pass


def _trace_child(paths: list[str], out: Any) -> None:
    """In the child: the same three steps as ``diagnoser analyze``, each reported."""
    os.setsid()
    from diagnoser.errors import InputError

    try:
        out.put(Progress(0, 3, f"reading {', '.join(Path(p).name for p in paths)}"))
        from diagnoser.trace.analysis import analyze_traces
        from diagnoser.trace.facts import to_observations
        from diagnoser.trace.load import load_traces

        traces = load_traces(paths)
        out.put(Progress(1, 3, f"finding steps on {len(traces)} rank(s)"))
        analysis = analyze_traces(traces)
        out.put(Progress(2, 3, f"{len(analysis.steps)} steps: extracting facts"))
        observations = to_observations(analysis)
        out.put(Finished(observations.model_dump(mode="json", exclude_unset=True)))
    except InputError as err:
        out.put(Failed(str(err)))
    except Exception as err:  # noqa: BLE001 - reported to the interface, which stays up
        out.put(Failed(f"internal error: {type(err).__name__}: {err}"))


class TraceJob:
    """``load_traces`` -> ``analyze_traces`` -> ``to_observations`` in a spawned child process."""

    def __init__(self, paths: list[str]) -> None:
        import multiprocessing

        context = multiprocessing.get_context("spawn")  # never fork a process that runs threads
        self._queue = context.Queue()
        self._process = context.Process(target=_trace_child, args=(list(paths), self._queue))
        self._cancelled = threading.Event()
        self._process.start()

    def events(self) -> Iterator[Event]:
        try:
            while True:
                if self._cancelled.is_set():
                    yield Failed("cancelled")
                    return
                try:
                    event = self._queue.get(timeout=POLL_S)
                except queue.Empty:
                    if not self._process.is_alive():
                        yield Failed(f"the analysis stopped (exit code {self._process.exitcode})")
                        return
                    continue
                if isinstance(event, Finished):
                    from diagnoser.models.observations import Observations

                    yield Finished(Observations.model_validate(event.result))
                    return
                yield event
                if isinstance(event, Failed):
                    return
        finally:
            self.cancel()
            self._process.join(timeout=5)

    def cancel(self) -> None:
        self._cancelled.set()
        if self._process.is_alive() and self._process.pid is not None:
            _kill_group(self._process.pid)


class ProbeJob:
    """``diagnoser probe --only NAME --json`` once per probe, against a copy of the case.

    Running the CLI keeps torch and CUDA out of the interface's process and gives the probes
    exactly the options ``probe --case`` derives from the pin. The result is the list of
    reports, one per probe, for the caller to merge.
    """

    def __init__(self, case_json: str, names: list[str], endpoint: str | None = None, model_name: str | None = None) -> None:
        self._names = names
        self._flags = [*(["--endpoint", endpoint] if endpoint else []), *(["--model-name", model_name] if model_name else [])]
        self._dir = tempfile.TemporaryDirectory(prefix="diagnoser-probe-")
        self._case = Path(self._dir.name) / "case.json"
        self._case.write_text(case_json)
        self._cancelled = threading.Event()
        self._proc: subprocess.Popen | None = None

    def _run_one(self, name: str) -> tuple[Path | None, str]:
        out = Path(self._dir.name) / f"{name}.json"
        argv = [sys.executable, "-m", "diagnoser", "probe", "--only", name, "--json", "-o", str(out), "--case", str(self._case), *self._flags]
        self._proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, start_new_session=True)
        _, err = self._proc.communicate()
        lines = [line for line in (err or "").splitlines() if line.strip()]
        return (out if self._proc.returncode == 0 and out.exists() else None), (lines[-1] if lines else f"exit code {self._proc.returncode}")

    def events(self) -> Iterator[Event]:
        from diagnoser.session_ops import load_probe_report

        reports = []
        try:
            for done, name in enumerate(self._names):
                yield Progress(done, len(self._names), f"probe {name}")
                path, why = self._run_one(name)
                if self._cancelled.is_set():
                    yield Failed("cancelled")
                    return
                if path is None:
                    yield Failed(f"probe {name}: {why}")
                    return
                report = load_probe_report(path)
                reports.append(report)
                outcome = "; ".join(f"{r.name}: {r.status}{' - ' + r.reason if r.reason else ''}" for r in report.results)
                yield Progress(done + 1, len(self._names), outcome)
            yield Finished(reports)
        finally:
            self._dir.cleanup()

    def cancel(self) -> None:
        self._cancelled.set()
        if self._proc is not None and self._proc.poll() is None:
            _kill_group(self._proc.pid)


class Jobs:
    """How the app starts its jobs; tests hand the app another one."""

    def traces(self, paths: list[str]) -> Job:
        return TraceJob(paths)

    def probes(self, case_json: str, names: list[str], endpoint: str | None = None, model_name: str | None = None) -> Job:
        return ProbeJob(case_json, names, endpoint, model_name)
