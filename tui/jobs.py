"""Long evidence work (trace analysis, probes) in child processes the TUI can watch and stop.

A thread cannot be stopped in the middle of parsing 300 MB of JSON, and a parse that holds
the GIL stalls the interface; a child process can be killed at once and leaves the
interface's process free. Each job reports ``Progress`` as it goes and ends with exactly one
``Finished`` or ``Failed``; ``cancel`` kills the child and its own workers (it leads a
process group of its own). Children are plain subprocesses talking JSON lines on stdout, not
``multiprocessing``: its helper process cannot start while Textual holds the standard streams,
and a child's stray output must never reach the terminal the interface draws on. Nothing
here imports Textual.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

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
    """SIGTERM to the child's process group (it was started in a session of its own): its workers go too."""
    try:
        os.killpg(pid, signal.SIGTERM)
    except (ProcessLookupError, PermissionError):
        try:
            os.kill(pid, signal.SIGTERM)
        except ProcessLookupError:
            pass


def trace_main(paths: list[str]) -> int:
    """In the child (``python -m diagnoser.tui.jobs PATH...``): ``diagnoser analyze``'s stages, each reported.

    Events go to stdout as JSON lines; nothing else is printed there.
    """
    import json

    from diagnoser.errors import InputError

    def say(**event: Any) -> None:
        print(json.dumps(event), flush=True)

    try:
        from diagnoser.analysis_stages import analyze_in_stages

        _, observations = analyze_in_stages(paths, lambda done, total, text: say(progress=[done, total, text]))
        say(observations=observations.model_dump(mode="json", exclude_unset=True))
    except InputError as err:
        say(error=str(err))
    except Exception as err:  # noqa: BLE001 - reported to the interface, which stays up
        say(error=f"internal error: {type(err).__name__}: {err}")
    return 0


class TraceJob:
    """``load_traces`` -> ``analyze_traces`` -> ``to_observations`` in a child process of its own."""

    def __init__(self, paths: list[str]) -> None:
        argv = [sys.executable, "-m", "diagnoser.tui.jobs", *paths]
        self._proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, start_new_session=True)
        self._cancelled = threading.Event()

    def events(self) -> Iterator[Event]:
        import json

        from diagnoser.models.observations import Observations

        try:
            for line in self._proc.stdout:
                if self._cancelled.is_set():
                    break
                event = json.loads(line)
                if "progress" in event:
                    yield Progress(*event["progress"])
                elif "observations" in event:
                    yield Finished(Observations.model_validate(event["observations"]))
                    return
                else:
                    yield Failed(event["error"])
                    return
            self._proc.wait()
            yield Failed("cancelled" if self._cancelled.is_set() else f"the analysis stopped (exit code {self._proc.returncode})")
        finally:
            self.cancel()
            self._proc.wait()
            self._proc.stdout.close()

    def cancel(self) -> None:
        self._cancelled.set()
        if self._proc.poll() is None:
            _kill_group(self._proc.pid)


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


if __name__ == "__main__":
    sys.exit(trace_main(sys.argv[1:]))
