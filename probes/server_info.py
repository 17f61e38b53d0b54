"""A serving engine's settings, from the configuration it publishes, as case facts with their sources.

vLLM serves its resolved configuration at ``GET /server_info`` only in development mode
(``VLLM_SERVER_DEV_MODE=1``): ``{vllm_config, vllm_env, system_env}``, where ``vllm_config`` is JSON
sections when asked with ``?config_format=json`` and a Python repr otherwise. SGLang serves its
flat server args at ``GET /get_server_info`` (newer versions also at ``/server_info``). This
project's lab serves vLLM's section names flat at the top level, with the default sampling
parameters and sampler beside them. When no endpoint publishes a configuration, the info gauges
on ``/metrics`` still carry the KV cache's.

Which document a reply is, is decided by its keys, never by the URL. The mapping of each key lives
in ``diagnoser.readers``; here are only the fetching, the choice of reader and the lab's extras.
"""

from __future__ import annotations

import json
from typing import Any

from diagnoser.errors import InputError
from diagnoser.http import Client, Reply
from diagnoser.models.observations import ServerConfig
from diagnoser.readers.facts import SourcedFacts
from diagnoser.readers.metrics_info import from_metrics_text
from diagnoser.readers.server_args import from_sglang_args
from diagnoser.readers.vllm_config import (
    SERVER,
    facts_from_sections,
    from_engine_args,
    from_vllm_config,
    penalty_settings,
    real,
    repr_fields,
    section,
    text,
)

ASK_FOR_JSON = "ask /server_info?config_format=json for the scheduler, cache and parallel settings the text form leaves out"
SERVER_INFO_OFF = ("/server_info is off: start vLLM with VLLM_SERVER_DEV_MODE=1 (SGLang serves /get_server_info), "
                   "or give the server's command line (--server-args) or its log")


def sampling_settings(params: dict, sampler: Any) -> dict[str, Any]:
    """Penalties and the sampler from default sampling parameters; greedy decoding sorts nothing."""
    out: dict[str, Any] = {field: value for field, (value, _) in penalty_settings(params).items()}
    temperature = real(params.get("temperature"))
    if temperature == 0.0:
        out["sampling"] = "greedy"
        return out
    if text(sampler):
        out["sampling"] = sampler
    top_k = real(params.get("top_k"))
    if top_k is not None and temperature is not None:
        out["top_k"] = int(top_k)
    return out


def lab_facts(info: dict, where: str = "/server_info") -> SourcedFacts:
    """The lab's flat layout: vLLM's sections at the top level, sampling defaults beside them.

    The lab states graphs only through ``enforce_eager`` (as vLLM did before ``cudagraph_mode``).
    """
    facts = facts_from_sections(info, lambda s, k: f"{where} {s}.{k}", legacy=True)
    facts.add(SERVER + "engine", text(info.get("engine")), f"{where} engine")
    for field, value in sampling_settings(section(info, "default_sampling_params"), info.get("sampler")).items():
        facts.add(SERVER + field, value, f"{where} " + ("sampler" if field == "sampling" and value != "greedy" else "default_sampling_params"))
    return facts


def server_fields(facts: SourcedFacts) -> dict[str, Any]:
    return {path.removeprefix(SERVER): s.value for path, s in facts.facts.items() if path.startswith(SERVER)}


def settings_from_info(info: dict) -> ServerConfig:
    return ServerConfig(**server_fields(lab_facts(info)))


def _vllm_document(cfg: Any, where: str) -> SourcedFacts:
    """``vllm_config`` as JSON sections, as a JSON string, or as the repr plain /server_info gives."""
    if isinstance(cfg, str):
        try:
            cfg = json.loads(cfg)
        except ValueError:
            facts = from_engine_args(repr_fields(cfg), lambda n: f"{where} vllm_config (text) {n}")
            facts.add(SERVER + "engine", "vllm", f"{where} vllm_config (text)")
            facts.missing.append(f"{where}: vllm_config came as text; " + ASK_FOR_JSON)
            return facts
    if isinstance(cfg, dict):
        return from_vllm_config(cfg, f"{where} vllm_config")
    facts = SourcedFacts()
    facts.missing.append(f"{where}: vllm_config is neither sections nor text; " + ASK_FOR_JSON)
    return facts


def _is_sglang(doc: dict) -> bool:
    return "max_running_requests" in doc or ("tp_size" in doc and "model_path" in doc)


def facts_from_document(doc: Any, where: str = "/server_info") -> SourcedFacts:
    """Facts from one published configuration, whichever engine published it."""
    if not isinstance(doc, dict):
        raise InputError(f"{where}: not a JSON object")
    if "vllm_config" in doc:
        return _vllm_document(doc["vllm_config"], where)
    if _is_sglang(doc):
        return from_sglang_args(doc, lambda k: f"{where} {k}")
    return lab_facts(doc, where)


def _get(http: Client, address: str) -> Reply | None:
    """The reply when it is a 200 (within the HTTP layer's caps); None when the endpoint is absent."""
    reply = http.get(address)
    return reply if reply.status_code == 200 else None


def _json(reply: Reply, where: str) -> Any:
    try:
        return reply.json()
    except ValueError:
        raise InputError(f"{where}: the reply is not JSON") from None


def server_facts(http: Client, url: str) -> SourcedFacts:
    """What the server at ``url`` publishes about its settings, each fact with the key it came from."""
    for path, query in (("/server_info", "?config_format=json"), ("/get_server_info", "")):
        reply = _get(http, f"{url}{path}{query}")
        if reply is not None:
            return facts_from_document(_json(reply, path), path)
    reply = _get(http, f"{url}/metrics")
    facts = from_metrics_text(reply.text, "/metrics") if reply is not None else SourcedFacts()
    facts.missing.insert(0, SERVER_INFO_OFF)
    return facts


def read_server_info(http: Client, url: str) -> ServerConfig | None:
    """The settings the server publishes, or None where it publishes none."""
    fields = server_fields(server_facts(http, url))
    return ServerConfig(**fields) if fields else None
