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

``forward`` takes any mix of decode tokens and prompt chunks, so its shapes follow the step.
``decode`` is the same decode step with every shape fixed by the row count alone, and no value
read back to the host, which is what a CUDA graph can capture (``graphs.py``): attention runs
over the whole ``max_context`` of each row's slot with the positions past its token masked off,
and each routed row multiplies its expert's gathered weights in one batched GEMM. The cache
holds one slot more than the scheduler uses, where a padded batch's spare rows write.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch.profiler import record_function

from diagnoser.lab.served import ModelConfig

BLOCK = 4


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
        for weights in self.layers:  # attention's 1/sqrt(head dim), folded into the query projection
            weights["qkv"][:, :d] *= self.head_dim ** -0.5
        self.head = w(d, cfg.vocab)
        # [layer, slot, k/v, head, position, head dim]: one contiguous stretch per sequence slot and
        # head, so attention reads each head's keys and values in place; the last slot is no
        # sequence's, only padding rows of a static decode batch write there
        self.padding_slot = cfg.max_seqs
        self.cache = torch.zeros(cfg.layers, cfg.max_seqs + 1, 2, cfg.kv_heads, cfg.max_context, self.head_dim, device=self.device)
        self.slots = [list(self.cache[layer].unbind(0)) for layer in range(cfg.layers)]  # [layer][slot] views
        self.context_positions = torch.arange(cfg.max_context, device=self.device)

    def _write(self, layer: int, seg: Segment, kv: torch.Tensor) -> torch.Tensor:
        """Store the segment's keys and values ([tokens, 2 x kv width]); returns the slot's cache."""
        slot, n = self.slots[layer][seg.slot], len(seg.tokens)
        slot[:, :, seg.start : seg.start + n] = kv.view(n, 2, self.cfg.kv_heads, self.head_dim).permute(1, 2, 0, 3)
        return slot

    def _read(self, slot: torch.Tensor, length: int) -> torch.Tensor:
        """The live context's keys and values, [2, kv heads, length, head dim]."""
        if self.cfg.gather_per_block:
            return torch.cat([slot[:, :, b : min(b + BLOCK, length)] for b in range(0, length, BLOCK)], dim=2)
        return slot[:, :, :length]  # read in place: a view of the live context

    def _attention(self, layer: int, x: torch.Tensor, segments: list[Segment]) -> torch.Tensor:
        cfg, hd = self.cfg, self.head_dim
        q, kv = (x @ self.layers[layer]["qkv"]).split([cfg.hidden, 2 * self.kv_width], dim=-1)
        outs, row = [], 0
        for seg in segments:
            n = len(seg.tokens)
            keys, values = self._read(self._write(layer, seg, kv[row : row + n]), seg.start + n).unbind(0)
            if n > 1:  # a prompt chunk: causal within the chunk, all of the cache before it
                query = q[row : row + n].view(n, cfg.heads, hd).transpose(0, 1)
                mask = torch.ones(n, seg.start + n, dtype=torch.bool, device=self.device).tril(seg.start)
                att = F.scaled_dot_product_attention(query, keys, values, attn_mask=mask, enable_gqa=True, scale=1.0)
                outs.append(att.transpose(0, 1).reshape(n, cfg.hidden))
            else:  # one query: each kv head's query heads in one small GEMM (the query is pre-scaled)
                scores = torch.softmax(q[row].view(cfg.kv_heads, -1, hd) @ keys.transpose(1, 2), dim=-1)
                outs.append((scores @ values).view(1, cfg.hidden))
            row += n
        return (torch.cat(outs) if len(outs) > 1 else outs[0]) @ self.layers[layer]["out"]

    def _route(self, layer: int, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Each row's top-k experts, [rows, k], and their renormalised gate weights."""
        gates = torch.softmax(x @ self.layers[layer]["router"], dim=-1)
        top, chosen = gates.topk(self.cfg.top_k, dim=-1)
        return top / top.sum(-1, keepdim=True), chosen

    def _experts(self, layer: int, x: torch.Tensor) -> torch.Tensor:
        cfg, weights = self.cfg, self.layers[layer]
        top, chosen = self._route(layer, x)
        flat = chosen.view(-1)
        with record_function("moe_experts"):
            if cfg.per_expert_loop:
                rows = torch.arange(x.shape[0], device=self.device).repeat_interleave(cfg.top_k)
                out = torch.zeros(len(flat), cfg.hidden, device=self.device)
                for expert in flat.unique().tolist():
                    picked = (flat == expert).nonzero().squeeze(1)
                    a, b = (x[rows[picked]] @ weights["w_in"][expert]).chunk(2, dim=-1)
                    out[picked] = (F.silu(a) * b) @ weights["w_out"][expert]
                return (out.view(x.shape[0], cfg.top_k, cfg.hidden) * top.unsqueeze(-1)).sum(1)
            # one grouped GEMM per projection: routed rows sorted by expert, each group against its
            # expert's weights in place (no copies, no per-expert launches)
            order = flat.argsort()
            token = order // cfg.top_k
            ends = torch.zeros(cfg.experts, dtype=torch.int32, device=self.device).scatter_add_(
                0, flat, torch.ones_like(flat, dtype=torch.int32)).cumsum(0, dtype=torch.int32)
            a, b = torch._grouped_mm(x[token], weights["w_in"], offs=ends).chunk(2, dim=-1)
            out = torch._grouped_mm(F.silu(a) * b, weights["w_out"], offs=ends) * top.view(-1)[order].unsqueeze(1)
            return torch.zeros_like(x).index_add_(0, token, out)

    def _static_attention(self, layer: int, x: torch.Tensor, slots: torch.Tensor, positions: torch.Tensor,
                          live: torch.Tensor) -> torch.Tensor:
        """Decode attention for one token per row with no shape that depends on a context: the new
        keys and values are scattered into the rows' slots, and each row attends over its slot's
        whole ``max_context`` with the positions after its token (``live`` false) masked off."""
        cfg, hd, rows = self.cfg, self.head_dim, x.shape[0]
        q, kv = (x @ self.layers[layer]["qkv"]).split([cfg.hidden, 2 * self.kv_width], dim=-1)
        cache = self.cache[layer]
        cache[slots, :, :, positions] = kv.view(rows, 2, cfg.kv_heads, hd)
        keys, values = cache.index_select(0, slots).unbind(1)  # [rows, kv heads, max context, head dim]
        scores = q.view(rows, cfg.kv_heads, -1, hd) @ keys.transpose(-1, -2)  # the query is pre-scaled
        scores = scores.masked_fill(~live[:, None, None, :], float("-inf"))
        return (torch.softmax(scores, dim=-1) @ values).reshape(rows, cfg.hidden) @ self.layers[layer]["out"]

    def _routed_experts(self, layer: int, x: torch.Tensor) -> torch.Tensor:
        """The MoE MLP with no host sync: every routed row multiplies its own expert's weights, gathered
        by the router's choice, in one batched GEMM per projection (the addresses follow the routing,
        the shapes do not)."""
        cfg, weights = self.cfg, self.layers[layer]
        top, chosen = self._route(layer, x)
        flat = chosen.view(-1)
        with record_function("moe_experts"):
            routed = x.unsqueeze(1).expand(-1, cfg.top_k, -1).reshape(-1, 1, cfg.hidden)  # [rows x k, 1, hidden]
            a, b = torch.bmm(routed, weights["w_in"].index_select(0, flat)).squeeze(1).chunk(2, dim=-1)
            out = torch.bmm((F.silu(a) * b).unsqueeze(1), weights["w_out"].index_select(0, flat)).squeeze(1)
            return (out.view(-1, cfg.top_k, cfg.hidden) * top.unsqueeze(-1)).sum(1)

    def decode(self, ids: torch.Tensor, positions: torch.Tensor, slots: torch.Tensor) -> torch.Tensor:
        """Logits of one token per row, [rows, vocab]; row i is token ``ids[i]`` at ``positions[i]`` of
        the sequence in ``slots[i]`` (the tokens before it are in the cache, where its keys and values
        go). The same step ``forward`` takes for single-token segments, with shapes fixed by the row
        count and nothing read back to the host, so it can be captured in a CUDA graph."""
        live = self.context_positions <= positions.unsqueeze(1)  # [rows, max context]: the keys each row attends to
        x = self.embed.index_select(0, ids)
        for layer in range(self.cfg.layers):
            x = x + self._static_attention(layer, self._norm(x), slots, positions, live)
            x = x + self._routed_experts(layer, self._norm(x))
        return self._norm(x) @ self.head

    @staticmethod
    def _norm(x: torch.Tensor) -> torch.Tensor:
        return F.rms_norm(x, x.shape[-1:], eps=1e-6)

    def forward(self, segments: list[Segment], tp=None) -> torch.Tensor:
        """Logits of the last token of every segment, [segments, vocab]; the cache is updated.
        With ``tp`` (a ``straggler.TensorParallel``) each layer ends in an all-reduce with the peer.
        Callers run it under ``torch.inference_mode()`` (the engine's loop does, once)."""
        ids = torch.tensor([t for seg in segments for t in seg.tokens], device=self.device)
        x = self.embed[ids]
        for layer in range(self.cfg.layers):
            x = x + self._attention(layer, self._norm(x), segments)
            x = x + self._experts(layer, self._norm(x))
            if tp is not None:
                x = x + tp.all_reduce(self._norm(x) @ tp.shard[layer])
        if len(ids) > len(segments):  # a prompt chunk in the step: only each segment's last token samples
            x = x[torch.tensor([len(seg.tokens) for seg in segments], device=self.device).cumsum(0) - 1]
        return self._norm(x) @ self.head
