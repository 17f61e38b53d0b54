"""Reading `nsys recipe` output folders (Parquet or CSV) into facts, with hand-checked summaries."""

from __future__ import annotations

import sys

import pytest

from diagnoser.cli import main
from diagnoser.errors import InputError
from diagnoser.trace.recipes import KernelSum, read_recipe_output

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")

# Real vLLM decode kernel names (shared/data/nsys/nsys-llm-explainer kernels table).
GEMM = "ampere_fp16_s16816gemm_fp16_64x64_sliced1x2_ldg8_f2f_stages_64x5_tn"
CACHE = "reshape_and_cache_kernel_flash"
NCCL = "ncclDevKernel_AllReduce_Sum_f16_RING_LL"


def write_parquet(folder, stem, columns):
    folder.mkdir(exist_ok=True)
    pq.write_table(pa.table(columns), folder / f"{stem}.parquet")


def test_kernel_summary_from_parquet_with_units_in_the_headers(tmp_path):
    write_parquet(tmp_path / "out", "rank_stats", {
        "Name": [GEMM, CACHE, NCCL],
        "Time (%)": [60.0, 30.0, 10.0],
        "Total Time (us)": [47015.035, 28817.926, 5000.0],
        "Instances": [3612, 5656, 100],
        "Avg (us)": [13.016, 5.095, 50.0],
        "Med (us)": [12.288, 3.6805, 48.0],
        "Rank": [0, 0, 0],
    })
    facts = read_recipe_output("cuda_gpu_kern_sum", tmp_path / "out")
    assert facts.table.endswith("rank_stats.parquet")
    gemm = facts.rows[0]
    assert isinstance(gemm, KernelSum)
    assert (gemm.name, gemm.instances, gemm.rank) == (GEMM, 3612, 0)
    assert gemm.total_ns == pytest.approx(47_015_035)  # µs header converted to ns
    assert gemm.median_ns == pytest.approx(12_288)
    total = 47_015_035 + 28_817_926 + 5_000_000
    assert facts.summary["kernel_time_ns"] == pytest.approx(total)
    assert facts.summary["kernel_instances"] == 3612 + 5656 + 100
    assert facts.summary["nccl_share_of_kernel_time"] == pytest.approx(5_000_000 / total)


def test_csv_is_read_when_pyarrow_is_missing(tmp_path, monkeypatch):
    out = tmp_path / "out"
    write_parquet(out, "trace", {"Text": ["wrong"], "Start": [0], "End": [1]})
    (out / "trace.csv").write_text(
        "Text,Start,End,PID,TID,Stack Level,Children Count,Range ID,Parent ID,Range Stack,Rank\n"
        '"decode_step, bs=8",1000,4000,11,12,0,2,1,,1,0\n'
        "decode_step,5000,6000,11,12,0,2,2,,2,0\n"
        "decode_step,7000,17000,11,12,0,2,3,,3,0\n"
    )
    monkeypatch.setitem(sys.modules, "pyarrow.parquet", None)  # import now raises ImportError
    facts = read_recipe_output("nvtx_gpu_proj_trace", out)
    assert facts.table.endswith("trace.csv")
    assert [r.text for r in facts.rows] == ["decode_step, bs=8", "decode_step", "decode_step"]
    assert (facts.rows[0].pid, facts.rows[0].tid, facts.rows[0].level) == (11, 12, 0)
    assert facts.summary == {"ranges": 3.0, "median_gpu_span_ns": 3000.0}  # spans 3000, 1000, 10000


def test_parquet_only_folder_without_pyarrow_says_why(tmp_path, monkeypatch):
    write_parquet(tmp_path / "out", "analysis", {"Duration": [0], "In-Use": [50.0]})
    monkeypatch.setitem(sys.modules, "pyarrow.parquet", None)
    with pytest.raises(InputError, match=r"none of analysis\.csv, heatmap\.csv .*pyarrow is not installed"):
        read_recipe_output("cuda_gpu_time_util_map", tmp_path / "out")


def test_time_utilization_heatmap(tmp_path):
    write_parquet(tmp_path / "out", "analysis", {
        "Duration": [0, 1_000_000, 2_000_000, 0, 1_000_000, 2_000_000],
        "In-Use": [90.0, 15.0, 60.0, 80.0, 80.0, 20.0],
        "PID": [11] * 3 + [12] * 3,
        "Device ID": [0] * 3 + [1] * 3,
        "Rank": [0] * 3 + [1] * 3,
    })
    facts = read_recipe_output("cuda_gpu_time_util_map", tmp_path / "out")
    assert [r.device for r in facts.rows] == [0, 0, 0, 1, 1, 1]
    assert facts.summary["mean_busy_percent"] == pytest.approx((90 + 15 + 60 + 80 + 80 + 20) / 6)
    assert facts.summary["min_busy_percent"] == 15.0


def test_nccl_overlap_with_name_index_column(tmp_path):
    write_parquet(tmp_path / "out", "rank_trace", {
        "Name": [NCCL, NCCL],
        "Start": [0, 10_000],
        "End": [4_000, 12_000],
        "PID": [11, 12],
        "DeviceID": [0, 1],
        "Communication Overlap": [0.0, 0.0],
        "Compute Overlap": [50.0, 0.0],
        "Rank": [0, 1],
    })
    facts = read_recipe_output("nccl_gpu_overlap_trace", tmp_path / "out")
    # 4000 ns half hidden (2000 exposed) + 2000 ns not hidden: 4000 exposed of 6000.
    assert facts.summary["nccl_time_ns"] == 6000
    assert facts.summary["exposed_nccl_time_ns"] == pytest.approx(4000)
    assert facts.rows[1].rank == 1 and facts.rows[1].device == 1


def test_missing_column_names_the_file_and_what_was_there(tmp_path):
    write_parquet(tmp_path / "out", "rank_trace", {"Name": [NCCL], "Start": [0], "End": [1]})
    with pytest.raises(InputError, match=r"rank_trace\.parquet: no column for compute_overlap_percent .*found Name, Start, End"):
        read_recipe_output("nccl_gpu_overlap_trace", tmp_path / "out")


def test_non_numeric_cell_and_corrupt_parquet_are_input_errors(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (out / "rank_stats.csv").write_text("Name,Total Time (ns),Instances\ngemm,lots,3\n")
    with pytest.raises(InputError, match=r"rank_stats\.csv: column 'Total Time \(ns\)' holds 'lots'"):
        read_recipe_output("cuda_gpu_kern_sum", out)
    (out / "rank_stats.parquet").write_bytes(b"PAR1 truncated")
    with pytest.raises(InputError, match=r"rank_stats\.parquet: unreadable Parquet file"):
        read_recipe_output("cuda_gpu_kern_sum", out)


def test_cli_reads_an_existing_recipe_folder_without_nsys(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("PATH", str(tmp_path))  # no nsys anywhere
    write_parquet(tmp_path / "out", "rank_stats", {"Name": [GEMM], "Total Time (ns)": [2_000_000], "Instances": [4]})
    assert main(["nsys", "recipe", "cuda_gpu_kern_sum", str(tmp_path / "out")]) == 0
    out = capsys.readouterr().out
    assert "cuda_gpu_kern_sum: 1 rows" in out and "kernel_time_ns: 2e+06" in out
    assert main(["nsys", "recipe", "cuda_gpu_kern_sum", str(tmp_path / "nothing-here")]) == 2
    assert "nothing-here: no such file" in capsys.readouterr().err
