"""The one HTTP client for probes and ``diagnoser live``: the server under diagnosis is not trusted.

A server that is slow or broken is what users point diagnoser at, and a hostile or buggy one
must not hang the process or fill its memory. So every request here has

- a wall-clock budget that ends it whatever the server does: httpx's timeouts are per read, and
  a server that trickles a byte a second never trips them, so a watchdog shuts the socket down
  at the budget (blocked reads then return) and the request ends as timed out;
- byte caps on the raw body, on the body once decompressed (decoded here, bounded, never by
  httpx, so a small gzip bomb cannot expand unchecked) and on any one line of a stream;
- no proxy taken from the environment for a loopback target, so ``HTTP_PROXY`` cannot reroute
  a local probe or receive its bearer key; remote targets keep the environment's proxies;
- one-line errors: transport failures become ``HttpError`` (an ``InputError``), a spent budget
  ``HttpTimeout`` (one too), never Python's own exception text.
"""

from __future__ import annotations

import codecs
import ipaddress
import json
import re
import socket
import threading
import time
import zlib
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import httpx

from diagnoser.errors import InputError

MAX_BODY_BYTES = 64 * 2**20  # raw and decoded; a /metrics scrape or a model list is kilobytes
MAX_STREAM_BYTES = 64 * 2**20  # one streamed completion of 4,096 tokens is about a megabyte
MAX_LINE_BYTES = 2**20  # one SSE event is a few hundred bytes
DEFAULT_TIMEOUT_S = 30.0
_LINE_BREAK = re.compile(r"\r\n|\n|\r")


class HttpError(InputError):
    """The server could not be reached or sent something unusable; the message is one line."""


class HttpTimeout(HttpError):
    """The request's wall-clock budget ran out, whatever the server was doing."""


def is_loopback(url: str) -> bool:
    host = (urlsplit(url).hostname or "").lower()
    if host == "localhost" or host.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _describe(err: httpx.HTTPError) -> str:
    """What went wrong in words a user can act on, not the library's exception text."""
    if isinstance(err, httpx.ConnectTimeout):
        return "no connection within the time limit"
    if isinstance(err, httpx.TimeoutException):
        return "no reply within the time limit"
    if isinstance(err, httpx.ConnectError):
        return "cannot connect"
    if isinstance(err, (httpx.RemoteProtocolError, httpx.ReadError)):
        return "the server broke off or broke the HTTP protocol"
    if isinstance(err, httpx.UnsupportedProtocol):
        return "not an http(s) URL"
    return f"HTTP failure ({type(err).__name__})"


class _Watchdog:
    """Shuts the request's socket down when its budget is spent; blocked reads then return at once."""

    def __init__(self, seconds: float) -> None:
        self.fired = False
        self._socket: socket.socket | None = None
        self._lock = threading.Lock()
        self._timer = threading.Timer(max(seconds, 0.0), self._fire)
        self._timer.daemon = True
        self._timer.start()

    def trace(self, event: str, info: dict[str, Any]) -> None:
        if event == "connection.connect_tcp.complete":
            with self._lock:
                self._socket = info["return_value"].get_extra_info("socket")
                if self.fired:
                    self._shutdown()

    def _fire(self) -> None:
        with self._lock:
            self.fired = True
            self._shutdown()

    def _shutdown(self) -> None:
        if self._socket is not None:
            try:
                self._socket.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def cancel(self) -> None:
        self._timer.cancel()


class _Body:
    """Raw bytes in, decoded bytes out, both counted against ``cap``."""

    def __init__(self, url: str, encoding: str, cap: int) -> None:
        self.url, self.cap, self.raw, self.decoded = url, cap, 0, 0
        name = encoding.strip().lower()
        if name in ("gzip", "x-gzip", "deflate"):
            self._inflate: Any = zlib.decompressobj(zlib.MAX_WBITS | 32)  # gzip or zlib framing
        elif name in ("", "identity"):
            self._inflate = None
        else:
            raise HttpError(f"{url}: the server sent content-encoding {name[:40]!r}, which diagnoser does not read")

    def feed(self, data: bytes) -> bytes:
        self.raw += len(data)
        if self.raw > self.cap:
            raise HttpError(f"{self.url}: the reply is larger than {self.cap:,} bytes")
        if self._inflate is not None:
            try:
                data = self._inflate.decompress(data, self.cap - self.decoded + 1)
            except zlib.error:
                raise HttpError(f"{self.url}: the compressed reply does not decompress") from None
        self.decoded += len(data)
        if self.decoded > self.cap:
            raise HttpError(f"{self.url}: the reply decompresses to more than {self.cap:,} bytes")
        return data


@dataclass
class Reply:
    """A whole, capped reply; the attributes callers used on httpx's response."""

    url: str
    status_code: int
    reason_phrase: str
    content: bytes

    @property
    def text(self) -> str:
        return self.content.decode("utf-8", errors="replace")

    def json(self) -> Any:
        """The body as JSON; ``ValueError`` when it is not (nesting past the parser's limit included)."""
        try:
            return json.loads(self.content)
        except RecursionError:
            raise ValueError("nested too deeply") from None


class Streaming:
    """An open reply read as it arrives: the status first, then lines or the whole (capped) body."""

    def __init__(self, url: str, reply: httpx.Response, watchdog: _Watchdog, cap: int) -> None:
        self.url, self._reply, self._watchdog = url, reply, watchdog
        self.status_code = reply.status_code
        self.content_encoding = reply.headers.get("content-encoding", "").strip().lower()
        self._body = _Body(url, self.content_encoding, cap)

    def _chunks(self) -> Iterator[bytes]:
        try:
            # a mock transport's reply arrives already read; a network reply never does
            raws = [self._reply.content] if self._reply.is_stream_consumed else self._reply.iter_raw()
            for raw in raws:
                self._check_deadline()
                yield self._body.feed(raw)
        except httpx.HTTPError as err:
            self._check_deadline()
            raise HttpError(f"{self.url}: {_describe(err)}") from None
        self._check_deadline()  # a close-delimited body ends "normally" when the watchdog cuts it

    def _check_deadline(self) -> None:
        if self._watchdog.fired:
            raise HttpTimeout(f"{self.url}: still open when its time limit ran out")

    def read(self) -> Reply:
        content = b"".join(self._chunks())
        return Reply(self.url, self.status_code, self._reply.reason_phrase, content)

    def lines(self) -> Iterator[tuple[float, int, str]]:
        """Each complete line with the time of the network read that completed it.

        Events a buffering proxy wrote together arrive in one read and so get one receipt time;
        stamping each line as it is parsed would instead spread them by the client's own parsing
        speed, which on a busy host is large enough to hide the burst. A CRLF split across two
        reads yields one extra empty line, which SSE treats as a separator anyway.
        """
        text = codecs.getincrementaldecoder("utf-8")(errors="replace")
        pending = ""
        for data in self._chunks():
            now_s, now_ns = time.perf_counter(), time.time_ns()
            pending += text.decode(data)
            *lines, pending = _LINE_BREAK.split(pending)
            if len(pending) > MAX_LINE_BYTES:
                raise HttpError(f"{self.url}: a line longer than {MAX_LINE_BYTES:,} characters; not a stream of events")
            for line in lines:
                yield now_s, now_ns, line
        pending += text.decode(b"", final=True)
        if pending:
            yield time.perf_counter(), time.time_ns(), pending


class Client:
    """Requests to one server, each within ``timeout_s`` and, when given, before ``deadline`` (time.monotonic())."""

    def __init__(self, base_url: str, *, timeout_s: float = DEFAULT_TIMEOUT_S, deadline: float | None = None,
                 headers: dict[str, str] | None = None, transport: httpx.BaseTransport | None = None) -> None:
        self.timeout_s, self.deadline = timeout_s, deadline
        self._http = httpx.Client(
            transport=transport,  # tests hand in a mock server
            trust_env=not is_loopback(base_url),
            headers={"Accept-Encoding": "gzip, deflate", **(headers or {})},
            # a fresh connection per request, so every request's socket is the watchdog's to cut
            limits=httpx.Limits(max_keepalive_connections=0),
        )

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc: object) -> None:
        self._http.close()

    def _budget(self, url: str, timeout_s: float | None) -> float:
        budget = self.timeout_s if timeout_s is None else timeout_s
        if self.deadline is not None:
            budget = min(budget, self.deadline - time.monotonic())
        if budget <= 0:
            raise HttpTimeout(f"{url}: no time left to ask")
        return budget

    @contextmanager
    def stream(self, method: str, url: str, *, json: Any = None, timeout_s: float | None = None,
               cap: int = MAX_STREAM_BYTES) -> Iterator[Streaming]:
        budget = self._budget(url, timeout_s)
        watchdog = _Watchdog(budget)
        try:
            with self._http.stream(method, url, json=json, timeout=httpx.Timeout(budget),
                                   extensions={"trace": watchdog.trace}) as reply:
                yield Streaming(url, reply, watchdog, cap)
        except httpx.HTTPError as err:
            if watchdog.fired:
                raise HttpTimeout(f"{url}: no reply within {budget:g} s") from None
            raise HttpError(f"{url}: {_describe(err)}") from None
        finally:
            watchdog.cancel()

    def request(self, method: str, url: str, *, json: Any = None, timeout_s: float | None = None) -> Reply:
        with self.stream(method, url, json=json, timeout_s=timeout_s, cap=MAX_BODY_BYTES) as reply:
            return reply.read()

    def get(self, url: str, *, timeout_s: float | None = None) -> Reply:
        return self.request("GET", url, timeout_s=timeout_s)

    def post(self, url: str, *, json: Any = None, timeout_s: float | None = None) -> Reply:
        return self.request("POST", url, json=json, timeout_s=timeout_s)
