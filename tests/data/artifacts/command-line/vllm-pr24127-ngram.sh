vllm serve facebook/opt-125m \
  --swap-space 16 \
  --disable-log-requests \
  --host :: \
  --dtype float16 \
  --speculative_config \
    "{\"method\":\"ngram\",\"num_speculative_tokens\":5,\"prompt_lookup_min\":5,\"prompt_lookup_max\":10}" \
  2>&1 | tee /data/users/$USER/logs/vllm_serving.$(date +%Y%m%d_%H%M%S).log
