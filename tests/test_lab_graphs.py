"""The lab's static decode step: the same numbers as the model's forward, and the step path each fault takes.

The static function is what the GPU server captures in CUDA graphs (and what ``eager-launches``
runs kernel by kernel); here it runs eagerly on the CPU against ``TinyMoE.forward`` on the same
cache, padded rows included. The capture itself needs a GPU: its test skips without one.
"""

from __future__ import annotations

import threading

import pytest

torch = pytest.importorskip("torch")

from diagnoser.lab import engine as engine_module  # noqa: E402
from diagnoser.lab.engine import Engine, Request  # noqa: E402
from diagnoser.lab.faults import FAULTS  # noqa: E402
from diagnoser.lab.graphs import StaticDecode  # noqa: E402
from diagnoser.lab.model import Segment, TinyMoE  # noqa: E402
from diagnoser.lab.served import ModelConfig, capture_sizes, decode_path  # noqa: E402
from diagnoser.lab.tokenizer import Tokenizer  # noqa: E402

CFG = ModelConfig(vocab=1024, max_context=128)


def prefilled(device: str, contexts: dict[int, int]) -> TinyMoE:
    """A model whose slots hold prompts of the given lengths (slot -> tokens), prefilled by ``forward``."""
    model = TinyMoE(CFG, device)
    g = torch.Generator().manual_seed(1)
    with torch.inference_mode():
        for slot, length in contexts.items():
            if length:
                model.forward([Segment(slot, torch.randint(0, CFG.vocab, (length,), generator=g).tolist(), 0)])
    return model


def decodes(contexts: dict[int, int]) -> list[Segment]:
    return [Segment(slot, [11 * slot + 5], length) for slot, length in contexts.items()]


# slot -> tokens already in its cache; 0 is a one-token prompt, max_context - 1 the last position there is
CASES = {
    "one row": {2: 9},
    "three rows, one padded": {5: 1, 0: 0, 3: 40},
    "five rows, three padded": {7: 127, 1: 17, 4: 2, 6: 64, 2: 33},
    "a full batch": {s: 3 + 15 * s for s in range(8)},
}


@pytest.mark.parametrize("contexts", CASES.values(), ids=CASES.keys())
def test_static_decode_equals_forward_on_the_same_cache(contexts):
    model = prefilled("cpu", contexts)
    segments = decodes(contexts)
    before = model.cache.clone()
    with torch.inference_mode():
        expected = model.forward(segments)
        forward_cache = model.cache.clone()
        model.cache.copy_(before)
        logits, greedy = StaticDecode(model, graphs=False)(segments)
    torch.testing.assert_close(logits, expected, rtol=1e-5, atol=1e-5)
    assert greedy.tolist() == expected.argmax(dim=-1).tolist()
    # the same keys and values went to the same places; padding rows wrote only the padding slot
    sequences = slice(0, CFG.max_seqs)
    torch.testing.assert_close(model.cache[:, sequences], forward_cache[:, sequences], rtol=1e-5, atol=1e-5)
    untouched = [s for s in range(CFG.max_seqs) if s not in contexts]
    assert torch.equal(model.cache[:, untouched], before[:, untouched])
    if len(contexts) not in capture_sizes(CFG.max_seqs):
        assert model.cache[:, model.padding_slot].abs().sum() > 0


def test_static_decode_traces_whole_with_nothing_read_back():
    """What keeps a CUDA graph from capturing a step is a value the host must read (``.item()``,
    ``nonzero``, ``unique``) or a shape that follows the data; Dynamo's whole-graph tracing refuses
    both, so the CPU checks the capture's precondition. The per-expert loop (small-experts) is
    refused, which shows the check bites."""
    static = StaticDecode(TinyMoE(CFG), graphs=False)
    looped = TinyMoE(ModelConfig(vocab=1024, max_context=128, experts=64, top_k=8, expert_hidden=64, per_expert_loop=True))
    try:
        with torch.inference_mode():
            logits, _ = torch.compile(static._run, backend="eager", fullgraph=True, dynamic=False)(static.inputs[4])
            assert logits.shape == (4, CFG.vocab)
            with pytest.raises(Exception, match=r"(?i)data-dependent|dynamic shape"):
                torch.compile(lambda x: looped._experts(0, x), backend="eager", fullgraph=True)(torch.randn(2, CFG.hidden))
    finally:
        torch._dynamo.reset()


def test_capture_sizes_cover_every_batch():
    assert capture_sizes(8) == (1, 2, 4, 8)
    assert capture_sizes(6) == (1, 2, 4, 6) and capture_sizes(1) == (1,)


def test_only_single_token_steps_take_the_static_path():
    static = StaticDecode(TinyMoE(CFG), graphs=False)
    assert static.takes([Segment(0, [4], 12), Segment(1, [9], 0)])  # a one-token prompt computes as a decode does
    assert not static.takes([Segment(0, [4], 12), Segment(1, [9, 8], 0)])
    assert not static.takes([Segment(s % 8, [1], 3) for s in range(CFG.max_seqs + 1)])


def test_step_path_per_fault():
    dynamic = {"kv-gather", "small-experts", "straggler"}  # their decode step has no fixed-shape, sync-free form
    for name in FAULTS:
        faults = frozenset() if name == "none" else frozenset({name})
        assert decode_path(faults, "cpu") == "dynamic", name
        expected = "eager" if name == "eager-launches" else "dynamic" if name in dynamic else "graph"
        assert decode_path(faults, "cuda") == expected, name
    # eager launches of a step that cannot be static are that step's own forward
    assert decode_path(frozenset({"eager-launches", "kv-gather"}), "cuda") == "dynamic"


def generate(path: str, monkeypatch) -> tuple[dict[int, list[int]], list[list[int]], int]:
    """Run the engine loop over four requests with the step path forced; the tokens each request got,
    the segment lengths of every forward call, and how many steps went through ``decode``."""
    monkeypatch.setattr(engine_module, "decode_path", lambda faults, device: path)
    tokens: dict[int, list[int]] = {}
    ended: list[int] = []
    finished = threading.Event()

    def send(out) -> None:
        for rid, token, *_ in out.tokens:
            tokens.setdefault(rid, []).append(token)
        ended.extend(rid for rid, _ in out.finished)
        if len(ended) == 4:
            finished.set()

    engine = Engine(frozenset(), CFG, "cpu", Tokenizer(CFG.vocab), send)
    forward_calls, decode_calls = [], []
    forward, decode = engine.model.forward, engine.model.decode
    engine.model.forward = lambda segments, tp=None: forward_calls.append([len(s.tokens) for s in segments]) or forward(segments, tp)
    engine.model.decode = lambda *inputs: decode_calls.append(1) or decode(*inputs)
    for rid, length in enumerate((3, 70, 1, 10)):  # the 70-token prompt takes two chunks
        engine.submit(Request(rid, [(7 * rid + i) % CFG.vocab for i in range(length)], max_tokens=6, ignore_eos=True))
    loop = threading.Thread(target=engine.run)
    loop.start()
    assert finished.wait(120), "the engine did not finish four 6-token requests"
    engine.stop()
    loop.join(30)
    return tokens, forward_calls, len(decode_calls)


def test_engine_runs_decode_steps_through_the_static_function(monkeypatch, one_thread_restored):
    expected, all_forward, none_static = generate("dynamic", monkeypatch)
    tokens, forward_calls, static_steps = generate("eager", monkeypatch)
    assert tokens == expected and none_static == 0
    assert static_steps > 0 and all(any(n > 1 for n in call) for call in forward_calls)  # every prefill step, no decode step
    assert len(forward_calls) + static_steps == len(all_forward)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="CUDA graphs need a GPU")
def test_graph_replay_equals_eager_launches_and_forward_on_cuda():
    contexts = CASES["a full batch"]
    model = prefilled("cuda", contexts)
    before = model.cache.clone()
    graphs, eager = StaticDecode(model, graphs=True), StaticDecode(model, graphs=False)
    assert set(graphs.graphs) == set(capture_sizes(CFG.max_seqs))
    for rows in range(1, CFG.max_seqs + 1):
        segments = decodes(dict(list(contexts.items())[:rows]))
        with torch.inference_mode():
            model.cache.copy_(before)
            expected = model.forward(segments)
            model.cache.copy_(before)
            replayed, replayed_tokens = (t.clone() for t in graphs(segments))
            replay_cache = model.cache.clone()
            model.cache.copy_(before)
            launched, launched_tokens = eager(segments)
        torch.testing.assert_close(replayed, launched, rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(replayed, expected, rtol=1e-4, atol=1e-4)
        assert replayed_tokens.tolist() == launched_tokens.tolist() == expected.argmax(-1).tolist()
        torch.testing.assert_close(replay_cache, model.cache, rtol=1e-5, atol=1e-5)
