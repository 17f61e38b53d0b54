"""Model architecture as the bound needs it, and import from a Hugging Face ``config.json``.

Only the numbers that decide bytes moved per decode step are kept: layer shapes, attention
kind (GQA/MHA or MLA), and the MoE layout. Everything else in a config is ignored.
"""

from __future__ import annotations

import json
import re
from enum import Enum
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from diagnoser.errors import InputError
from diagnoser.models.precision import DType
from diagnoser.models.workload import Precision


class MoESpec(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)  # "32" is a typo, not 32

    num_experts: int = Field(gt=0, description="routed experts per MoE layer (E)")
    top_k: int = Field(gt=0, description="routed experts chosen per token (k)")
    expert_intermediate_size: int = Field(gt=0)
    num_shared_experts: int = Field(default=0, ge=0)
    shared_intermediate_size: int = Field(default=0, ge=0, description="width of each shared expert")
    first_dense_layers: int = Field(default=0, ge=0, description="leading layers with a dense MLP (first_k_dense_replace)")
    layer_frequency: int = Field(default=1, ge=1, description="every n-th layer (after the dense ones) is MoE")

    @model_validator(mode="after")
    def _k_within_e(self) -> "MoESpec":
        if self.top_k > self.num_experts:
            raise ValueError(f"top_k={self.top_k} exceeds num_experts={self.num_experts}")
        return self


class MLASpec(BaseModel):
    """Multi-head latent attention (DeepSeek-V2/V3): the KV cache holds one compressed latent."""

    model_config = ConfigDict(extra="forbid", strict=True)  # "32" is a typo, not 32

    q_lora_rank: int | None = Field(default=None, gt=0)
    kv_lora_rank: int = Field(gt=0)
    qk_nope_head_dim: int = Field(gt=0)
    qk_rope_head_dim: int = Field(gt=0)
    v_head_dim: int = Field(gt=0)


class LinearAttentionSpec(BaseModel):
    """Gated DeltaNet layers (Qwen3-Next, Qwen3.5): each keeps a fixed-size recurrent state per sequence, read and
    rewritten every step, where a softmax-attention layer keeps a KV cache that grows with the context."""

    model_config = ConfigDict(extra="forbid", strict=True)  # "32" is a typo, not 32

    num_key_heads: int = Field(gt=0)
    num_value_heads: int = Field(gt=0)
    key_head_dim: int = Field(gt=0)
    value_head_dim: int = Field(gt=0)
    conv_kernel: int = Field(gt=0, description="width of the short causal convolution before the recurrence")
    full_attention_every: int = Field(gt=0, description="every n-th layer is softmax attention; the others are linear")


class ModelFeature(str, Enum):
    """A part some models have and others lack; a rule about it cannot apply to a model without it."""

    moe = "moe"  # routed experts


def full_attention_layers(layers: range, every: int) -> int:
    """How many of ``layers`` attend to the whole context when every ``every``-th layer does, in closed form (a config
    may claim a billion layers): the i in layers with (i + 1) % every == 0."""
    return layers.stop // every - layers.start // every


class ModelSpec(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)  # "32" is a typo, not 32

    name: str
    architecture: str = ""
    hidden_size: int = Field(gt=0)
    num_layers: int = Field(gt=0)
    vocab_size: int = Field(gt=0)
    num_attention_heads: int = Field(gt=0)
    num_kv_heads: int = Field(gt=0)
    head_dim: int = Field(gt=0)
    intermediate_size: int = Field(gt=0, description="dense MLP width")
    attention_bias: bool = False
    tie_word_embeddings: bool = False
    mla: MLASpec | None = None
    moe: MoESpec | None = None
    linear_attention: LinearAttentionSpec | None = None
    attention_output_gate: bool = Field(default=False, description="the query projection also yields a gate on the "
                                        "attention output (twice its width)")
    sliding_window: int | None = Field(default=None, gt=0, description="tokens a sliding-window layer attends to")
    full_attention_every: int | None = Field(
        default=None, gt=0, description="with a sliding window, every n-th layer attends to the whole context; none: "
        "every layer slides",
    )
    checkpoint_precision: Precision | None = Field(
        default=None, description="the formats the published checkpoint stores (its quantization_config): what is "
        "served when a case names none",
    )
    source: str = Field(default="", description="where these numbers came from")

    @model_validator(mode="after")
    def _heads_consistent(self) -> "ModelSpec":
        if self.num_attention_heads % self.num_kv_heads:
            raise ValueError(
                f"num_attention_heads={self.num_attention_heads} is not a multiple of num_kv_heads={self.num_kv_heads}"
            )
        if self.moe and self.moe.first_dense_layers > self.num_layers:
            raise ValueError("first_dense_layers exceeds num_layers")
        if self.linear_attention and (self.sliding_window or self.mla):
            raise ValueError("linear-attention layers beside a sliding window or MLA are not supported")
        return self

    def moe_layer_ids(self, layers: range) -> range:
        """The MoE layers among ``layers``, as a range (a config may claim a billion layers)."""
        if not self.moe:
            return range(0)
        every = self.moe.layer_frequency
        low = max(layers.start, self.moe.first_dense_layers)
        first = (low + every) // every * every - 1  # the first i >= low with (i + 1) % every == 0
        return range(first, max(first, layers.stop), every)

    def windowed_layers(self, layers: range) -> int:
        """How many of ``layers`` read only the sliding window of the context, in closed form (a config may claim a
        billion layers)."""
        if self.sliding_window is None:
            return 0
        every = self.full_attention_every
        return len(layers) if every is None else len(layers) - full_attention_layers(layers, every)

    def linear_layers(self, layers: range) -> int:
        """How many of ``layers`` are linear attention: every ``full_attention_every``-th layer is softmax attention,
        the rest linear."""
        if self.linear_attention is None:
            return 0
        return len(layers) - full_attention_layers(layers, self.linear_attention.full_attention_every)

    @property
    def features(self) -> frozenset[ModelFeature]:
        return frozenset({ModelFeature.moe} if self.moe else ())

    @property
    def moe_layers(self) -> int:
        return len(self.moe_layer_ids(range(self.num_layers)))

    @property
    def dense_mlp_layers(self) -> int:
        return self.num_layers - self.moe_layers


# Dense decoders whose MLP is gated (gate, up and down matrices, Phi-3's gate and up fused into one of twice the width):
# their bytes a step are Llama's for the same dimensions.
_ARCH_DENSE = {"LlamaForCausalLM", "Qwen2ForCausalLM", "Qwen3ForCausalLM", "MistralForCausalLM", "GemmaForCausalLM",
               "Phi3ForCausalLM"}
# Architectures whose config leaves out tie_word_embeddings because transformers ties them by default.
_TIED_BY_DEFAULT = {"GemmaForCausalLM"}
_ARCH_MOE = {"MixtralForCausalLM", "Qwen3MoeForCausalLM", "Qwen2MoeForCausalLM", "GptOssForCausalLM"}
_ARCH_MLA = {"DeepseekV3ForCausalLM", "DeepseekV2ForCausalLM"}
# Hybrids of Gated DeltaNet and gated softmax attention; the multimodal releases keep the language model's numbers in a
# nested text_config.
_ARCH_HYBRID_DENSE = {"Qwen3_5ForCausalLM", "Qwen3_5ForConditionalGeneration"}
_ARCH_HYBRID_MOE = {"Qwen3NextForCausalLM", "Qwen3_5MoeForCausalLM", "Qwen3_5MoeForConditionalGeneration"}
SUPPORTED_ARCHITECTURES = sorted(_ARCH_DENSE | _ARCH_MOE | _ARCH_MLA | _ARCH_HYBRID_DENSE | _ARCH_HYBRID_MOE)
# A config's model_type, as Hugging Face writes it, names its architecture where a pasted excerpt leaves out
# "architectures".
MODEL_TYPES = {
    "llama": "LlamaForCausalLM", "qwen2": "Qwen2ForCausalLM", "qwen3": "Qwen3ForCausalLM", "mistral": "MistralForCausalLM",
    "mixtral": "MixtralForCausalLM", "qwen3_moe": "Qwen3MoeForCausalLM", "qwen2_moe": "Qwen2MoeForCausalLM",
    "deepseek_v3": "DeepseekV3ForCausalLM", "deepseek_v2": "DeepseekV2ForCausalLM", "gpt_oss": "GptOssForCausalLM",
    "gemma": "GemmaForCausalLM", "phi3": "Phi3ForCausalLM", "qwen3_next": "Qwen3NextForCausalLM",
    "qwen3_5": "Qwen3_5ForCausalLM", "qwen3_5_text": "Qwen3_5ForCausalLM", "qwen3_5_moe": "Qwen3_5MoeForCausalLM",
    "qwen3_5_moe_text": "Qwen3_5MoeForCausalLM",
}
# Checkpoint formats a config's quantization_config states (quant_method), as the bound's storage formats: gpt-oss
# ships its experts in MXFP4 beside bf16 attention; DeepSeek-V3 its linear layers in block-scaled fp8 beside a bf16
# output layer.
CHECKPOINT_FORMATS = {
    "mxfp4": Precision(expert_weights=DType.mxfp4),
    "fp8": Precision(weights=DType.fp8, lm_head=DType.bf16),
}


# No released model has a dimension, layer count or vocabulary beyond this; a larger figure
# is a typo, and refusing it keeps every product in the bound finite.
MAX_DIMENSION = 10**9


def _need(cfg: dict[str, Any], key: str, where: str) -> int:
    if key not in cfg or cfg[key] is None:
        raise InputError(f"{where}: missing required key {key!r}")
    return _count(cfg, key, where, minimum=1)


def _opt(cfg: dict[str, Any], key: str, where: str, default: int = 0, minimum: int = 0) -> int:
    """An optional count; absent or null means ``default`` (as transformers reads it)."""
    if cfg.get(key) is None:
        return default
    return _count(cfg, key, where, minimum)


def _flag(cfg: dict[str, Any], key: str, where: str, default: bool) -> bool:
    value = cfg.get(key, default)
    if not isinstance(value, bool):
        raise InputError(f"{where}: {key}: expected true or false, got {value!r}")
    return value


def _count(cfg: dict[str, Any], key: str, where: str, minimum: int) -> int:
    """A config integer, refused when it is a string, a float, a boolean or out of range."""
    value = cfg[key]
    if isinstance(value, bool) or not isinstance(value, int):
        raise InputError(f"{where}: {key}: expected an integer, got {type(value).__name__} {value!r}")
    if not minimum <= value <= MAX_DIMENSION:
        raise InputError(f"{where}: {key}: {value} is outside {minimum}..{MAX_DIMENSION}")
    return value


def spec_from_hf_config(cfg: dict[str, Any], name: str | None = None, where: str = "config.json") -> ModelSpec:
    """Build a ``ModelSpec`` from a parsed Hugging Face config dictionary."""
    try:
        return _spec_from_hf_config(cfg, name, where)
    except ValidationError as err:
        raise InputError(f"{where}: {_first_error(err)}") from None


def _spec_from_hf_config(cfg: dict[str, Any], name: str | None, where: str) -> ModelSpec:
    if not isinstance(cfg, dict):
        raise InputError(f"{where}: expected a JSON object")
    archs = cfg.get("architectures") or []
    if not isinstance(archs, list) or not all(isinstance(a, str) for a in archs):
        raise InputError(f"{where}: architectures: expected a list of class names")
    cfg = _language_model(cfg, where)
    arch = archs[0] if archs else MODEL_TYPES.get(str(cfg.get("model_type", "")).lower(), "")
    if arch not in SUPPORTED_ARCHITECTURES:
        raise InputError(f"{where}: architecture {arch or '(none)'!r} not supported; supported: {', '.join(SUPPORTED_ARCHITECTURES)}")
    if arch in _ARCH_HYBRID_MOE and "intermediate_size" not in cfg:  # every layer routes: no dense MLP width to read
        cfg = {**cfg, "intermediate_size": cfg.get("moe_intermediate_size")}
    hidden = _need(cfg, "hidden_size", where)
    heads = _need(cfg, "num_attention_heads", where)
    fields: dict[str, Any] = dict(
        name=name or cfg.get("_name_or_path") or cfg.get("model_type") or arch,
        architecture=arch,
        hidden_size=hidden,
        num_layers=_need(cfg, "num_hidden_layers", where),
        vocab_size=_need(cfg, "vocab_size", where),
        num_attention_heads=heads,
        num_kv_heads=_opt(cfg, "num_key_value_heads", where) or heads,
        head_dim=_opt(cfg, "head_dim", where) or hidden // heads,
        intermediate_size=_need(cfg, "intermediate_size", where),
        attention_bias=_flag(cfg, "attention_bias", where, arch.startswith("Qwen2")),
        tie_word_embeddings=_flag(cfg, "tie_word_embeddings", where, arch in _TIED_BY_DEFAULT),
        source=f"imported from {where}",
    )
    if arch == "MixtralForCausalLM":
        fields["moe"] = MoESpec(
            num_experts=_need(cfg, "num_local_experts", where),
            top_k=_need(cfg, "num_experts_per_tok", where),
            expert_intermediate_size=fields["intermediate_size"],
        )
    elif arch in ("Qwen3MoeForCausalLM", "Qwen2MoeForCausalLM") or arch in _ARCH_HYBRID_MOE:
        shared = _opt(cfg, "shared_expert_intermediate_size", where)
        fields["moe"] = MoESpec(
            num_experts=_need(cfg, "num_experts", where),
            top_k=_need(cfg, "num_experts_per_tok", where),
            expert_intermediate_size=_need(cfg, "moe_intermediate_size", where),
            num_shared_experts=1 if shared else 0,
            shared_intermediate_size=shared,
            layer_frequency=_opt(cfg, "decoder_sparse_step", where) or 1,
        )
    elif arch == "GptOssForCausalLM":  # every layer routes; each expert is as wide as the config's intermediate_size
        fields["moe"] = MoESpec(
            num_experts=_need(cfg, "num_local_experts", where),
            top_k=_need(cfg, "num_experts_per_tok", where),
            expert_intermediate_size=fields["intermediate_size"],
        )
    elif arch in _ARCH_MLA:
        nope = _need(cfg, "qk_nope_head_dim", where)
        rope = _need(cfg, "qk_rope_head_dim", where)
        fields["mla"] = MLASpec(
            q_lora_rank=_opt(cfg, "q_lora_rank", where) or None,
            kv_lora_rank=_need(cfg, "kv_lora_rank", where),
            qk_nope_head_dim=nope,
            qk_rope_head_dim=rope,
            v_head_dim=_need(cfg, "v_head_dim", where),
        )
        fields["head_dim"] = nope + rope
        fields["num_kv_heads"] = heads  # MLA decompresses to one K/V head per query head
        moe_inter = _need(cfg, "moe_intermediate_size", where)
        fields["moe"] = MoESpec(
            num_experts=_need(cfg, "n_routed_experts", where),
            top_k=_need(cfg, "num_experts_per_tok", where),
            expert_intermediate_size=moe_inter,
            num_shared_experts=_opt(cfg, "n_shared_experts", where),
            shared_intermediate_size=moe_inter,
            first_dense_layers=_opt(cfg, "first_k_dense_replace", where),
            layer_frequency=_opt(cfg, "moe_layer_freq", where) or 1,
        )
    if arch in _ARCH_HYBRID_DENSE | _ARCH_HYBRID_MOE:
        fields["linear_attention"] = _linear_attention(cfg, fields["num_layers"], where)
        fields["attention_output_gate"] = _flag(cfg, "attn_output_gate", where, True)
    else:
        fields.update(_sliding_window(cfg, arch, fields["num_layers"], where))
    fields["checkpoint_precision"] = _checkpoint_precision(cfg)
    return ModelSpec(**fields)


def _sliding_window(cfg: dict[str, Any], arch: str, layers: int, where: str) -> dict[str, Any]:
    """Which layers read only a window of the context. Mistral's family slides in every layer when its config gives a
    window; a config listing ``layer_types`` names each layer, and the pattern the bound reads is every n-th layer
    attending fully (gpt-oss alternates, so n is 2). Qwen's configs carry a window their released models leave off."""
    if cfg.get("layer_types") is not None:
        every = _full_attention_every(cfg, "sliding_attention", layers, where)
        if every is None:
            return {}
        return {"sliding_window": _need(cfg, "sliding_window", where), "full_attention_every": every if every <= layers else None}
    if arch in ("MistralForCausalLM", "MixtralForCausalLM") and cfg.get("sliding_window") is not None:
        return {"sliding_window": _count(cfg, "sliding_window", where, minimum=1)}
    return {}


def _language_model(cfg: dict[str, Any], where: str) -> dict[str, Any]:
    """A multimodal release's language model: its numbers sit in text_config, the checkpoint's formats beside it."""
    text = cfg.get("text_config")
    if text is None or "hidden_size" in cfg:
        return cfg
    if not isinstance(text, dict):
        raise InputError(f"{where}: text_config: expected an object")
    return {**text, **{key: cfg[key] for key in ("architectures", "quantization_config", "_name_or_path") if key in cfg}}


def _full_attention_every(cfg: dict[str, Any], kind: str, layers: int, where: str) -> int | None:
    """From a config's layer_types, each ``kind`` or full_attention: None where no layer is of ``kind``, else n, every
    n-th layer attending fully (more than the layer count where none does); other patterns are refused."""
    types = cfg["layer_types"]
    if not isinstance(types, list) or len(types) != layers or not set(types) <= {kind, "full_attention"}:
        raise InputError(f"{where}: layer_types: expected {layers} entries, each {kind} or full_attention")
    if kind not in types:
        return None
    full = [i for i, name in enumerate(types) if name == "full_attention"]
    every = full[0] + 1 if full else layers + 1
    if full != list(range(every - 1, layers, every)):
        raise InputError(f"{where}: layer_types: only a full-attention layer every n-th layer is supported")
    return every


def _linear_attention(cfg: dict[str, Any], layers: int, where: str) -> LinearAttentionSpec:
    """The Gated DeltaNet shape and which layers are softmax attention: full_attention_interval, or a layer_types
    list whose full-attention layers fall every n-th layer."""
    if cfg.get("layer_types") is not None:
        every = _full_attention_every(cfg, "linear_attention", layers, where) or 1
    else:
        every = _count(cfg, "full_attention_interval", where, minimum=1)
    return LinearAttentionSpec(
        num_key_heads=_need(cfg, "linear_num_key_heads", where),
        num_value_heads=_need(cfg, "linear_num_value_heads", where),
        key_head_dim=_need(cfg, "linear_key_head_dim", where),
        value_head_dim=_need(cfg, "linear_value_head_dim", where),
        conv_kernel=_need(cfg, "linear_conv_kernel_dim", where),
        full_attention_every=every,
    )


def _checkpoint_precision(cfg: dict[str, Any]) -> Precision | None:
    """A method the table does not hold (AWQ, GPTQ and their group sizes) leaves the formats to the case."""
    quant = cfg.get("quantization_config")
    method = quant.get("quant_method") if isinstance(quant, dict) else None
    return CHECKPOINT_FORMATS.get(method) if isinstance(method, str) else None


def _first_error(err: ValidationError) -> str:
    first = err.errors()[0]
    loc = ".".join(str(part) for part in first["loc"]) or "value"
    return f"{loc}: {first['msg'].removeprefix('Value error, ')}"


def load_hf_config(path: str | Path) -> ModelSpec:
    from diagnoser.jsondoc import read_json

    return spec_from_hf_config(read_json(path, "a Hugging Face config.json"), where=str(path))


@lru_cache(maxsize=1)
def model_presets() -> dict[str, ModelSpec]:
    raw = json.loads(resources.files("diagnoser.data").joinpath("models.json").read_text())
    out = {}
    for key, entry in raw["presets"].items():
        out[key] = spec_from_hf_config(entry["config"], name=key, where=f"preset {key}").model_copy(
            update={"source": entry["source"]}
        )
    for alias, key in raw["aliases"].items():
        out[alias] = out[key].model_copy(update={"name": alias, "source": f"{out[key].source}: the same numbers as {key}"})
    return out


# Suffixes of a model's name that leave its architecture as the base repository publishes it: a chat or instruct
# tune, the repository's transformers copy (-hf), the base itself.
SAME_ARCHITECTURE = re.compile(r"(?:-(?:instruct|chat|hf|base))+$")


def preset_key(name: str) -> str:
    """The preset a model's name points at, written as its Hugging Face repository (Qwen/Qwen3-8B) or a tune of it
    (meta-llama/Llama-3.1-8B-Instruct): the repository's own name, lower case, without an owner or a tune suffix."""
    return SAME_ARCHITECTURE.sub("", name.strip().lower().rsplit("/", 1)[-1])


def resolve_model(ref: str | dict[str, Any] | ModelSpec) -> ModelSpec:
    """A preset name, a path to a config.json, an inline HF config, or a spec."""
    if isinstance(ref, ModelSpec):
        return ref
    if isinstance(ref, dict):
        if "architectures" in ref or "model_type" in ref:
            return spec_from_hf_config(ref, where="inline model config")
        try:
            return ModelSpec.model_validate(ref)
        except ValidationError as err:
            raise InputError(f"model: {_first_error(err)}") from None
    presets = model_presets()
    if ref.lower() in presets:
        return presets[ref.lower()]
    path = Path(ref)
    if path.is_dir():
        path = path / "config.json"
    if path.suffix == ".json" or path.exists():
        return load_hf_config(path)
    if (key := preset_key(ref)) in presets:
        return presets[key]
    raise InputError(f"unknown model {ref!r}: not a preset ({', '.join(sorted(presets))}) nor a config.json path")
