#!/usr/bin/env bash
# The one test command (README; .ci/run calls it): installs what the tests need, then runs
# lint, type checks and every test tier. Unit tests need nothing else; integration tests
# start a real etcd + kube-apiserver, Chroma server and an OpenAI-compatible HTTP server,
# and run neo's memory-core (installed from the npm registry) as the agents' client.
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
cd "$top"
export PATH="/usr/local/go/bin:$PATH"
t0=$(date +%s)
bash hack/install-system.sh
SSO_TOOLS_BIN=$(bash hack/install-tools.sh | tail -n 1)
export SSO_TOOLS_BIN
venv=$(bash hack/install-python.sh | tail -n 1)
# neo's memory-core from the npm registry: the real client of tests/integration/test_neo_client.py.
SSO_NEO_CLIENT_DIR=$(bash hack/install-neo.sh | tail -n 1)
export SSO_NEO_CLIENT_DIR
echo "== setup took $(( $(date +%s) - t0 ))s; tools in $SSO_TOOLS_BIN"
echo "== ruff"
"$venv/bin/ruff" check controller devenv tests bench
"$venv/bin/ruff" format --check controller devenv tests bench
echo "== mypy"
"$venv/bin/mypy"
echo "== pytest"
# Two workers (pytest-xdist), a module to one worker (its module fixtures start once), the
# longest modules first (tests/conftest.py: LONGEST_FIRST): most of an integration test's
# time is waiting on timers and servers, not a core.
t1=$(date +%s)
rc=0
"$venv/bin/python" -m pytest -n "${SSO_TEST_WORKERS:-2}" --dist loadfile --no-loadscope-reorder --durations=25 "$@" || rc=$?
echo "== pytest took $(( $(date +%s) - t1 ))s (rc $rc)"
[[ $rc -eq 0 ]] || exit "$rc"
echo "== e2e: the image in real Pods (hack/e2e.sh; kind with Docker, else the local node)"
bash hack/e2e.sh
