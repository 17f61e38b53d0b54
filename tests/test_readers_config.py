"""Readers of a server's configuration, on real vLLM 0.32 (CPU build) recordings.

tests/data/vllm/healthy/ is a server with no extra flags; tests/data/vllm/variants/ was started
with --max-num-seqs 2, n-gram speculation of 8 tokens and penalties in --override-generation-config
(tests/data/vllm/README.md). The SGLang samples below are hand-made from SGLang's documentation
(docs/advanced_features/server_arguments.md and the /get_server_info handler), not recorded.
"""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest

from diagnoser.errors import InputError
from diagnoser.models.case import Case
from diagnoser.http import Client
from diagnoser.probes.server_info import facts_from_document, read_server_info, server_facts
from diagnoser.readers.facts import apply_facts
from diagnoser.readers.metrics_info import from_metrics_text
from diagnoser.readers.server_args import from_command_line, from_server_log
from diagnoser.readers.vllm_config import compiled, from_vllm_config, graph_mode_on, graph_state, repr_value

DATA = Path(__file__).parent / "data" / "vllm"
HEALTHY, VARIANTS = DATA / "healthy", DATA / "variants"
S = "observations.server."
WHERE = "/server_info vllm_config"


def recorded(folder: Path, name: str = "server_info.json") -> dict:
    return json.loads((folder / name).read_text())


def table(facts) -> dict:
    return {path: (f.value, f.source) for path, f in facts.facts.items()}


def values(facts) -> dict:
    return {path: f.value for path, f in facts.facts.items()}


# --------------------------------------------------------------------------------------------
# /server_info?config_format=json


def test_every_fact_of_the_healthy_server_info_with_its_key():
    facts = from_vllm_config(recorded(HEALTHY)["vllm_config"], WHERE)
    at = lambda key: f"{WHERE}.{key}"  # noqa: E731
    assert table(facts) == {
        S + "max_num_seqs": (128, at("scheduler_config.max_num_seqs")),
        S + "max_num_batched_tokens": (2048, at("scheduler_config.max_num_batched_tokens")),
        S + "long_prefill_token_threshold": (0, at("scheduler_config.long_prefill_token_threshold")),
        S + "chunked_prefill": (True, at("scheduler_config.enable_chunked_prefill")),
        S + "prefill_priority": (False, at("scheduler_config.enable_chunked_prefill")),
        S + "async_scheduling": (False, at("scheduler_config.async_scheduling")),
        S + "max_context": (4096, at("model_config.max_model_len")),
        S + "tokenizer_fast": (True, at("model_config.tokenizer_mode")),
        S + "torch_compile": (True, at("compilation_config.mode")),
        S + "cuda_graphs": (False, at("compilation_config.cudagraph_mode")),
        S + "kv_cache_tokens": (524288, at("cache_config.kv_cache_size_tokens")),
        S + "kv_cache_dtype": ("auto", at("cache_config.cache_dtype")),
        S + "prefix_caching": (True, at("cache_config.enable_prefix_caching")),
        S + "custom_allreduce": (False, at("parallel_config.disable_custom_all_reduce")),
        S + "structured_output_backend": ("auto", at("structured_outputs_config.backend")),
        S + "engine": ("vllm", WHERE),
        "workload.layout.tp": (1, at("parallel_config.tensor_parallel_size")),
        "workload.layout.pp": (1, at("parallel_config.pipeline_parallel_size")),
        "workload.layout.dp": (1, at("parallel_config.data_parallel_size")),
        "workload.layout.ep": (1, at("parallel_config.enable_expert_parallel")),
        "observations.platform.device_api": ("cpu", at("device_config.device")),
    }
    assert facts.conflicts == [] and facts.missing == []


def test_the_cpu_build_replays_no_graphs_though_it_is_not_eager():
    cfg = recorded(HEALTHY)["vllm_config"]
    assert cfg["model_config"]["enforce_eager"] is False  # what the recording says, and why it is not enough
    facts = from_vllm_config(cfg, WHERE)
    assert facts.value(S + "cuda_graphs") is False
    assert S + "cuda_graph_max_batch" not in facts
    assert facts.value(S + "torch_compile") is True  # mode 2 (DYNAMO_TRACE_ONCE): compiled, without graphs


def test_variants_server_info_reads_speculation_penalties_and_the_sequence_cap():
    facts = from_vllm_config(recorded(VARIANTS)["vllm_config"], WHERE)
    got = table(facts)
    assert got[S + "max_num_seqs"] == (2, f"{WHERE}.scheduler_config.max_num_seqs")
    assert got[S + "speculative"] == ("ngram", f"{WHERE}.speculative_config.method")
    assert got["observations.speculation.draft_length"] == (8, f"{WHERE}.speculative_config.num_speculative_tokens")
    assert got[S + "repetition_penalty"] == (True, f"{WHERE}.model_config.override_generation_config.repetition_penalty")
    assert got[S + "penalties"] == (True, f"{WHERE}.model_config.override_generation_config.frequency_penalty+presence_penalty")
    # the healthy server overrides nothing: its penalties are unknown (the model's generation_config may set them)
    healthy = from_vllm_config(recorded(HEALTHY)["vllm_config"], WHERE)
    assert S + "penalties" not in healthy and S + "repetition_penalty" not in healthy and S + "speculative" not in healthy


def test_neutral_penalties_are_a_stated_off():
    cfg = {"model_config": {"override_generation_config": {"repetition_penalty": 1.0, "frequency_penalty": 0.0, "presence_penalty": 0}}}
    facts = from_vllm_config(cfg, WHERE)
    assert (facts.value(S + "penalties"), facts.value(S + "repetition_penalty")) == (False, False)


def test_wrong_types_leave_those_facts_unknown_and_the_rest_read():
    cfg = {
        "scheduler_config": {"max_num_seqs": "128", "max_num_batched_tokens": True, "enable_chunked_prefill": 1,
                             "long_prefill_token_threshold": -1, "async_scheduling": "no"},
        "model_config": {"max_model_len": 4096.0, "tokenizer_mode": 3, "enforce_eager": "false", "quantization": "",
                         "override_generation_config": {"repetition_penalty": "1.2", "frequency_penalty": None}},
        "compilation_config": {"mode": "fast", "cudagraph_mode": None, "cudagraph_capture_sizes": [0, True]},
        "cache_config": {"kv_cache_size_tokens": 0, "cache_dtype": None, "enable_prefix_caching": "True"},
        "parallel_config": {"tensor_parallel_size": 0, "pipeline_parallel_size": 2.0, "data_parallel_size": None,
                            "enable_expert_parallel": True},
        "speculative_config": "ngram",
        "structured_outputs_config": ["xgrammar"],
        "device_config": {"device": ["cuda"]},
    }
    assert table(from_vllm_config(cfg, WHERE)) == {S + "engine": ("vllm", WHERE)}
    cfg["scheduler_config"]["max_num_seqs"] = 16  # one good key among the bad ones is read alone
    assert values(from_vllm_config(cfg, WHERE)) == {S + "engine": "vllm", S + "max_num_seqs": 16}
    assert values(from_vllm_config({}, WHERE)) == {}


def test_graphs_need_a_capturing_mode_sizes_and_no_eager():
    compilation = {"mode": 3, "cudagraph_mode": [2, 1], "cudagraph_capture_sizes": [1, 2, 4, 8, 512]}
    facts = from_vllm_config({"model_config": {"enforce_eager": False}, "compilation_config": compilation}, WHERE)
    assert (facts.value(S + "cuda_graphs"), facts.value(S + "cuda_graph_max_batch"), facts.value(S + "torch_compile")) == (True, 512, True)
    assert facts.facts[S + "cuda_graphs"].source == f"{WHERE}.compilation_config.cudagraph_mode + {WHERE}.compilation_config.cudagraph_capture_sizes"
    eager = from_vllm_config({"model_config": {"enforce_eager": True}, "compilation_config": {**compilation, "mode": 0}}, WHERE)
    assert (eager.value(S + "cuda_graphs"), eager.value(S + "torch_compile")) == (False, False)
    assert eager.facts[S + "cuda_graphs"].source == f"{WHERE}.model_config.enforce_eager"
    nothing_to_capture = {**compilation, "cudagraph_capture_sizes": []}
    no_sizes = from_vllm_config({"model_config": {"enforce_eager": False}, "compilation_config": nothing_to_capture}, WHERE)
    assert S + "cuda_graphs" not in no_sizes  # a capturing mode with nothing to capture: unknown, not on
    unstated_eager = from_vllm_config({"compilation_config": compilation}, WHERE)
    assert S + "cuda_graphs" not in unstated_eager


@pytest.mark.parametrize(
    ("mode", "on"),
    [(0, False), (1, True), ("NONE", False), ("CUDAGraphMode.NONE", False), ("FULL_AND_PIECEWISE", True), ("full_decode_only", True),
     ([2, 0], True), ((0, 0), False), ("sometimes", None), (True, None), (None, None), (-1, None)],
)
def test_cudagraph_mode_spellings(mode, on):
    assert graph_mode_on(mode) is on


def test_graph_decision_and_compile_decision():
    assert graph_state(None, True, [1, 2]) == (None, None, ())
    assert graph_state(False, None, [1, 2]) == (None, None, ())
    assert graph_state(True, True, [1, 2])[:2] == (False, None)
    assert graph_state(False, True, [4, 1, 2])[:2] == (True, 4)
    assert (compiled(True, True), compiled(True, None), compiled(None, False), compiled(False, None)) == (False, True, None, False)


def test_expert_parallel_spans_tp_times_dp():
    cfg = {"parallel_config": {"tensor_parallel_size": 4, "data_parallel_size": 2, "pipeline_parallel_size": 1, "enable_expert_parallel": True}}
    facts = from_vllm_config(cfg, WHERE)
    assert facts.value("workload.layout.ep") == 8
    assert "enable_expert_parallel" in facts.facts["workload.layout.ep"].source


def test_facts_apply_to_a_case_with_their_sources():
    facts = from_vllm_config(recorded(VARIANTS)["vllm_config"], WHERE)
    case = apply_facts(Case(), facts)
    assert case.observations.server.max_num_seqs == 2 and case.observations.speculation.draft_length == 8
    assert case.observations.platform.device_api == "cpu" and case.workload.layout.tp == 1
    assert case.sources["observations.server.cuda_graphs"] == f"{WHERE}.compilation_config.cudagraph_mode"


# --------------------------------------------------------------------------------------------
# plain /server_info: vllm_config as a repr


def test_plain_server_info_reads_what_its_text_holds_and_asks_for_json():
    facts = facts_from_document(recorded(HEALTHY, "server_info_plain.json"), "/server_info")
    json_facts = values(from_vllm_config(recorded(HEALTHY)["vllm_config"], WHERE))
    got = values(facts)
    assert got.items() <= json_facts.items()  # every fact the text gives agrees with the JSON
    assert {S + "cuda_graphs", S + "torch_compile", S + "max_context", S + "chunked_prefill", "workload.layout.tp",
            "observations.platform.device_api"} <= got.keys()
    assert S + "max_num_seqs" not in got  # the text form leaves the scheduler's limits out
    assert facts.facts[S + "max_context"].source == "/server_info vllm_config (text) max_seq_len"
    assert any("config_format=json" in m for m in facts.missing)


def test_vllm_config_as_a_json_string_is_read_as_json():
    doc = {"vllm_config": json.dumps(recorded(HEALTHY)["vllm_config"])}
    assert values(facts_from_document(doc, "/server_info")) == values(from_vllm_config(recorded(HEALTHY)["vllm_config"], WHERE))


# --------------------------------------------------------------------------------------------
# /metrics info gauges


def test_cache_config_info_gauge():
    facts = from_metrics_text((HEALTHY / "metrics_after.txt").read_text())
    label = lambda key: f'/metrics vllm:cache_config_info{{{key},engine="0"}}'  # noqa: E731
    assert table(facts) == {
        S + "kv_cache_tokens": (524288, label("kv_cache_size_tokens")),
        S + "kv_cache_dtype": ("auto", label("cache_dtype")),
        S + "prefix_caching": (True, label("enable_prefix_caching")),
        S + "engine": ("vllm", "/metrics vllm:* metric names"),
    }
    json_facts = values(from_vllm_config(recorded(HEALTHY)["vllm_config"], WHERE))
    assert values(facts).items() <= json_facts.items()


def test_cache_size_from_blocks_when_the_size_label_is_absent():
    text = '# TYPE vllm:cache_config_info gauge\nvllm:cache_config_info{block_size="16",num_gpu_blocks="1000",cache_dtype="fp8"} 1.0\n'
    facts = from_metrics_text(text)
    assert (facts.value(S + "kv_cache_tokens"), facts.value(S + "kv_cache_dtype")) == (16000, "fp8")
    assert "num_gpu_blocks" in facts.facts[S + "kv_cache_tokens"].source and "block_size" in facts.facts[S + "kv_cache_tokens"].source


def test_metrics_without_info_gauges_say_what_is_missing():
    facts = from_metrics_text("# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running 0.0\n")
    assert values(facts) == {S + "engine": "vllm"} and facts.missing


# --------------------------------------------------------------------------------------------
# the server log


def test_healthy_log_engine_line():
    facts = from_server_log(HEALTHY / "server.log")
    got = table(facts)
    assert got[S + "cuda_graphs"] == (False, "server.log:21 compilation_config.cudagraph_mode")
    assert got[S + "torch_compile"] == (True, "server.log:21 compilation_config.mode")
    assert got[S + "max_context"] == (4096, "server.log:21 max_seq_len")
    assert got["observations.platform.device_api"] == ("cpu", "server.log:21 device_config")
    assert got[S + "structured_output_backend"] == ("auto", "server.log:21 structured_outputs_config.backend")
    assert got[S + "engine_version"] == ("0.32.0", "server.log:21")  # "Initializing a V1 LLM engine (v0.32.0)"
    assert facts.conflicts == []
    json_facts = values(from_vllm_config(recorded(HEALTHY)["vllm_config"], WHERE))
    assert {k: v for k, v in values(facts).items() if k != S + "engine_version"}.items() <= json_facts.items()


def test_variants_log_adds_what_was_asked():
    facts = from_server_log(VARIANTS / "server.log")
    got = table(facts)
    assert got[S + "max_num_seqs"] == (2, "server.log:12 max_num_seqs")  # only the non-default args say it
    assert got[S + "repetition_penalty"] == (True, "server.log:12 override_generation_config.repetition_penalty")
    assert got[S + "speculative"] == ("ngram", "server.log:23 speculative_config.method")  # the engine line is read first
    assert got["observations.speculation.draft_length"] == (8, "server.log:23 speculative_config.num_spec_tokens")
    assert facts.conflicts == []
    asked = {k: v for k, v in values(facts).items() if k != S + "engine_version"}  # the config document has no version
    assert asked.items() <= values(from_vllm_config(recorded(VARIANTS)["vllm_config"], WHERE)).items()


def test_non_default_args_with_objects_inside():
    line = ("{'port': 8011, 'max_num_seqs': 4, 'profiler_config': ProfilerConfig(profiler='torch', dir='/a(b)', n=None), "
            "'compilation_config': {'mode': <CompilationMode.NONE: 0>, 'cudagraph_mode': <CUDAGraphMode.FULL_AND_PIECEWISE: (2, 1)>}}")
    args = repr_value(line)
    assert args["max_num_seqs"] == 4 and args["profiler_config"] == {"profiler": "torch", "dir": "/a(b)", "n": None}
    assert args["compilation_config"] == {"mode": 0, "cudagraph_mode": (2, 1)}


def test_expert_parallel_from_the_asked_args_and_the_engine_line(tmp_path):
    log = tmp_path / "server.log"
    log.write_text(
        "INFO non-default args: {'model': 'm', 'enable_expert_parallel': True, 'tensor_parallel_size': 4}\n"
        "INFO Initializing a V1 LLM engine (v0.32.0) with config: model='m', tensor_parallel_size=4, data_parallel_size=2, "
        "enforce_eager=True, compilation_config={'mode': <CompilationMode.NONE: 0>, 'cudagraph_mode': <CUDAGraphMode.NONE: 0>}\n"
    )
    facts = from_server_log(log)
    assert facts.value("workload.layout.ep") == 8
    assert facts.facts["workload.layout.ep"].source == (
        "server.log:1 enable_expert_parallel + server.log:2 tensor_parallel_size + server.log:2 data_parallel_size"
    )
    assert (facts.value(S + "cuda_graphs"), facts.value(S + "torch_compile")) == (False, False)
    assert facts.facts[S + "cuda_graphs"].source == "server.log:2 enforce_eager"


# --------------------------------------------------------------------------------------------
# command lines


def test_enforce_eager_means_graphs_off_and_compile_off():
    facts = from_command_line("vllm serve Qwen/Qwen3-8B --enforce-eager -O3 --max-num-seqs 64")
    got = table(facts)
    assert got[S + "cuda_graphs"] == (False, "--server-args --enforce-eager")
    assert got[S + "torch_compile"] == (False, "--server-args --enforce-eager")
    assert got[S + "max_num_seqs"] == (64, "--server-args --max-num-seqs")
    assert S + "cuda_graph_max_batch" not in got


def test_the_variants_command_line_agrees_with_the_server_it_started():
    flags = ("--max-num-seqs 2 --speculative-config '{\"method\":\"ngram\",\"num_speculative_tokens\":8,\"prompt_lookup_max\":4,"
             "\"prompt_lookup_min\":2}' --override-generation-config '{\"repetition_penalty\":1.2,\"frequency_penalty\":0.5,"
             "\"presence_penalty\":0.5}'")
    line = ("HF_HUB_OFFLINE=1 VLLM_SERVER_DEV_MODE=1 python -m vllm.entrypoints.openai.api_server \\\n"
            f"  --model /tmp/models/dense --served-model-name tiny --max-model-len 4096 --dtype bfloat16 {flags}")
    facts = from_command_line(line)
    assert values(facts) == {
        S + "engine": "vllm", S + "max_num_seqs": 2, S + "max_context": 4096, S + "speculative": "ngram",
        "observations.speculation.draft_length": 8, S + "penalties": True, S + "repetition_penalty": True,
    }
    assert facts.facts["observations.speculation.draft_length"].source == "--server-args --speculative-config num_speculative_tokens"
    assert facts.facts[S + "engine"].source == "--server-args python -m vllm.entrypoints.openai.api_server"
    served = values(from_vllm_config(recorded(VARIANTS)["vllm_config"], WHERE))
    assert values(facts).items() <= served.items()


def test_flag_spellings():
    facts = from_command_line(
        "vllm serve m --max-num-batched-tokens=8192 -tp 4 -pp=2 -dp 2 --enable-expert-parallel --no-enable-prefix-caching "
        "--enable-chunked-prefill --kv-cache-dtype fp8 --tokenizer-mode slow --async-scheduling --max-model-len 32K "
        "--structured-outputs-config '{\"backend\": \"xgrammar\"}' --long-prefill-token-threshold 512 "
        "-O '{\"mode\": 3, \"cudagraph_mode\": \"FULL_AND_PIECEWISE\"}'"
    )
    assert values(facts) == {
        S + "engine": "vllm", S + "max_num_batched_tokens": 8192, "workload.layout.tp": 4, "workload.layout.pp": 2,
        "workload.layout.dp": 2, "workload.layout.ep": 8, S + "prefix_caching": False, S + "chunked_prefill": True,
        S + "prefill_priority": False, S + "kv_cache_dtype": "fp8", S + "tokenizer_fast": False, S + "async_scheduling": True,
        S + "max_context": 32768, S + "structured_output_backend": "xgrammar", S + "long_prefill_token_threshold": 512,
        S + "torch_compile": True,  # graphs stay unknown: enforce_eager was not stated and no sizes were
    }
    assert facts.facts["workload.layout.pp"].source == "--server-args -pp"
    assert facts.facts[S + "prefix_caching"].source == "--server-args --no-enable-prefix-caching"
    assert facts.facts[S + "torch_compile"].source == "--server-args -O mode"


def test_only_what_the_command_states():
    assert values(from_command_line("vllm serve m")) == {S + "engine": "vllm"}
    dotted = from_command_line("vllm serve m -O.mode=0 --no-enable-chunked-prefill")
    assert (dotted.value(S + "torch_compile"), dotted.value(S + "chunked_prefill"), dotted.value(S + "prefill_priority")) == (False, False, True)
    assert values(from_command_line("vllm serve m -O0"))[S + "torch_compile"] is False


def test_sglang_command_line():
    # hand-made from SGLang's docs/advanced_features/server_arguments.md, not recorded
    facts = from_command_line(
        "python3 -m sglang.launch_server --model-path meta-llama/Llama-3.1-8B-Instruct --tp 4 --dp-size 2 --ep 4 "
        "--max-running-requests 48 --chunked-prefill-size -1 --cuda-graph-max-bs 32 --speculative-algorithm EAGLE "
        "--speculative-num-steps 3 --speculative-eagle-topk 1 --speculative-num-draft-tokens 4 --disable-radix-cache "
        "--grammar-backend xgrammar --enable-torch-compile --context-length 8192 --kv-cache-dtype fp8_e4m3"
    )
    assert values(facts) == {
        S + "engine": "sglang", S + "max_num_seqs": 48, S + "chunked_prefill": False, S + "prefill_priority": True,
        S + "torch_compile": True, S + "speculative": "eagle", "observations.speculation.draft_length": 3,
        "workload.layout.tp": 4, "workload.layout.dp": 2, "workload.layout.ep": 4, S + "prefix_caching": False,
        S + "structured_output_backend": "xgrammar", S + "max_context": 8192, S + "kv_cache_dtype": "fp8_e4m3",
    }  # graphs unknown: --disable-cuda-graph was not given, and a max size alone does not say they run
    assert facts.facts["workload.layout.tp"].source == "--server-args --tp"
    off = from_command_line("sglang serve --model-path m --disable-cuda-graph --cuda-graph-bs 1 2 4")
    assert (off.value(S + "cuda_graphs"), off.facts[S + "cuda_graphs"].source) == (False, "--server-args --disable-cuda-graph")


def test_sglang_get_server_info():
    # hand-made from SGLang's ServerArgs names and its /get_server_info handler (asdict(server_args) + scheduler info)
    doc = {"model_path": "m", "tp_size": 2, "dp_size": 1, "pp_size": 1, "ep_size": 1, "max_running_requests": 256,
           "chunked_prefill_size": 8192, "enable_mixed_chunk": False, "disable_cuda_graph": False, "cuda_graph_max_bs": 160,
           "cuda_graph_bs": None, "speculative_algorithm": None, "context_length": None, "kv_cache_dtype": "auto",
           "disable_radix_cache": False, "grammar_backend": "xgrammar", "enable_torch_compile": False, "device": "cuda",
           "disable_overlap_schedule": False, "max_total_num_tokens": 600000, "version": "0.5.0"}
    facts = facts_from_document(doc, "/get_server_info")
    assert values(facts) == {
        S + "engine": "sglang", S + "max_num_seqs": 256, S + "chunked_prefill": True, S + "prefill_priority": True,
        S + "async_scheduling": True, S + "kv_cache_tokens": 600000, S + "cuda_graphs": True, S + "cuda_graph_max_batch": 160,
        S + "torch_compile": False, "workload.layout.tp": 2, "workload.layout.dp": 1, "workload.layout.pp": 1,
        "workload.layout.ep": 1, S + "prefix_caching": True, S + "kv_cache_dtype": "auto", S + "structured_output_backend": "xgrammar",
        "observations.platform.device_api": "cuda",
    }
    assert facts.facts[S + "cuda_graph_max_batch"].source == "/get_server_info disable_cuda_graph + /get_server_info cuda_graph_max_bs"


# --------------------------------------------------------------------------------------------
# damaged input: one line each


@pytest.mark.parametrize(
    "call",
    [
        lambda tmp: from_metrics_text("vllm:cache_config_info{block_size=\"16\" 1.0\n"),
        lambda tmp: from_metrics_text("x" * (64 * 1024 * 1024 + 1)),
        lambda tmp: from_command_line("vllm serve m --speculative-config '{\"method\": ngram}'"),
        lambda tmp: from_command_line("vllm serve m --max-num-seqs lots"),
        lambda tmp: from_command_line("vllm serve m --max-num-seqs"),
        lambda tmp: from_command_line("vllm serve m --override-generation-config '{unclosed"),
        lambda tmp: from_command_line("docker run --gpus all image"),
        lambda tmp: from_server_log(tmp / "absent.log"),
        lambda tmp: from_server_log(_write(tmp / "other.log", "just some text\nnothing of vLLM here\n")),
        lambda tmp: from_server_log(_write(tmp / "two.log", "INFO non-default args: {'max_num_seqs': 4} and {'model': 'x'}\n")),
        lambda tmp: facts_from_document(["not", "an", "object"]),
    ],
)
def test_damaged_documents_give_one_line(call, tmp_path):
    with pytest.raises(InputError) as err:
        call(tmp_path)
    assert "\n" not in str(err.value) and str(err.value)


def _write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


# --------------------------------------------------------------------------------------------
# fetching: which document a server gives decides the reader


def _server(routes: dict[str, tuple[int, str]]) -> Client:
    def reply(request: httpx.Request) -> httpx.Response:
        status, body = routes.get(request.url.path, (404, "not found"))
        return httpx.Response(status, text=body)

    return Client("http://server", transport=httpx.MockTransport(reply))


def test_server_facts_asks_for_json_and_reads_vllm():
    asked = []

    def reply(request: httpx.Request) -> httpx.Response:
        asked.append(str(request.url))
        return httpx.Response(200, text=(VARIANTS / "server_info.json").read_text())

    with Client("http://vllm", transport=httpx.MockTransport(reply)) as http:
        facts = server_facts(http, "http://vllm")
    assert asked == ["http://vllm/server_info?config_format=json"]
    assert facts.value(S + "max_num_seqs") == 2 and facts.facts[S + "max_num_seqs"].source == f"{WHERE}.scheduler_config.max_num_seqs"


def test_without_server_info_the_metrics_gauges_and_a_way_to_supply_the_rest():
    with _server({"/metrics": (200, (HEALTHY / "metrics_after.txt").read_text())}) as http:
        facts = server_facts(http, "http://vllm")
    assert facts.value(S + "kv_cache_tokens") == 524288
    assert "VLLM_SERVER_DEV_MODE=1" in facts.missing[0]


def test_sglang_is_recognised_by_its_document():
    doc = {"model_path": "m", "tp_size": 1, "max_running_requests": 8, "disable_cuda_graph": True}
    with _server({"/get_server_info": (200, json.dumps(doc))}) as http:
        facts = server_facts(http, "http://sglang")
    assert values(facts) == {S + "engine": "sglang", S + "max_num_seqs": 8, S + "cuda_graphs": False, "workload.layout.tp": 1}


def test_the_lab_layout_still_gives_a_server_config():
    from diagnoser.lab.served import model_config, server_info

    info = server_info(frozenset({"prefill-stall"}), model_config(frozenset(), 32768), "cuda")
    with _server({"/server_info": (200, json.dumps(info))}) as http:
        settings = read_server_info(http, "http://lab")
        facts = server_facts(http, "http://lab")
    assert settings is not None and settings.chunked_prefill is False and settings.sampling == "greedy"
    assert settings.cuda_graphs is True and settings.engine == "diagnoser-lab"
    assert facts.facts[S + "max_num_seqs"].source == "/server_info scheduler_config.max_num_seqs"
    with _server({}) as http:
        assert read_server_info(http, "http://nothing") is None
    eager = server_info(frozenset({"eager-launches"}), model_config(frozenset(), 32768), "cuda")
    with _server({"/server_info": (200, json.dumps(eager))}) as http:
        settings = read_server_info(http, "http://lab")
    assert settings.cuda_graphs is False and settings.torch_compile is None  # the lab's eager flag is about graphs only
