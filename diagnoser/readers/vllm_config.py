"""vLLM's resolved configuration as case facts, each named by the key it was read from.

vLLM publishes one configuration in several shapes: ``GET /server_info?config_format=json`` gives
``vllm_config`` as JSON sections (``scheduler_config``, ``model_config``, ...); plain
``GET /server_info`` and the engine's start-up log line give the same object as a Python repr
(``model='...', max_seq_len=4096, compilation_config={'mode': <CompilationMode...: 2>, ...}``);
a command line or the log's ``non-default args`` give engine-argument names. Every shape is turned
into the JSON sections first, so one set of decisions (what counts as graphs on, as compiled, as
a penalty) serves them all and they cannot drift apart.

A value that is absent, ``None`` or of the wrong type leaves its fact unknown: a partial or odd
document must never clear a cause by defaulting a setting.
"""

from __future__ import annotations

import ast
import re
from typing import Any, Callable, Iterable

from diagnoser.readers.facts import SourcedFacts

SERVER = "observations.server."
Fact = tuple[str, Any, str]  # case path, value, source
Source = Callable[[str, str], str]  # (section, key) -> where that value was read

# ---------------------------------------------------------------------------------------------
# values: each returns None for anything that is not clearly of its kind


def section(doc: Any, name: str) -> dict:
    value = doc.get(name) if isinstance(doc, dict) else None
    return value if isinstance(value, dict) else {}


def count(value: Any, minimum: int = 1) -> int | None:
    """A whole number at or above ``minimum``; a bool is not a number here (JSON true is not 1)."""
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= minimum else None


def real(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def flag(value: Any) -> bool | None:
    return value if isinstance(value, bool) else None


def text(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None


def sizes(value: Any) -> list[int] | None:
    """Capture sizes: a list of positive whole numbers, else unknown (an empty list is a list)."""
    if isinstance(value, (list, tuple)) and all(count(n) is not None for n in value):
        return list(value)
    return None


def _enum_name(value: str, prefix: str) -> str:
    return value.strip().upper().removeprefix(prefix.upper() + ".")


def compile_mode_on(value: Any) -> bool | None:
    """``compilation_config.mode`` (or the older ``level``): 0/NONE runs eager PyTorch, above it compiles."""
    if count(value, 0) is not None:
        return value > 0
    if isinstance(value, str):
        name = _enum_name(value, "CompilationMode")
        if name.isdigit():
            return int(name) > 0
        if name == "NONE":
            return False
        if name in {"STOCK_TORCH_COMPILE", "DYNAMO_TRACE_ONCE", "VLLM_COMPILE", "DYNAMO_AS_IS", "DYNAMO_ONCE", "PIECEWISE"}:
            return True
    return None


def graph_mode_on(value: Any) -> bool | None:
    """``cudagraph_mode``: 0/NONE captures nothing; the pair modes (FULL_DECODE_ONLY = (2, 0)) capture."""
    if count(value, 0) is not None:
        return value > 0
    if isinstance(value, (list, tuple)) and value and all(count(v, 0) is not None for v in value):
        return any(v > 0 for v in value)
    if isinstance(value, str):
        name = _enum_name(value, "CUDAGraphMode")
        if name.isdigit():
            return int(name) > 0
        if name == "NONE":
            return False
        if name in {"PIECEWISE", "FULL", "FULL_DECODE_ONLY", "FULL_AND_PIECEWISE"}:
            return True
    return None


def graph_state(enforce_eager: bool | None, mode_on: bool | None, capture: list[int] | None) -> tuple[bool | None, int | None, tuple[str, ...]]:
    """Whether decode replays graphs, the largest captured size, and the inputs that decided it.

    On needs all three: not eager, a capturing mode, and sizes to capture. A CPU build says
    ``enforce_eager=False`` yet captures nothing (mode 0, no sizes), so ``enforce_eager`` alone
    never means graphs.
    """
    if enforce_eager is True:
        return False, None, ("enforce_eager",)
    if mode_on is False:
        return False, None, ("cudagraph_mode",)
    if enforce_eager is False and mode_on is True and capture:
        return True, max(capture), ("cudagraph_mode", "cudagraph_capture_sizes")
    return None, None, ()


def compiled(mode_on: bool | None, enforce_eager: bool | None) -> bool | None:
    """``--enforce-eager`` sets the compilation mode to NONE, whatever else was asked."""
    return False if enforce_eager is True else mode_on


def penalty_settings(params: dict) -> dict[str, tuple[bool, tuple[str, ...]]]:
    """Penalties in default or overriding sampling parameters, with the keys that decided each.

    An explicit neutral value (repetition 1, frequency and presence 0) is a stated "off".
    """
    out: dict[str, tuple[bool, tuple[str, ...]]] = {}
    given = {k: real(params.get(k)) for k in ("frequency_penalty", "presence_penalty")}
    given = {k: v for k, v in given.items() if v is not None}
    if given:
        on = [k for k, v in given.items() if v]
        out["penalties"] = (bool(on), tuple(on or given))
    repetition = real(params.get("repetition_penalty"))
    if repetition is not None:
        out["repetition_penalty"] = (repetition != 1.0, ("repetition_penalty",))
    return out


def chunking(chunked: bool) -> dict[str, bool]:
    """Without chunking a waiting prompt is prefilled whole, before the running decodes go on."""
    return {"chunked_prefill": chunked, "prefill_priority": not chunked}


def expert_parallel_size(enabled: bool | None, tp: int | None, dp: int | None) -> int | None:
    """vLLM's expert-parallel group spans every TP rank of every DP rank; off, experts are TP-sharded."""
    if enabled is False:
        return 1
    return tp * dp if enabled is True and tp is not None and dp is not None else None


# ---------------------------------------------------------------------------------------------
# sections -> facts


def _scheduler(cfg: dict, at: Source) -> Iterable[Fact]:
    s = section(cfg, "scheduler_config")
    where = lambda key: at("scheduler_config", key)  # noqa: E731
    for key, minimum in (("max_num_seqs", 1), ("max_num_batched_tokens", 1), ("long_prefill_token_threshold", 0)):
        yield SERVER + key, count(s.get(key), minimum), where(key)
    chunked = flag(s.get("enable_chunked_prefill"))
    if chunked is not None:
        for field, value in chunking(chunked).items():
            yield SERVER + field, value, where("enable_chunked_prefill")
    yield SERVER + "async_scheduling", flag(s.get("async_scheduling")), where("async_scheduling")


def _model(cfg: dict, at: Source) -> Iterable[Fact]:
    m = section(cfg, "model_config")
    yield SERVER + "max_context", count(m.get("max_model_len")), at("model_config", "max_model_len")
    yield SERVER + "vocab_size", count(m.get("vocab_size")), at("model_config", "vocab_size")
    mode = text(m.get("tokenizer_mode"))
    yield SERVER + "tokenizer_fast", None if mode is None else mode != "slow", at("model_config", "tokenizer_mode")
    yield SERVER + "quantization", text(m.get("quantization")), at("model_config", "quantization")
    for field, (value, keys) in penalty_settings(section(m, "override_generation_config")).items():
        yield SERVER + field, value, at("model_config", "override_generation_config." + "+".join(keys))


def _compilation(cfg: dict, at: Source, legacy: bool) -> Iterable[Fact]:
    c, eager = section(cfg, "compilation_config"), flag(section(cfg, "model_config").get("enforce_eager"))
    mode_key = "mode" if "mode" in c else "level"
    if not (legacy and mode_key not in c):  # a legacy eager flag speaks of graphs, not of compiling
        on = compiled(compile_mode_on(c.get(mode_key)), eager)
        compile_source = at("model_config", "enforce_eager") if eager is True else at("compilation_config", mode_key)
        yield SERVER + "torch_compile", on, compile_source
    mode = graph_mode_on(c["cudagraph_mode"]) if "cudagraph_mode" in c else (True if legacy else None)
    graphs, largest, because = graph_state(eager, mode, sizes(c.get("cudagraph_capture_sizes")))
    if "cudagraph_mode" not in c:  # the mode was assumed: not being eager is what was stated
        because = tuple(dict.fromkeys(("enforce_eager", *(k for k in because if k != "cudagraph_mode"))))
    if graphs is not None:
        home = {"enforce_eager": "model_config"}
        source = " + ".join(at(home.get(k, "compilation_config"), k) for k in because)
        yield SERVER + "cuda_graphs", graphs, source
        yield SERVER + "cuda_graph_max_batch", largest, source


def _speculation(cfg: dict, at: Source) -> Iterable[Fact]:
    s = section(cfg, "speculative_config")  # None (no speculation) reads as {}: "off" has no value to record
    yield SERVER + "speculative", text(s.get("method")), at("speculative_config", "method")
    yield "observations.speculation.draft_length", count(s.get("num_speculative_tokens")), at("speculative_config", "num_speculative_tokens")


def _cache(cfg: dict, at: Source) -> Iterable[Fact]:
    c = section(cfg, "cache_config")
    tokens = count(c.get("kv_cache_size_tokens"))
    if tokens is not None:
        yield SERVER + "kv_cache_tokens", tokens, at("cache_config", "kv_cache_size_tokens")
    else:  # before vLLM published the size, blocks x block size was the count it logged
        blocks, block = count(c.get("num_gpu_blocks")), count(c.get("block_size"))
        if blocks is not None and block is not None:
            yield SERVER + "kv_cache_tokens", blocks * block, at("cache_config", "num_gpu_blocks") + " x " + at("cache_config", "block_size")
    yield SERVER + "kv_cache_dtype", text(c.get("cache_dtype")), at("cache_config", "cache_dtype")
    yield SERVER + "prefix_caching", flag(c.get("enable_prefix_caching")), at("cache_config", "enable_prefix_caching")


_LAYOUT = (("tp", "tensor_parallel_size"), ("pp", "pipeline_parallel_size"), ("dp", "data_parallel_size"))


def _parallel(cfg: dict, at: Source) -> Iterable[Fact]:
    p = section(cfg, "parallel_config")
    size = {short: count(p.get(key)) for short, key in _LAYOUT}
    for short, key in _LAYOUT:
        yield "workload.layout." + short, size[short], at("parallel_config", key)
    ep = expert_parallel_size(flag(p.get("enable_expert_parallel")), size["tp"], size["dp"])
    decided = ("enable_expert_parallel",) if ep == 1 else ("enable_expert_parallel", "tensor_parallel_size", "data_parallel_size")
    yield "workload.layout.ep", ep, " + ".join(at("parallel_config", k) for k in decided)
    if flag(p.get("disable_custom_all_reduce")) is True:  # enabled is only permission: it may still fall back to NCCL
        yield SERVER + "custom_allreduce", False, at("parallel_config", "disable_custom_all_reduce")


def _others(cfg: dict, at: Source) -> Iterable[Fact]:
    backend = text(section(cfg, "structured_outputs_config").get("backend"))
    yield SERVER + "structured_output_backend", backend, at("structured_outputs_config", "backend")
    yield SERVER + "attention_backend", text(section(cfg, "attention_config").get("backend")), at("attention_config", "backend")
    yield "observations.platform.device_api", text(section(cfg, "device_config").get("device")), at("device_config", "device")


def facts_from_sections(cfg: dict, at: Source, *, legacy: bool = False) -> SourcedFacts:
    """Facts from vLLM-named sections; ``at`` names where each (section, key) was read.

    ``legacy`` is for documents that predate ``cudagraph_mode`` and the compilation mode (this
    project's lab, like vLLM before 0.10): there a non-eager engine replayed graphs, and the eager
    flag said nothing about compiling.
    """
    facts = SourcedFacts()
    readers = (_scheduler(cfg, at), _model(cfg, at), _compilation(cfg, at, legacy), _speculation(cfg, at),
               _cache(cfg, at), _parallel(cfg, at), _others(cfg, at))
    for produced in readers:
        for path, value, source in produced:
            facts.add(path, value, source)
    return facts


def from_vllm_config(cfg: dict, where: str) -> SourcedFacts:
    """Facts from ``vllm_config`` as ``/server_info?config_format=json`` serves it.

    ``where`` names the document up to the sections: ``/server_info vllm_config`` gives sources
    such as ``/server_info vllm_config.scheduler_config.max_num_seqs``.
    """
    facts = facts_from_sections(cfg, lambda s, k: f"{where}.{s}.{k}")
    if isinstance(cfg, dict) and cfg:
        facts.add(SERVER + "engine", "vllm", where)
    return facts


# ---------------------------------------------------------------------------------------------
# engine-argument names (command line, the log's non-default args and engine line) -> sections

# argument or engine-line name -> (section, key); a name mapped to a bare section is that whole section
ENGINE_ARGS: dict[str, tuple[str, str | None]] = {
    "max_num_seqs": ("scheduler_config", "max_num_seqs"),
    "max_num_batched_tokens": ("scheduler_config", "max_num_batched_tokens"),
    "enable_chunked_prefill": ("scheduler_config", "enable_chunked_prefill"),
    "long_prefill_token_threshold": ("scheduler_config", "long_prefill_token_threshold"),
    "async_scheduling": ("scheduler_config", "async_scheduling"),
    "max_model_len": ("model_config", "max_model_len"),
    "max_seq_len": ("model_config", "max_model_len"),  # the engine line's name for it
    "tokenizer_mode": ("model_config", "tokenizer_mode"),
    "quantization": ("model_config", "quantization"),
    "enforce_eager": ("model_config", "enforce_eager"),
    "override_generation_config": ("model_config", "override_generation_config"),
    "tensor_parallel_size": ("parallel_config", "tensor_parallel_size"),
    "pipeline_parallel_size": ("parallel_config", "pipeline_parallel_size"),
    "data_parallel_size": ("parallel_config", "data_parallel_size"),
    "enable_expert_parallel": ("parallel_config", "enable_expert_parallel"),
    "disable_custom_all_reduce": ("parallel_config", "disable_custom_all_reduce"),
    "kv_cache_dtype": ("cache_config", "cache_dtype"),
    "enable_prefix_caching": ("cache_config", "enable_prefix_caching"),
    "device": ("device_config", "device"),
    "device_config": ("device_config", "device"),  # the engine line prints the device alone
    "attention_backend": ("attention_config", "backend"),
    "optimization_level": ("compilation_config", "level"),  # -O<n>: 0 compiles nothing, above 0 compiles
    "speculative_config": ("speculative_config", None),
    "compilation_config": ("compilation_config", None),
    "structured_outputs_config": ("structured_outputs_config", None),
}
_SPECULATIVE_ALIASES = {"num_spec_tokens": "num_speculative_tokens"}  # SpeculativeConfig's repr


def sections_from_args(args: dict) -> tuple[dict, dict[tuple[str, str], str]]:
    """Engine arguments regrouped as vLLM's sections, and for each (section, key) the argument it came from."""
    sections: dict[str, dict] = {}
    origin: dict[tuple[str, str], str] = {}
    for name, value in args.items():
        if name not in ENGINE_ARGS or value is None:
            continue
        home, key = ENGINE_ARGS[name]
        if key is not None:
            sections.setdefault(home, {})[key] = value
            origin[(home, key)] = name
        elif isinstance(value, dict):
            for inner, inner_value in value.items():
                inner_key = _SPECULATIVE_ALIASES.get(inner, inner) if home == "speculative_config" else inner
                sections.setdefault(home, {})[inner_key] = inner_value
                origin[(home, inner_key)] = f"{name}.{inner}"
    return sections, origin


def from_engine_args(args: dict, render: Callable[[str], str]) -> SourcedFacts:
    """Facts from vLLM engine-argument names; ``render`` turns an argument name into a source."""
    sections, origin = sections_from_args(args)

    def at(home: str, key: str) -> str:
        head, dot, rest = key.partition(".")
        name = origin.get((home, head))
        return render(f"{name}{dot}{rest}" if name else f"{home}.{key}")

    return facts_from_sections(sections, at)


# ---------------------------------------------------------------------------------------------
# Python reprs (the engine line, plain /server_info, the log's non-default args)

_ENUM = re.compile(r"<[A-Za-z_][\w.]*: ([^<>]*)>")  # <CompilationMode.DYNAMO_TRACE_ONCE: 2> -> 2
_CALL = re.compile(r"[A-Za-z_][\w.]*\(")
_KEY = re.compile(r"[A-Za-z_]\w*")
_MAX_DEPTH = 8


def _string_end(s: str, i: int) -> int:
    """Index just past the quoted string starting at ``i`` (the end of ``s`` when unterminated)."""
    quote, i = s[i], i + 1
    while i < len(s):
        if s[i] == "\\":
            i += 2
            continue
        if s[i] == quote:
            return i + 1
        i += 1
    return len(s)


def _close(s: str, i: int) -> int:
    """Index just past the bracket that closes the one at ``i`` (the end of ``s`` when unbalanced)."""
    depth = 0
    while i < len(s):
        c = s[i]
        if c in "'\"":
            i = _string_end(s, i)
            continue
        depth += c in "([{"
        depth -= c in ")]}"
        i += 1
        if depth == 0:
            return i
    return len(s)


def split_top(s: str, sep: str) -> list[str]:
    """``s`` cut at each ``sep`` outside quotes and brackets."""
    parts, start, i = [], 0, 0
    while i < len(s):
        c = s[i]
        if c in "'\"":
            i = _string_end(s, i)
        elif c in "([{":
            i = _close(s, i)
        elif c == sep:
            parts.append(s[start:i])
            start = i = i + 1
        else:
            i += 1
    parts.append(s[start:])
    return [p.strip() for p in parts if p.strip()]


def _without_calls(s: str) -> str:
    """``Name(...)`` objects nested in a literal become None: their fields are not literals."""
    out, i = [], 0
    while i < len(s):
        c = s[i]
        if c in "'\"":
            j = _string_end(s, i)
            out.append(s[i:j])
            i = j
            continue
        call = _CALL.match(s, i)
        if call and (i == 0 or not (s[i - 1].isalnum() or s[i - 1] in "_.")):
            out.append("None")
            i = _close(s, call.end() - 1)
            continue
        out.append(c)
        i += 1
    return "".join(out)


def repr_value(s: str, depth: int = 0) -> Any:
    """A repr'd value: a literal, an object's fields as a dict, or a bare word (``auto``) as text."""
    s = s.strip()
    call = _CALL.match(s)
    if call and _close(s, call.end() - 1) == len(s) and depth < _MAX_DEPTH:
        return repr_fields(s[call.end():-1], depth + 1)
    if s.startswith("{") and _close(s, 0) == len(s) and depth < _MAX_DEPTH:
        return repr_dict(s, depth + 1)
    try:
        return ast.literal_eval(_without_calls(_ENUM.sub(r"\1", s)))
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        return None if s[:1] in "([{<" else s


def repr_dict(s: str, depth: int = 0) -> dict:
    """A dict repr item by item, so one odd item costs only itself."""
    out: dict = {}
    for item in split_top(_ENUM.sub(r"\1", s.strip())[1:-1], ","):
        key, *value = split_top(item, ":")
        try:
            name = ast.literal_eval(key)
        except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
            continue
        if isinstance(name, str) and len(value) == 1:
            out[name] = repr_value(value[0], depth)
    return out


def repr_fields(s: str, depth: int = 0) -> dict:
    """``k=v, k=v`` (an object's repr body or the engine line) as a dict; parts that are not k=v are skipped."""
    out: dict = {}
    for part in split_top(_ENUM.sub(r"\1", s), ","):
        key, eq, value = part.partition("=")
        if eq and _KEY.fullmatch(key.strip()):
            out[key.strip()] = repr_value(value, depth)
    return out
