"""The probe report as an engineer reads it: every probe's figures, in the terminal and Markdown.

Facts come from the probes themselves where a test can run them here (the recorded H200 NVML
readings, the real streaming server), and GPU-shaped by hand where only a GPU could make them.
"""

from __future__ import annotations

import json

import pytest
from conftest import needs_torch, run_cli
from streaming_server import DecodeConfig, StreamingServer

from probe_examples import COLLECTIVES, CONTEXT_SWEEP, GPU_BANDWIDTH, GPU_GEMM, GPU_GRAPHS, report_of, save

from diagnoser.models.probe_report import ProbeReport
from diagnoser.models.probe_results import probe_result
from diagnoser.probes import client
from diagnoser.probes.base import ProbeContext
from diagnoser.report.probe import render_markdown, render_text, sections


def test_gpu_shaped_figures_reach_the_document():
    text = render_markdown(report_of(bandwidth=GPU_BANDWIDTH, graphs=GPU_GRAPHS, gemm=GPU_GEMM))
    assert "probe figure 4400.0 GB/s = 102.3% of the best torch copy (4300.0 GB/s, copy_ 1/2 buffer)" in text
    assert "theoretical 4917 GB/s (nvml), achieved 89.5%" in text  # 4400 / 4916.736
    assert "under load: SM 1980 MHz, memory 3201 MHz, clock events: none" in text
    assert "| 1 | 320 | 2.000 | 0.500 | 4.00x | 4.69 | True |" in text  # (2.0 - 0.5) ms / 320 launches
    assert "| 256 | 320 | 2.500 | out of memory | n/a | n/a | n/a |" in text
    assert "| 1 | 15.3 | 3.84 | 3.84e+03 | 0.4% | 80.0% | 80.0% |" in text
    assert "**gate_up, bf16: N=4096 K=7168, 5 weight copies; time doubles at M=128**" in text
    assert "swept bf16; peak TFLOP/s: bf16 989;" in text
    assert "- fp8 not swept: no fp8 here" in text and "- down in bf16 not swept: refused" in text


def test_collectives_name_the_injected_and_the_late_rank():
    text = render_markdown(report_of(collectives=COLLECTIVES))
    assert "injected: rank 1 sleeps 20 ms before each collective" in text
    assert "late participant: rank 1 (the wait outweighs the transfer)" in text
    assert "| all_reduce | 14,336 | 20.410 | 0.031 | 20.380 | 1 (100.0%) | 0.462 |" in text


def test_context_sweep_gives_the_slope_per_1k_tokens():
    text = render_markdown(report_of(context_sweep=CONTEXT_SWEEP))
    assert "step time grows 3.000 ms per 1k tokens of context (intercept 8.000 ms, R² 0.999)" in text
    assert "| 6000 | 12 | 6006 | 26.020 | 122.0 |" in text


def test_recorded_h200_device_facts_become_one_row_and_the_gaps_are_said():
    pytest.importorskip("pynvml")
    from test_probe_device import TORCH_DEVICES, RecordedNVML

    from diagnoser.probes.device import collect

    from diagnoser.models.probe_results import DeviceFacts

    facts = DeviceFacts(**dict(collect(RecordedNVML(), TORCH_DEVICES)), torch_cuda="12.8")
    text = render_markdown(report_of(device=facts))
    assert "driver 570.86.15, CUDA driver 12.8" in text
    # 150,754,820,096 B = 140 GiB; 768 B x 2 x 3201 MHz = 4917 GB/s; 17 of 18 links active
    row = next(line for line in text.splitlines() if "NVIDIA H200" in line)
    assert row == "| 0 | NVIDIA H200 | 140 GiB | 132 | 4917 | 345/1980 SM, 3201/3201 mem | GpuIdle | 113/700 W | gen5 x16 | 17/18 | n/a |"
    assert "device 0: temperature_c not read (NVML NotSupported)" in text


def test_buffered_stream_from_the_real_server_shows_bursts_and_where_they_formed():
    step = 10.0
    with StreamingServer(DecodeConfig(step_ms=step, prefill_ms=5, burst=4, server_timing=True)) as url:
        facts = client.run(ProbeContext(timeout_s=60, options={"endpoint": url, "max_tokens": 17, "requests": 1}))
    text = render_text(report_of(client=facts), width=160)
    assert f"bunched chunks: {100 * facts.bunching.bunched_fraction:.1f}%" in text
    # the engine kept its 10 ms pace; receipt did not
    assert "per token: device step 10.000 ms, server emission" in text
    assert "ITL" in text and f"{facts.itl_ms.p90:.2f}" in text and f"{facts.itl_ms.p50:.2f}" in text


def test_skips_and_failures_have_no_section_only_a_status_row():
    report = report_of(bandwidth=GPU_BANDWIDTH, collectives=COLLECTIVES)
    report.results.append(probe_result(name="graphs", status="failed", reason="capture refused", duration_s=0.1))
    report.results.append(probe_result(name="client", status="skipped", reason="no endpoint given", duration_s=0.0))
    assert [s.title for s in sections(report)] == ["Bandwidth", "Collectives"]
    text = render_markdown(report)
    assert "| graphs | failed | 0.10 | capture refused |" in text and "| client | skipped | 0.00 | no endpoint given |" in text


def test_saved_report_prints_as_text_or_markdown_and_writes_atomically(tmp_path):
    saved = save(report_of(collectives=COLLECTIVES, context_sweep=CONTEXT_SWEEP), tmp_path / "report.json")
    before = saved.read_bytes()
    done = run_cli("probe", "--probe-report", str(saved))
    assert done.returncode == 0, done.stderr
    assert "Collectives" in done.stdout and "late participant: rank 1" in done.stdout
    out = tmp_path / "probe.md"
    done = run_cli("probe", "--probe-report", str(saved), "--markdown", "-o", str(out))
    assert done.returncode == 0 and done.stdout == ""
    assert out.read_text().startswith("# diagnoser probe on gpu-box") and "## Context sweep" in out.read_text()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["probe.md", "report.json"]  # no temporary left behind
    assert saved.read_bytes() == before
    done = run_cli("probe", "--probe-report", str(saved), "--json")
    assert ProbeReport.model_validate_json(done.stdout) == ProbeReport.model_validate_json(before)
    done = run_cli("probe", "--probe-report", str(saved), "--json", "--markdown")
    assert done.returncode == 2 and "choose one output format" in done.stderr


@needs_torch
def test_a_cpu_run_prints_its_figures_not_only_the_statuses():
    done = run_cli("probe", "--only", "bandwidth,graphs")
    assert done.returncode == 0, done.stderr
    assert "Bandwidth" in done.stdout and "of the best torch copy" in done.stdout
    assert "Eager launches vs CUDA graph replay" in done.stdout and "CUDA graphs need a GPU" in done.stdout
    with pytest.raises(json.JSONDecodeError):
        json.loads(done.stdout)
