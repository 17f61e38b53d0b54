"""A serving engine's settings, from the configuration it publishes, as ServerConfig facts.

vLLM serves its resolved configuration at ``GET /server_info`` (in development mode), and the
lab server does the same under the same section names; an engineer can also save the
equivalent JSON by hand. Only settings that decide which costs exist are read: chunked
prefill, the tokenizer mode, graph capture (``model_config.enforce_eager`` and the capture
sizes), the default sampling parameters and the sampler. Absent keys stay unknown rather than
defaulting, so a partial document never clears a cause.
"""

from __future__ import annotations

from typing import Any

import httpx

from diagnoser.models.observations import ServerConfig


def _section(info: dict, name: str) -> dict:
    value = info.get(name)
    return value if isinstance(value, dict) else {}


def _number(section: dict, key: str) -> float | None:
    value = section.get(key)
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def sampling_settings(params: dict, sampler: Any) -> dict[str, Any]:
    """Penalties and the sampler from default sampling parameters; greedy decoding sorts nothing."""
    out: dict[str, Any] = {}
    frequency, presence, repetition = (_number(params, k) for k in ("frequency_penalty", "presence_penalty", "repetition_penalty"))
    if frequency is not None or presence is not None:
        out["penalties"] = bool(frequency) or bool(presence)
    if repetition is not None:
        out["repetition_penalty"] = repetition != 1.0
    temperature = _number(params, "temperature")
    if temperature == 0.0:
        out["sampling"] = "greedy"
        return out
    if isinstance(sampler, str) and sampler:
        out["sampling"] = sampler
    top_k = _number(params, "top_k")
    if top_k is not None and temperature is not None:
        out["top_k"] = int(top_k)
    return out


def settings_from_info(info: dict) -> ServerConfig:
    model, scheduler = _section(info, "model_config"), _section(info, "scheduler_config")
    found: dict[str, Any] = {}
    if isinstance(info.get("engine"), str):
        found["engine"] = info["engine"]
    if isinstance(scheduler.get("enable_chunked_prefill"), bool):
        chunked = scheduler["enable_chunked_prefill"]
        # without chunking a waiting prompt is prefilled whole, before the running decodes go on
        found.update(chunked_prefill=chunked, prefill_priority=not chunked)
    counts = ((scheduler, "max_num_seqs", "max_num_seqs"), (model, "max_model_len", "max_context"), (model, "vocab_size", "vocab_size"))
    for section, key, field in counts:
        value = section.get(key)
        if isinstance(value, int) and not isinstance(value, bool) and value >= 1:
            found[field] = value
    if isinstance(model.get("tokenizer_mode"), str):
        found["tokenizer_fast"] = model["tokenizer_mode"] != "slow"
    if isinstance(model.get("enforce_eager"), bool):
        found["cuda_graphs"] = not model["enforce_eager"]
    sizes = _section(info, "compilation_config").get("cudagraph_capture_sizes")
    if found.get("cuda_graphs") is not False and isinstance(sizes, list) and sizes and all(
        isinstance(n, int) and not isinstance(n, bool) and n >= 1 for n in sizes
    ):  # an eager engine may still list the sizes it would capture; it captures none
        found["cuda_graph_max_batch"] = max(sizes)
    found.update(sampling_settings(_section(info, "default_sampling_params"), info.get("sampler")))
    return ServerConfig(**found)


def read_server_info(http: httpx.Client, url: str) -> ServerConfig | None:
    """The settings the server publishes, or None where it publishes none."""
    reply = http.get(f"{url}/server_info")
    if reply.status_code != 200:
        return None
    try:
        info = reply.json()
    except ValueError:
        return None
    return settings_from_info(info) if isinstance(info, dict) else None
