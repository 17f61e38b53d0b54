"""The lab's proxy fault on a stand-in upstream: nginx in front bunches an event stream that the
upstream writes one event at a time, and nothing of it outlives the block."""

from __future__ import annotations

import os
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import httpx
import pytest

from diagnoser.errors import InputError
from diagnoser.lab.proxy import BufferingProxy, nginx_path

try:
    nginx_path()
except InputError:
    pytest.skip("nginx is not installed (apt-get install -y nginx)", allow_module_level=True)

EVENTS, EVERY_S = 64, 0.01


class Upstream(BaseHTTPRequestHandler):
    """/health, and an SSE stream of one vLLM-shaped event every 10 ms, each flushed as written."""

    protocol_version = "HTTP/1.1"

    def do_GET(self):  # noqa: N802 - the stdlib's name
        if self.path == "/health":
            self.send_response(200)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        for i in range(EVENTS):
            event = f'data: {{"id":"cmpl-1","object":"text_completion","choices":[{{"index":0,"text":" w{i}"}}]}}\n\n'.encode()
            self.wfile.write(f"{len(event):x}\r\n".encode() + event + b"\r\n")
            self.wfile.flush()
            time.sleep(EVERY_S)
        self.wfile.write(b"0\r\n\r\n")

    def log_message(self, *args):
        pass


def test_nginx_in_front_delivers_the_stream_in_bursts_and_stops(tmp_path):
    upstream = ThreadingHTTPServer(("127.0.0.1", 0), Upstream)
    threading.Thread(target=upstream.serve_forever, daemon=True).start()
    try:
        proxy = BufferingProxy(f"http://127.0.0.1:{upstream.server_port}", tmp_path)
        with proxy as url, httpx.Client(trust_env=False, timeout=30) as http:
            reads = []
            with http.stream("GET", f"{url}/stream") as reply:
                assert reply.headers["content-encoding"] == "gzip"
                reads = [chunk.count(b"data:") for chunk in reply.iter_bytes() if chunk]
            pid = proxy.proc.pid
        assert sum(reads) == EVENTS
        assert 1 < len(reads) <= EVENTS // 8, reads  # bursts of eight events or more, yet more than one
        with pytest.raises(ProcessLookupError):
            os.killpg(pid, 0)  # the proxy's whole group is gone
    finally:
        upstream.shutdown()
