"""Record PyTorch-profiler traces of a small decode loop, eagerly and as CUDA-graph replay.

The project needs real decode-loop traces for its tests and benchmarks; this makes them on
whatever GPU a session is lent (and, as a smoke test, on the CPU). The model is a plain
pre-norm transformer stack decoding one token per sequence per step against a KV cache:
norms, QKV and output projections, attention over the cache, a gated MLP and an LM head, so
the trace has the kernel mix of real decode (many small kernels; GEMV-shaped GEMMs).

Each step runs inside ``record_function("decode_step")`` so `diagnoser analyze
--step-range decode_step` finds it; graph replay is recorded the same way. Like a server, each
step copies its sampled tokens to the host, so `--steps-from pattern` can cut the eager trace
without the marks and be checked against them.

Usage: python bench/capture_decode_trace.py --out DIR [--layers 8] [--hidden 2048] [--batch 8]
       [--context 1024] [--steps 12] [--device auto|cuda|cpu]
Writes DIR/decode_eager.json.gz, and on a GPU DIR/decode_graph.json.gz, then prints the
median step time of each and the graph gain.
"""

from __future__ import annotations

import argparse
import gzip
import json
import statistics
import time
from pathlib import Path

import torch
import torch.nn.functional as F

STEP_NAME = "decode_step"


class DecodeStack(torch.nn.Module):
    def __init__(self, layers: int, hidden: int, heads: int, vocab: int, dtype: torch.dtype, device: str):
        super().__init__()
        self.heads, self.head_dim = heads, hidden // heads
        make = dict(dtype=dtype, device=device)
        self.qkv = torch.nn.ModuleList(torch.nn.Linear(hidden, 3 * hidden, bias=False, **make) for _ in range(layers))
        self.out = torch.nn.ModuleList(torch.nn.Linear(hidden, hidden, bias=False, **make) for _ in range(layers))
        self.gate_up = torch.nn.ModuleList(torch.nn.Linear(hidden, 8 * hidden, bias=False, **make) for _ in range(layers))
        self.down = torch.nn.ModuleList(torch.nn.Linear(4 * hidden, hidden, bias=False, **make) for _ in range(layers))
        self.head = torch.nn.Linear(hidden, vocab, bias=False, **make)

    @staticmethod
    def norm(x: torch.Tensor) -> torch.Tensor:
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6)

    def forward(self, x: torch.Tensor, keys: list[torch.Tensor], values: list[torch.Tensor]) -> torch.Tensor:
        batch = x.shape[0]
        for qkv, out, gate_up, down, k_cache, v_cache in zip(self.qkv, self.out, self.gate_up, self.down, keys, values):
            q, k, v = qkv(self.norm(x)).view(batch, 3, self.heads, 1, self.head_dim).unbind(1)
            k_cache[:, :, -1:].copy_(k)  # the new token's K and V land in the cache's last slot
            v_cache[:, :, -1:].copy_(v)
            attn = F.scaled_dot_product_attention(q, k_cache, v_cache)
            x = x + out(attn.reshape(batch, -1))
            gate, up = gate_up(self.norm(x)).chunk(2, dim=-1)
            x = x + down(F.silu(gate) * up)
        return self.head(self.norm(x)).argmax(-1)  # greedy sampling on the device


def build(args: argparse.Namespace, device: str):
    dtype = torch.bfloat16 if device == "cuda" else torch.float32
    heads = max(1, args.hidden // 128)
    model = DecodeStack(args.layers, args.hidden, heads, args.vocab, dtype, device).eval()
    shape = (args.batch, heads, args.context, args.hidden // heads)
    keys = [torch.randn(shape, dtype=dtype, device=device) for _ in range(args.layers)]
    values = [torch.randn(shape, dtype=dtype, device=device) for _ in range(args.layers)]
    x = torch.randn(args.batch, args.hidden, dtype=dtype, device=device)
    return model, keys, values, x


def profile_steps(step, steps: int, device: str, path: Path) -> list[float]:
    """Run ``step`` under the profiler, one record_function per step; return wall ms per step."""
    activities = [torch.profiler.ProfilerActivity.CPU]
    if device == "cuda":
        activities.append(torch.profiler.ProfilerActivity.CUDA)
    times = []
    with torch.profiler.profile(activities=activities, record_shapes=True) as prof:
        for _ in range(steps):
            start = time.perf_counter()
            with torch.profiler.record_function(STEP_NAME):
                step()
            if device == "cuda":
                torch.cuda.synchronize()
            times.append((time.perf_counter() - start) * 1e3)
    raw = path.with_suffix("")  # export writes plain JSON; keep the committed copy gzipped
    prof.export_chrome_trace(str(raw))
    path.write_bytes(gzip.compress(raw.read_bytes()))
    raw.unlink()
    json.loads(gzip.decompress(path.read_bytes()))  # fail here, not in a later test, if the export broke
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--layers", type=int, default=8)
    parser.add_argument("--hidden", type=int, default=2048)
    parser.add_argument("--vocab", type=int, default=32000)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--context", type=int, default=1024)
    parser.add_argument("--steps", type=int, default=12)
    parser.add_argument("--device", choices=["auto", "cuda", "cpu"], default="auto")
    args = parser.parse_args()
    device = ("cuda" if torch.cuda.is_available() else "cpu") if args.device == "auto" else args.device
    args.out.mkdir(parents=True, exist_ok=True)
    model, keys, values, x = build(args, device)

    with torch.inference_mode():
        def forward() -> torch.Tensor:
            return model(x, keys, values)

        def eager() -> list[int]:
            return forward().tolist()  # a server emits the sampled tokens: one copy to the host per step

        for _ in range(3):  # warm-up: allocator, cuBLAS handles, kernel selection
            eager()
        eager_ms = profile_steps(eager, args.steps, device, args.out / "decode_eager.json.gz")
        print(f"eager: median step {statistics.median(eager_ms):.3f} ms over {args.steps} steps ({device})")
        if device != "cuda":
            print("graph replay: skipped (CUDA graphs need a GPU)")
            return
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            for _ in range(3):
                forward()
        torch.cuda.current_stream().wait_stream(stream)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            tokens = forward()

        def replay() -> list[int]:
            graph.replay()
            return tokens.tolist()

        graph_ms = profile_steps(replay, args.steps, device, args.out / "decode_graph.json.gz")
    e, g = statistics.median(eager_ms), statistics.median(graph_ms)
    print(f"graph: median step {g:.3f} ms; gain {e / g:.2f}x ({e - g:.3f} ms per step)")


if __name__ == "__main__":
    main()
