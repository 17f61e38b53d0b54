"""A tiny random-weight decoder: attention over a paged KV cache and a top-k mixture-of-experts MLP.

The weights are random (seeded), so the text is nonsense, but every step does the work a real
decode step does, in the same order: embed, per layer norm / QKV / attention over the
sequence's cached keys and values / output projection / norm / router / experts, then the
final norm and the LM head. The cache holds one contiguous stretch per sequence slot, read in
place by attention.

Two knobs change the work mechanically (``faults`` picks them):

* ``gather_per_block``: attention assembles each sequence's keys and values block by block into
  a fresh tensor (one copy per 4-token block, as an engine without a kernel that reads its
  paged cache in place does) instead of reading a view, so each step costs more the longer
  the context;
* ``experts``/``expert_hidden``/``top_k`` with ``per_expert_loop``: fine-grained experts, each
  GEMM run separately on the few rows routed to it, instead of one grouped GEMM over all
  routed rows.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch.profiler import record_function

BLOCK = 4
# Above this many routed rows (a prompt chunk) every engine loops over experts with large GEMMs;
# the grouped path gathers one weight matrix per row, which only pays for decode-sized batches.
GROUPED_ROWS = 64


@dataclass(frozen=True)
class ModelConfig:
    vocab: int = 8192
    hidden: int = 512
    heads: int = 8
    kv_heads: int = 2  # grouped-query attention: four query heads share each cached head
    layers: int = 2
    experts: int = 8
    top_k: int = 2
    expert_hidden: int = 256
    max_context: int = 4096
    max_seqs: int = 8
    gather_per_block: bool = False
    per_expert_loop: bool = False
    seed: int = 0


@dataclass
class Segment:
    """Tokens of one sequence fed in one step: a decode token, or a chunk of its prompt."""

    slot: int
    tokens: list[int]
    start: int  # position of the first token (tokens already in the cache)


class TinyMoE:
    def __init__(self, cfg: ModelConfig, device: str = "cpu") -> None:
        self.cfg, self.device = cfg, torch.device(device)
        self.head_dim = cfg.hidden // cfg.heads
        self.kv_width = cfg.kv_heads * self.head_dim
        self.scale = self.head_dim ** -0.5
        g = torch.Generator().manual_seed(cfg.seed)
        d, e, h = cfg.hidden, cfg.experts, cfg.expert_hidden

        def w(*shape: int) -> torch.Tensor:
            return (torch.randn(*shape, generator=g) / shape[-2] ** 0.5).to(self.device)

        self.embed = (torch.randn(cfg.vocab, d, generator=g) * 0.5).to(self.device)
        self.layers = [
            {
                "qkv": w(d, d + 2 * self.kv_width), "out": w(d, d), "router": w(d, e),
                "w_in": w(e, d, 2 * h), "w_out": w(e, h, d),
            }
            for _ in range(cfg.layers)
        ]
        self.head = w(d, cfg.vocab)
        # [layer, slot, k/v, head, position, head dim]: one contiguous stretch per sequence slot and
        # head, so attention reads each head's keys and values in place
        self.cache = torch.zeros(cfg.layers, cfg.max_seqs, 2, cfg.kv_heads, cfg.max_context, self.head_dim, device=self.device)

    def _heads(self, t: torch.Tensor) -> torch.Tensor:
        """[tokens, heads x head dim] -> [heads, tokens, head dim]."""
        return t.view(t.shape[0], -1, self.head_dim).transpose(0, 1)

    def _write(self, layer: int, seg: Segment, k: torch.Tensor, v: torch.Tensor) -> None:
        end = seg.start + len(seg.tokens)
        self.cache[layer, seg.slot, 0, :, seg.start : end] = self._heads(k)
        self.cache[layer, seg.slot, 1, :, seg.start : end] = self._heads(v)

    def _read(self, layer: int, seg: Segment, length: int) -> tuple[torch.Tensor, torch.Tensor]:
        if self.cfg.gather_per_block:
            blocks = [self.cache[layer, seg.slot, :, :, b : min(b + BLOCK, length)] for b in range(0, length, BLOCK)]
            kv = torch.cat(blocks, dim=2)
        else:  # read in place: a view of the live context
            kv = self.cache[layer, seg.slot, :, :, :length]
        return kv[0], kv[1]

    def _attention(self, layer: int, x: torch.Tensor, segments: list[Segment]) -> torch.Tensor:
        cfg = self.cfg
        qkv = x @ self.layers[layer]["qkv"]
        q, k, v = qkv.split([cfg.hidden, self.kv_width, self.kv_width], dim=-1)
        outs, row = [], 0
        for seg in segments:
            n = len(seg.tokens)
            self._write(layer, seg, k[row : row + n], v[row : row + n])
            keys, values = self._read(layer, seg, seg.start + n)  # [kv heads, context, head dim]
            query = self._heads(q[row : row + n])
            if n > 1:  # a prompt chunk: causal within the chunk, all of the cache before it
                mask = torch.ones(n, seg.start + n, dtype=torch.bool, device=self.device).tril(seg.start)
                att = F.scaled_dot_product_attention(query, keys, values, attn_mask=mask, enable_gqa=True)
            else:  # one query: two small GEMMs beat the fused CPU kernel at this size
                grouped = query.reshape(cfg.kv_heads, -1, self.head_dim)  # each kv head's query heads
                scores = grouped @ keys.transpose(1, 2) * self.scale
                att = (torch.softmax(scores, dim=-1) @ values).reshape(cfg.heads, 1, self.head_dim)
            outs.append(att.transpose(0, 1).reshape(n, cfg.hidden))
            row += n
        return torch.cat(outs) @ self.layers[layer]["out"]

    def _experts(self, layer: int, x: torch.Tensor) -> torch.Tensor:
        cfg, weights = self.cfg, self.layers[layer]
        gates = torch.softmax(x @ weights["router"], dim=-1)
        top, chosen = gates.topk(cfg.top_k, dim=-1)
        top = top / top.sum(-1, keepdim=True)
        rows = torch.arange(x.shape[0], device=self.device).repeat_interleave(cfg.top_k)
        flat = chosen.reshape(-1)
        with record_function("moe_experts"):
            if cfg.per_expert_loop or len(flat) > GROUPED_ROWS:
                out = torch.zeros(len(flat), cfg.hidden, device=self.device)
                for expert in flat.unique().tolist():
                    picked = (flat == expert).nonzero().squeeze(1)
                    a, b = (x[rows[picked]] @ weights["w_in"][expert]).chunk(2, dim=-1)
                    out[picked] = (F.silu(a) * b) @ weights["w_out"][expert]
            else:  # one grouped GEMM: every routed row against its expert's weights
                a, b = torch.bmm(x[rows].unsqueeze(1), weights["w_in"][flat]).squeeze(1).chunk(2, dim=-1)
                out = torch.bmm((F.silu(a) * b).unsqueeze(1), weights["w_out"][flat]).squeeze(1)
        return (out.view(x.shape[0], cfg.top_k, cfg.hidden) * top.unsqueeze(-1)).sum(1)

    @staticmethod
    def _norm(x: torch.Tensor) -> torch.Tensor:
        return F.rms_norm(x, x.shape[-1:], eps=1e-6)

    @torch.inference_mode()
    def forward(self, segments: list[Segment], tp=None) -> torch.Tensor:
        """Logits of the last token of every segment, [segments, vocab]; the cache is updated.
        With ``tp`` (a ``straggler.TensorParallel``) each layer ends in an all-reduce with the peer."""
        ids = torch.tensor([t for seg in segments for t in seg.tokens], device=self.device)
        x = self.embed[ids]
        for layer in range(self.cfg.layers):
            x = x + self._attention(layer, self._norm(x), segments)
            x = x + self._experts(layer, self._norm(x))
            if tp is not None:
                x = x + tp.all_reduce(self._norm(x) @ tp.shard[layer])
        last = torch.tensor([len(seg.tokens) for seg in segments], device=self.device).cumsum(0) - 1
        return self._norm(x[last]) @ self.head
