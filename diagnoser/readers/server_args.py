"""What a launch command or a vLLM server log states about the engine's settings, as case facts.

A command line says only what was asked: a flag not given is the engine's default, and defaults
move between versions and GPUs, so the reader does not guess them. One exception is by design:
``--enforce-eager`` given is graphs off and compile off, because vLLM forces both.

The vLLM log says more: its ``non-default args: {...}`` line is the parsed command line (a Python
dict repr, which may hold objects such as ``ProfilerConfig(...)``), and its ``Initializing a V1
LLM engine (vX) with config: k=v, ...`` line is the resolved configuration the engine runs with.

SGLang's names are its ``ServerArgs`` dataclass fields, which are also the keys of its
``GET /get_server_info`` document (``dataclasses.asdict(server_args)`` plus the scheduler's
``max_total_num_tokens``). They were taken from SGLang's documentation page
``docs/advanced_features/server_arguments.md`` and ``python/sglang/srt/entrypoints/http_server.py``
(repository sgl-project/sglang), not from a running SGLang server.
"""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path
from typing import Any, Callable, Iterable

from diagnoser.artifacts.artifact import Artifact
from diagnoser.errors import InputError
from diagnoser.readers.facts import SourcedFacts
from diagnoser.readers.vllm_config import (
    SERVER,
    count,
    expert_parallel_size,
    flag,
    from_engine_args,
    graph_state,
    repr_fields,
    repr_value,
    text,
)

MAX_BYTES = 64 * 1024 * 1024
Fact = tuple[str, Any, str]

# ---------------------------------------------------------------------------------------------
# flags: the kind of value each takes (anything not listed is kept as text and maps to nothing)

VLLM_KINDS: dict[str, str] = {
    **dict.fromkeys(("max_num_seqs", "max_num_batched_tokens", "long_prefill_token_threshold", "tensor_parallel_size",
                     "pipeline_parallel_size", "data_parallel_size", "max_model_len", "optimization_level"), "int"),
    **dict.fromkeys(("enforce_eager", "enable_chunked_prefill", "enable_prefix_caching", "async_scheduling",
                     "enable_expert_parallel", "disable_custom_all_reduce", "trust_remote_code", "disable_log_stats",
                     "disable_log_requests", "enable_log_requests", "enable_lora", "enable_auto_tool_choice",
                     "enable_prompt_tokens_details", "disable_frontend_multiprocessing", "enable_sleep_mode"), "bool"),
    **dict.fromkeys(("speculative_config", "override_generation_config", "compilation_config", "structured_outputs_config"), "json"),
}
VLLM_ALIASES = {"tp": "tensor_parallel_size", "pp": "pipeline_parallel_size", "dp": "data_parallel_size", "q": "quantization",
                "O": "compilation_config"}

SGLANG_KINDS: dict[str, str] = {
    **dict.fromkeys(("max_running_requests", "chunked_prefill_size", "cuda_graph_max_bs", "speculative_num_steps",
                     "speculative_eagle_topk", "speculative_num_draft_tokens", "tp_size", "dp_size", "pp_size", "ep_size",
                     "context_length", "max_prefill_tokens", "max_total_tokens"), "int"),
    "cuda_graph_bs": "ints",
    **dict.fromkeys(("disable_cuda_graph", "disable_radix_cache", "enable_torch_compile", "enable_mixed_chunk",
                     "disable_overlap_schedule", "enable_dp_attention", "disable_custom_all_reduce", "trust_remote_code",
                     "enable_metrics", "skip_server_warmup", "enable_p2p_check", "disable_cuda_graph_padding",
                     "log_requests", "enable_cache_report"), "bool"),
}
SGLANG_ALIASES = {"tp": "tp_size", "tensor_parallel_size": "tp_size", "dp": "dp_size", "data_parallel_size": "dp_size",
                  "pipeline_parallel_size": "pp_size", "ep": "ep_size", "expert_parallel_size": "ep_size", "model": "model_path"}

_NUMBER = re.compile(r"-?\d+(\.\d+)?")
_HUMAN = re.compile(r"(\d+(?:\.\d+)?)([kmgKMG]?)")


def _is_flag(token: str) -> bool:
    return token.startswith("-") and len(token) > 1 and not _NUMBER.fullmatch(token)


def whole_number(value: str, flag_name: str) -> int:
    """vLLM's human-readable sizes: 32k = 32,000, 32K = 32,768 (lower case decimal, upper case binary)."""
    value = value.strip()
    if re.fullmatch(r"-\d+", value):
        return int(value)  # SGLang's "-1": off
    m = _HUMAN.fullmatch(value)
    if m is None or ("." in m.group(1) and not m.group(2).islower()):
        raise InputError(f"server args {flag_name}: {value!r} is not a whole number")
    scale = {"": 1, "k": 10**3, "m": 10**6, "g": 10**9, "K": 2**10, "M": 2**20, "G": 2**30}[m.group(2)]
    return int(float(m.group(1)) * scale)


def _json(value: str, flag_name: str) -> Any:
    try:
        return json.loads(value)
    except ValueError as err:
        raise InputError(f"server args {flag_name}: not JSON ({err.msg} at character {err.pos})") from None


def _scalar(value: str) -> Any:
    """A dotted sub-option's value (``-O.mode=3``): JSON when it parses, else the text."""
    lowered = {"true": True, "false": False, "none": None}
    if value.lower() in lowered:
        return lowered[value.lower()]
    try:
        return json.loads(value)
    except ValueError:
        return value


def typed(kind: str, value: str, flag_name: str) -> Any:
    if kind == "int":
        return whole_number(value, flag_name)
    if kind == "json":
        return _json(value, flag_name)
    return value


# ---------------------------------------------------------------------------------------------
# command lines


def _tokens(line: str) -> list[str]:
    try:
        tokens = shlex.split(re.sub(r"\\\r?\n", " ", line))
    except ValueError as err:
        raise InputError(f"server args: {err} (an unclosed quote?)") from None
    return [t for t in tokens if t.strip()]


def _program(tokens: list[str]) -> tuple[str, str, list[str]]:
    """(engine, how it was launched, the arguments after it)."""
    for i, token in enumerate(tokens):
        name = Path(token).name
        after = tokens[i + 1] if i + 1 < len(tokens) else ""
        if name in ("vllm", "sglang") and after == "serve":
            return name, f"{name} serve", tokens[i + 2:]
        if token == "-m" and after.startswith("vllm.entrypoints"):
            return "vllm", f"python -m {after}", tokens[i + 2:]
        if token == "-m" and after.startswith("sglang.launch_server"):
            return "sglang", f"python -m {after}", tokens[i + 2:]
    raise InputError("server args: not a vLLM or SGLang launch command (expected `vllm serve MODEL ...`, "
                     "`python -m vllm.entrypoints.openai.api_server ...` or `python -m sglang.launch_server ...`)")


def _vllm_level(value: str, written: str) -> tuple[str, Any]:
    """``-O`` takes a compilation config (JSON) or an optimization level (0-3)."""
    if value.lstrip().startswith("{") and written == "-O":
        return "compilation_config", _json(value, written)
    return "optimization_level", whole_number(value, written)


def _set_dotted(args: dict, dest: str, sub: str, value: Any) -> None:
    node = args.setdefault(dest, {})
    if not isinstance(node, dict):
        node = args[dest] = {}
    *parents, last = sub.split(".")
    for key in parents:
        node = node.setdefault(key, {}) if isinstance(node.get(key, {}), dict) else {}
    node[last] = value


def _split_flag(token: str, vllm: bool) -> tuple[str, str, str, str | None]:
    """(the flag as written, its destination name, a dotted sub-key, an inline value)."""
    raw, eq, inline = token.partition("=")
    if vllm and re.fullmatch(r"-O\d+", raw):  # -O3: an optimization level written into the flag
        return "-O", "O", "", raw[2:]
    name, _, sub = raw.lstrip("-").replace("-", "_").partition(".")
    return raw.partition(".")[0], name, sub, inline if eq else None


def _next_value(tokens: list[str], i: int, raw: str, kind: str) -> tuple[str | None, int]:
    """The value after a flag, or None for a switch (a flag followed by a flag, or last)."""
    if kind == "bool":
        given = i < len(tokens) and tokens[i].lower() in ("true", "false")
        return (tokens[i], i + 1) if given else (None, i)
    if i < len(tokens) and not _is_flag(tokens[i]):
        return tokens[i], i + 1
    if kind in ("int", "json", "dotted", "level"):
        raise InputError(f"server args: {raw} needs a value")
    return None, i


def _parse_flags(tokens: list[str], kinds: dict[str, str], aliases: dict[str, str], vllm: bool) -> tuple[dict, dict[str, str]]:
    """Flags as (destination name -> typed value) and how each destination was written."""
    args: dict[str, Any] = {}
    written: dict[str, str] = {}
    i = 0
    while i < len(tokens):
        token, i = tokens[i], i + 1
        if not _is_flag(token):
            continue  # the model, or a value nothing asked for
        raw, name, sub, value = _split_flag(token, vllm)
        negated = vllm and name.startswith("no_") and kinds.get(aliases.get(name[3:], name[3:])) == "bool"
        dest = aliases.get(name[3:] if negated else name, name[3:] if negated else name)
        kind = "dotted" if sub else "level" if vllm and raw in ("-O", "--optimization-level") else kinds.get(dest, "text")
        if kind == "ints" and value is None:
            values = []
            while i < len(tokens) and not _is_flag(tokens[i]):
                values.append(tokens[i])
                i += 1
            args[dest], written[dest] = [whole_number(v, raw) for v in values], raw
            continue
        if value is None and not negated:
            value, i = _next_value(tokens, i, raw, kind)
        written.setdefault(dest, raw)
        if negated:
            args[dest] = False
        elif kind == "bool" or value is None:  # a switch this reader does not know is kept, and maps to nothing
            args[dest] = value is None or value.lower() == "true"
        elif kind == "ints":
            args[dest] = [whole_number(value, raw)]
        elif kind == "level":
            dest, args_value = _vllm_level(value, raw)
            args[dest], written[dest] = args_value, raw
        elif kind == "dotted":
            _set_dotted(args, dest, sub, _scalar(value))
        else:
            args[dest] = typed(kind, value, raw)
    return args, written


def from_command_line(line: str, origin: str = "--server-args") -> SourcedFacts:
    """Facts a ``vllm serve``, vLLM api_server or ``sglang.launch_server`` command line states;
    ``origin`` names where the line was read (the option that gave it, or a file and line)."""
    if len(line) > MAX_BYTES:
        raise InputError("server args: longer than 64 MB; that is not a command line")
    engine, launched, rest = _program(_tokens(line))
    vllm = engine == "vllm"
    args, written = _parse_flags(rest, VLLM_KINDS if vllm else SGLANG_KINDS, VLLM_ALIASES if vllm else SGLANG_ALIASES, vllm)

    def render(name: str) -> str:
        head, _, rest_of = name.partition(".")
        shown = written.get(head, "--" + head.replace("_", "-"))
        return f"{origin} {shown}" + (f" {rest_of}" if rest_of else "")

    facts = SourcedFacts()
    facts.add(SERVER + "engine", engine, f"{origin} {launched}")
    return facts.merge(from_engine_args(args, render) if vllm else from_sglang_args(args, render))


# ---------------------------------------------------------------------------------------------
# the vLLM server log

_NON_DEFAULT = re.compile(r"non-default args: (\{.*?)\s*$")  # a cut dict is caught, not skipped
_ENGINE_LINE = re.compile(r"Initializing an? (?:V1 )?LLM engine \(([^)]*)\) with config: (.*?)\s*$")


def _config_lines(lines: Iterable[str]) -> tuple[tuple[int, str] | None, tuple[int, str, str] | None]:
    """The last ``non-default args`` dict, and the last engine-config line's version and text, each with its line number."""
    args = engine = None
    for number, line in enumerate(lines, 1):
        if (m := _NON_DEFAULT.search(line)) is not None:
            args = (number, m.group(1))
        elif (m := _ENGINE_LINE.search(line)) is not None:
            engine = (number, m.group(1), m.group(2))
    return args, engine


def vllm_log_config(artifact: Artifact) -> SourcedFacts | None:
    """Facts from a vLLM log's engine-config line (what runs) and non-default args (what was asked);
    None when the log has neither line (an excerpt of the periodic lines only)."""
    args_line, engine_line = _config_lines(artifact.lines)
    if args_line is None and engine_line is None:
        return None
    facts = SourcedFacts()
    if engine_line is not None:
        number, version, body = engine_line
        facts.merge(from_engine_args(repr_fields(body), lambda n: f"{artifact.at(number)} {n}"))
        facts.add(SERVER + "engine", "vllm", artifact.at(number))
        facts.add(SERVER + "engine_version", version.strip().removeprefix("v") or None, artifact.at(number))
    if args_line is not None:
        number, body = args_line
        asked = repr_value(body) if body.endswith("}") else None
        if not isinstance(asked, dict):
            raise InputError(f"{artifact.at(number)}: the non-default args are not a readable dict")
        facts.merge(from_engine_args(asked, lambda n: f"{artifact.at(number)} {n}"))
        _expert_parallel_across_lines(facts, asked, f"{artifact.at(number)} enable_expert_parallel")
    return facts


def from_server_log(path: str | Path) -> SourcedFacts:
    """The settings a vLLM server log states; a file with neither config line is refused."""
    artifact = Artifact.load(path)
    facts = vllm_log_config(artifact)
    if facts is None:
        raise InputError(f"{artifact.name}: no 'non-default args' or 'Initializing a V1 LLM engine' line; is this a vLLM server log?")
    return facts


def _expert_parallel_across_lines(facts: SourcedFacts, asked: dict, source: str) -> None:
    """The engine line has the TP and DP sizes but not whether EP is on; the asked-for args have that."""
    tp, dp = facts.facts.get("workload.layout.tp"), facts.facts.get("workload.layout.dp")
    if "workload.layout.ep" in facts or tp is None or dp is None:
        return
    ep = expert_parallel_size(flag(asked.get("enable_expert_parallel")), tp.value, dp.value)
    facts.add("workload.layout.ep", ep, f"{source} + {tp.source} + {dp.source}")


# ---------------------------------------------------------------------------------------------
# SGLang's server args (command line or /get_server_info)


def _sglang_scheduling(args: dict, at: Callable[[str], str]) -> Iterable[Fact]:
    yield SERVER + "max_num_seqs", count(args.get("max_running_requests")), at("max_running_requests")
    size = args.get("chunked_prefill_size")
    if isinstance(size, int) and not isinstance(size, bool):
        chunked = size > 0  # -1 (or 0) turns chunking off
        yield SERVER + "chunked_prefill", chunked, at("chunked_prefill_size")
        mixed = flag(args.get("enable_mixed_chunk"))
        # SGLang runs a waiting prefill batch before the decodes unless chunks are mixed into decode batches
        if not chunked:
            yield SERVER + "prefill_priority", True, at("chunked_prefill_size")
        elif mixed is not None:
            yield SERVER + "prefill_priority", not mixed, at("chunked_prefill_size") + " + " + at("enable_mixed_chunk")
    overlap_off = flag(args.get("disable_overlap_schedule"))
    yield SERVER + "async_scheduling", None if overlap_off is None else not overlap_off, at("disable_overlap_schedule")
    yield SERVER + "max_context", count(args.get("context_length")), at("context_length")
    yield SERVER + "kv_cache_tokens", count(args.get("max_total_num_tokens")), at("max_total_num_tokens")


def _sglang_graphs(args: dict, at: Callable[[str], str]) -> Iterable[Fact]:
    disabled = flag(args.get("disable_cuda_graph"))
    listed = args.get("cuda_graph_bs")
    size_key = "cuda_graph_bs" if isinstance(listed, list) and listed else "cuda_graph_max_bs"
    capture = listed if size_key == "cuda_graph_bs" else ([args["cuda_graph_max_bs"]] if count(args.get("cuda_graph_max_bs")) else None)
    if capture is not None and not all(count(n) for n in capture):
        capture = None
    graphs, largest, because = graph_state(disabled, None if disabled is None else not disabled, capture)
    names = {"enforce_eager": "disable_cuda_graph", "cudagraph_mode": "disable_cuda_graph", "cudagraph_capture_sizes": size_key}
    source = " + ".join(at(k) for k in dict.fromkeys(names[b] for b in because))
    yield SERVER + "cuda_graphs", graphs, source
    yield SERVER + "cuda_graph_max_batch", largest, source
    yield SERVER + "torch_compile", flag(args.get("enable_torch_compile")), at("enable_torch_compile")


def _sglang_speculation(args: dict, at: Callable[[str], str]) -> Iterable[Fact]:
    algorithm = text(args.get("speculative_algorithm"))
    yield SERVER + "speculative", algorithm.lower() if algorithm else None, at("speculative_algorithm")
    # a chain (top-k 1) drafts num_steps tokens a cycle; num_draft_tokens counts the verified slots, one more
    if algorithm and algorithm.upper() != "NGRAM" and count(args.get("speculative_eagle_topk")) == 1:
        steps = count(args.get("speculative_num_steps"))
        yield "observations.speculation.draft_length", steps, at("speculative_num_steps") + " + " + at("speculative_eagle_topk")


def _sglang_layout_and_kernels(args: dict, at: Callable[[str], str]) -> Iterable[Fact]:
    for key, short in (("tp_size", "tp"), ("pp_size", "pp"), ("dp_size", "dp"), ("ep_size", "ep")):
        yield "workload.layout." + short, count(args.get(key)), at(key)
    mode = text(args.get("tokenizer_mode"))
    yield SERVER + "tokenizer_fast", None if mode is None else mode != "slow", at("tokenizer_mode")
    radix_off = flag(args.get("disable_radix_cache"))
    yield SERVER + "prefix_caching", None if radix_off is None else not radix_off, at("disable_radix_cache")
    for key, field in (("kv_cache_dtype", "kv_cache_dtype"), ("grammar_backend", "structured_output_backend"),
                       ("quantization", "quantization"), ("attention_backend", "attention_backend")):
        yield SERVER + field, text(args.get(key)), at(key)
    yield "observations.platform.device_api", text(args.get("device")), at("device")
    if flag(args.get("disable_custom_all_reduce")) is True:
        yield SERVER + "custom_allreduce", False, at("disable_custom_all_reduce")


def from_sglang_args(args: dict, at: Callable[[str], str]) -> SourcedFacts:
    """Facts from SGLang ``ServerArgs`` names; ``at`` names where each key was read."""
    facts = SourcedFacts()
    if not isinstance(args, dict) or not args:
        return facts
    facts.add(SERVER + "engine", "sglang", at("server args"))
    for produced in (_sglang_scheduling(args, at), _sglang_graphs(args, at), _sglang_speculation(args, at),
                     _sglang_layout_and_kernels(args, at)):
        for path, value, source in produced:
            facts.add(path, value, source)
    return facts
