"""Hostile clients against a server the project starts (hardening class 9), and the harness.

    .venv/bin/python tests/bad_clients.py [--match TEXT] [--list]

The bad-input corpus (tests/bad_inputs.py) holds diagnoser's commands to their contract; this one
holds the servers diagnoser starts (the lab today) to theirs: whatever a client does, abandoning a
request at any point, sending a body too large, too slow, cut short or malformed, asking for
absurd amounts, or leaving a profile on, the server lets go of it. After every case: the server
answers ``/health``; no request stays running or waiting; a small, healthy completion is served;
the server's processes together stay under ``MAX_PEAK_MB``. At the end the memory the whole
corpus left behind is printed and held under ``MAX_GROWTH_MB``. tests/test_bad_clients.py runs
the same corpus.
"""

from __future__ import annotations

import argparse
import json
import re
import socket
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import httpx
from bad_inputs import Outcome  # the same verdict shape; peak_mb holds the server's memory after the case

from diagnoser.lab.process import LabServer, _children
from diagnoser.lab.server import MAX_BODY_BYTES

MAX_PEAK_MB = 1024
# What the corpus may leave resident in the server once every request has ended: Python keeps
# freed arenas and the allocator's caches, measured at 5-20 MB here; a table that kept every
# abandoned request grew by about 50 kB each (68 -> 352 MB over 6,000).
MAX_GROWTH_MB = 64
# How long a server has to let go of a case's requests: far less than a long request runs (4,000
# tokens, over 20 s here), so one kept running is caught; far more than letting go takes (under 1 s).
SETTLE_S = 10.0
LONG_TOKENS = 4000
QUIET_S = 0.3
ENDPOINTS = (("completions", "/v1/completions"), ("chat", "/v1/chat/completions"))


@dataclass
class Case:
    name: str
    act: Callable[[str], None]  # what the client does to the server at this URL


def _body(chat: bool, stream: bool, max_tokens: int = 64, **extra) -> dict:
    prompt = {"messages": [{"role": "user", "content": "tell me more"}]} if chat else {"prompt": "tell me more"}
    return {**prompt, "max_tokens": max_tokens, "ignore_eos": True, "stream": stream, **extra}


def _address(url: str) -> tuple[str, int]:
    host, port = url.removeprefix("http://").rstrip("/").split(":")
    return host, int(port)


def _connect(url: str) -> socket.socket:
    return socket.create_connection(_address(url), timeout=10)


def _request(path: str, body: bytes, length: int | None = None, chunked: bool = False) -> bytes:
    headers = [f"POST {path} HTTP/1.1", "Host: lab", "Content-Type: application/json"]
    if chunked:
        headers.append("Transfer-Encoding: chunked")
    else:
        headers.append(f"Content-Length: {len(body) if length is None else length}")
    return ("\r\n".join(headers) + "\r\n\r\n").encode() + body


def _answered(got: bytes) -> bool:
    """One whole HTTP response is in: a keep-alive server sends nothing more until asked, so reading on
    would only wait out the window (35 s over the corpus, measured: 164 s against 129 s)."""
    head, sep, body = got.partition(b"\r\n\r\n")
    if not sep:
        return False
    headers = head.lower()
    if b"transfer-encoding: chunked" in headers:
        return body.endswith(b"0\r\n\r\n")
    found = re.search(rb"\ncontent-length:\s*(\d+)", headers)
    return found is not None and len(body) >= int(found[1])


def _drain(sock: socket.socket, seconds: float, limit: int = 1 << 20) -> bytes:
    """Read what comes for up to ``seconds`` (at most ``limit`` bytes), then stop; sooner once a whole
    response is in."""
    got, end = b"", time.monotonic() + seconds
    while time.monotonic() < end and len(got) < limit and not _answered(got):
        sock.settimeout(max(0.01, end - time.monotonic()))
        try:
            part = sock.recv(65536)
        except (TimeoutError, OSError):
            break
        if not part:
            break
        got += part
    return got


# ---------------------------------------------------------------- what a client can do


def send_then_close(path: str, body: dict, read_s: float) -> Callable[[str], None]:
    """Send a whole request, read its answer for ``read_s`` seconds (0: not at all), hang up."""

    def act(url: str) -> None:
        with _connect(url) as sock:
            sock.sendall(_request(path, json.dumps(body).encode()))
            if read_s:
                _drain(sock, read_s)

    return act


def never_read(path: str, body: dict, hold_s: float) -> Callable[[str], None]:
    """Send a request and keep the connection open without reading, so the server's writes back up."""

    def act(url: str) -> None:
        with _connect(url) as sock:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            sock.sendall(_request(path, json.dumps(body).encode()))
            time.sleep(hold_s)

    return act


def half_close(path: str, body: dict) -> Callable[[str], None]:
    """Send a request, shut the sending side, read a little, go."""

    def act(url: str) -> None:
        with _connect(url) as sock:
            sock.sendall(_request(path, json.dumps(body).encode()))
            sock.shutdown(socket.SHUT_WR)
            _drain(sock, 0.5)

    return act


def raw(data: bytes, read_s: float = 2.0) -> Callable[[str], None]:
    """Send these exact bytes and read what comes back for a while."""

    def act(url: str) -> None:
        with _connect(url) as sock:
            try:
                sock.sendall(data)
            except OSError:  # the server may refuse and close before all of it is sent
                return
            _drain(sock, read_s)

    return act


def trickle(path: str, body: bytes, declared: int, seconds: float) -> Callable[[str], None]:
    """Declare a body, then send it a few bytes at a time for ``seconds`` and hang up unfinished."""

    def act(url: str) -> None:
        with _connect(url) as sock:
            sock.sendall(_request(path, b"", length=declared))
            end, sent = time.monotonic() + seconds, 0
            while time.monotonic() < end and sent < len(body):
                try:
                    sock.sendall(body[sent:sent + 8])
                except OSError:
                    return
                sent += 8
                time.sleep(0.05)

    return act


def chunked_oversize(path: str) -> Callable[[str], None]:
    """A body with no declared length that runs past the server's limit."""

    def act(url: str) -> None:
        with _connect(url) as sock:
            sock.sendall(_request(path, b"", chunked=True))
            piece = b"x" * 65536
            for _ in range(MAX_BODY_BYTES // len(piece) + 4):
                try:
                    sock.sendall(f"{len(piece):x}\r\n".encode() + piece + b"\r\n")
                except OSError:
                    return  # refused and closed: what the server should do
            _drain(sock, 2.0)

    return act


def crowd_then_leave(path: str, body: dict, count: int, read_s: float) -> Callable[[str], None]:
    """More requests at once than the engine runs, so some wait; every client leaves after ``read_s``."""

    def act(url: str) -> None:
        threads = [threading.Thread(target=send_then_close(path, body, read_s), args=(url,)) for _ in range(count)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)

    return act


def posts(path: str, payload: dict, timeout_s: float = 30.0) -> Callable[[str], None]:
    def act(url: str) -> None:
        httpx.post(url + path, json=payload, timeout=timeout_s)

    return act


def profile(*steps: str, load: Callable[[str], None] | None = None) -> Callable[[str], None]:
    """Profile commands in this order, with a load between them; a profile left on must stop itself."""

    def act(url: str) -> None:
        for step in steps:
            httpx.post(f"{url}/{step}_profile", timeout=60)
            if load is not None:
                load(url)

    return act


# ---------------------------------------------------------------- the corpus


def corpus() -> list[Case]:
    cases: list[Case] = []
    for label, path in ENDPOINTS:
        chat = label == "chat"
        for stream in (True, False):
            kind = f"{label}-{'stream' if stream else 'whole'}"
            body = _body(chat, stream)
            long = _body(chat, stream, max_tokens=LONG_TOKENS)
            cases += [
                Case(f"{kind}/close-at-once", send_then_close(path, long, 0)),
                Case(f"{kind}/close-after-first-bytes", send_then_close(path, long, 0.3)),
                Case(f"{kind}/never-read", never_read(path, long, 2.0)),
                Case(f"{kind}/half-close", half_close(path, long)),
                Case(f"{kind}/crowd-of-24-leaves-waiting", crowd_then_leave(path, long, 24, 0.2)),
                Case(f"{kind}/crowd-of-24-leaves-at-once", crowd_then_leave(path, long, 24, 0)),
                Case(f"{kind}/body-cut-short", raw(_request(path, json.dumps(body).encode()[:20], length=400), 1.0)),
                Case(f"{kind}/body-trickled-then-dropped", trickle(path, json.dumps(body).encode(), 4000, 2.0)),
                Case(f"{kind}/declares-a-huge-body", raw(_request(path, b"{", length=10**12), 1.0)),
                Case(f"{kind}/declares-just-over-the-limit", raw(_request(path, b"{", length=MAX_BODY_BYTES + 1), 1.0)),
                Case(f"{kind}/chunked-past-the-limit", chunked_oversize(path)),
            ]
            for name, value in (("huge", 10**12), ("negative", -5), ("zero", 0), ("float", 3.5), ("string", "64"),
                                ("null", None), ("bool", True), ("list", [64])):
                cases.append(Case(f"{kind}/max-tokens-{name}", posts(path, {**body, "max_tokens": value})))
            for name, extra in (("n-a-billion", {"n": 10**9}), ("best-of-a-billion", {"best_of": 10**9}),
                                ("temperature-nan", {"temperature": "NaN"}), ("logprobs-huge", {"logprobs": 10**6}),
                                ("stop-list-huge", {"stop": ["x"] * 10000})):
                cases.append(Case(f"{kind}/{name}", posts(path, {**body, **extra})))
        prompt_key = "messages" if chat else "prompt"
        near_limit = "word " * (MAX_BODY_BYTES // 5 - 100)
        cases += [
            Case(f"{label}/prompt-near-the-body-limit", posts(path, {**_body(chat, True), prompt_key: (
                [{"role": "user", "content": near_limit}] if chat else near_limit)})),
            Case(f"{label}/token-ids-out-of-vocabulary", posts(path, {**_body(False, False), "prompt": [10**9, -1, 2**63]})),
            Case(f"{label}/malformed-json", raw(_request(path, b'{"prompt": "x", "max_tokens": '))),
            Case(f"{label}/not-utf8", raw(_request(path, b'{"prompt": "\xff\xfe\xfd"}'))),
            Case(f"{label}/nested-100k-deep", raw(_request(path, b"[" * 100000 + b"]" * 100000))),
            Case(f"{label}/json-not-an-object", raw(_request(path, b"[1, 2, 3]"))),
            Case(f"{label}/messages-wrong-shape", posts(path, {"messages": [{"role": 7, "content": {"x": [1]}}], "max_tokens": 4})),
        ]
    flood = crowd_then_leave("/v1/completions", _body(False, True, max_tokens=LONG_TOKENS), 24, 0.1)
    cases += [
        Case("http/garbage-request-line", raw(b"\x00\x01\x02 NOT HTTP\r\n\r\n")),
        Case("http/header-64k", raw(b"GET /health HTTP/1.1\r\nHost: lab\r\nX-Big: " + b"a" * 65536 + b"\r\n\r\n")),
        Case("http/headers-never-end", trickle("/v1/completions", b"X-A: b\r\n" * 200, 10, 2.0)),
        Case("http/get-on-a-post-path", raw(b"GET /v1/completions HTTP/1.1\r\nHost: lab\r\n\r\n")),
        Case("http/unknown-path", raw(b"POST /v1/nothing HTTP/1.1\r\nHost: lab\r\nContent-Length: 0\r\n\r\n")),
        Case("profile/stop-without-start", profile("stop")),
        Case("profile/start-twice-then-stop", profile("start", "start", "stop")),
        Case("profile/left-on-under-load", profile("start", load=flood)),
        Case("profile/stopped-under-abandoned-load", profile("start", "stop", load=flood)),
    ]
    return cases


# ---------------------------------------------------------------- judging


def _tree_rss_mb(pid: int) -> float:
    total = 0.0
    for p in [pid, *_children(pid)]:
        try:
            with open(f"/proc/{p}/status") as status:
                line = next((row for row in status if row.startswith("VmRSS:")), "VmRSS: 0 kB")
        except OSError:
            continue
        total += int(line.split()[1]) / 1024
    return total


def _in_flight(client: httpx.Client, url: str) -> float:
    text = client.get(url + "/metrics", timeout=10).text
    names = ("vllm:num_requests_running", "vllm:num_requests_waiting", "lab:api_server_requests")
    return sum(float(line.split()[-1]) for line in text.splitlines() if line.startswith(names))


def settled(client: httpx.Client, url: str) -> str:
    """'' when the server let go of everything and serves a small request; else what is wrong."""
    end = time.monotonic() + SETTLE_S
    try:
        # zero twice, QUIET_S apart: a request the client already left may reach the engine late
        left, quiet = 1.0, 0
        while quiet < 2 and time.monotonic() < end:
            left = _in_flight(client, url)
            quiet = quiet + 1 if not left else 0
            time.sleep(QUIET_S)
        if left:
            return f"{left:g} requests still running, waiting or held by the API server after {SETTLE_S:g} s"
        if client.get(url + "/health", timeout=10).status_code != 200:
            return "/health did not answer 200"
        answer = client.post(url + "/v1/completions", json={"prompt": "ok", "max_tokens": 4}, timeout=SETTLE_S)
        if answer.status_code != 200 or not answer.json()["choices"][0]["text"]:
            return f"a healthy request got {answer.status_code}"
    except (httpx.HTTPError, ValueError, KeyError) as err:
        return f"the server stopped answering: {type(err).__name__}: {err}"
    return ""


def run_case(case: Case, url: str, pid: int, client: httpx.Client) -> Outcome:
    start = time.perf_counter()
    try:
        case.act(url)
    except (httpx.HTTPError, OSError):
        pass  # the client's own failure is expected; what matters is the server afterwards
    why = settled(client, url)
    rss = _tree_rss_mb(pid)
    if not why and rss > MAX_PEAK_MB:
        why = f"the server holds {rss:,.0f} MB"
    return Outcome(case, not why, why or "let go", time.perf_counter() - start, rss)  # type: ignore[arg-type]


def run_corpus(cases: list[Case], say: Callable[[str], None] = lambda _: None) -> tuple[list[Outcome], float, float]:
    """Every case against one lab server; the outcomes and its memory before and after (MB)."""
    with tempfile.TemporaryDirectory() as profiles, httpx.Client() as client:
        lab = LabServer([], profile_dir=Path(profiles))
        with lab as url:
            pid = lab.proc.pid
            # warm: the first request pays for compilation and caches, the first profile for the profiler
            profile("start", "stop", load=lambda u: settled(client, u))(url)
            before = _tree_rss_mb(pid)
            outcomes = []
            for case in cases:
                outcomes.append(run_case(case, url, pid, client))
                o = outcomes[-1]
                say(f"{'ok  ' if o.ok else 'FAIL'} {case.name}: {o.why} ({o.seconds:.1f} s, {o.peak_mb:,.0f} MB)")
            # a profile left on holds its capped steps until stopped; stopping writes and frees them
            client.post(url + "/stop_profile", timeout=SETTLE_S)
            return outcomes, before, _tree_rss_mb(pid)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--match", default="", help="only the cases whose name contains TEXT")
    parser.add_argument("--list", action="store_true", help="list the cases and stop")
    parser.add_argument("-v", "--verbose", action="store_true", help="a line per case as it ends")
    args = parser.parse_args(argv)
    cases = [c for c in corpus() if args.match in c.name]
    if args.list:
        print("\n".join(c.name for c in cases) + f"\n{len(cases)} cases")
        return 0
    start = time.perf_counter()
    outcomes, before, after = run_corpus(cases, print if args.verbose else lambda _: None)
    failed = [o for o in outcomes if not o.ok]
    for o in failed:
        print(f"FAIL {o.case.name}: {o.why}")
    slowest = max(outcomes, key=lambda o: o.seconds)
    grew = after - before
    print(f"{len(outcomes) - len(failed)}/{len(outcomes)} hostile clients let go of; slowest {slowest.seconds:.1f} s "
          f"({slowest.case.name}); server memory {before:,.0f} -> {after:,.0f} MB (+{grew:,.0f}, limit {MAX_GROWTH_MB}), "
          f"peak {max(o.peak_mb for o in outcomes):,.0f} MB; {time.perf_counter() - start:.0f} s in all")
    return 0 if not failed and grew <= MAX_GROWTH_MB else 1


if __name__ == "__main__":
    sys.exit(main())
