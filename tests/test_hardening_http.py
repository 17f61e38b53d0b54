"""The HTTP layer against hostile loopback servers: a wall-clock budget, byte caps, no environment proxy."""

from __future__ import annotations

import time

import pytest
from hostile_servers import Behaviour, Server, flood, gzip_bomb, sse, trickle, whole

from diagnoser.http import MAX_BODY_BYTES, Client, HttpError, HttpTimeout, is_loopback

HEAD_SSE = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n\r\n"


def _served(reply, lifetime_s: float = 20) -> Server:
    return Server(Behaviour("test", reply), lifetime_s=lifetime_s)


@pytest.mark.parametrize("reply", [trickle(HEAD_SSE + b"data: ", b"x", 0.2), trickle(b"HTTP/1.1 200 OK\r\n", b"X", 0.2)],
                         ids=["a body that trickles", "headers that trickle"])
def test_a_trickling_server_is_cut_at_the_budget(reply):
    server = _served(reply)
    start = time.monotonic()
    with Client(server.url, timeout_s=1.5) as http, pytest.raises(HttpTimeout):
        with http.stream("POST", f"{server.url}/v1/completions", json={}) as streaming:
            list(streaming.lines())
    assert time.monotonic() - start < 4
    server.stop()


def test_a_line_without_end_is_refused_at_the_line_cap():
    server = _served(flood(HEAD_SSE + b"data: ", b"x"))
    with Client(server.url, timeout_s=20) as http, pytest.raises(HttpError, match="a line longer than"):
        with http.stream("POST", f"{server.url}/v1/completions", json={}) as streaming:
            list(streaming.lines())
    server.stop()


def test_a_gzip_bomb_is_refused_once_it_decodes_past_the_cap():
    server = _served(whole("200 OK", gzip_bomb(4 * MAX_BODY_BYTES), content_encoding="gzip"))
    with Client(server.url, timeout_s=20) as http, pytest.raises(HttpError, match="decompresses to more than"):
        http.get(f"{server.url}/metrics")
    server.stop()


def test_a_gzip_reply_within_the_cap_is_read():
    server = _served(sse([b'{"choices": []}'], gzip=True))
    with Client(server.url) as http:
        assert http.get(f"{server.url}/x").text.startswith("data: ")
    server.stop()


def test_loopback_targets_ignore_the_environments_proxy(monkeypatch):
    server = _served(whole("200 OK", b"{}"))
    for name in ("HTTP_PROXY", "http_proxy", "ALL_PROXY"):
        monkeypatch.setenv(name, "http://127.0.0.1:9")  # nothing listens there
    with Client(server.url) as http:
        assert http.get(f"{server.url}/v1/models").status_code == 200
    assert is_loopback("http://localhost:8000") and is_loopback("http://[::1]:80") and not is_loopback("http://example.com")
    server.stop()


def test_a_compressed_event_stream_is_said_as_a_stream_fact():
    """A gzip event stream is read, and the encoding reaches the case: a compressor on the way holds events."""
    from diagnoser.probes import client
    from diagnoser.probes.sse_client import stream

    choice = b'{"choices": [{"text": "x"}]}'
    observations = {}
    for gzip in (True, False):
        server = _served(sse([choice] * 8 + [b"[DONE]"], gzip=gzip))
        with Client(server.url, timeout_s=20) as http:
            response = stream(http, f"{server.url}/v1/completions", {}, 20)
        server.stop()
        assert len(response.chunks) == 8
        facts = client.client_facts([response], server.url, "completions", "m", 1, 8)
        observations[gzip] = client.to_observations(facts)["stream"]
    assert observations[True].compressed is True and observations[False].compressed is False
