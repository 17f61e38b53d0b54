"""A profile of a short load through the server's own profiler endpoints.

vLLM answers ``/stop_profile`` with an empty 200 and writes its traces afterwards, one file per
process, into the profiler folder it was started with; so the traces are the files that
appeared there since ``/start_profile``, once their sizes stop changing. That folder is read on
this host: the configured one when it exists here, else the one the user names.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from diagnoser.http import Client, HttpError

TRACE_SUFFIXES = (".pt.trace.json", ".pt.trace.json.gz", ".json", ".json.gz")
SETTLE_POLL_S = 1.0
START_TIMEOUT_S = 30


@dataclass
class Profile:
    traces: list[Path] = field(default_factory=list)
    note: str = ""  # why there is no profile, or what to know about it


def _traces(folder: Path) -> dict[Path, int]:
    found = {}
    for path in folder.glob("*"):
        if path.is_file() and path.name.endswith(TRACE_SUFFIXES):
            try:
                found[path] = path.stat().st_size
            except OSError:
                continue
    return found


def settled(folder: Path, known: set[Path], timeout_s: float) -> list[Path]:
    """New trace files in ``folder`` once two polls a second apart see the same sizes (at most ``timeout_s``)."""
    deadline = time.monotonic() + timeout_s
    previous: dict[Path, int] = {}
    while time.monotonic() < deadline:
        current = {p: s for p, s in _traces(folder).items() if p not in known}
        if current and current == previous and all(current.values()):
            return sorted(current)
        previous = current
        time.sleep(SETTLE_POLL_S)
    return sorted(previous)


def profile(url: str, folder: Path | None, run: Callable[[], object], settle_timeout_s: float) -> Profile:
    """Profile what ``run`` does on the server; the new trace files, or a note saying why there are none."""
    if folder is None:
        return Profile(note="no profiler folder on this host: pass --profile-dir DIR (the server's torch_profiler_dir), or --no-profile")
    if not folder.is_dir():
        return Profile(note=f"--profile-dir {folder}: not a folder on this host")
    known = set(_traces(folder))
    with Client(url, timeout_s=START_TIMEOUT_S) as http:
        try:
            started = http.post(f"{url}/start_profile")
        except HttpError as err:
            return Profile(note=str(err))
        if started.status_code != 200:
            return Profile(note=f"{url}/start_profile: HTTP {started.status_code} (start the server with a profiler, "
                                "e.g. vLLM's --profiler-config '{\"profiler\":\"torch\",\"torch_profiler_dir\":DIR}')")
        try:
            run()
        finally:
            try:
                stopped = http.post(f"{url}/stop_profile", timeout_s=max(START_TIMEOUT_S, settle_timeout_s))
            except HttpError as err:
                return Profile(note=str(err))
    if stopped.status_code != 200:
        return Profile(note=f"{url}/stop_profile: HTTP {stopped.status_code}")
    traces = settled(folder, known, settle_timeout_s)
    if not traces:
        return Profile(note=f"no new trace in {folder} within {settle_timeout_s:.0f} s of /stop_profile")
    return Profile(traces=traces)
