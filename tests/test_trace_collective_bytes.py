"""Collective message sizes from Kineto args, and the bandwidth of the transfer alone."""

import json
from pathlib import Path

import pytest
from conftest import run_cli

from diagnoser.trace.analysis import analyze_traces
from diagnoser.trace.facts import to_observations
from diagnoser.trace.kineto import read_kineto
from diagnoser.trace.load import load_traces

ALL_REDUCE = "ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<4096ul>)"
T0 = 1_700_000_000_000_000  # us


def _rank(tmp_path: Path, rank: int, ts: float, dur: float, args: dict) -> Path:
    """One step with one all-reduce kernel, launched by one runtime call."""
    events = [
        {"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#1", "pid": 1, "tid": 1, "ts": T0, "dur": 5000},
        {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": T0 + 10,
         "dur": 5, "args": {"correlation": 1}},
        {"ph": "X", "cat": "kernel", "name": ALL_REDUCE, "pid": 0, "tid": 7, "ts": ts, "dur": dur,
         "args": {"device": 0, "stream": 7, "correlation": 1, **args}},
    ]  # fmt: skip
    path = tmp_path / f"rank{rank}.json"
    path.write_text(json.dumps({"distributedInfo": {"rank": rank, "world_size": 2}, "traceEvents": events}))
    return path


SIZE = {"Collective name": "allreduce", "In msg nelems": 1048576, "Out msg nelems": 1048576, "dtype": "BFloat16"}


def test_two_ranks_late_arrival_gives_size_and_transfer_bandwidth(tmp_path):
    # rank 0 arrives at T0+1000 us and waits; rank 1 arrives 2 ms later; both leave 0.5 ms after that
    paths = [_rank(tmp_path, 0, T0 + 1000, 2500, SIZE), _rank(tmp_path, 1, T0 + 3000, 500, SIZE)]
    analysis = analyze_traces(load_traces(paths, workers=1))
    (call,) = analysis.collectives
    assert call.wait_us == 2000 and call.transfer_us == 500
    # 1,048,576 bf16 elements x 2 bytes; over the 0.5 ms transfer, not the 2.5 ms kernel
    assert call.message_bytes == 2_097_152
    assert call.bandwidth_gbs == pytest.approx(2_097_152 / 0.5e-3 / 1e9)  # 4.194 GB/s
    (obs,) = to_observations(analysis).collectives
    assert obs.message_bytes == 2_097_152
    assert obs.effective_bandwidth_gbs == pytest.approx(4.194304)
    text = run_cli("analyze", *map(str, paths)).stdout
    assert "message 2,097,152 B, 4.2 GB/s" in text


@pytest.mark.parametrize(
    "args",
    [
        {"In msg nelems": "many", "Out msg nelems": 8, "dtype": "BFloat16"},
        {"In msg nelems": None, "dtype": "Float"},
        {"In msg nelems": 8, "dtype": "ComplexFloat"},  # unknown dtype
        {"In msg nelems": -8, "dtype": "Float"},
        {"In msg nelems": [8], "dtype": "Float"},
        {"dtype": "BFloat16"},  # no size args: symmetric-memory all-reduce, other traces
    ],
)
def test_malformed_or_missing_sizes_are_unknown(tmp_path, args):
    path = _rank(tmp_path, 0, T0 + 1000, 500, args)
    assert read_kineto(path).kernels["msg_bytes"].tolist() == [0]
    (call,) = analyze_traces(load_traces([path])).collectives
    assert call.message_bytes is None and call.bandwidth_gbs is None


@pytest.mark.parametrize(
    ("dtype", "element"), [("Float", 4), ("Half", 2), ("Float8_e4m3fn", 1), ("Long", 8), ("Byte", 1)]
)
def test_element_sizes_and_the_larger_buffer(tmp_path, dtype, element):
    path = _rank(tmp_path, 0, T0 + 1000, 500, {"In msg nelems": 16, "Out msg nelems": 128, "dtype": dtype})
    assert read_kineto(path).kernels["msg_bytes"].tolist() == [128 * element]


def test_real_vllm_all_gather_size(shared_dir):
    path = shared_dir / "data" / "decode" / "TraceLens" / "eager_trace.json.gz"
    trace = read_kineto(path)
    sized = {trace.strings[n]: b for n, b in zip(trace.kernels["name"], trace.kernels["msg_bytes"]) if b}
    # "In msg nelems": 25136 per rank, "Out msg nelems": 201088 gathered over 8 ranks, BFloat16
    assert sized and all(name.startswith("ncclDevKernel_AllGather") for name in sized)
    assert set(sized.values()) == {201088 * 2}
    gathers = [c for c in analyze_traces([trace]).collectives if c.op == "all_gather"]
    assert gathers and {c.message_bytes for c in gathers} == {402_176}
