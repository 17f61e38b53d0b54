"""The real vLLM, run beside diagnoser for tests, benchmarks and the lab.

    python_path() -> Path            the real vLLM's own Python (installed on first use)
    tiny_model(moe=False) -> Path    a random-weight Qwen3 built locally, cached
    with VllmServer(["--max-num-seqs", "1"]) as server:   # server.url, server.profile_dir, server.log
        ...

vLLM lives in a virtual environment of its own (``install.sh`` beside this file): its pins
(torch, transformers, pydantic) must never reach diagnoser's. Nothing here downloads a model:
the model is built from a config with seeded random weights, and the server runs offline.
A server is a process group of its own (API server, engine core, worker); stopping it sends
SIGINT to the group, as Ctrl-C would, and kills whatever is left after a grace period.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path

import httpx

INSTALL_SCRIPT = Path(__file__).with_name("install.sh")
BUILD_MODEL = Path(__file__).with_name("build_model.py")
# Cold start with torch.compile takes about 175 s on a 2-core machine, 30-90 s with the compile cache warm.
STARTUP_TIMEOUT_S = 420
STOP_GRACE_S = 30


def cache_dir() -> Path:
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "diagnoser"


class Unavailable(RuntimeError):
    """The real vLLM cannot run here (not installed and not installable, or it failed to start)."""


def _locked(name: str):
    """An exclusive file lock, so two test processes never build the same thing at once."""
    path = cache_dir() / f".{name}.lock"
    path.parent.mkdir(parents=True, exist_ok=True)
    handle = open(path, "w")  # noqa: SIM115 - released by the caller's close()
    fcntl.flock(handle, fcntl.LOCK_EX)
    return handle


def python_path(install: bool = True) -> Path:
    """The real vLLM's Python: ``DIAGNOSER_VLLM_PYTHON``, else the install script's environment."""
    given = os.environ.get("DIAGNOSER_VLLM_PYTHON")
    if given:
        return Path(given)
    if not install:
        raise Unavailable("the real vLLM is not installed (bash diagnoser/real_vllm/install.sh)")
    with _locked("install"):
        done = subprocess.run(["bash", str(INSTALL_SCRIPT)], capture_output=True, text=True, timeout=1800)
    if done.returncode != 0:
        raise Unavailable(f"installing the real vLLM failed: {done.stderr.strip()[-400:]}")
    return Path(done.stdout.strip().splitlines()[-1])


def tiny_model(moe: bool = False) -> Path:
    """The tiny model's folder, built on first use by the real vLLM's Python (a few seconds)."""
    out = cache_dir() / "models" / ("qwen3-moe-tiny" if moe else "qwen3-dense-tiny")
    if (out / "config.json").exists():
        return out
    with _locked("model"):
        if not (out / "config.json").exists():
            partial = out.with_name(out.name + ".partial")
            subprocess.run(["rm", "-rf", str(partial)], check=True)
            args = [str(python_path()), str(BUILD_MODEL), str(out)] + (["--moe"] if moe else [])
            done = subprocess.run(args, capture_output=True, text=True, timeout=600, env={**os.environ, **OFFLINE})
            if done.returncode != 0:
                raise Unavailable(f"building the tiny model failed: {done.stderr.strip()[-400:]}")
    return out


# No hub, no telemetry: everything the server needs is on disk.
OFFLINE = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "VLLM_NO_USAGE_STATS": "1", "DO_NOT_TRACK": "1"}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class VllmServer:
    """The real vLLM's OpenAI-compatible server on a loopback port, with dev mode and the torch profiler on.

    ``args`` are vLLM's own flags (``--enforce-eager``, ``--max-num-seqs 1``, ...). The server log
    is kept beside the profiles in ``workdir``.
    """

    def __init__(self, args: list[str] | tuple[str, ...] = (), workdir: str | Path | None = None, moe: bool = False,
                 dev_mode: bool = True, kv_cache_gib: int = 1, port: int = 0, env: dict[str, str] | None = None) -> None:
        self.args = list(args)
        self.env = dict(env or {})  # vLLM's own environment switches (VLLM_CUSTOM_SCOPES_FOR_PROFILING=1, ...)
        self.port = port  # 0: a free loopback port
        self.owns_workdir = workdir is None  # a folder of its own is removed with the server, profiles and all
        self.workdir = Path(workdir) if workdir else Path(cache_dir() / "servers" / f"{os.getpid()}-{time.monotonic_ns()}")
        self.moe, self.dev_mode, self.kv_cache_gib = moe, dev_mode, kv_cache_gib
        self.proc: subprocess.Popen | None = None
        self.url = ""
        self.sockets: Path | None = None

    @property
    def profile_dir(self) -> Path:
        return self.workdir / "profiles"

    @property
    def log(self) -> Path:
        return self.workdir / "server.log"

    def command(self, port: int) -> list[str]:
        profiler = {"profiler": "torch", "torch_profiler_dir": str(self.profile_dir), "torch_profiler_with_stack": False}
        return [
            str(python_path()), "-m", "vllm.entrypoints.openai.api_server", "--model", str(tiny_model(self.moe)),
            "--served-model-name", "tiny", "--host", "127.0.0.1", "--port", str(port), "--max-model-len", "4096",
            "--dtype", "bfloat16", "--profiler-config", json.dumps(profiler), *self.args,
        ]

    def __enter__(self) -> "VllmServer":
        self.profile_dir.mkdir(parents=True, exist_ok=True)
        port = self.port or free_port()
        # vLLM's processes talk over ZMQ sockets it names in the temporary folder and leaves there when
        # stopped (about seven a server); a folder of the server's own, short enough for a socket path,
        # goes with it. TMPDIR stays: torch.compile's cache lives there and is shared between servers.
        self.sockets = Path(tempfile.mkdtemp(prefix="vllm-ipc-"))
        env = {**os.environ, **OFFLINE, "VLLM_CPU_KVCACHE_SPACE": str(self.kv_cache_gib),
               "VLLM_RPC_BASE_PATH": str(self.sockets), **self.env}
        if self.dev_mode:
            env["VLLM_SERVER_DEV_MODE"] = "1"
        with open(self.log, "w") as log:
            self.proc = subprocess.Popen(self.command(port), stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                         env=env, start_new_session=True, cwd=self.workdir)
        self.url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + STARTUP_TIMEOUT_S
        with httpx.Client(timeout=2, trust_env=False) as http:
            while time.monotonic() < deadline:
                if self.proc.poll() is not None:
                    break
                try:
                    if http.get(f"{self.url}/health").status_code == 200:
                        return self
                except httpx.HTTPError:
                    pass
                time.sleep(1)
        self.stop()
        tail = self.log.read_text(errors="replace")[-1500:] if self.log.exists() else ""
        raise Unavailable(f"vLLM did not start within {STARTUP_TIMEOUT_S} s: {tail}")

    def stop(self) -> int | None:
        """SIGINT to the whole group (API server, engine core, worker), then SIGKILL to what is left."""
        if self.proc is None:
            return None
        try:
            os.killpg(self.proc.pid, signal.SIGINT)
        except ProcessLookupError:
            pass
        try:
            self.proc.wait(timeout=STOP_GRACE_S)
        except subprocess.TimeoutExpired:
            pass
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.proc.wait()
        if self.sockets is not None:
            shutil.rmtree(self.sockets, ignore_errors=True)
        return self.proc.returncode

    def __exit__(self, *exc: object) -> None:
        self.stop()
        if self.owns_workdir:
            shutil.rmtree(self.workdir, ignore_errors=True)
