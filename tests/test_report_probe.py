"""The probe report as an engineer reads it: every probe's figures, in the terminal and Markdown.

Facts come from the probes themselves where a test can run them here (the recorded H200 NVML
readings, the real streaming server), and GPU-shaped by hand where only a GPU could make them.
"""

from __future__ import annotations

import json

import pytest
from conftest import needs_torch, run_cli
from streaming_server import DecodeConfig, StreamingServer

from diagnoser.probes import client
from diagnoser.probes.base import ProbeContext
from diagnoser.probes.report import ProbeReport, ProbeResult
from diagnoser.report.probe import render_markdown, render_text, sections


def report_of(**facts: dict) -> ProbeReport:
    return ProbeReport(
        created="2026-11-29T12:00:00+00:00",
        host="gpu-box",
        results=[ProbeResult(name=name, status="ok", duration_s=1.0, facts=f) for name, f in facts.items()],
    )


GPU_BANDWIDTH = {
    "device": "cuda", "buffer_bytes": 1 << 30, "buffer_over_cache": 17.1, "dtype": "float32", "read_gbs": 4400.0,
    "copy_gbs": 4250.0, "copy_bytes_counted": "read + write (2 x buffer)", "measured_bandwidth_gbs": 4400.0,
    "best_torch_copy_gbs": 4300.0, "best_torch_copy_variant": "copy_ 1/2 buffer", "fraction_of_best_torch_copy": 4400.0 / 4300.0,
    "theoretical_bandwidth_gbs": 4916.736, "theoretical_source": "nvml", "fraction_of_theoretical": 4400.0 / 4916.736,
    "under_load": {"sm_clock_mhz": 1980, "mem_clock_mhz": 3201, "clock_event_reasons": []},
}
GPU_GRAPHS = {
    "layers": 32, "hidden": 512, "dtype": "float32", "mode": "eager and CUDA graph",
    "batches": [
        {"batch": 1, "launches_per_step": 320, "eager_step_ms": 2.0, "graph_step_ms": 0.5, "graph_gain": 4.0,
         "launch_cost_us": 4.6875, "replay_matches_eager": True, "captured": True},
        {"batch": 256, "launches_per_step": 320, "eager_step_ms": 2.5, "captured": False, "capture_error": "out of memory"},
    ],
}
GPU_GEMM = {
    "shapes_source": "option", "dtypes": ["bf16"], "peak_tflops": {"bf16": 989.0}, "peak_bandwidth_gbs": 4800.0,
    "dtypes_skipped": {"fp8": "no fp8 here"}, "skipped": [{"name": "down", "dtype": "bf16", "reason": "refused"}],
    "hardware": "NVIDIA H200 SXM 141GB", "scaled_for_cpu": False, "device_name": "NVIDIA H200",
    "shapes": [{"name": "gate_up", "dtype": "bf16", "n": 4096, "k": 7168, "weight_copies": 5, "m_doubling_time_at": 128, "points": [
        {"m": 1, "time_us": 15.3, "tflops": 3.84, "gbs": 3839.0, "fraction_of_peak_flops": 0.0039,
         "fraction_of_peak_bandwidth": 0.80, "fraction_of_roofline": 0.80},
    ]}],
}
COLLECTIVES = {
    "backend": "nccl", "backend_note": None, "dtype": "bfloat16", "world_size": 2, "clock": "time.time_ns",
    "injected_delay": {"rank": 1, "ms": 20.0}, "late_rank": 1,
    "collectives": [{"op": "all_reduce", "message_bytes": 14336, "interval_ms": 20.41, "transfer_ms": 0.031, "wait_ms": 20.38,
                     "late_rank": 1, "late_fraction": 1.0, "bus_bandwidth_gbs": 0.462}],
}
CONTEXT_SWEEP = {
    "endpoint": "http://127.0.0.1:8000/v1/completions", "model": "m", "repeats": 1,
    "points": [{"prompt_tokens": 200, "output_tokens": 12, "context": 206, "step_ms": 8.62, "ttft_ms": 6.1},
               {"prompt_tokens": 6000, "output_tokens": 12, "context": 6006, "step_ms": 26.02, "ttft_ms": 122.0}],
    "step_ms_per_1k_context": 3.0, "step_intercept_ms": 8.0, "step_fit_r2": 0.999, "ttft_ms_per_1k_prompt": 20.0,
}


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

    text = render_markdown(report_of(device=collect(RecordedNVML(), TORCH_DEVICES)))
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
    bunching = facts["bunching"]
    assert f"bunched chunks: {100 * bunching['bunched_fraction']:.1f}%" in text
    # the engine kept its 10 ms pace; receipt did not
    assert "per token: device step 10.000 ms, server emission" in text
    itl = facts["itl_ms"]
    assert "ITL" in text and f"{itl['p90']:.2f}" in text and f"{itl['p50']:.2f}" in text


def test_skips_and_failures_have_no_section_and_odd_facts_do_not_stop_the_rest():
    report = report_of(bandwidth={"measured_bandwidth_gbs": 4310.5}, collectives=COLLECTIVES)
    report.results.append(ProbeResult(name="graphs", status="failed", reason="capture refused", duration_s=0.1))
    report.results.append(ProbeResult(name="client", status="skipped", reason="no endpoint given", duration_s=0.0))
    assert [s.title for s in sections(report)] == ["bandwidth", "Collectives"]
    text = render_markdown(report)
    assert "| graphs | failed | 0.10 | capture refused |" in text and "| client | skipped | 0.00 | no endpoint given |" in text
    assert "- facts not in the form this version reads (KeyError: 'buffer_bytes')" in text


def test_saved_report_prints_as_text_or_markdown_and_writes_atomically(tmp_path):
    saved = tmp_path / "report.json"
    saved.write_text(report_of(collectives=COLLECTIVES, context_sweep=CONTEXT_SWEEP).model_dump_json())
    before = saved.read_bytes()
    done = run_cli("probe", "--from-report", str(saved))
    assert done.returncode == 0, done.stderr
    assert "Collectives" in done.stdout and "late participant: rank 1" in done.stdout
    out = tmp_path / "probe.md"
    done = run_cli("probe", "--from-report", str(saved), "--markdown", "-o", str(out))
    assert done.returncode == 0 and done.stdout == ""
    assert out.read_text().startswith("# diagnoser probe on gpu-box") and "## Context sweep" in out.read_text()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["probe.md", "report.json"]  # no temporary left behind
    assert saved.read_bytes() == before
    done = run_cli("probe", "--from-report", str(saved), "--json")
    assert ProbeReport.model_validate_json(done.stdout).result("collectives").facts["late_rank"] == 1
    done = run_cli("probe", "--from-report", str(saved), "--json", "--markdown")
    assert done.returncode == 2 and "choose one output format" in done.stderr


@needs_torch
def test_a_cpu_run_prints_its_figures_not_only_the_statuses():
    done = run_cli("probe", "--only", "bandwidth,graphs")
    assert done.returncode == 0, done.stderr
    assert "Bandwidth" in done.stdout and "of the best torch copy" in done.stdout
    assert "Eager launches vs CUDA graph replay" in done.stdout and "CUDA graphs need a GPU" in done.stdout
    with pytest.raises(json.JSONDecodeError):
        json.loads(done.stdout)
