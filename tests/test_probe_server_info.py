"""Published serving settings read as ServerConfig facts: what each key implies, and what it does not."""

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
