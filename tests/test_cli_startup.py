"""`diagnoser --help` stays light: no torch, textual, numpy or pydantic on the start-up path."""

import subprocess
import sys

from conftest import run_cli

HEAVY = ["torch", "textual", "numpy", "pydantic", "experta", "rich"]


def test_help_imports_no_heavy_module():
    code = (
        "import sys\n"
        "from diagnoser.cli import main\n"
        "rc = main(['--help'])\n"
        f"print(sorted(m for m in {HEAVY!r} if m in sys.modules)); sys.exit(rc)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().splitlines()[-1] == "[]"
    assert "bound" in out.stdout and "diagnose" in out.stdout


def test_every_listed_command_loads_and_has_help():
    from diagnoser.cli import COMMANDS

    for name in COMMANDS:
        out = run_cli(name, "--help")
        assert out.returncode == 0, (name, out.stderr)
        assert "Usage:" in out.stdout


def test_version():
    out = run_cli("--version")
    assert out.returncode == 0 and "diagnoser" in out.stdout


def test_analyze_imports_only_what_its_report_needs(shared_dir):
    """A plain ``analyze`` builds no case or workload models and imports no diagnosis renderer: on a
    small trace the start is most of the time (issue #28 measures it against HTA)."""
    shared = shared_dir / "data" / "hta" / "trace_file_list"
    unwanted = ["diagnoser.models.case", "diagnoser.models.workload", "diagnoser.report.diagnosis", "diagnoser.report.html"]
    for extra in ([], ["--json"]):
        code = (
            "import io, sys, contextlib\n"
            "from diagnoser.cli import main\n"
            "with contextlib.redirect_stdout(io.StringIO()):\n"
            f"    rc = main(['analyze', *{extra!r}, {str(shared)!r}])\n"
            f"print(sorted(m for m in {unwanted!r} if m in sys.modules)); sys.exit(rc)\n"
        )
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
        assert out.returncode == 0, out.stderr
        assert out.stdout.strip().splitlines()[-1] == "[]", extra


def test_every_lazy_renderer_resolves():
    """The report package imports its renderers on first use through a name table: a name in the table
    whose module moved or was renamed would fail only when a user asked for that report."""
    code = (
        "import inspect, diagnoser.report as r\n"
        "print(all(inspect.isfunction(getattr(r, n)) and getattr(r, n).__name__ == n for n in r.__all__), len(r.__all__))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["True", "7"]
