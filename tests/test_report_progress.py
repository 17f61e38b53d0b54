"""``analyze`` draws a progress bar on a terminal's stderr and prints nothing extra when stderr is a pipe."""

from __future__ import annotations

import os
import pty
import subprocess
import sys

from conftest import REPO, run_cli

SYNTH = REPO / "tests" / "data" / "trace" / "synthetic"


def test_analyze_draws_a_bar_on_a_terminal_only():
    primary, secondary = pty.openpty()
    env = {**os.environ, "COLUMNS": "120", "TERM": "xterm-256color"}
    proc = subprocess.run([sys.executable, "-m", "diagnoser", "analyze", str(SYNTH)], stdout=subprocess.PIPE, stderr=secondary,
                          env=env, cwd=REPO, timeout=300)
    os.close(secondary)
    drawn = b""
    try:
        while chunk := os.read(primary, 65536):
            drawn += chunk
    except OSError:  # the terminal closed: everything has been read
        pass
    os.close(primary)
    assert proc.returncode == 0
    text = drawn.decode(errors="replace")
    assert "analyze" in text and "━" in text  # rich's bar, drawn and cleared at the end

    piped = run_cli("analyze", str(SYNTH))
    assert piped.returncode == 0 and "━" not in piped.stderr and "analyze" not in piped.stderr
    assert piped.stdout == proc.stdout.decode()
