"""The reference's synthetic single-rank example, reproduced exactly."""

import json

import pytest

from conftest import bandwidth_report, run_cli
from diagnoser.bound import floor_from_bytes
from diagnoser.models.workload import Boundary


def test_synthetic_floor_ceiling_and_gap():
    # 10 GB / 2 TB/s = 5 ms; one token per step -> 200 tokens/s; 20 ms observed -> 50 tokens/s = 25%
    r = floor_from_bytes(10e9, 2000, observed_step_ms=20)
    assert r.floor_ms == pytest.approx(5.0)
    assert r.ceiling_tokens_per_s == pytest.approx(200.0)
    assert r.observed_tokens_per_s == pytest.approx(50.0)
    assert r.fraction_of_ceiling == pytest.approx(0.25)
    assert r.unexplained_ms == pytest.approx(15.0)
    assert any("explains 5 of 20 ms" in line for line in r.sanity)
    assert any("not a diagnosis" in line for line in r.sanity)
    # at 80 % of the ceiling the fraction is not low, and the report does not say it is
    near = floor_from_bytes(10e9, 2000, observed_step_ms=6.25)
    assert near.fraction_of_ceiling == pytest.approx(0.8) and not any("not a diagnosis" in line for line in near.sanity)


def test_rate_observation_is_converted_to_the_same_step():
    r = floor_from_bytes(10e9, 2000, observed_tokens_per_s=50)
    assert r.observed_step_ms == pytest.approx(20.0)
    assert r.unexplained_ms == pytest.approx(15.0)


def test_client_boundary_is_called_out():
    r = floor_from_bytes(10e9, 2000, observed_step_ms=20, boundary=Boundary.client_receipt)
    assert any("client receipt" in line and "detokenization" in line for line in r.sanity)
    device = floor_from_bytes(10e9, 2000, observed_step_ms=20)
    assert not any("client receipt" in line for line in device.sanity)


def test_observation_faster_than_floor_is_flagged():
    r = floor_from_bytes(10e9, 2000, observed_step_ms=4)
    assert r.unexplained_ms == 0
    assert "FASTER than the floor" in r.sanity[0]


def test_cli_text_and_json():
    out = run_cli("bound", "--bytes-per-step", "10GB", "--bandwidth", "2TB/s", "--observed-step-ms", "20")
    assert out.returncode == 0, out.stderr
    assert "= 5 ms" in out.stdout and "200 tokens/s" in out.stdout
    assert "50 tokens/s" in out.stdout and "25.0% of the ceiling" in out.stdout
    assert "the floor explains 5 of 20 ms" in out.stdout
    js = run_cli("bound", "--bytes-per-step", "1e10", "--bandwidth", "2000GB/s", "--observed-step-ms", "20", "--json")
    data = json.loads(js.stdout)
    assert data["floor_ms"] == pytest.approx(5.0) and data["unexplained_ms"] == pytest.approx(15.0)


def test_measured_gpu_bandwidth_from_a_probe_report(tmp_path):
    path = bandwidth_report(tmp_path, "cuda", 2000.0)
    out = run_cli("bound", "--bytes-per-step", "10GB", "--probe-report", str(path), "--json")
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["floor_ms"] == pytest.approx(5.0)
