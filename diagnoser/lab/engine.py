"""The lab's engine: continuous batching of streaming requests over the tiny model.

It runs in the engine-core process (``core.py``), in that process's main thread. Every step
the scheduler admits waiting requests into free slots, gives each running request one decode
token, and spends the prefill budget (``PREFILL_CHUNK`` prompt tokens) on the oldest request
still prefilling, all in one forward pass, as a chunked-prefill scheduler does. The step's
tokens are sampled, then handed on with the step's own time in one ``StepOutput``;
detokenization happens in the API server, off this loop (unless a fault puts it here).

A step with a prompt chunk runs the model's ``forward``. A step whose segments are all single
tokens runs as ``served.decode_path`` says: on a GPU, replayed from the CUDA graph captured for
its batch size at start-up, or (``eager-launches``) the same static function launched eagerly;
on a CPU, and for the faults that change the model's step, through ``forward`` too. Sampling
runs after the model either way, so a sampling fault does its work beside a replayed graph.

While profiling, each step runs inside a ``ProfilerStep#N`` range, so ``diagnoser analyze``
cuts the trace at step boundaries.
"""

from __future__ import annotations

import ctypes
import gc
import itertools
import threading
import time
from collections import deque
from collections.abc import Callable
from contextlib import nullcontext
from dataclasses import dataclass, field
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile, record_function

from diagnoser.lab.core import StepOutput
from diagnoser.lab.graphs import StaticDecode
from diagnoser.lab.model import Segment, TinyMoE
from diagnoser.lab.served import FREQUENCY_PENALTY, PREFILL_CHUNK, PRESENCE_PENALTY, TOP_P, ModelConfig, decode_path
from diagnoser.lab.tokenizer import EOS, Tokenizer

# A profile left on (a client that never calls /stop_profile) or running under heavy load grew
# without limit (6.7 GB measured): it records this many steps, then stops and waits for the stop
# command to write what it holds. The lab's own measurements profile well under a hundred.
MAX_PROFILED_STEPS = 512
DETOK_WINDOW = 6  # tokens an incremental detokenizer re-decodes per token (its prefix offset)


@dataclass
class Request:
    rid: int
    prompt: list[int]
    max_tokens: int
    ignore_eos: bool
    slot: int = -1
    prefilled: int = 0
    generated: list[int] = field(default_factory=list)
    scheduled: float | None = None  # perf_counter when first admitted (CLOCK_MONOTONIC, shared across processes)
    cancelled: bool = False


class Engine:
    def __init__(self, faults: frozenset[str], cfg: ModelConfig, device: str, tokenizer: Tokenizer,
                 send: Callable[[StepOutput], None], tp=None) -> None:
        self.faults, self.cfg, self.tokenizer, self.send, self.tp = faults, cfg, tokenizer, send, tp
        self.model = TinyMoE(cfg, device)
        path = decode_path(faults, device)
        self.static = None if path == "dynamic" else StaticDecode(self.model, graphs=path == "graph")
        self.waiting: deque[Request] = deque()
        self.running: list[Request] = []
        self.free_slots = list(range(cfg.max_seqs))
        self.wake = threading.Condition()
        self.cancelled: set[int] = set()
        self.stopping = False
        self.step_no = itertools.count()
        self.profiler: profile | None = None
        self.profiled_steps = 0
        self.held_profile: profile | None = None  # stopped at MAX_PROFILED_STEPS, not yet written
        self.profile_commands: deque[tuple[str, Path | None, threading.Event, list]] = deque()

    # -- called from the command thread ----------------------------------------------------------
    def submit(self, request: Request) -> None:
        with self.wake:
            self.waiting.append(request)
            self.wake.notify()

    def cancel(self, rid: int) -> None:
        with self.wake:
            self.cancelled.add(rid)
            self.wake.notify()

    def profile_command(self, command: str, path: Path | None = None, timeout_s: float = 30.0) -> list:
        """Start or stop the profiler between two steps; returns what the stop wrote."""
        done, result = threading.Event(), []
        with self.wake:
            self.profile_commands.append((command, path, done, result))
            self.wake.notify()
        if not done.wait(timeout_s):
            raise TimeoutError("the engine did not reach a step boundary")
        if result and isinstance(result[0], Exception):
            raise result[0]
        return result

    def stop(self) -> None:
        with self.wake:
            self.stopping = True
            self.wake.notify()

    # -- the loop ----------------------------------------------------------------------------
    def run(self) -> None:
        torch.set_num_threads(1)
        with torch.inference_mode():  # once for the loop: per-step entry would be host time in every step
            while True:
                with self.wake:
                    while not (self.stopping or self.waiting or self.running or self.profile_commands or self.cancelled):
                        self.wake.wait()
                    if self.stopping:
                        break
                    out = StepOutput()
                    self._drop_cancelled(out)
                    self._admit()
                self._profile_boundary()
                if self.running:
                    self._step(out)
                if out.tokens or out.finished:
                    out.running, out.waiting = len(self.running), len(self.waiting)
                    self.send(out)
        ended = StepOutput(finished=[(r.rid, "abort") for r in self.running + list(self.waiting)])
        if ended.finished:
            self.send(ended)
        if self.tp is not None:
            self.tp.close()

    def _drop_cancelled(self, out: StepOutput) -> None:
        """Requests whose client went away leave the batch (and the queue) before the next step."""
        if not self.cancelled:
            return
        for r in [r for r in self.running if r.rid in self.cancelled]:
            self._finish(r, "abort", out)
        # one still waiting is finished too, so the API server lets go of its request (it held every
        # request cancelled before admission: 68 -> 352 MB over 6,000 aborts)
        out.finished += [(r.rid, "abort") for r in self.waiting if r.rid in self.cancelled]
        self.waiting = deque(r for r in self.waiting if r.rid not in self.cancelled)
        self.cancelled.clear()

    def _admit(self) -> None:
        while self.waiting and self.free_slots:
            request = self.waiting.popleft()
            request.slot = self.free_slots.pop()
            request.scheduled = time.perf_counter()
            self.running.append(request)

    def _segments(self) -> list[tuple[Request, Segment, bool]]:
        """(request, its tokens this step, whether the step ends its prompt and so samples)."""
        out = []
        prefilling = [r for r in self.running if r.prefilled < len(r.prompt)]
        if "prefill-stall" in self.faults and prefilling:
            # whole prompts, ahead of every decode: the running streams wait for this step
            return [(r, Segment(r.slot, r.prompt[r.prefilled :], r.prefilled), True) for r in prefilling]
        for r in self.running:
            if r.prefilled >= len(r.prompt):
                out.append((r, Segment(r.slot, [r.generated[-1]], len(r.prompt) + len(r.generated) - 1), True))
        budget = PREFILL_CHUNK
        for r in prefilling:
            if budget <= 0:
                break
            chunk = r.prompt[r.prefilled : r.prefilled + budget]
            budget -= len(chunk)
            out.append((r, Segment(r.slot, chunk, r.prefilled), r.prefilled + len(chunk) == len(r.prompt)))
        return out

    def _step(self, out: StepOutput) -> None:
        plan = self._segments()
        if not plan:
            return
        n = next(self.step_no)
        start = time.perf_counter()
        with record_function(f"ProfilerStep#{n}") if self.profiler is not None else nullcontext():
            segments = [seg for _, seg, _ in plan]
            if self.tp is not None:
                self.tp.begin_step(n, sum(len(s.tokens) for s in segments), self.profiler is not None)
            if self.static is not None and self.static.takes(segments):
                logits, greedy = self.static(segments)
            else:
                logits, greedy = self.model.forward(segments, self.tp), None
            sampling = [i for i, (_, _, samples) in enumerate(plan) if samples]
            rows = slice(None) if len(sampling) == len(plan) else sampling
            tokens = self._sample(logits[rows], [plan[i][0] for i in sampling], None if greedy is None else greedy[rows])
            step_ms = (time.perf_counter() - start) * 1e3
        # The profiled step is the model's (as an engine's execute-model range); what the loop
        # does with its tokens before the next step shows as the gap between steps.
        for request, seg, _ in plan:
            if request.prefilled < len(request.prompt):
                request.prefilled += len(seg.tokens)
                out.prompt_tokens += len(seg.tokens)
        for i, token in zip(sampling, tokens):
            self._deliver(plan[i][0], token, step_ms, out)
        out.batch_tokens = sum(len(s.tokens) for s in segments)
        if self.profiler is not None:
            self.profiled_steps += 1
            if self.profiled_steps >= MAX_PROFILED_STEPS:
                self.held_profile, self.profiler = self.profiler, None
                self.held_profile.__exit__(None, None, None)

    def _sample(self, logits: torch.Tensor, requests: list[Request], greedy: torch.Tensor | None) -> list[int]:
        """One token per row; ``greedy`` is the argmax a captured step already took on the device,
        which holds only while no penalty changes the logits. The tokens reach the host in one copy."""
        if "penalty-history" in self.faults:
            greedy = None
            vocab = torch.arange(logits.shape[-1], device=logits.device)
            for row, request in enumerate(requests):
                if request.generated:
                    # counted afresh each step: every generated token compared with the whole vocabulary
                    history = torch.tensor(request.generated, device=logits.device)
                    counts = (history.unsqueeze(1) == vocab).sum(0, dtype=torch.int16)
                    logits[row] -= FREQUENCY_PENALTY * counts + PRESENCE_PENALTY * (counts > 0)
        if "sort-sampler" in self.faults:
            # every row of the batch padded to max_seqs is sorted, live or not, as a sampler captured at a
            # fixed batch size runs; one sort, so the fault's cost is the sort's and not the host's between ops
            padded = logits.new_zeros((self.cfg.max_seqs, logits.shape[-1]))
            padded[: len(requests)] = logits
            probs, order = torch.sort(torch.softmax(padded, dim=-1), dim=-1, descending=True)
            picked = []
            for row in range(len(requests)):
                # the nucleus, read back to the host; a greedy request takes its head, sorted all the same
                keep = int((probs[row].cumsum(0) <= TOP_P).sum().item()) + 1
                picked.append(int(order[row, :keep][0].item()))
            return picked
        return (logits.argmax(dim=-1) if greedy is None else greedy).tolist()

    def _deliver(self, request: Request, token: int, step_ms: float, out: StepOutput) -> None:
        first = not request.generated
        request.generated.append(token)
        text = None
        if "detok-inline" in self.faults:
            window = (request.prompt + request.generated)[-DETOK_WINDOW:]
            text = _suffix(self.tokenizer.slow_decode(window[:-1]), self.tokenizer.slow_decode(window))
        elif "detok-growing" in self.faults:
            text = _suffix(self.tokenizer.slow_decode(request.generated[:-1]), self.tokenizer.slow_decode(request.generated))
        out.tokens.append((request.rid, token, text, step_ms, time.perf_counter(), request.scheduled if first else None))
        if token == EOS and not request.ignore_eos:
            self._finish(request, "stop", out)
        elif len(request.generated) >= request.max_tokens:
            self._finish(request, "length", out)

    def _finish(self, request: Request, reason: str, out: StepOutput) -> None:
        self.running.remove(request)
        self.free_slots.append(request.slot)
        out.finished.append((request.rid, reason))

    def _profile_boundary(self) -> None:
        while self.profile_commands:
            command, path, done, result = self.profile_commands.popleft()
            try:
                if command == "start" and self.profiler is None:
                    activities = [ProfilerActivity.CPU]
                    if self.model.device.type == "cuda":
                        activities.append(ProfilerActivity.CUDA)
                    self.held_profile, self.profiled_steps = None, 0
                    self.profiler = profile(activities=activities)
                    self.profiler.__enter__()
                elif command == "stop" and (self.profiler is not None or self.held_profile is not None):
                    prof = self.profiler or self.held_profile
                    if self.profiler is not None:
                        prof.__exit__(None, None, None)
                    self.profiler = self.held_profile = None
                    assert path is not None
                    prof.export_chrome_trace(str(path))
                    del prof
                    _return_freed_memory()
                    result.append(path)
                    if self.tp is not None:
                        result += self.tp.collect_profile(path)
            except Exception as err:  # noqa: BLE001 - reported to the HTTP caller, the loop goes on
                result.append(err)
            done.set()


def _return_freed_memory() -> None:
    """A written profile's events are freed, but glibc keeps the pages in its arenas: a server
    profiled again and again grew by 8-25 MB a profile until ``malloc_trim`` handed them back
    (measured: 25 MB a cycle, flat once trimmed). Elsewhere than glibc there is nothing to do."""
    gc.collect()
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass


def _suffix(before: str, after: str) -> str:
    """The text a token added: what ``after`` holds beyond ``before`` (a held partial character
    may change the last character, which is then re-sent whole)."""
    common = len(before) - 1 if before.endswith("\ufffd") else len(before)
    return after[common:] if after.startswith(before[:common]) else after
