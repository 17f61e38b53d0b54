"""The wheel installs rules/, probes/ and tui/ as diagnoser.rules, .probes, .tui, and nothing generic."""

import subprocess
import sys

import zipfile

import pytest

from conftest import REPO

MAPPED = {"diagnoser": "diagnoser", "diagnoser.rules": "rules", "diagnoser.probes": "probes", "diagnoser.tui": "tui"}


def source_packages() -> set[str]:
    """Every folder with an __init__.py under the mapped roots, as its installed dotted name."""
    found = set()
    for dotted, root in MAPPED.items():
        for init in (REPO / root).rglob("__init__.py"):
            rel = init.parent.relative_to(REPO / root).parts
            found.add(".".join((dotted, *rel)) if rel else dotted)
    return found


def test_pyproject_lists_every_package():
    tomllib = pytest.importorskip("tomllib")  # Python >= 3.11
    listed = set(tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
    assert source_packages() <= listed, sorted(source_packages() - listed)


def test_wheel_installs_and_imports(tmp_path):
    wheel_dir, target = tmp_path / "wheel", tmp_path / "site"
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(wheel_dir), str(REPO)],
        check=True, capture_output=True, timeout=240,
    )
    (wheel,) = wheel_dir.glob("diagnoser-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    top = {n.split("/")[0] for n in names if not n.split("/")[0].endswith(".dist-info")}
    assert top == {"diagnoser"}, top  # no generic top-level 'rules', 'probes' or 'tui'
    assert "diagnoser/data/hardware.json" in names and "diagnoser/data/models.json" in names
    subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "-q", "--target", str(target), str(wheel)],
                   check=True, capture_output=True, timeout=240)
    code = (
        "import diagnoser, diagnoser.rules, diagnoser.probes, diagnoser.tui\n"
        "from diagnoser.models.model_spec import model_presets\n"
        "assert diagnoser.__file__.startswith(%r), diagnoser.__file__\n"
        "print(len(model_presets()))\n" % str(target)
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env={"PYTHONPATH": str(target)},
                         cwd=tmp_path, timeout=120)
    assert out.returncode == 0, out.stderr
    assert int(out.stdout) >= 6
