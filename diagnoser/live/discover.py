"""What a running server says about itself before any load: its model, context limit, version and settings.

vLLM publishes its resolved configuration at ``/server_info?config_format=json`` in dev mode
only; otherwise its ``/metrics`` info gauges carry part of it (the KV cache). SGLang publishes
``/get_server_info``. Whatever none of them gives is named in ``missing`` with how to supply it.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from diagnoser.errors import InputError
from diagnoser.http import Client, HttpError
from diagnoser.live.load import scrape
from diagnoser.readers.facts import SourcedFacts

HOW_TO_SUPPLY = (
    "the server's settings (max sequences, chunked prefill, compile and graphs, speculation, default penalties): "
    "start vLLM with VLLM_SERVER_DEV_MODE=1 for /server_info, or pass --server-args \"vllm serve ...\" or --server-log FILE"
)


@dataclass
class Server:
    model: str
    max_model_len: int | None
    facts: SourcedFacts
    profile_dir: Path | None  # the profiler's folder, when the server says where and it exists on this host


def _json(http: Client, url: str) -> object | None:
    try:
        reply = http.get(url)
    except HttpError:
        return None
    if reply.status_code != 200:
        return None
    try:
        return reply.json()
    except ValueError:
        return None


def _model(http: Client, url: str, wanted: str | None, facts: SourcedFacts) -> tuple[str, int | None]:
    listed = _json(http, f"{url}/v1/models")
    entries = listed.get("data") if isinstance(listed, dict) else None
    if not isinstance(entries, list) or not entries or not all(isinstance(e, dict) for e in entries):
        raise InputError(f"{url}/v1/models: no model listed (is this an OpenAI-compatible server?)")
    ids = [str(e.get("id")) for e in entries]
    if wanted is not None and wanted not in ids:
        raise InputError(f"--model {wanted}: the server lists {', '.join(ids)}")
    entry = entries[ids.index(wanted)] if wanted else entries[0]
    limit = entry.get("max_model_len")
    limit = limit if isinstance(limit, int) and not isinstance(limit, bool) and limit > 0 else None
    facts.add("observations.server.max_context", limit, "/v1/models max_model_len")
    return str(entry.get("id")), limit


def _profile_dir(config: dict) -> Path | None:
    profiler = config.get("profiler_config")
    folder = profiler.get("torch_profiler_dir") if isinstance(profiler, dict) else None
    return Path(folder) if isinstance(folder, str) and folder and Path(folder).is_dir() else None


def discover(http: Client, url: str, model: str | None = None) -> Server:
    from diagnoser.readers.metrics_info import from_metrics_text
    from diagnoser.readers.vllm_config import from_vllm_config

    facts = SourcedFacts()
    name, limit = _model(http, url, model, facts)
    version = _json(http, f"{url}/version")
    if isinstance(version, dict) and isinstance(version.get("version"), str):
        facts.add("observations.server.engine", "vllm", "/version")
        facts.add("observations.server.engine_version", version["version"][:100], "/version version")
    info = _json(http, f"{url}/server_info?config_format=json")
    config = info.get("vllm_config") if isinstance(info, dict) else None
    folder = None
    if isinstance(config, dict):
        facts.merge(from_vllm_config(config, "/server_info vllm_config"))
        folder = _profile_dir(config)
    else:
        sglang = _json(http, f"{url}/get_server_info")
        if isinstance(sglang, dict):
            from diagnoser.readers.server_args import from_sglang_args

            facts.merge(from_sglang_args(sglang, lambda key: f"/get_server_info {key}"))
        else:
            facts.missing.append(HOW_TO_SUPPLY)
    text = scrape(http, url)
    if text:
        facts.merge(from_metrics_text(text, "/metrics"))
    return Server(name, limit, facts, folder)
