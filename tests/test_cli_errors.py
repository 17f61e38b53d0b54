"""Bad input gets one clear line on stderr and exit code 2, never a traceback."""

import json

import pytest

from conftest import bandwidth_report, run_cli


def assert_one_line_error(out, *needles):
    assert out.returncode == 2, (out.returncode, out.stdout, out.stderr)
    lines = [line for line in out.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, out.stderr
    assert "Traceback" not in out.stderr
    for needle in needles:
        assert needle in lines[0], lines[0]


def test_unknown_model_preset():
    assert_one_line_error(run_cli("bound", "--model", "gpt-9"), "unknown model 'gpt-9'")


def test_unknown_hardware_preset():
    assert_one_line_error(run_cli("bound", "--model", "llama-3.1-8b", "--hardware", "tpu-v9"), "unknown hardware preset")


def test_malformed_config_json(tmp_path):
    bad = tmp_path / "config.json"
    bad.write_text('{"architectures": ["LlamaForCausalLM"], "hidden_size": 4096,')
    before = bad.read_bytes()
    assert_one_line_error(run_cli("bound", "--model", str(bad)), "config.json", "not valid JSON")
    assert bad.read_bytes() == before  # inputs are never modified


def test_config_json_missing_key(tmp_path):
    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps({"architectures": ["LlamaForCausalLM"], "hidden_size": 64}))
    assert_one_line_error(run_cli("bound", "--model", str(cfg)), "missing required key 'num_attention_heads'")


def test_negative_batch():
    assert_one_line_error(run_cli("bound", "--model", "llama-3.1-8b", "--batch", "-4"), "--batch", ">= 1")


def test_tp_not_dividing_heads():
    assert_one_line_error(run_cli("bound", "--model", "llama-3.1-8b", "--tp", "3"), "TP=3 does not divide num_attention_heads=32")


def test_bad_workload_file_field(tmp_path):
    wl = tmp_path / "w.yaml"
    wl.write_text("model: llama-3.1-8b\nprecision:\n  weights: fp7\n")
    assert_one_line_error(run_cli("bound", str(wl)), "precision.weights")


@pytest.mark.parametrize("content,needle", [("", "empty"), ("model: [unclosed", "not valid YAML"), ("- a\n- b\n", "mapping")])
def test_unreadable_workload_files(tmp_path, content, needle):
    wl = tmp_path / "w.yaml"
    wl.write_text(content)
    assert_one_line_error(run_cli("bound", str(wl)), needle)


def test_missing_file():
    assert_one_line_error(run_cli("bound", "no/such/workload.yaml"), "no such file")


def test_unknown_option_is_usage_error():
    out = run_cli("bound", "--no-such-flag")
    assert out.returncode == 2 and "Traceback" not in out.stderr


def test_probe_bandwidth_must_come_from_a_gpu(tmp_path):
    path = bandwidth_report(tmp_path, "cpu", 12.0)
    assert_one_line_error(run_cli("bound", "--model", "llama-3.1-8b", "--probe-report", str(path)), "cpu memory, not GPU HBM")


def test_bound_reads_a_case_files_pin_and_says_when_there_is_none(tmp_path):
    import yaml
    from conftest import REPO

    case = REPO / "examples" / "case-moe-small-experts.yaml"
    workload = tmp_path / "workload.yaml"
    workload.write_text(yaml.safe_dump(yaml.safe_load(case.read_text())["workload"]))
    as_case = json.loads(run_cli("bound", str(case), "--json").stdout)
    assert as_case == json.loads(run_cli("bound", str(workload), "--json").stdout)
    assert as_case["observed_step_ms"] == 16.0  # the pin's observation came along
    assert_one_line_error(run_cli("bound", str(REPO / "examples" / "case-synthetic-20ms.yaml")), "a case without a workload: section")
