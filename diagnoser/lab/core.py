"""The engine core in a process of its own, as vLLM's V1 engine runs beside its API server.

    EngineCore(faults, device, vocab, on_step)   the API server's handle: submit, cancel, profile, stop
    run_core(conn, faults, device, vocab)        the child process: the engine loop, fed from the pipe

In one process the HTTP event loop and the model loop share a GIL: every token the server
writes out is Python work that the next decode step waits behind, and a healthy server's
trace would show that wait as host time it does not have. Two processes keep the step's
host time what the engine itself spends. The pipe carries a few small messages per step:
requests and commands in, one ``StepOutput`` per step out.

The core ignores SIGINT (a terminal's Ctrl-C reaches the whole process group): the API server
stops it, and it also stops when the pipe closes, so it never outlives its server.
"""

from __future__ import annotations

import itertools
import multiprocessing
import signal
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from pathlib import Path

from diagnoser.lab.served import ModelConfig, model_config, tokenizer_for

READY_TIMEOUT_S = 120
STOP_TIMEOUT_S = 20


@dataclass
class StepOutput:
    """What one engine step hands the API server: the tokens it made and the requests it ended."""

    tokens: list[tuple[int, int, str | None, float, float, float | None]] = field(default_factory=list)
    # (request id, token, text or None, step ms, perf_counter at hand-off, scheduled time on the first token)
    finished: list[tuple[int, str]] = field(default_factory=list)  # (request id, finish reason)
    batch_tokens: int = 0  # prompt and generated tokens the step fed the model
    prompt_tokens: int = 0
    running: int = 0
    waiting: int = 0


class EngineCore:
    def __init__(self, faults: frozenset[str], device: str, vocab: int, on_step: Callable) -> None:
        """Starts the core and waits until its model is built; ``on_step`` gets every ``StepOutput``
        (on the reader thread) and ``None`` once the core is gone."""
        context = multiprocessing.get_context("spawn")
        self.conn, child = context.Pipe()
        self.process = context.Process(target=run_core, args=(child, faults, device, vocab), name="lab-engine-core", daemon=True)
        self.process.start()
        child.close()
        if not self.conn.poll(READY_TIMEOUT_S):
            self.process.kill()
            raise RuntimeError("the engine core did not start")
        try:
            kind, payload = self.conn.recv()
        except EOFError:
            self.process.join(STOP_TIMEOUT_S)
            kind, payload = "failed", f"it exited with code {self.process.exitcode}"
        if kind != "ready":
            self.process.join(STOP_TIMEOUT_S)
            raise RuntimeError(f"the engine core failed to start: {payload}")
        self.cfg: ModelConfig = payload
        self.on_step = on_step
        self.sending = threading.Lock()
        self.replies: dict[int, tuple[threading.Event, list]] = {}
        self.reply_ids = itertools.count()
        self.reader = threading.Thread(target=self._read, name="lab-core-reader", daemon=True)
        self.reader.start()

    def _send(self, message: tuple) -> None:
        with self.sending:
            self.conn.send(message)

    def _read(self) -> None:
        try:
            while True:
                kind, *rest = self.conn.recv()
                if kind == "step":
                    self.on_step(rest[0])
                elif kind == "profiled":
                    event, result = self.replies.pop(rest[0])
                    result.append(rest[1])
                    event.set()
        except (EOFError, OSError):
            pass
        for event, result in list(self.replies.values()):
            result.append(RuntimeError("the engine core stopped"))
            event.set()
        self.on_step(None)

    def submit(self, rid: int, prompt: list[int], max_tokens: int, ignore_eos: bool) -> None:
        self._send(("submit", rid, prompt, max_tokens, ignore_eos))

    def cancel(self, rid: int) -> None:
        try:
            self._send(("cancel", rid))
        except (OSError, ValueError):  # the core is already gone, and the request with it
            pass

    def profile(self, command: str, path: Path | None = None, timeout_s: float = 120.0) -> list[Path]:
        """``start`` or ``stop`` the profiler between two steps; the traces a stop wrote. Blocks."""
        reply_id = next(self.reply_ids)
        reply = self.replies[reply_id] = (threading.Event(), [])
        self._send(("profile", reply_id, command, path))
        if not reply[0].wait(timeout_s):
            raise TimeoutError("the engine core did not answer the profiler command")
        result = reply[1][0]
        if isinstance(result, Exception):
            raise result
        return result

    def request_stop(self) -> None:
        """Ask the core to end its streams and exit; returns at once. From a thread of its own, as a
        signal handler may have interrupted a send that holds the lock."""
        threading.Thread(target=self._send_stop, name="lab-core-stop", daemon=True).start()

    def _send_stop(self) -> None:
        try:
            self._send(("stop",))
        except (OSError, ValueError):  # already gone
            pass

    def stop(self) -> None:
        self._send_stop()
        self.process.join(STOP_TIMEOUT_S)
        if self.process.is_alive():
            self.process.kill()
            self.process.join()
        self.conn.close()


def run_core(conn: Connection, faults: frozenset[str], device: str, vocab: int) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    from diagnoser.lab.engine import Engine, Request

    try:
        cfg = model_config(faults, vocab)
        tp = None
        if "straggler" in faults:
            from diagnoser.lab.straggler import TensorParallel

            tp = TensorParallel(cfg.layers, cfg.hidden, late=True, device=device)
        sending = threading.Lock()

        def send(out) -> None:
            with sending:
                conn.send(("step", out))

        engine = Engine(faults, cfg, device, tokenizer_for(faults, vocab), send, tp)
    except Exception as err:  # noqa: BLE001 - reported to the API server, which refuses to start
        conn.send(("failed", f"{type(err).__name__}: {err}"))
        return
    conn.send(("ready", cfg))

    def profile(reply_id: int, command: str, path: Path | None) -> None:
        try:
            result: object = engine.profile_command(command, path, 120.0)
        except Exception as err:  # noqa: BLE001 - sent back to the API server's caller
            result = err
        with sending:
            conn.send(("profiled", reply_id, result))

    def commands() -> None:
        try:
            while True:
                kind, *args = conn.recv()
                if kind == "submit":
                    rid, prompt, max_tokens, ignore_eos = args
                    engine.submit(Request(rid, prompt, max_tokens, ignore_eos))
                elif kind == "cancel":
                    engine.cancel(args[0])
                elif kind == "profile":  # waits for a step boundary: off this thread, so submits go on
                    threading.Thread(target=profile, args=args, daemon=True).start()
                elif kind == "stop":
                    break
        except (EOFError, OSError):
            pass
        engine.stop()

    threading.Thread(target=commands, name="lab-core-commands", daemon=True).start()
    engine.run()
