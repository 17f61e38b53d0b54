"""An external rule pack, built and installed into a temporary folder, adds its rule and fixtures.

The pack (tests/data/rulepack) declares a `diagnoser.rules` entry point and a FIXTURES folder;
with the folder on the path, `rules list` shows its rule, `rules test` runs its fixtures beside
the bundled ones, and `diagnose` applies it.
"""

import os
import shutil
import subprocess
import sys

from conftest import REPO

PACK = REPO / "tests" / "data" / "rulepack"


def test_an_installed_pack_adds_rules_and_fixtures(tmp_path):
    source = tmp_path / "src"
    shutil.copytree(PACK, source)  # build a copy: the repository's files are never touched
    site = tmp_path / "site"
    built = subprocess.run(
        [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation", "--target", str(site), str(source)],
        capture_output=True, text=True, timeout=240,
    )
    assert built.returncode == 0, built.stderr[-2000:]
    env = {**os.environ, "PYTHONPATH": str(site)}

    def cli(*args):
        return subprocess.run([sys.executable, "-m", "diagnoser", *args], capture_output=True, text=True, env=env, timeout=240)

    listed = cli("rules", "list")
    assert listed.returncode == 0 and "step-spread-wide" in listed.stdout
    tested = cli("rules", "test")
    assert tested.returncode == 0
    assert "ok   sample.yaml: sample pack - a window spread over 60 % of its step" in tested.stdout
    assert "ok   sample.yaml: sample pack - near miss, a steady window" in tested.stdout
    case = tmp_path / "case.yaml"
    case.write_text("observations:\n  budget: {step_ms: 10, device_ms: 9, step_spread_ms: 6}\n")
    assert "[step-spread-wide]" in cli("diagnose", str(case)).stdout
    # without the pack on the path, none of it is there
    plain = subprocess.run([sys.executable, "-m", "diagnoser", "rules", "list"], capture_output=True, text=True, timeout=240)
    assert "step-spread-wide" not in plain.stdout
