"""Hostile HTTP servers on loopback, for the bad-input corpus: each one bounded and self-stopping.

A server here is a raw socket loop (no http.server, so it can break HTTP as a bad proxy or a
hostile endpoint does): it answers every request with one ``Behaviour``, whatever the path,
except that ``/v1/models`` lists a model unless the behaviour is aimed at it. Every server stops
by itself after ``LIFETIME_S`` and sends at most ``MAX_SEND_BYTES``, so a client that never hangs
up cannot keep it (or the test) alive.
"""

from __future__ import annotations

import json
import socket
import threading
import time
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache

LIFETIME_S = 60.0
MAX_SEND_BYTES = 2**30
_MODELS = json.dumps({"object": "list", "data": [{"id": "m", "object": "model"}]}).encode()


@dataclass(frozen=True)
class Behaviour:
    """What the server does with a request; ``paths`` limits it to some paths (others get a sane reply)."""

    name: str
    reply: Callable[[socket.socket, "Server"], None]
    paths: tuple[str, ...] = ()


@cache
def gzip_bomb(decoded_bytes: int = 2**30) -> bytes:
    """``decoded_bytes`` of zeros as gzip (about a thousandth of that), built once per process."""
    squeeze = zlib.compressobj(9, zlib.DEFLATED, 31)  # wbits 31: gzip framing
    block = bytes(2**24)
    parts = [squeeze.compress(block) for _ in range(decoded_bytes // len(block))]
    return b"".join(parts) + squeeze.flush()


def _head(status: str, headers: dict[str, str]) -> bytes:
    lines = [f"HTTP/1.1 {status}", *(f"{k}: {v}" for k, v in headers.items()), "", ""]
    return "\r\n".join(lines).encode()


def whole(status: str, body: bytes, **headers: str) -> Callable[[socket.socket, "Server"], None]:
    """A complete reply with a Content-Length; ``content_encoding`` and the like via ``headers``."""
    named = {k.replace("_", "-"): v for k, v in headers.items()}

    def reply(conn: socket.socket, server: Server) -> None:
        server.send(conn, _head(status, {"Content-Length": str(len(body)), "Content-Type": "application/json", **named}) + body)

    return reply


def sse(events: list[bytes], gzip: bool = False, then: Callable[[socket.socket, "Server"], None] | None = None):
    """A 200 event stream of ``events`` (each sent as ``data: ...``), close-delimited, then ``then``."""

    def reply(conn: socket.socket, server: Server) -> None:
        body = b"".join(b"data: " + e + b"\n\n" for e in events)
        headers = {"Content-Type": "text/event-stream", "Connection": "close"}
        if gzip:
            headers["Content-Encoding"] = "gzip"
            body = _gzip(body)
        server.send(conn, _head("200 OK", headers) + body)
        if then:
            then(conn, server)

    return reply


def _gzip(data: bytes) -> bytes:
    squeeze = zlib.compressobj(9, zlib.DEFLATED, 31)
    return squeeze.compress(data) + squeeze.flush()


def trickle(prefix: bytes, unit: bytes = b"x", every_s: float = 0.5) -> Callable[[socket.socket, "Server"], None]:
    """``prefix`` at once, then ``unit`` every ``every_s`` until the client or the server gives up."""

    def reply(conn: socket.socket, server: Server) -> None:
        server.send(conn, prefix)
        while server.alive():
            time.sleep(every_s)
            server.send(conn, unit)

    return reply


def flood(prefix: bytes, unit: bytes) -> Callable[[socket.socket, "Server"], None]:
    """``prefix``, then ``unit`` as fast as the client reads, up to the server's byte cap."""

    def reply(conn: socket.socket, server: Server) -> None:
        server.send(conn, prefix)
        chunk = unit * max(1, 2**16 // len(unit))
        while server.alive():
            server.send(conn, chunk)

    return reply


def silence(conn: socket.socket, server: Server) -> None:
    """Accept, read the request, never answer."""
    while server.alive():
        time.sleep(0.2)


def hang_up(conn: socket.socket, server: Server) -> None:
    """Close without a word."""


class _Gone(Exception):
    pass


class Server:
    """One behaviour on ``127.0.0.1:<port>`` in daemon threads; ``url`` once started; stops by itself."""

    def __init__(self, behaviour: Behaviour, lifetime_s: float = LIFETIME_S) -> None:
        self.behaviour = behaviour
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self._listener.getsockname()[1]}"
        self._until = time.monotonic() + lifetime_s
        self._stop = threading.Event()
        self._sent = 0
        threading.Thread(target=self._accept, daemon=True, name=f"hostile-{behaviour.name}").start()

    def alive(self) -> bool:
        return not self._stop.is_set() and time.monotonic() < self._until and self._sent < MAX_SEND_BYTES

    def send(self, conn: socket.socket, data: bytes) -> None:
        if not self.alive():
            raise _Gone
        self._sent += len(data)
        try:
            conn.sendall(data)
        except OSError:
            raise _Gone from None

    def stop(self) -> None:
        self._stop.set()
        self._listener.close()

    def _accept(self) -> None:
        self._listener.settimeout(0.2)
        while self.alive():
            try:
                conn, _ = self._listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()
        self.stop()

    def _serve(self, conn: socket.socket) -> None:
        with conn:
            conn.settimeout(5)
            try:
                path = self._read_request(conn)
                mine = not self.behaviour.paths or any(path.startswith(p) for p in self.behaviour.paths)
                if mine:
                    self.behaviour.reply(conn, self)
                elif path.startswith("/v1/models"):
                    whole("200 OK", _MODELS)(conn, self)
                else:
                    whole("404 Not Found", b'{"error": "no"}')(conn, self)
            except (_Gone, OSError):
                pass

    @staticmethod
    def _read_request(conn: socket.socket) -> str:
        """The request's path; its body is read when it says how long it is (bounded)."""
        data = b""
        while b"\r\n\r\n" not in data and len(data) < 2**16:
            piece = conn.recv(4096)
            if not piece:
                raise _Gone
            data += piece
        head, _, body = data.partition(b"\r\n\r\n")
        length = next((int(line.split(b":")[1]) for line in head.split(b"\r\n") if line.lower().startswith(b"content-length:")), 0)
        while len(body) < min(length, 2**20):
            piece = conn.recv(4096)
            if not piece:
                break
            body += piece
        return head.split(b" ")[1].decode("latin-1") if b" " in head else "/"
