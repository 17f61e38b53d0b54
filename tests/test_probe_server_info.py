"""Published serving settings read as ServerConfig facts: what each key implies, and what it does not."""

import pytest

from diagnoser.probes.server_info import settings_from_info
from diagnoser.rules.kernels import whole_vocabulary_sort


def test_chunked_prefill_off_means_prefill_goes_first():
    s = settings_from_info({"scheduler_config": {"enable_chunked_prefill": False, "max_num_seqs": 8}})
    assert (s.chunked_prefill, s.prefill_priority, s.max_num_seqs) == (False, True, 8)
    s = settings_from_info({"scheduler_config": {"enable_chunked_prefill": True}})
    assert (s.chunked_prefill, s.prefill_priority) == (True, False)


def test_penalties_and_sampler_from_default_sampling_params():
    s = settings_from_info({
        "default_sampling_params": {"temperature": 1.0, "top_p": 0.9, "top_k": -1, "frequency_penalty": 0.5,
                                    "presence_penalty": 0.0, "repetition_penalty": 1.0},
        "sampler": "pytorch-native top-p",
    })
    assert (s.penalties, s.repetition_penalty, s.sampling, s.top_k) == (True, False, "pytorch-native top-p", -1)
    assert whole_vocabulary_sort(s.model_dump(exclude_none=True))


def test_greedy_defaults_sort_nothing_whatever_top_k_says():
    s = settings_from_info({"default_sampling_params": {"temperature": 0, "top_k": -1, "frequency_penalty": 0}, "sampler": "x"})
    assert (s.sampling, s.top_k, s.penalties) == ("greedy", None, False)
    assert not whole_vocabulary_sort({"sampling": "greedy", "top_k": -1})


def test_tokenizer_mode_and_model_limits():
    s = settings_from_info({"model_config": {"tokenizer_mode": "slow", "max_model_len": 4096, "vocab_size": 32768}})
    assert (s.tokenizer_fast, s.max_context, s.vocab_size) == (False, 4096, 32768)
    assert settings_from_info({"model_config": {"tokenizer_mode": "auto"}}).tokenizer_fast is True


def test_absent_or_malformed_keys_stay_unknown():
    assert settings_from_info({"model_config": {"vocab_size": True, "max_model_len": 2.5}}).model_dump(exclude_none=True) == {}
    s = settings_from_info({"model_config": "not a section", "scheduler_config": {"enable_chunked_prefill": "yes", "max_num_seqs": 0},
                            "default_sampling_params": {"frequency_penalty": True, "temperature": "hot"}})
    assert s.model_dump(exclude_none=True) == {}


def test_enforce_eager_and_capture_sizes_say_whether_decode_replays_graphs():
    s = settings_from_info({"model_config": {"enforce_eager": False}, "compilation_config": {"cudagraph_capture_sizes": [1, 2, 4, 8]}})
    assert (s.cuda_graphs, s.cuda_graph_max_batch) == (True, 8)
    s = settings_from_info({"model_config": {"enforce_eager": True}, "compilation_config": {"cudagraph_capture_sizes": [1, 2, 4]}})
    assert (s.cuda_graphs, s.cuda_graph_max_batch) == (False, None)  # sizes an eager engine lists are captured by nobody
    malformed = {"model_config": {"enforce_eager": "yes"}, "compilation_config": {"cudagraph_capture_sizes": [0, True]}}
    assert settings_from_info(malformed).model_dump(exclude_none=True) == {}


@pytest.mark.parametrize(
    ("fault", "device", "graphs", "max_batch"),
    [("none", "cuda", True, 8), ("sort-sampler", "cuda", True, 8), ("eager-launches", "cuda", False, None),
     ("kv-gather", "cuda", False, None), ("none", "cpu", None, None)],
)
def test_the_lab_publishes_its_graph_setting(fault, device, graphs, max_batch):
    from diagnoser.lab.served import model_config, server_info

    faults = frozenset() if fault == "none" else frozenset({fault})
    info = server_info(faults, model_config(faults, 32768), device)
    assert ("enforce_eager" in info["model_config"]) == (device == "cuda")  # a CPU has no graphs to turn off
    s = settings_from_info(info)
    assert (s.cuda_graphs, s.cuda_graph_max_batch) == (graphs, max_batch)
