"""The lab's engine: continuous batching of streaming requests over the tiny model, one thread.

Every step the scheduler admits waiting requests into free slots, gives each running request
one decode token, and spends the prefill budget (``PREFILL_CHUNK`` prompt tokens) on the
oldest request still prefilling, all in one forward pass, as a chunked-prefill scheduler
does. The step's tokens are sampled, then handed to each request's output callback with the
step's own time; detokenization happens on the output path, off this loop (unless a fault
puts it here).

While profiling, each step runs inside a ``ProfilerStep#N`` range, so ``diagnoser analyze``
cuts the trace at step boundaries.
"""

from __future__ import annotations

import itertools
import sys
from contextlib import nullcontext
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile, record_function

from diagnoser.lab.metrics import LabMetrics
from diagnoser.lab.model import ModelConfig, Segment, TinyMoE
from diagnoser.lab.tokenizer import EOS, Tokenizer

PREFILL_CHUNK = 64
DETOK_WINDOW = 6  # tokens an incremental detokenizer re-decodes per token (its prefix offset)
# Special tokens the slow tokenizer carries: thousands reserved (a chat model's) make each of its
# calls slow (detok-inline); a thousand make it slow per id, so a whole-output decode grows.
RESERVED_TOKENS = {"detok-inline": 8192, "detok-growing": 1024}
FREQUENCY_PENALTY = 0.5
PRESENCE_PENALTY = 0.5
TOP_P = 0.9
SWITCH_INTERVAL_S = 0.0002


@dataclass
class Request:
    prompt: list[int]
    max_tokens: int
    ignore_eos: bool
    emit: Callable[[int | None, str | None, float], None]  # (token, text or None, step ms); token None: finished
    arrival: float = field(default_factory=time.perf_counter)
    slot: int = -1
    prefilled: int = 0
    generated: list[int] = field(default_factory=list)
    scheduled: float | None = None
    first_token: float | None = None
    last_token: float | None = None
    cancelled: bool = False
    finish_reason: str | None = None


class Engine(threading.Thread):
    def __init__(self, faults: frozenset[str], device: str, metrics: LabMetrics, tokenizer: Tokenizer, tp=None) -> None:
        super().__init__(name="lab-engine", daemon=True)
        self.faults, self.metrics, self.tokenizer = faults, metrics, tokenizer
        small = "small-experts" in faults
        self.cfg = ModelConfig(
            vocab=tokenizer.vocab_size,
            experts=64 if small else 8,
            top_k=8 if small else 2,
            expert_hidden=64 if small else 256,
            per_expert_loop=small,
            gather_per_block="kv-gather" in faults,
        )
        self.model = TinyMoE(self.cfg, device)
        self.tp = tp
        self.waiting: deque[Request] = deque()
        self.running: list[Request] = []
        self.free_slots = list(range(self.cfg.max_seqs))
        self.wake = threading.Condition()
        self.stopping = False
        self.step_no = itertools.count()
        self.profiler: profile | None = None
        self.profile_commands: deque[tuple[str, Path | None, threading.Event, list]] = deque()

    # -- called from the HTTP side ------------------------------------------------------------
    def submit(self, request: Request) -> None:
        if len(request.prompt) + request.max_tokens > self.cfg.max_context:
            raise ValueError(f"prompt ({len(request.prompt)}) + max_tokens ({request.max_tokens}) exceed the context of {self.cfg.max_context}")
        with self.wake:
            self.waiting.append(request)
            self.metrics.waiting.set(len(self.waiting))
            self.wake.notify()

    def cancel(self, request: Request) -> None:
        request.cancelled = True

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
        # The HTTP event loop shares this process's GIL; at the default 5 ms switch interval a
        # step loop that rarely releases it would starve the output path and fake bursts.
        sys.setswitchinterval(SWITCH_INTERVAL_S)
        while True:
            with self.wake:
                while not (self.stopping or self.waiting or self.running or self.profile_commands):
                    self.wake.wait()
                if self.stopping:
                    break
                self._admit()
            self._profile_boundary()
            if self.running:
                self._step()
        for request in self.running + list(self.waiting):
            request.emit(None, None, 0.0)
        if self.tp is not None:
            self.tp.close()

    def _admit(self) -> None:
        while self.waiting and self.free_slots:
            request = self.waiting.popleft()
            request.slot = self.free_slots.pop()
            request.scheduled = time.perf_counter()
            self.metrics.queue_time.observe(request.scheduled - request.arrival)
            self.running.append(request)
        self.metrics.waiting.set(len(self.waiting))
        self.metrics.running.set(len(self.running))

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

    def _step(self) -> None:
        for r in [r for r in self.running if r.cancelled]:
            self._finish(r, "abort")
        plan = self._segments()
        if not plan:
            return
        n = next(self.step_no)
        start = time.perf_counter()
        with record_function(f"ProfilerStep#{n}") if self.profiler is not None else nullcontext():
            segments = [seg for _, seg, _ in plan]
            if self.tp is not None:
                self.tp.begin_step(n, sum(len(s.tokens) for s in segments), self.profiler is not None)
            logits = self.model.forward(segments, self.tp)
            sampling = [i for i, (_, _, samples) in enumerate(plan) if samples]
            tokens = self._sample(logits[sampling], [plan[i][0] for i in sampling])
            step_ms = (time.perf_counter() - start) * 1e3
        # The profiled step is the model's (as an engine's execute-model range); what the loop
        # does with its tokens before the next step shows as the gap between steps.
        for request, seg, _ in plan:
            if request.prefilled < len(request.prompt):
                request.prefilled += len(seg.tokens)
                self.metrics.prompt_tokens.inc(len(seg.tokens))
        for i, token in zip(sampling, tokens):
            self._deliver(plan[i][0], token, step_ms)
        self.metrics.iteration_tokens.observe(sum(len(s.tokens) for s in segments))

    def _sample(self, logits: torch.Tensor, requests: list[Request]) -> list[int]:
        if "penalty-history" in self.faults:
            vocab = torch.arange(logits.shape[-1], device=logits.device)
            for row, request in enumerate(requests):
                if request.generated:
                    # counted afresh each step: every generated token compared with the whole vocabulary
                    history = torch.tensor(request.generated, device=logits.device)
                    counts = (history.unsqueeze(1) == vocab).sum(0, dtype=torch.int16)
                    logits[row] -= FREQUENCY_PENALTY * counts + PRESENCE_PENALTY * (counts > 0)
        if "sort-sampler" in self.faults:
            picked = []
            for row in range(len(requests)):
                probs, order = torch.sort(torch.softmax(logits[row], dim=-1), descending=True)
                # the nucleus, read back to the host; a greedy request takes its head, sorted all the same
                keep = int((probs.cumsum(0) <= TOP_P).sum().item()) + 1
                picked.append(int(order[:keep][0].item()))
            return picked
        return logits.argmax(dim=-1).tolist()

    def server_info(self) -> dict:
        """The settings a deployment would show (vLLM's /server_info names): what an engineer
        reads from flags and generation config, not which fault is on."""
        sampling = {"temperature": 0.0, "top_p": 1.0, "top_k": -1, "repetition_penalty": 1.0, "frequency_penalty": 0.0, "presence_penalty": 0.0}
        sampler = "greedy"
        if "sort-sampler" in self.faults:
            sampling.update(temperature=1.0, top_p=TOP_P)
            sampler = "pytorch-native top-p"
        if "penalty-history" in self.faults:
            sampling.update(frequency_penalty=FREQUENCY_PENALTY, presence_penalty=PRESENCE_PENALTY)
        slow = "detok-inline" in self.faults  # the slow (pure-Python) tokenizer, as --tokenizer-mode slow
        return {
            "engine": "diagnoser-lab",
            "model_config": {"max_model_len": self.cfg.max_context, "vocab_size": self.cfg.vocab, "tokenizer_mode": "slow" if slow else "auto"},
            "scheduler_config": {
                "max_num_seqs": self.cfg.max_seqs,
                "enable_chunked_prefill": "prefill-stall" not in self.faults,
                "max_num_batched_tokens": PREFILL_CHUNK,
            },
            "default_sampling_params": sampling,
            "sampler": sampler,
        }

    def _deliver(self, request: Request, token: int, step_ms: float) -> None:
        now = time.perf_counter()
        if request.first_token is None:
            request.first_token = now
            self.metrics.ttft.observe(now - request.arrival)
            self.metrics.prefill_time.observe(now - (request.scheduled or request.arrival))
        else:
            self.metrics.itl.observe(now - (request.last_token or now))
        request.last_token = now
        request.generated.append(token)
        self.metrics.generation_tokens.inc()
        text = None
        if "detok-inline" in self.faults:
            window = (request.prompt + request.generated)[-DETOK_WINDOW:]
            text = _suffix(self.tokenizer.slow_decode(window[:-1]), self.tokenizer.slow_decode(window))
        elif "detok-growing" in self.faults:
            text = _suffix(self.tokenizer.slow_decode(request.generated[:-1]), self.tokenizer.slow_decode(request.generated))
        request.emit(token, text, step_ms)
        if token == EOS and not request.ignore_eos:
            self._finish(request, "stop")
        elif len(request.generated) >= request.max_tokens:
            self._finish(request, "length")

    def _finish(self, request: Request, reason: str) -> None:
        request.finish_reason = reason
        self.running.remove(request)
        self.free_slots.append(request.slot)
        self.metrics.running.set(len(self.running))
        self.metrics.finished(reason)
        if request.first_token is not None and request.last_token is not None:
            self.metrics.e2e.observe(request.last_token - request.arrival)
            self.metrics.decode_time.observe(request.last_token - request.first_token)
        request.emit(None, None, 0.0)

    def _profile_boundary(self) -> None:
        while self.profile_commands:
            command, path, done, result = self.profile_commands.popleft()
            try:
                if command == "start" and self.profiler is None:
                    activities = [ProfilerActivity.CPU]
                    if self.model.device.type == "cuda":
                        activities.append(ProfilerActivity.CUDA)
                    self.profiler = profile(activities=activities)
                    self.profiler.__enter__()
                elif command == "stop" and self.profiler is not None:
                    prof, self.profiler = self.profiler, None
                    prof.__exit__(None, None, None)
                    assert path is not None
                    prof.export_chrome_trace(str(path))
                    result.append(path)
                    if self.tp is not None:
                        result += self.tp.collect_profile(path)
            except Exception as err:  # noqa: BLE001 - reported to the HTTP caller, the loop goes on
                result.append(err)
            done.set()


def tokenizer_for(faults: frozenset[str], vocab: int) -> Tokenizer:
    """The served model's tokenizer: its reserved special tokens are what a detokenization fault pays for."""
    return Tokenizer(vocab, reserved=max((RESERVED_TOKENS.get(f, 0) for f in faults), default=0))


def _suffix(before: str, after: str) -> str:
    """The text a token added: what ``after`` holds beyond ``before`` (a held partial character
    may change the last character, which is then re-sent whole)."""
    common = len(before) - 1 if before.endswith("\ufffd") else len(before)
    return after[common:] if after.startswith(before[:common]) else after
