"""A launch command saved in a file, or the YAML given to ``vllm serve --config`` / ``sglang ... --config``.

Both state only what was asked; the flag and key names are the engines' own, so they go through
the command-line reader's tables (``server_args``) and the engine-args mapping (``vllm_config``).
The YAML form is documented in vLLM's ``docs/configuration/serve_args.md`` ("Configuration file":
long option names as keys, with dashes or underscores) and SGLang's ``--config`` option
(``python/sglang/srt/server_args.py``, ``ServerArgs`` field names). A YAML file is claimed only when
most of its keys are engine arguments and one of them belongs to one engine alone: ``host`` and
``port`` are in every server's configuration.
"""

from __future__ import annotations

import re
from typing import Any

from diagnoser.artifacts.artifact import Artifact
from diagnoser.artifacts.formats import Format
from diagnoser.errors import InputError
from diagnoser.readers.facts import SourcedFacts
from diagnoser.readers.server_args import (
    SGLANG_ALIASES,
    SGLANG_KINDS,
    VLLM_KINDS,
    from_command_line,
    from_sglang_args,
    typed,
)
from diagnoser.readers.vllm_config import from_engine_args

# ---------------------------------------------------------------------------------------------
# a command line in a file

_COMMAND_CHARS = 256 * 1024  # a script or a pasted command, not a log
_LAUNCH = re.compile(
    r"^\s*(?:\$\s+)?(?:[A-Za-z_]\w*=\S*\s+)*(?:\S*/)?"
    r"(?:vllm\s+serve|sglang\s+serve|python[\d.]*\s+-m\s+(?:vllm\.entrypoints\.\S+|sglang\.launch_server))(?:\s|\\?$)",
    re.MULTILINE,
)


def _commands(artifact: Artifact) -> list[tuple[int, str]]:
    """Each launch command with the line it starts on, its backslash-continued lines joined."""
    found, lines = [], artifact.lines
    i = 0
    while i < len(lines):
        start = i
        text = lines[i]
        while text.rstrip().endswith("\\") and i + 1 < len(lines):
            i += 1
            text = text.rstrip()[:-1] + " " + lines[i]
        if _LAUNCH.match(text):
            found.append((start + 1, text))
        i += 1
    return found


def read_command(artifact: Artifact) -> SourcedFacts:
    """The last launch command in the file (a script that restarts the server ends with the one that ran)."""
    commands = _commands(artifact)
    if not commands:
        raise InputError(f"{artifact.name}: no `vllm serve`, vLLM api_server or `sglang.launch_server` command in it")
    number, text = commands[-1]
    try:
        return from_command_line(text, origin=artifact.at(number))
    except InputError as err:
        raise InputError(f"{artifact.at(number)}: {err}") from None


def recognise_command(artifact: Artifact) -> bool:
    return len(artifact.text) <= _COMMAND_CHARS and _LAUNCH.search(artifact.text) is not None


COMMAND_LINE = Format(
    name="command-line",
    what="a saved launch command (`vllm serve MODEL ...` or `python -m sglang.launch_server ...`)",
    recognise=recognise_command,
    read=read_command,
)

# ---------------------------------------------------------------------------------------------
# a --config YAML

_BOTH = {"model", "host", "port", "dtype", "trust_remote_code", "quantization", "kv_cache_dtype", "served_model_name",
         "tokenizer_mode", "load_format", "revision", "api_key", "download_dir", "tool_call_parser", "reasoning_parser",
         "chat_template", "seed", "random_seed", "enable_lora", "lora_paths", "tensor_parallel_size", "data_parallel_size",
         "pipeline_parallel_size", "attention_backend", "disable_custom_all_reduce", "skip_tokenizer_init", "log_level"}
_VLLM_ONLY = set(VLLM_KINDS) - _BOTH | {
    "gpu_memory_utilization", "uvicorn_log_level", "block_size", "swap_space", "max_seq_len_to_capture", "config_format",
    "tokenizer", "max_logprobs", "kv_transfer_config", "distributed_executor_backend", "cpu_offload_gb", "generation_config",
    "limit_mm_per_prompt", "enable_chunked_prefill", "disable_log_stats", "enable_prefix_caching"}
_SGLANG_ONLY = set(SGLANG_KINDS) - _BOTH | {
    "model_path", "tokenizer_path", "mem_fraction_static", "schedule_policy", "schedule_conservativeness", "page_size",
    "speculative_algorithm", "speculative_draft_model_path", "grammar_backend", "sampling_backend", "decode_log_interval",
    "load_balance_method", "dist_init_addr", "nnodes", "node_rank"}
_KNOWN = _BOTH | _VLLM_ONLY | _SGLANG_ONLY


def _args(mapping: dict) -> dict[str, tuple[str, Any]]:
    """Engine-argument name (underscores) -> (the key as written, its value)."""
    return {str(key).replace("-", "_"): (str(key), value) for key, value in mapping.items()}


def _is_sglang(names: set[str]) -> bool:
    return bool(names & _SGLANG_ONLY) and not names & _VLLM_ONLY


def recognise_yaml(artifact: Artifact) -> bool:
    if artifact.text.lstrip()[:1] in ("{", "["):
        return False  # JSON documents (server_info, benchmark results) are other formats
    mapping = artifact.mapping
    if not mapping:
        return False
    names = set(_args(mapping))
    known = names & _KNOWN
    return len(known) >= 3 and 2 * len(known) >= len(names) and bool(known & (_VLLM_ONLY | _SGLANG_ONLY))


def _typed(value: Any, kind: str | None, where: str) -> Any:
    """YAML types its values already; a size written as text (``32k``) or a JSON option written as a string is read here."""
    return typed(kind, value, where) if isinstance(value, str) and kind in ("int", "json") else value


def read_yaml(artifact: Artifact) -> SourcedFacts:
    mapping = artifact.mapping
    if not mapping:
        raise InputError(f"{artifact.name}: not a YAML mapping of engine arguments")
    args = _args(mapping)
    if _is_sglang(set(args)):
        named = {SGLANG_ALIASES.get(name, name): pair for name, pair in args.items()}
        values = {name: _typed(value, SGLANG_KINDS.get(name), artifact.key(key)) for name, (key, value) in named.items()}
        return from_sglang_args(values, lambda name: artifact.key(named[name][0]) if name in named else artifact.key(name))
    values = {name: _typed(value, VLLM_KINDS.get(name), artifact.key(key)) for name, (key, value) in args.items()}

    def render(name: str) -> str:
        head, _, rest = name.partition(".")
        return artifact.key(args[head][0] if head in args else head, *([rest] if rest else []))

    facts = from_engine_args(values, render)
    facts.add("observations.server.engine", "vllm", f"{artifact.name} (vllm serve --config keys)")
    return facts


ENGINE_ARGS_YAML = Format(
    name="engine-args-yaml",
    what="a `vllm serve --config` or SGLang `--config` YAML of engine arguments (max-num-seqs: 4, ...)",
    recognise=recognise_yaml,
    read=read_yaml,
)
