"""The lab's HTTP server: OpenAI-compatible streaming completions, Prometheus metrics, profiling.

Served by FastAPI on uvicorn, as vLLM's API server is; the model runs in the engine core's own
process (``core.py``), and this process encodes prompts, detokenizes, writes the SSE and keeps
the metrics from the core's per-step outputs. Routes:

* ``GET /health``, ``GET /v1/models``;
* ``POST /v1/completions`` and ``POST /v1/chat/completions``, ``stream`` true or false; with
  ``stream_options.include_usage`` a final usage event, with ``continuous_usage_stats`` usage on
  every chunk (vLLM's extension), and on every chunk the ``server_timing`` extension the client
  probe reads (``emitted_ns`` when the chunk left the output path, ``step_ms`` the engine step
  that made its token);
* ``GET /metrics``: Prometheus text under vLLM's metric names;
* ``POST /start_profile`` and ``POST /stop_profile``: a PyTorch-profiler trace of the decode
  loop, one ``ProfilerStep#N`` range per engine step, written under ``--profile-dir``; stop
  answers with the paths written.

Bad requests get a 4xx JSON body ``{"error": {"message", "type", "code"}}``. Sampling is
greedy whatever the temperature (the weights are random; a fixed output length is what the
probes need). The ``buffered-stream`` fault lives here: finished events are held and written
in bursts, after their emission time was stamped, as a proxy in front of the server would.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import time
import uuid
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response, StreamingResponse
from starlette.exceptions import HTTPException

from diagnoser.lab.core import EngineCore, StepOutput
from diagnoser.lab.metrics import LabMetrics
from diagnoser.lab.served import server_info as published_settings
from diagnoser.lab.served import tokenizer_for
from diagnoser.lab.tokenizer import EOS, StreamDecoder, Tokenizer

BURST = 8  # events a buffering proxy holds before writing them out
MODEL = "lab-tiny-moe"
MAX_TOKENS_DEFAULT = 16
# The lab's context is a few thousand tokens: its longest prompt, as token ids or text, is tens of
# kB. A larger body is refused before it is read (a 10 MB prompt tokenised on the event loop
# stalled every stream for 16 s), and what is accepted is tokenised off the loop.
MAX_BODY_BYTES = 256 * 1024
DISCONNECT_POLL_S = 0.5  # how often an unstreamed request checks that its client is still there


@dataclass
class LabConfig:
    faults: frozenset[str] = frozenset()
    device: str = "cpu"
    profile_dir: str = "lab-profiles"
    vocab: int = 32768


class BadRequest(Exception):
    def __init__(self, message: str, code: int = 400) -> None:
        super().__init__(message)
        self.code = code


def _error(message: str, code: int) -> JSONResponse:
    kind = {400: "BadRequestError", 404: "NotFoundError", 405: "MethodNotAllowed", 409: "ConflictError", 413: "PayloadTooLarge",
            422: "BadRequestError"}
    return JSONResponse({"error": {"message": message, "type": kind.get(code, "Error"), "code": code}}, status_code=code)


def _int(body: dict, key: str, default: int, low: int, high: int) -> int:
    value = body.get(key, default)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise BadRequest(f"{key} must be an integer in {low}..{high}, got {value!r}")
    return value


def parse_prompt(body: dict, chat: bool, tokenizer: Tokenizer) -> list[int]:
    if chat:
        messages = body.get("messages")
        if not isinstance(messages, list) or not messages:
            raise BadRequest("messages must be a non-empty list")
        text = []
        for m in messages:
            if not isinstance(m, dict) or not isinstance(m.get("content"), str) or not isinstance(m.get("role"), str):
                raise BadRequest("each message needs a string role and a string content")
            text.append(f"{m['role']}: {m['content']}\n")
        return tokenizer.encode("".join(text) + "assistant:")
    prompt = body.get("prompt")
    if isinstance(prompt, str) and prompt:
        return tokenizer.encode(prompt)
    if isinstance(prompt, list) and prompt and all(isinstance(t, int) and not isinstance(t, bool) for t in prompt):
        bad = [t for t in prompt if not 0 <= t < tokenizer.vocab_size]
        if bad:
            raise BadRequest(f"token id {bad[0]} is outside the vocabulary (0..{tokenizer.vocab_size - 1})")
        return list(prompt)
    raise BadRequest("prompt must be a non-empty string or a non-empty list of token ids (one prompt per request)")


@dataclass
class Job:
    """One request as the API server tracks it: what the client asked, and the times its metrics need."""

    rid: int
    prompt: list[int]
    max_tokens: int
    ignore_eos: bool
    queue: asyncio.Queue
    arrival: float = field(default_factory=time.perf_counter)  # perf_counter: the core stamps on the same clock
    first_token: float | None = None
    last_token: float | None = None


class Requests:
    """The requests in flight, and the engine-side metrics observed as the core's steps arrive."""

    def __init__(self, metrics: LabMetrics) -> None:
        self.metrics = metrics
        self.jobs: dict[int, Job] = {}
        self.ids = itertools.count()
        metrics.api_requests.set_function(lambda: len(self.jobs))

    def add(self, prompt: list[int], max_tokens: int, ignore_eos: bool) -> Job:
        job = Job(next(self.ids), prompt, max_tokens, ignore_eos, asyncio.Queue())
        self.jobs[job.rid] = job
        return job

    def on_step(self, out: StepOutput | None) -> None:
        """In the event loop: hand each token to its stream and record what vLLM's metrics count."""
        m = self.metrics
        if out is None:  # the core is gone: every open stream ends
            for rid in list(self.jobs):
                self.jobs.pop(rid).queue.put_nowait((None, None, 0.0))
            return
        if out.batch_tokens:
            m.iteration_tokens.observe(out.batch_tokens)
        m.prompt_tokens.inc(out.prompt_tokens)
        m.running.set(out.running)
        m.waiting.set(out.waiting)
        for rid, token, text, step_ms, at, scheduled in out.tokens:
            job = self.jobs.get(rid)
            if job is None:
                continue
            if job.first_token is None:
                job.first_token = at
                m.ttft.observe(at - job.arrival)
                if scheduled is not None:
                    m.queue_time.observe(scheduled - job.arrival)
                    m.prefill_time.observe(at - scheduled)
            else:
                m.itl.observe(at - (job.last_token or at))
            job.last_token = at
            m.generation_tokens.inc()
            job.queue.put_nowait((token, text, step_ms))
        for rid, reason in out.finished:
            job = self.jobs.pop(rid, None)
            if job is None:
                continue
            m.finished(reason)
            if job.first_token is not None and job.last_token is not None:
                m.e2e.observe(job.last_token - job.arrival)
                m.decode_time.observe(job.last_token - job.first_token)
            job.queue.put_nowait((None, None, 0.0))


def create_app(config: LabConfig) -> FastAPI:
    tokenizer = tokenizer_for(config.faults, config.vocab)
    metrics = LabMetrics(MODEL)
    requests = Requests(metrics)
    state: dict[str, Any] = {}

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        loop = asyncio.get_running_loop()
        core = await asyncio.to_thread(
            EngineCore, config.faults, config.device, config.vocab, lambda out: loop.call_soon_threadsafe(requests.on_step, out)
        )
        state["core"] = app.state.core = core
        yield
        await asyncio.to_thread(core.stop)

    app = FastAPI(title="diagnoser lab", lifespan=lifespan)

    @app.exception_handler(BadRequest)
    async def bad_request(_: Request, err: BadRequest) -> JSONResponse:
        return _error(str(err), err.code)

    @app.exception_handler(RequestValidationError)
    async def invalid(_: Request, err: RequestValidationError) -> JSONResponse:
        return _error(f"invalid request: {err.errors()[0].get('msg')}", 400)

    @app.exception_handler(HTTPException)
    async def http_error(_: Request, err: HTTPException) -> JSONResponse:
        return _error(str(err.detail), err.status_code)

    @app.get("/health")
    async def health() -> Response:
        return Response(status_code=200)

    @app.get("/v1/models")
    async def models() -> dict:
        return {"object": "list", "data": [{"id": MODEL, "object": "model", "owned_by": "diagnoser-lab", "max_model_len": state["core"].cfg.max_context}]}

    @app.get("/server_info")
    async def server_info() -> dict:
        return published_settings(config.faults, state["core"].cfg, config.device)

    @app.get("/metrics")
    async def prometheus() -> Response:
        return Response(metrics.text(), media_type="text/plain; version=0.0.4; charset=utf-8")

    @app.post("/start_profile")
    async def start_profile() -> dict:
        await asyncio.to_thread(state["core"].profile, "start")
        return {"status": "profiling"}

    @app.post("/stop_profile")
    async def stop_profile() -> dict:
        folder = Path(config.profile_dir)
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / f"lab-{int(time.time() * 1000)}-rank0.pt.trace.json"
        written = await asyncio.to_thread(state["core"].profile, "stop", path)
        if not written:
            raise BadRequest("the profiler is not running (POST /start_profile first)", 409)
        return {"traces": [str(p) for p in written]}

    async def completion(request: Request, chat: bool):
        try:
            body = json.loads(await _bounded_body(request))
        except ValueError:
            raise BadRequest("the body is not JSON") from None
        if not isinstance(body, dict):
            raise BadRequest("the body must be a JSON object")
        if body.get("model", MODEL) != MODEL:
            raise BadRequest(f"the model {body.get('model')!r} does not exist (served: {MODEL})", 404)
        if _int(body, "n", 1, 1, 1) != 1:
            raise BadRequest("n must be 1")
        core: EngineCore = state["core"]
        prompt = await asyncio.to_thread(parse_prompt, body, chat, tokenizer)
        key = "max_completion_tokens" if chat and "max_completion_tokens" in body else "max_tokens"
        max_tokens = _int(body, key, MAX_TOKENS_DEFAULT, 1, core.cfg.max_context)
        if len(prompt) + max_tokens > core.cfg.max_context:
            raise BadRequest(f"prompt ({len(prompt)}) + max_tokens ({max_tokens}) exceed the context of {core.cfg.max_context}")
        options = body.get("stream_options") or {}
        if not isinstance(options, dict):
            raise BadRequest("stream_options must be an object")
        job = requests.add(prompt, max_tokens, bool(body.get("ignore_eos", False)))
        core.submit(job.rid, job.prompt, job.max_tokens, job.ignore_eos)
        stream = Stream(job, tokenizer, chat, options, "buffered-stream" in config.faults)
        if body.get("stream"):
            return StreamingResponse(stream.events(core), media_type="text/event-stream")
        return await _unless_abandoned(request, stream.whole(core))

    @app.post("/v1/completions")
    async def completions(request: Request):
        return await completion(request, chat=False)

    @app.post("/v1/chat/completions")
    async def chat_completions(request: Request):
        return await completion(request, chat=True)

    return app


async def _bounded_body(request: Request) -> bytes:
    """The body, refused with 413 past MAX_BODY_BYTES whether or not it declares its length."""
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > MAX_BODY_BYTES:
        raise BadRequest(f"the body is {int(declared)} bytes; this server takes at most {MAX_BODY_BYTES}", 413)
    body = bytearray()
    async for chunk in request.stream():
        body += chunk
        if len(body) > MAX_BODY_BYTES:
            raise BadRequest(f"the body is over {MAX_BODY_BYTES} bytes, the most this server takes", 413)
    return bytes(body)


async def _unless_abandoned(request: Request, work):
    """Await ``work`` while the client is there; a client gone cancels it, and the cancelled stream
    frees its slot (an unstreamed request otherwise kept the engine busy for minutes)."""
    task = asyncio.ensure_future(work)
    try:
        while not task.done():
            await asyncio.wait({task}, timeout=DISCONNECT_POLL_S)
            if not task.done() and await request.is_disconnected():
                task.cancel()
                return Response(status_code=499)
        return task.result()
    finally:
        if not task.done():
            task.cancel()


class Stream:
    """One request's output path: detokenization (unless the engine did it) and the SSE events."""

    def __init__(self, job: Job, tokenizer: Tokenizer, chat: bool, options: dict, buffered: bool) -> None:
        self.job, self.queue, self.chat, self.buffered = job, job.queue, chat, buffered
        self.decoder = StreamDecoder(tokenizer)
        self.usage_each = bool(options.get("continuous_usage_stats"))
        self.usage_last = bool(options.get("include_usage"))
        self.id = ("chatcmpl-" if chat else "cmpl-") + uuid.uuid4().hex[:16]
        self.created = int(time.time())
        self.tokens = 0

    def _usage(self) -> dict:
        n = len(self.job.prompt)
        return {"prompt_tokens": n, "completion_tokens": self.tokens, "total_tokens": n + self.tokens}

    def _chunk(self, text: str | None, finish: str | None, role: bool = False) -> dict:
        kind = "chat.completion.chunk" if self.chat else "text_completion"
        if self.chat:
            delta: dict[str, Any] = {"role": "assistant", "content": ""} if role else ({"content": text} if text is not None else {})
            choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}
        else:
            choice = {"index": 0, "text": text or "", "logprobs": None, "finish_reason": finish}
        return {"id": self.id, "object": kind, "created": self.created, "model": MODEL, "choices": [choice]}

    async def _tokens(self, core: EngineCore):
        """(text, step ms, finish reason) per generated token, as the engine hands them over."""
        ended = False
        try:
            while True:
                token, text, step_ms = await self.queue.get()
                if token is None:
                    ended = True
                    return
                self.tokens += 1
                if text is None:
                    text = "" if token == EOS else self.decoder.add(token)
                finish = None
                if self.tokens >= self.job.max_tokens or (token == EOS and not self.job.ignore_eos):
                    finish = "length" if self.tokens >= self.job.max_tokens else "stop"
                    text += self.decoder.flush()
                yield text, step_ms, finish
        finally:
            if not ended:  # a client gone mid-stream frees its slot
                core.cancel(self.job.rid)

    async def events(self, core: EngineCore):
        held: list[bytes] = []

        def sse(event: dict | str) -> bytes:
            return f"data: {event if isinstance(event, str) else json.dumps(event, ensure_ascii=False)}\n\n".encode()

        if self.chat:
            held.append(sse(self._chunk(None, None, role=True)))
        async for text, step_ms, finish in self._tokens(core):
            event = self._chunk(text, finish)
            if self.usage_each:
                event["usage"] = self._usage()
            event["server_timing"] = {"emitted_ns": time.time_ns(), "step_ms": step_ms}
            held.append(sse(event))
            if not self.buffered or len(held) >= BURST:
                yield b"".join(held)
                held = []
        if self.usage_last:
            held.append(sse({"id": self.id, "object": "text_completion" if not self.chat else "chat.completion.chunk",
                             "created": self.created, "model": MODEL, "choices": [], "usage": self._usage()}))
        held.append(sse("[DONE]"))
        yield b"".join(held)

    async def whole(self, core: EngineCore) -> dict:
        parts, finish = [], None
        async for text, _, finish in self._tokens(core):
            parts.append(text)
        text = "".join(parts)
        if self.chat:
            choice = {"index": 0, "message": {"role": "assistant", "content": text}, "logprobs": None, "finish_reason": finish}
        else:
            choice = {"index": 0, "text": text, "logprobs": None, "finish_reason": finish}
        kind = "chat.completion" if self.chat else "text_completion"
        return {"id": self.id, "object": kind, "created": self.created, "model": MODEL, "choices": [choice], "usage": self._usage()}
