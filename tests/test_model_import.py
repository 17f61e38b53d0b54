"""Hugging Face config.json import for the supported architectures."""

import json

import pytest

from diagnoser.errors import InputError
from diagnoser.models.model_spec import load_hf_config, model_presets, resolve_model, spec_from_hf_config


def test_presets_cover_dense_and_moe_families():
    presets = model_presets()
    for name in ["llama-3.1-8b", "qwen2.5-7b", "qwen3-8b", "mixtral-8x7b", "qwen3-30b-a3b", "deepseek-v3"]:
        assert presets[name].source
    assert presets["qwen2.5-7b"].attention_bias  # Qwen2 has q/k/v bias


def test_a_preset_is_found_by_its_repository_id_and_its_tunes(tmp_path):
    presets = model_presets()
    assert resolve_model("Qwen/Qwen3-8B") == presets["qwen3-8b"]
    assert resolve_model("meta-llama/Llama-3.1-8B-Instruct") == presets["llama-3.1-8b"]
    assert resolve_model("Qwen/Qwen2.5-7B-Instruct") == presets["qwen2.5-7b"]
    with pytest.raises(InputError, match="unknown model 'Qwen/Qwen3-14B'"):
        resolve_model("Qwen/Qwen3-14B")  # another size is another model
    local = tmp_path / "qwen3-8b"
    local.mkdir()
    (local / "config.json").write_text(json.dumps({
        "architectures": ["LlamaForCausalLM"], "hidden_size": 1024, "num_hidden_layers": 4, "num_attention_heads": 8,
        "num_key_value_heads": 8, "intermediate_size": 2048, "vocab_size": 1000,
    }))
    assert resolve_model(str(local)).hidden_size == 1024  # a folder on disk is read, whatever its name


def test_deepseek_v3_mla_and_moe_fields():
    ds = model_presets()["deepseek-v3"]
    assert ds.mla.kv_lora_rank == 512 and ds.mla.qk_rope_head_dim == 64
    assert ds.moe.first_dense_layers == 3 and ds.moe_layers == 58 and ds.dense_mlp_layers == 3
    assert ds.moe.num_shared_experts == 1 and ds.moe.expert_intermediate_size == 2048


def test_qwen3_moe_from_file(tmp_path):
    cfg = {
        "architectures": ["Qwen3MoeForCausalLM"], "hidden_size": 2048, "num_hidden_layers": 48,
        "num_attention_heads": 32, "num_key_value_heads": 4, "head_dim": 128, "intermediate_size": 6144,
        "moe_intermediate_size": 768, "num_experts": 128, "num_experts_per_tok": 8, "vocab_size": 151936,
    }
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    spec = load_hf_config(path)
    assert spec.moe.num_experts == 128 and spec.moe.top_k == 8 and spec.moe_layers == 48
    assert spec.num_kv_heads == 4 and spec.head_dim == 128


def test_unsupported_architecture_and_bad_values():
    with pytest.raises(InputError, match="not supported"):
        spec_from_hf_config({"architectures": ["GPT2LMHeadModel"]})
    with pytest.raises(InputError, match="top_k"):
        spec_from_hf_config({
            "architectures": ["MixtralForCausalLM"], "hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
            "intermediate_size": 128, "vocab_size": 100, "num_local_experts": 2, "num_experts_per_tok": 4,
        })


def test_an_inline_excerpt_named_by_model_type_alone():
    """A config pasted without its "architectures" line is still a config: model_type names the family."""
    excerpt = {"model_type": "qwen2", "hidden_size": 3584, "num_hidden_layers": 28, "num_attention_heads": 28,
               "num_key_value_heads": 4, "intermediate_size": 18944, "vocab_size": 152064, "tie_word_embeddings": False}
    spec = resolve_model(excerpt)
    assert spec.architecture == "Qwen2ForCausalLM" and spec.attention_bias  # Qwen2's q/k/v biases, as from the file
    assert spec.num_kv_heads == 4 and spec.head_dim == 128
    with pytest.raises(InputError, match="architecture '\\(none\\)' not supported"):
        resolve_model({**excerpt, "model_type": "gpt2"})


@pytest.mark.parametrize(
    ("config", "billions"),
    [
        # google/gemma-2b's config.json leaves tie_word_embeddings out (transformers ties Gemma's by default): 2.51 B
        ({"architectures": ["GemmaForCausalLM"], "model_type": "gemma", "hidden_size": 2048, "intermediate_size": 16384,
          "num_hidden_layers": 18, "num_attention_heads": 8, "num_key_value_heads": 1, "head_dim": 256,
          "vocab_size": 256000}, 2.51),
        # microsoft/Phi-3-mini-4k-instruct, gate and up fused in one matrix of twice the width: 3.82 B
        ({"model_type": "phi3", "hidden_size": 3072, "intermediate_size": 8192, "num_hidden_layers": 32,
          "num_attention_heads": 32, "num_key_value_heads": 32, "vocab_size": 32064, "tie_word_embeddings": False}, 3.82),
    ],
)
def test_gated_dense_families_count_their_published_parameters(config, billions):
    from diagnoser.bound.estimate import active_parameters

    assert active_parameters(resolve_model(config)) / 1e9 == pytest.approx(billions, abs=0.01)


@pytest.mark.parametrize(
    ("name", "preset", "billions"),
    [
        # published parameter counts, embedding and output layer included
        ("meta-llama/Llama-2-7b-chat-hf", "llama-2-7b", 6.74),
        ("meta-llama/Llama-2-70b-hf", "llama-2-70b", 68.98),
        ("meta-llama/Llama-3.2-1B-Instruct", "llama-3.2-1b", 1.24),  # tied output layer
        ("meta-llama/Llama-3.2-3B", "llama-3.2-3b", 3.21),
        ("mistralai/Mistral-7B-v0.1", "mistral-7b-v0.1", 7.24),
        ("Qwen/Qwen3-0.6B", "qwen3-0.6b", 0.60),
        ("Qwen/Qwen3-4B", "qwen3-4b", 4.02),
        ("Qwen/Qwen3-32B", "qwen3-32b", 32.76),
        ("Qwen/Qwen2.5-72B-Instruct", "qwen2.5-72b", 72.71),
    ],
)
def test_presets_count_the_published_parameters(name, preset, billions):
    from diagnoser.bound.estimate import active_parameters

    spec = resolve_model(name)
    assert spec == model_presets()[preset]
    assert active_parameters(spec) / 1e9 == pytest.approx(billions, abs=0.01)


@pytest.mark.parametrize(("name", "billions"), [("openai/gpt-oss-120b", 5.13), ("openai/gpt-oss-20b", 3.61)])
def test_gpt_oss_presets_count_the_model_cards_active_parameters(name, billions):
    """OpenAI's model card counts the output layer but not the embedding table among a token's active parameters
    (its router and biases, 0.01 B, the preset leaves out)."""
    from diagnoser.bound.estimate import active_parameters

    spec = resolve_model(name)
    assert active_parameters(spec) / 1e9 - spec.vocab_size * spec.hidden_size / 1e9 == pytest.approx(billions, abs=0.02)
    assert spec.moe.num_experts in (128, 32) and spec.moe.top_k == 4 and spec.moe_layers == spec.num_layers
    # half the layers slide over the last 128 tokens: the odd ones attend to the whole context
    assert spec.sliding_window == 128 and spec.full_attention_every == 2
    assert spec.windowed_layers(range(spec.num_layers)) == spec.num_layers // 2
    assert spec.windowed_layers(range(1, 4)) == 1  # layers 1 and 3 full, 2 slides
    assert spec.checkpoint_precision.experts.value == "mxfp4" and spec.checkpoint_precision.weights.value == "bf16"


def test_layer_types_name_the_sliding_layers_and_a_pattern_the_bound_cannot_read_is_refused():
    base = {"model_type": "gpt_oss", "hidden_size": 64, "num_hidden_layers": 6, "num_attention_heads": 4,
            "num_key_value_heads": 2, "head_dim": 16, "intermediate_size": 64, "num_local_experts": 4,
            "num_experts_per_tok": 2, "vocab_size": 100, "sliding_window": 32}
    third = resolve_model({**base, "layer_types": ["sliding_attention", "sliding_attention", "full_attention"] * 2})
    assert third.full_attention_every == 3 and third.windowed_layers(range(6)) == 4
    every = resolve_model({**base, "layer_types": ["sliding_attention"] * 6})
    assert every.full_attention_every is None and every.windowed_layers(range(2, 5)) == 3
    assert resolve_model({**base, "layer_types": ["full_attention"] * 6}).sliding_window is None
    with pytest.raises(InputError, match="only a full-attention layer every n-th layer"):
        resolve_model({**base, "layer_types": ["full_attention"] + ["sliding_attention"] * 5})
    with pytest.raises(InputError, match="expected 6 entries"):
        resolve_model({**base, "layer_types": ["sliding_attention"] * 5})
    # Mistral's family slides in every layer when its config gives a window; a null window is none
    mistral = {"architectures": ["MistralForCausalLM"], "hidden_size": 64, "num_hidden_layers": 4, "num_attention_heads": 4,
               "num_key_value_heads": 2, "intermediate_size": 128, "vocab_size": 100}
    assert resolve_model({**mistral, "sliding_window": 4096}).windowed_layers(range(4)) == 4
    assert resolve_model({**mistral, "sliding_window": None}).sliding_window is None


def test_a_checkpoints_quantization_config_names_its_formats():
    presets = model_presets()
    ds = presets["deepseek-v3"].checkpoint_precision
    assert (ds.weights.value, ds.experts.value, ds.head.value) == ("fp8", "fp8", "bf16")
    assert presets["llama-3.1-8b"].checkpoint_precision is None
    awq = {"architectures": ["LlamaForCausalLM"], "hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
           "intermediate_size": 128, "vocab_size": 100, "quantization_config": {"quant_method": "awq", "bits": 4}}
    assert resolve_model(awq).checkpoint_precision is None  # a method the table does not hold leaves it to the case


def test_a_release_with_a_presets_numbers_is_that_preset_under_its_own_name():
    presets = model_presets()
    for alias, preset in [("meta-llama/Llama-3.3-70B-Instruct", "llama-3.1-70b"), ("meta-llama/Meta-Llama-3-8B", "llama-3.1-8b"),
                          ("deepseek-ai/DeepSeek-R1", "deepseek-v3"), ("mistralai/Mistral-7B-Instruct-v0.2", "mistral-7b-v0.1")]:
        spec = resolve_model(alias)
        assert spec.model_copy(update={"name": presets[preset].name, "source": presets[preset].source}) == presets[preset]
        assert spec.name != preset and preset in spec.source
    with pytest.raises(InputError, match="unknown model"):
        resolve_model("meta-llama/Llama-3.2-11B-Vision")  # a sibling with other numbers is not an alias
