"""Smoke test in a real terminal: the installed ``diagnoser tui`` in a detached tmux session.

Keys go in with ``send-keys`` and the pane is read back with ``capture-pane``, so this covers
what Pilot cannot: the console script, a real pty, the terminal driver. It runs on its own
tmux server socket and removes it afterwards. Skipped where tmux is absent.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from tui_support import example_copy

TMUX = shutil.which("tmux")
DIAGNOSER = Path(sys.executable).with_name("diagnoser")
WAIT_S = 60

pytestmark = [
    pytest.mark.skipif(TMUX is None, reason="tmux is not installed"),
    pytest.mark.skipif(not DIAGNOSER.exists(), reason="the diagnoser console script is not installed beside this Python"),
]


class Pane:
    def __init__(self, socket: str) -> None:
        self.socket = socket

    def tmux(self, *args: str) -> subprocess.CompletedProcess:
        return subprocess.run([TMUX, "-L", self.socket, *args], capture_output=True, text=True, timeout=30)

    def text(self) -> str:
        return self.tmux("capture-pane", "-p", "-t", "tui").stdout

    def keys(self, *keys: str) -> None:
        self.tmux("send-keys", "-t", "tui", *keys)

    def wait_for(self, needle: str) -> str:
        """The pane once it shows ``needle``; fails with the pane's text after WAIT_S."""
        deadline = time.monotonic() + WAIT_S
        while time.monotonic() < deadline:
            shown = self.text()
            if needle in shown:
                return shown
            time.sleep(0.2)
        pytest.fail(f"the pane never showed {needle!r}; it shows:\n{self.text()}")

    def alive(self) -> bool:
        return self.tmux("has-session", "-t", "tui").returncode == 0


def test_installed_tui_draws_and_answers_keys(tmp_path):
    case = example_copy(tmp_path)
    pane = Pane(f"diagnoser-test-{os.getpid()}")
    env = {**os.environ, "TERM": "xterm-256color"}
    command = f"{DIAGNOSER} tui {case.name}"
    started = subprocess.run(
        [TMUX, "-L", pane.socket, "-f", "/dev/null", "new-session", "-d", "-s", "tui", "-x", "100", "-y", "30", command],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=30,
    )
    assert started.returncode == 0, started.stderr
    try:
        bound = pane.wait_for("step floor")  # a case with a pin opens on its bound
        assert "2 Bound" in bound and "qwen3-30b-a3b" in bound and "unexplained" in bound
        pane.keys("5")
        pane.wait_for("small-expert-kernels")
        pane.wait_for("measured")  # the screen draws in parts: wait for each, then read it whole
        hypotheses = pane.wait_for("Confirmed")
        assert "small-expert-kernels" in hypotheses and "measured" in hypotheses  # the footer names the keys
        pane.keys("c")
        pane.wait_for("✓ 1. small-expert-kernels")
        session = tmp_path / "case-moe-small-experts.session.json"
        assert '"status": "confirmed"' in session.read_text()  # saved as soon as it changed
        pane.keys("?")
        pane.wait_for("the guided session")
        pane.keys("Escape", "C-q")
        deadline = time.monotonic() + WAIT_S
        while pane.alive() and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not pane.alive()
    finally:
        pane.tmux("kill-server")
