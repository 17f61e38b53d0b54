"""Streaming requests to OpenAI-compatible endpoints, timed chunk by chunk at the client.

Only what arrives is recorded here (receipt times, text, token counts, any server timing);
the metrics are computed in ``serving_metrics`` so they can be checked by hand.

Token counts per chunk come from vLLM's ``stream_options.continuous_usage_stats`` (each chunk
carries cumulative ``usage.completion_tokens``) when the server honours it. A server that
wants its own emission reconciled with the client's receipt may add, to each chunk, the
extension ``"server_timing": {"emitted_ns": <time.time_ns() when the engine produced the
chunk>, "step_ms": <engine time per token for it>}``; the probe uses it when present.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

import httpx

from diagnoser.errors import InputError
from diagnoser.probes.base import ProbeTimeout

_LINE_BREAK = re.compile(r"\r\n|\n|\r")

APIS = {"completions": "completions", "chat": "chat/completions"}


@dataclass
class Chunk:
    """One SSE event that carried a choice."""

    received_s: float  # time.perf_counter() at receipt
    received_ns: int  # time.time_ns() at receipt, comparable with a same-host server's clock
    text: str
    completion_tokens: int | None = None  # cumulative, from continuous usage stats
    emitted_ns: int | None = None
    step_ms: float | None = None


@dataclass
class StreamedResponse:
    start_s: float  # time.perf_counter() just before the request was sent
    chunks: list[Chunk] = field(default_factory=list)
    completion_tokens: int | None = None  # from the final usage, when sent
    prompt_tokens: int | None = None


def v1_base(endpoint: str) -> str:
    """``http://host:port``, ``.../v1`` or a full ``.../v1/completions`` URL -> ``.../v1``."""
    parts = urlsplit(endpoint)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise InputError(f"{endpoint}: endpoint must be an http(s) URL such as http://127.0.0.1:8000")
    base = endpoint.rstrip("/")
    for suffix in APIS.values():
        base = base.removesuffix("/" + suffix)
    return base if base.endswith("/v1") else base + "/v1"


def api_url(endpoint: str, api: str) -> str:
    if api not in APIS:
        raise InputError(f"api must be one of {', '.join(APIS)}, got {api!r}")
    return f"{v1_base(endpoint)}/{APIS[api]}"


def _server_message(response: httpx.Response) -> str:
    try:
        body = response.json()
        return str(body.get("error", {}).get("message") or body.get("message") or body)[:200]
    except ValueError:
        return response.text[:200].strip() or response.reason_phrase


def _get(client: httpx.Client, url: str) -> httpx.Response:
    try:
        response = client.get(url)
    except httpx.HTTPError as err:
        raise InputError(f"{url}: {type(err).__name__}: {err}") from None
    if response.status_code != 200:
        raise InputError(f"{url}: HTTP {response.status_code}: {_server_message(response)}")
    return response


def served_model(client: httpx.Client, endpoint: str) -> str:
    """The first model the server lists, for when the user did not name one."""
    url = f"{v1_base(endpoint)}/models"
    try:
        return str(_get(client, url).json()["data"][0]["id"])
    except (ValueError, KeyError, IndexError, TypeError):
        raise InputError(f"{url}: no model listed; pass the model name") from None


def request_body(api: str, model: str, prompt: str | list[int], max_tokens: int, options: dict[str, Any]) -> dict[str, Any]:
    """A greedy streaming request of a fixed length.

    Two vLLM extensions are on unless the options turn them off for a stricter server:
    ``ignore_eos`` (generate exactly ``max_tokens``) and ``per_chunk_usage``
    (``continuous_usage_stats``: a cumulative token count on every chunk).
    """
    stream_options = {"include_usage": True}
    if options.get("per_chunk_usage", True):
        stream_options["continuous_usage_stats"] = True
    body: dict[str, Any] = {
        "model": model,
        "max_tokens": max_tokens,
        "temperature": 0.0,
        "stream": True,
        "stream_options": stream_options,
    }
    if api == "chat":
        body["messages"] = [{"role": "user", "content": prompt}]
    else:
        body["prompt"] = prompt
    if options.get("ignore_eos", True):
        body["ignore_eos"] = True
    return body


def _choice_text(choice: dict[str, Any]) -> str:
    """Generated text of a choice, counting a reasoning model's thinking tokens as generated."""
    delta = choice.get("delta")
    if not isinstance(delta, dict):
        return choice.get("text") or ""
    return delta.get("content") or delta.get("reasoning_content") or delta.get("reasoning") or ""


def _record(data: dict[str, Any], response: StreamedResponse, now_s: float, now_ns: int) -> None:
    usage = data.get("usage") if isinstance(data.get("usage"), dict) else None
    if data.get("choices"):
        timing = data.get("server_timing") or {}
        response.chunks.append(
            Chunk(
                received_s=now_s,
                received_ns=now_ns,
                text=_choice_text(data["choices"][0]),
                completion_tokens=usage.get("completion_tokens") if usage else None,
                emitted_ns=timing.get("emitted_ns"),
                step_ms=timing.get("step_ms"),
            )
        )
    elif usage:
        response.completion_tokens = usage.get("completion_tokens")
        response.prompt_tokens = usage.get("prompt_tokens")


def _lines_by_read(reply: httpx.Response) -> Iterator[tuple[float, int, str]]:
    """Each complete line with the time of the network read that completed it.

    Events a buffering proxy wrote together arrive in one read and so get one receipt time;
    stamping each line as it is parsed would instead spread them by the client's own parsing
    speed, which on a busy host is large enough to hide the burst. A CRLF split across two
    reads yields one extra empty line, which SSE treats as a separator anyway.
    """
    pending = ""
    for text in reply.iter_text():
        now_s, now_ns = time.perf_counter(), time.time_ns()
        pending += text
        *lines, pending = _LINE_BREAK.split(pending)
        for line in lines:
            yield now_s, now_ns, line
    if pending:
        yield time.perf_counter(), time.time_ns(), pending


def stream(client: httpx.Client, url: str, body: dict[str, Any], timeout_s: float) -> StreamedResponse:
    """Send one streaming request and timestamp every event as it is parsed off the wire."""
    response = StreamedResponse(start_s=time.perf_counter())
    try:
        with client.stream("POST", url, json=body, timeout=httpx.Timeout(timeout_s)) as reply:
            if reply.status_code != 200:
                reply.read()
                raise InputError(f"{url}: HTTP {reply.status_code}: {_server_message(reply)}")
            for now_s, now_ns, line in _lines_by_read(reply):
                if now_s - response.start_s > timeout_s:
                    raise ProbeTimeout(f"{url}: stream still open after {timeout_s:.0f} s")
                if not line.startswith("data:"):
                    continue  # blank separators, SSE comments (pings), event names
                payload = line[5:].strip()
                if payload == "[DONE]":
                    break
                try:
                    data = json.loads(payload)
                except ValueError:
                    raise InputError(f"{url}: malformed stream event: {payload[:80]!r}") from None
                if not isinstance(data, dict):
                    raise InputError(f"{url}: stream event is not a JSON object: {payload[:80]!r}")
                if data.get("error"):
                    error = data["error"]
                    raise InputError(f"{url}: server error in stream: {error.get('message') if isinstance(error, dict) else error}")
                _record(data, response, now_s, now_ns)
    except httpx.HTTPError as err:
        raise InputError(f"{url}: {type(err).__name__}: {err}") from None
    if not response.chunks:
        raise InputError(f"{url}: the stream carried no generated chunk")
    # Cumulative counts in the last chunk stand in for a missing final usage event.
    if response.completion_tokens is None:
        response.completion_tokens = response.chunks[-1].completion_tokens
    return response
