import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared"


def run_cli(*args: str, env: dict | None = None, cwd: Path | None = None) -> subprocess.CompletedProcess:
    """Run the installed CLI in a fresh interpreter, the way a user does."""
    full_env = {**os.environ, **(env or {})}
    return subprocess.run(
        [sys.executable, "-m", "diagnoser", *args], capture_output=True, text=True, env=full_env, cwd=cwd or REPO, timeout=300
    )


@pytest.fixture
def shared_dir() -> Path:
    if not SHARED.is_dir():
        pytest.skip("shared/ data folder not present beside the checkout")
    return SHARED


def bandwidth_report(tmp_path: Path, device: str, gbs: float) -> Path:
    """A saved `probe --json` report holding one bandwidth measurement."""
    from probe_examples import bandwidth_facts, report_of, save

    return save(report_of(bandwidth=bandwidth_facts(device, gbs)), tmp_path / "probe.json")


# torch is in the optional gpu extra: tests that run torch probes skip without it
needs_torch = pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="torch (the gpu extra) is not installed")


@pytest.fixture
def one_thread_restored():
    """The lab's Engine.run pins torch to one thread for the process; give the rest of the session its threads back."""
    import torch

    threads = torch.get_num_threads()
    yield
    torch.set_num_threads(threads)
