"""Starting the lab server: in this process (``serve``), or as a child the caller stops (``LabServer``).

The server binds its own socket (port 0 picks a free one) before it prints the URL, so the
line a parent reads names a port that already accepts connections. SIGINT shuts it down the
way uvicorn does: new connections refused, the engine stopped, open streams ended, then exit.
"""

from __future__ import annotations

import os
import select
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

READY = "diagnoser lab: serving "
STARTUP_TIMEOUT_S = 120
STOP_TIMEOUT_S = 20


def serve(config, host: str = "127.0.0.1", port: int = 8000) -> None:
    """Run the server until SIGINT or SIGTERM; prints the ready line with the bound URL."""
    import uvicorn

    from diagnoser.lab.server import create_app

    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as err:
        from diagnoser.errors import InputError

        raise InputError(f"--port {port}: cannot listen on {host}:{port} ({err.strerror})") from None
    sock.listen(128)
    app = create_app(config)
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", timeout_graceful_shutdown=5))
    original, on_signal = server.startup, server.handle_exit

    async def startup(sockets=None):
        await original(sockets=sockets)
        print(f"{READY}http://{host}:{sock.getsockname()[1]}", flush=True)

    def handle_exit(sig, frame) -> None:
        # Stop the engine core first: it ends every open stream, so uvicorn's graceful wait for
        # connections to close does not run out on a stream still generating.
        core = getattr(app.state, "core", None)
        if core is not None:
            core.request_stop()
        on_signal(sig, frame)

    server.startup, server.handle_exit = startup, handle_exit
    try:
        server.run(sockets=[sock])
    except KeyboardInterrupt:  # uvicorn re-raises the SIGINT it handled; the shutdown is done
        pass


def _children(pid: int) -> list[int]:
    """Live descendants of ``pid``, from /proc (no psutil needed)."""
    out, frontier = [], [pid]
    while frontier:
        parent = frontier.pop()
        for entry in Path("/proc").glob("[0-9]*/stat"):
            try:
                fields = entry.read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[1]) == parent and fields[0] != "Z":
                child = int(entry.parent.name)
                out.append(child)
                frontier.append(child)
    return out


def still_running(pids: list[int], grace_s: float = 5.0) -> list[int]:
    """Those of ``pids`` alive after up to ``grace_s`` (zombies count as gone), from /proc. The grace
    is for multiprocessing's resource tracker, which leaves only once its parent has exited."""
    deadline = time.monotonic() + grace_s
    while True:
        alive = []
        for pid in pids:
            try:
                state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
            except (OSError, IndexError):
                continue
            if state != "Z":
                alive.append(pid)
        if not alive or time.monotonic() >= deadline:
            return alive
        time.sleep(0.1)


class LabServer:
    """``with LabServer(["sort-sampler"]) as url:`` runs ``diagnoser lab serve --imitation`` in a child process."""

    def __init__(self, faults: list[str] | tuple[str, ...] = (), profile_dir: str | Path = "lab-profiles", device: str = "cpu") -> None:
        args = [sys.executable, "-m", "diagnoser", "lab", "serve", "--imitation", "--port", "0", "--device", device,
                "--profile-dir", str(profile_dir)]
        for fault in faults:
            args += ["--fault", fault]
        self.args = args
        self.proc: subprocess.Popen[str] | None = None
        self.url = ""

    def __enter__(self) -> str:
        self.proc = subprocess.Popen(self.args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
        deadline = time.monotonic() + STARTUP_TIMEOUT_S
        line = ""
        while time.monotonic() < deadline and self.proc.poll() is None:
            ready, _, _ = select.select([self.proc.stdout], [], [], 1.0)
            if ready:
                line = self.proc.stdout.readline()
                if line.startswith(READY):
                    self.url = line[len(READY):].strip()
                    return self.url
        self.__exit__()
        err = self.proc.stderr.read() if self.proc.stderr else ""
        raise RuntimeError(f"lab server did not start: {line!r} {err[-500:]}")

    def stop(self) -> int:
        """SIGINT, as a user's Ctrl-C; the exit code. Anything still alive after it is killed."""
        assert self.proc is not None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(timeout=STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)  # a worker left behind by a failed shutdown
        except ProcessLookupError:
            pass
        for stream in (self.proc.stdout, self.proc.stderr):
            if stream:
                stream.close()
        return self.proc.returncode

    def __exit__(self, *exc: object) -> None:
        if self.proc is not None:
            self.stop()
