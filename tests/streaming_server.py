"""A small OpenAI-compatible decode server for the client and context-sweep probe tests.

It is a real HTTP/1.1 server on 127.0.0.1 (stdlib, one thread per connection) that streams
Server-Sent Events with chunked transfer encoding, like vLLM. Its "engine" is a decode loop
with a known step time, so a test knows exactly what the probe ought to recover:

- prefill takes ``prefill_ms + prefill_ms_per_1k_prompt * prompt/1000`` and yields token 1;
- token i (i >= 2) takes ``step_ms + step_ms_per_1k_context * (prompt + i - 1)/1000``;
- ``stream_interval`` tokens are coalesced into one chunk (a server-side stream interval);
- ``burst`` chunks are held in the output path and written together (the buffering fault);
- ``truncate_after`` cuts the stream off in the middle of an event (a crashed proxy), and
  ``error_after`` ends it with an error event (an engine failure mid-request);
- ``reasoning_tokens``: chat deltas of the first tokens are ``reasoning_content``;
- ``server_timing`` adds the per-chunk ``server_timing`` extension the client probe reads:
  ``emitted_ns`` is stamped when the engine produced the chunk, i.e. before any buffering, and
  ``step_ms`` is the scheduled step time, standing in for device time that host load on the
  test machine does not stretch.

The server runs in its own process (see ``StreamingServer``). Deadlines are absolute (the loop sleeps until the step's end, not for the step's length), so
scheduling overhead does not accumulate into the measured step time.
"""

from __future__ import annotations

import json
import select
import socket
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

MAX_TOKENS_CAP = 4096  # bounds every decode loop, whatever a request asks for
STARTUP_TIMEOUT_S = 30


@dataclass
class DecodeConfig:
    step_ms: float = 10.0
    step_ms_per_1k_context: float = 0.0
    prefill_ms: float = 5.0
    prefill_ms_per_1k_prompt: float = 0.0
    stream_interval: int = 1
    burst: int = 1
    server_timing: bool = False
    per_chunk_usage: bool = True  # honour stream_options.continuous_usage_stats
    truncate_after: int | None = None  # write half an event after this many tokens, then stop
    error_after: int | None = None  # send an error event after this many tokens, then stop
    reasoning_tokens: int = 0  # chat: the first tokens stream as reasoning_content
    api_key: str | None = None  # when set, requests must carry it as a bearer token
    model: str = "toy-decoder"


def prompt_tokens(prompt: Any) -> int:
    """Token ids count one each; text counts one token per whitespace-separated word."""
    if isinstance(prompt, list) and all(isinstance(t, int) for t in prompt):
        return len(prompt)
    if isinstance(prompt, str):
        return len(prompt.split())
    raise ValueError("prompt must be a string or a list of token ids")


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: "_Server"

    def setup(self) -> None:
        super().setup()
        # Without this, Nagle's algorithm holds small SSE writes back and fakes bursts.
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - stdlib signature
        pass

    def _json(self, status: int, body: dict[str, Any]) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _write_chunk(self, events: list[dict[str, Any] | str]) -> None:
        payload = "".join(f"data: {e if isinstance(e, str) else json.dumps(e)}\n\n" for e in events).encode()
        self.wfile.write(f"{len(payload):x}\r\n".encode() + payload + b"\r\n")

    def do_GET(self) -> None:  # noqa: N802 - stdlib name
        if self.path.rstrip("/") == "/v1/models":
            self._json(200, {"object": "list", "data": [{"id": self.server.config.model, "object": "model"}]})
        else:
            self._json(404, {"error": {"message": f"no route {self.path}"}})

    def do_POST(self) -> None:  # noqa: N802 - stdlib name
        chat = self.path == "/v1/chat/completions"
        key = self.server.config.api_key
        if key and self.headers.get("Authorization") != f"Bearer {key}":
            self._json(401, {"error": {"message": "invalid API key"}})
            return
        if self.path not in ("/v1/completions", "/v1/chat/completions"):
            self._json(404, {"error": {"message": f"no route {self.path}"}})
            return
        try:
            body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))))
            prompt = body["messages"][-1]["content"] if chat else body["prompt"]
            n_prompt = prompt_tokens(prompt)
            n_out = min(int(body.get("max_tokens") or body.get("max_completion_tokens") or 16), MAX_TOKENS_CAP)
        except (ValueError, KeyError, TypeError, IndexError) as err:
            self._json(400, {"error": {"message": f"bad request: {err}"}})
            return
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        self._decode(body, chat, n_prompt, n_out)
        self.wfile.write(b"0\r\n\r\n")

    def _decode(self, body: dict[str, Any], chat: bool, n_prompt: int, n_out: int) -> None:
        cfg = self.server.config
        options = body.get("stream_options") or {}
        continuous = cfg.per_chunk_usage and bool(options.get("continuous_usage_stats"))
        kind = "chat.completion.chunk" if chat else "text_completion"
        held: list[dict[str, Any] | str] = []
        held_content = 0  # token-carrying events held back (the chat role event does not count)
        pending_tokens: list[str] = []
        deadline = time.perf_counter()
        step_times: list[float] = []  # the "device" time of each token in the pending chunk
        for i in range(1, n_out + 1):
            if i == 1:
                step = cfg.prefill_ms + cfg.prefill_ms_per_1k_prompt * n_prompt / 1e3
            else:
                step = cfg.step_ms + cfg.step_ms_per_1k_context * (n_prompt + i - 1) / 1e3
            deadline += step / 1e3
            time.sleep(max(0.0, deadline - time.perf_counter()))
            pending_tokens.append(f" t{i}")
            step_times.append(step)
            if len(pending_tokens) < cfg.stream_interval and i < n_out:
                continue
            text = "".join(pending_tokens)
            field = "reasoning_content" if i <= cfg.reasoning_tokens else "content"
            choice = {"index": 0, "delta": {field: text}} if chat else {"index": 0, "text": text}
            choice["finish_reason"] = "length" if i == n_out else None
            event: dict[str, Any] = {"id": "cmpl-test", "object": kind, "model": cfg.model, "choices": [choice]}
            if continuous:
                event["usage"] = {"prompt_tokens": n_prompt, "completion_tokens": i, "total_tokens": n_prompt + i}
            if cfg.server_timing:
                event["server_timing"] = {"emitted_ns": time.time_ns(), "step_ms": sum(step_times) / len(step_times)}
            if chat and i == len(pending_tokens):
                held.append({"id": "cmpl-test", "object": kind, "model": cfg.model, "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}]})
            pending_tokens, step_times = [], []
            if cfg.truncate_after is not None and i > cfg.truncate_after:
                self._write_chunk([*held, json.dumps(event)[:20]])
                return
            if cfg.error_after is not None and i > cfg.error_after:
                self._write_chunk([*held, {"error": {"message": "engine died", "code": 500}}, "[DONE]"])
                return
            held.append(event)
            held_content += 1
            if held_content >= cfg.burst or i == n_out:
                self._write_chunk(held)
                held, held_content = [], 0
        tail: list[dict[str, Any] | str] = []
        if options.get("include_usage"):
            tail.append({"id": "cmpl-test", "object": kind, "model": cfg.model, "choices": [], "usage": {"prompt_tokens": n_prompt, "completion_tokens": n_out, "total_tokens": n_prompt + n_out}})
        self._write_chunk([*tail, "[DONE]"])


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, config: DecodeConfig) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.config = config


class StreamingServer:
    """Context manager: ``with StreamingServer(DecodeConfig(...)) as url:`` gives the base URL.

    The server runs in its own interpreter, as a real one would: sharing the test's process
    (and its GIL) would let the client's parsing delay the server's steps and blur the very
    timings under test.
    """

    def __init__(self, config: DecodeConfig | None = None) -> None:
        self._config = config or DecodeConfig()
        self._proc: subprocess.Popen[str] | None = None

    def __enter__(self) -> str:
        self._proc = subprocess.Popen(
            [sys.executable, __file__, json.dumps(asdict(self._config))],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        ready, _, _ = select.select([self._proc.stdout], [], [], STARTUP_TIMEOUT_S)
        line = self._proc.stdout.readline() if ready else ""
        if not line.strip().isdigit():
            self.__exit__()
            raise RuntimeError(f"streaming server did not start: {line!r}")
        return f"http://127.0.0.1:{int(line)}"

    def __exit__(self, *exc: object) -> None:
        assert self._proc is not None
        self._proc.terminate()
        try:
            self._proc.communicate(timeout=5)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.communicate()


def serve(config: DecodeConfig) -> None:
    """Bind a free loopback port, print it for the parent, and serve until terminated."""
    server = _Server(config)
    print(server.server_address[1], flush=True)
    server.serve_forever()


if __name__ == "__main__":
    serve(DecodeConfig(**json.loads(sys.argv[1])))
