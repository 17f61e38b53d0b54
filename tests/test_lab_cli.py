"""``diagnoser lab`` input errors, listings and missing installs; the exercise's draw, commands and verdict."""

from __future__ import annotations

import shlex
from pathlib import Path

import pytest

from diagnoser.cli import main
from diagnoser.lab.exercise import commands, draw, verdict
from diagnoser.lab.faults import FAULTS as IMITATED
from diagnoser.lab.real import OFFERED, UNMADE, Lab
from diagnoser.real_vllm.faults import FAULTS


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["lab", "serve", "--fault", "gremlins"], "unknown fault"),
        (["lab", "serve", "--fault", "slow-tokenizer"], "cannot be made on the real vLLM here"),
        (["lab", "serve", "--fault", "none", "--fault", "enforce-eager"], "one fault at a time"),
        (["lab", "serve", "--imitation", "--fault", "eager-launches"], "no cpu form"),
        (["lab", "serve", "--port", "70000"], "--port"),
    ],
)
def test_bad_input_is_one_line_exit_2(args, message, capsys):
    assert main(args) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1


def test_a_missing_real_vllm_is_one_line_with_the_install_command(monkeypatch, tmp_path, capsys):
    monkeypatch.delenv("DIAGNOSER_VLLM_PYTHON", raising=False)
    monkeypatch.setenv("DIAGNOSER_VLLM_VENV", str(tmp_path / "absent"))
    for args in (["lab", "serve", "--fault", "none", "--port", "0"], ["lab", "exercise", "--seed", "1"]):
        assert main(args) == 2
        err = capsys.readouterr().err
        assert "bash diagnoser/real_vllm/install.sh" in err and err.count("\n") == 1


def test_missing_lab_extras_name_the_install_command(monkeypatch, capsys):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "fastapi" else real(name, *a))
    assert main(["lab", "serve", "--imitation"]) == 2
    err = capsys.readouterr().err
    assert "pip install 'diagnoser[lab,gpu]'" in err and err.count("\n") == 1


def test_a_missing_proxy_is_one_line_with_the_install_command(monkeypatch):
    from diagnoser.errors import InputError
    from diagnoser.lab import proxy

    monkeypatch.setattr(proxy.shutil, "which", lambda name: None)
    monkeypatch.setattr(proxy.os, "access", lambda path, mode: False)
    with pytest.raises(InputError, match="apt-get install -y nginx"):
        proxy.nginx_path()


def test_faults_listing_names_every_fault_how_it_is_made_and_why_not(capsys):
    assert main(["lab", "faults"]) == 0
    out = capsys.readouterr().out
    assert all(name in out for name in [*FAULTS, *UNMADE, *IMITATED])
    assert all(FAULTS[name].healthy in out for name in OFFERED)


def test_every_fault_names_a_real_rule():
    from diagnoser.engine import load_rulebook

    causes = {f.cause for f in [*FAULTS.values(), *IMITATED.values()] if f.cause}
    assert causes <= set(load_rulebook().specs)


def test_exercise_draws_every_offered_fault_and_scores():
    assert {draw(seed).name for seed in range(200)} == set(OFFERED)
    fault = FAULTS["enforce-eager"]
    assert verdict(fault, "compile-off")[0] and not verdict(fault, "none")[0]
    assert verdict(FAULTS["none"], "")[0] and verdict(FAULTS["none"], "none")[0]


def test_exercise_commands_are_valid_diagnoser_commands():
    """Every printed command parses with diagnoser's own options (no option the CLI lacks)."""
    from click.testing import CliRunner

    from diagnoser.cli import cli

    lab = Lab("http://127.0.0.1:9", Path("lab-run"), Path("lab-run/server.log"))
    for name in OFFERED:
        for line in commands(lab, FAULTS[name]):
            if not line.startswith("diagnoser "):
                continue
            args = shlex.split(line.split("   #")[0])[1:]
            # --help after the arguments: click parses every option given, then prints help and stops
            result = CliRunner().invoke(cli, [*args, "--help"])
            assert result.exit_code == 0, (line, result.output)


def test_a_cause_named_by_a_setting_or_counter_is_beyond_health_at_any_size():
    """The lab's health: host-overhead within its baseline and small measured times are noise; a measured cause whose
    evidence is a server setting or counter is not, however small, nor is an indicated one."""
    from diagnoser.models.hypothesis import Diagnosis
    from diagnoser.real_vllm.faults import healthy_problems

    def cause(rule, grade, removable, step, *names):
        gain = None if removable is None else {"removable_ms": removable, "step_ms": step, "after_ms": step - removable,
                                               "speedup": step / (step - removable)}
        return {"id": rule, "rule": rule, "title": rule, "explanation": "", "kind": "cause", "grade": grade,
                "evidence": [{"name": n, "value": 1.0} for n in names], "gain": gain}

    def problems(*hypotheses):
        return healthy_problems(Diagnosis.model_validate({"title": "t", "hypotheses": list(hypotheses)}))

    host = cause("host-overhead", "measured", 2.0, 5.0, "budget.host_ms")
    assert problems(host, cause("structured-output-overhead", "measured", 0.5, 5.0, "runs.figure")) == []
    assert problems(host, cause("speculation-low-acceptance", "measured", 0.45, 7.5, "speculation.acceptance_rate")) == ["speculation-low-acceptance"]
    assert problems(host, cause("default-penalties", "measured", 0.3, 5.0, "server.penalties", "runs.figure")) == ["default-penalties"]
    assert problems(cause("host-overhead", "measured", 3.5, 5.0, "budget.host_ms")) == ["host-overhead"]
    assert problems(host, cause("compile-off", "indicated", None, None, "server.torch_compile")) == ["compile-off"]
