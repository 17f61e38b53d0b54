"""A real buffering reverse proxy (nginx, as the OS packages it) in front of a server.

    with BufferingProxy("http://127.0.0.1:PORT", workdir, port=8000) as url: ...

nginx with ``proxy_buffering on`` alone passes each event on as it reads it (measured here: one
token per read, 5 ms apart). What bunches a stream in the field is the proxy's compression: with
``gzip on`` for ``text/event-stream``, nginx sends compressed output only as its gzip buffers
fill and deflate ends a block, so a client that accepts gzip (every HTTP library does by default)
gets the stream in bursts. The events compress to about 10 bytes a token: with nginx's defaults
(128 KiB of deflate hash, 4 KiB buffers) a 64-token stream comes in one read at its end; a 512-byte
hash and 128-byte buffers give bursts of about 30 tokens, measured here (2, 31, 31). Temp files are off, so nothing spills to disk. nginx runs in the foreground in a session of
its own and is stopped with its group.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

import httpx

from diagnoser.errors import InputError
from diagnoser.real_vllm import free_port

INSTALL_HINT = "nginx is not installed: apt-get install -y nginx (the lab's buffered-proxy fault puts it in front of vLLM)"
START_TIMEOUT_S = 15

CONFIG = """\
worker_processes 1;
error_log {work}/nginx-error.log warn;
pid {work}/nginx.pid;
events {{ worker_connections 256; }}
http {{
    access_log off;
    client_body_temp_path {work}/client_body;
    proxy_temp_path {work}/proxy_temp;
    fastcgi_temp_path {work}/fastcgi_temp;
    uwsgi_temp_path {work}/uwsgi_temp;
    scgi_temp_path {work}/scgi_temp;
    server {{
        listen 127.0.0.1:{port};
        location / {{
            proxy_pass {upstream};
            proxy_http_version 1.1;
            proxy_buffering on;
            proxy_buffer_size 4k;
            proxy_buffers 8 4k;
            proxy_busy_buffers_size 4k;
            proxy_max_temp_file_size 0;
            proxy_read_timeout 600s;
            gzip on;
            gzip_types text/event-stream;
            gzip_min_length 0;
            gzip_hash 512;
            gzip_buffers 16 128;
        }}
    }}
}}
"""


def nginx_path() -> str:
    found = shutil.which("nginx") or next((p for p in ("/usr/sbin/nginx", "/usr/local/sbin/nginx") if os.access(p, os.X_OK)), None)
    if found is None:
        raise InputError(INSTALL_HINT)
    return found


class BufferingProxy:
    def __init__(self, upstream: str, workdir: Path, port: int = 0) -> None:
        self.upstream, self.workdir, self.port = upstream, Path(workdir) / "nginx", port or free_port()
        self.proc: subprocess.Popen | None = None

    def __enter__(self) -> str:
        binary = nginx_path()
        self.workdir.mkdir(parents=True, exist_ok=True)
        conf = self.workdir / "nginx.conf"
        conf.write_text(CONFIG.format(work=self.workdir, port=self.port, upstream=self.upstream))
        self.proc = subprocess.Popen([binary, "-p", str(self.workdir), "-c", str(conf), "-g", "daemon off;"],
                                     stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                     start_new_session=True)
        url = f"http://127.0.0.1:{self.port}"
        deadline = time.monotonic() + START_TIMEOUT_S
        with httpx.Client(timeout=2, trust_env=False) as http:
            while time.monotonic() < deadline and self.proc.poll() is None:
                try:
                    if http.get(f"{url}/health").status_code == 200:
                        return url
                except httpx.HTTPError:
                    time.sleep(0.2)
        err = self.proc.stderr.read().decode(errors="replace")[-400:] if self.proc.poll() is not None else ""
        self.stop()
        raise RuntimeError(f"nginx did not start on port {self.port}: {err.strip()}")

    def stop(self) -> None:
        if self.proc is None:
            return
        for sig, wait in ((signal.SIGQUIT, 5), (signal.SIGKILL, None)):  # QUIT: nginx's graceful stop
            try:
                os.killpg(self.proc.pid, sig)
            except ProcessLookupError:
                break
            try:
                self.proc.wait(timeout=wait)
                break
            except subprocess.TimeoutExpired:
                continue
        self.proc.wait()
        self.proc.stderr.close()
        self.proc = None

    def __exit__(self, *exc: object) -> None:
        self.stop()
