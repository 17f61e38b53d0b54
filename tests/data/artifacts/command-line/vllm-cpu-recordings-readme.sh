HF_HUB_OFFLINE=1 VLLM_CPU_KVCACHE_SPACE=1 VLLM_SERVER_DEV_MODE=1 python -m vllm.entrypoints.openai.api_server \
    --model MODEL --served-model-name tiny --max-model-len 4096 --dtype bfloat16 \
    --profiler-config '{"profiler":"torch","torch_profiler_dir":DIR,"torch_profiler_with_stack":false}'
