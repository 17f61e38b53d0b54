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
import math
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from diagnoser.errors import InputError
from diagnoser.http import Client, HttpError, Reply, Streaming

# What a server claims is checked before it becomes a figure: no request generates or reads
# more tokens than this, and no engine step takes longer than a minute.
MAX_CLAIMED_TOKENS = 10_000_000
MAX_CLAIMED_STEP_MS = 60_000.0

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
    content_encoding: str = ""  # the reply's, as sent: an event stream compressed on the way


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


def _server_message(response: Reply) -> str:
    """The server's own words about a failure, on one line (it is shown to the user as is)."""
    try:
        body = response.json()
    except ValueError:
        body = None
    if isinstance(body, dict):
        error = body.get("error")
        text = (error.get("message") if isinstance(error, dict) else error) or body.get("message") or body
    else:
        text = response.text.strip() or response.reason_phrase
    return " ".join(str(text)[:200].split())


def _get(client: Client, url: str) -> Reply:
    response = client.get(url)
    if response.status_code != 200:
        raise InputError(f"{url}: HTTP {response.status_code}: {_server_message(response)}")
    return response


def served_model(client: Client, endpoint: str) -> str:
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


def _claimed(value: Any, what: str, high: float, url: str, whole: bool = True) -> Any:
    """A number the server claims, or None when it claims none; an impossible one refuses the stream."""
    if value is None:
        return None
    kinds = (int,) if whole else (int, float)
    if isinstance(value, bool) or not isinstance(value, kinds) or not (0 <= value <= high and math.isfinite(value)):
        kind = "a whole number" if whole else "a number"
        raise HttpError(f"{url}: the server claims an impossible {what} (not {kind} from 0 to {high:,.0f})")
    return value


def _record(data: dict[str, Any], response: StreamedResponse, now_s: float, now_ns: int, url: str) -> None:
    usage = data.get("usage") if isinstance(data.get("usage"), dict) else {}
    completion = _claimed(usage.get("completion_tokens"), "a completion token count", MAX_CLAIMED_TOKENS, url)
    choices = data.get("choices")
    if choices:
        if not isinstance(choices, list) or not isinstance(choices[0], dict):
            raise HttpError(f"{url}: a stream event whose choices are not a list of objects")
        timing = data.get("server_timing") if isinstance(data.get("server_timing"), dict) else {}
        text = _choice_text(choices[0])
        response.chunks.append(
            Chunk(
                received_s=now_s,
                received_ns=now_ns,
                text=text if isinstance(text, str) else str(text),
                completion_tokens=completion,
                emitted_ns=_claimed(timing.get("emitted_ns"), "an emission time", 2**63, url),
                step_ms=_claimed(timing.get("step_ms"), "a step time", MAX_CLAIMED_STEP_MS, url, whole=False),
            )
        )
    elif usage:
        response.completion_tokens = completion
        response.prompt_tokens = _claimed(usage.get("prompt_tokens"), "a prompt token count", MAX_CLAIMED_TOKENS, url)


def _events(reply: Streaming, url: str) -> Iterator[tuple[float, int, dict[str, Any]]]:
    """Each ``data:`` event as a JSON object, with its receipt times, until ``[DONE]``."""
    for now_s, now_ns, line in reply.lines():
        if not line.startswith("data:"):
            continue  # blank separators, SSE comments (pings), event names
        payload = line[5:].strip()
        if payload == "[DONE]":
            return
        try:
            data = json.loads(payload)
        except (ValueError, RecursionError):
            raise HttpError(f"{url}: malformed stream event: {payload[:80]!r}") from None
        if not isinstance(data, dict):
            raise HttpError(f"{url}: stream event is not a JSON object: {payload[:80]!r}")
        yield now_s, now_ns, data


def stream(
    client: Client, url: str, body: dict[str, Any], timeout_s: float, on_chunk: Callable[[int], None] | None = None,
) -> StreamedResponse:
    """Send one streaming request and timestamp every event as it is parsed off the wire.
    ``on_chunk(chunks so far)`` after each generated chunk lets a caller act at a point in the stream
    rather than at a time, which a busy machine would shift."""
    response = StreamedResponse(start_s=time.perf_counter())
    with client.stream("POST", url, json=body, timeout_s=timeout_s) as reply:
        if reply.status_code != 200:
            raise HttpError(f"{url}: HTTP {reply.status_code}: {_server_message(reply.read())}")
        response.content_encoding = reply.content_encoding
        for now_s, now_ns, data in _events(reply, url):
            if data.get("error"):
                error = data["error"]
                message = error.get("message") if isinstance(error, dict) else error
                raise HttpError(f"{url}: server error in stream: {' '.join(str(message)[:200].split())}")
            _record(data, response, now_s, now_ns, url)
            if on_chunk is not None and data.get("choices"):
                on_chunk(len(response.chunks))
    if not response.chunks:
        raise InputError(f"{url}: the stream carried no generated chunk")
    # Cumulative counts in the last chunk stand in for a missing final usage event.
    if response.completion_tokens is None:
        response.completion_tokens = response.chunks[-1].completion_tokens
    return response
