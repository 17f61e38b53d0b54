"""Decode steps through the model's static decode function: replayed from CUDA graphs, or launched eagerly.

    StaticDecode(model, graphs)       one input buffer per capture size; with ``graphs`` a CUDA graph
                                      captured per size at start-up (a GPU only)
    StaticDecode.takes(segments)      whether a step can run this way (one token per segment)
    StaticDecode(segments)            -> (logits [segments, vocab], greedy tokens [segments]), on the device

A step's batch is padded to the next capture size (spare rows decode a token into the padding
slot), its token ids, positions and slots go to the device in one copy, and then either the
graph captured for that size is replayed (one launch for the whole step, as vLLM's decode does)
or ``TinyMoE.decode`` runs from Python kernel by kernel (``eager-launches``). Both do the same
work on the same buffers, so the difference between them is the launches alone. The caller
copies the tokens it samples to the host once per step.
"""

from __future__ import annotations

import torch

from diagnoser.lab.model import Segment, TinyMoE
from diagnoser.lab.served import capture_sizes

WARMUP_RUNS = 3  # before each capture, on a side stream (the PyTorch CUDA-graph recipe): kernels chosen, workspaces allocated


class StaticDecode:
    def __init__(self, model: TinyMoE, graphs: bool) -> None:
        self.model = model
        self.sizes = capture_sizes(model.cfg.max_seqs)
        # [ids, positions, slots] x rows, filled with padding rows: token 0 at position 0 of the padding slot
        self.inputs = {size: torch.tensor([[0] * size, [0] * size, [model.padding_slot] * size]).to(model.device) for size in self.sizes}
        self.graphs: dict[int, tuple[torch.cuda.CUDAGraph, tuple[torch.Tensor, torch.Tensor]]] = {}
        if graphs:
            self._capture()

    def _run(self, inputs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        logits = self.model.decode(inputs[0], inputs[1], inputs[2])
        return logits, logits.argmax(dim=-1)

    def _capture(self) -> None:
        """One graph per capture size, largest first, all in one memory pool: a smaller graph reuses the
        larger one's temporaries (they never run at once), as vLLM captures. The padding rows the
        buffers hold meanwhile write only the padding slot."""
        side = torch.cuda.Stream(device=self.model.device)
        pool = None
        with torch.inference_mode():
            for size in reversed(self.sizes):
                inputs = self.inputs[size]
                side.wait_stream(torch.cuda.current_stream())
                with torch.cuda.stream(side):
                    for _ in range(WARMUP_RUNS):
                        self._run(inputs)
                torch.cuda.current_stream().wait_stream(side)
                graph = torch.cuda.CUDAGraph()
                with torch.cuda.graph(graph, pool=pool):
                    outputs = self._run(inputs)
                pool = graph.pool()
                self.graphs[size] = (graph, outputs)
        torch.cuda.synchronize(self.model.device)

    def takes(self, segments: list[Segment]) -> bool:
        """A step runs here when each segment is one token (a decode, or a one-token piece of a prompt,
        which the model computes alike) and the batch fits the largest capture size."""
        return len(segments) <= self.sizes[-1] and all(len(seg.tokens) == 1 for seg in segments)

    def __call__(self, segments: list[Segment]) -> tuple[torch.Tensor, torch.Tensor]:
        rows = len(segments)
        size = next(s for s in self.sizes if s >= rows)
        pad = size - rows
        host = torch.tensor([
            [seg.tokens[0] for seg in segments] + [0] * pad,
            [seg.start for seg in segments] + [0] * pad,
            [seg.slot for seg in segments] + [self.model.padding_slot] * pad,
        ])
        inputs = self.inputs[size]
        inputs.copy_(host)  # the step's one host-to-device copy, into the buffer the graph reads
        if size in self.graphs:
            graph, (logits, greedy) = self.graphs[size]
            graph.replay()
        else:
            logits, greedy = self._run(inputs)
        return logits[:rows], greedy[:rows]
