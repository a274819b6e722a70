#!/usr/bin/env bash
# End to end on kind (`make e2e`): create a cluster from kind-config.yaml, build the image and
# load it into kind, helm install the chart with values-kind.yaml (bundled Chroma) into a
# namespace that enforces the restricted Pod Security level, load one sample agent session
# into Chroma, kubectl apply a SessionSummary for it, wait for phase Summarized, and show
# `kubectl get sessionsummaries`. The cluster is deleted on exit (KEEP_CLUSTER=1 keeps it).
#
# Skips, loudly and with exit 0, where Docker or kind is missing.
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
cd "$top"
# shellcheck source=hack/versions.env
source hack/versions.env

skip() {
  printf '\n%s\n*** SKIPPED e2e on kind: %s\n%s\n\n' \
    "**************************************************************************" "$1" \
    "**************************************************************************"
  exit 0
}
command -v docker >/dev/null || skip "the docker CLI is not installed"
docker info >/dev/null 2>&1 || skip "no Docker engine answers 'docker info' (kind needs one)"
command -v kind >/dev/null || skip "kind is not on PATH (go install sigs.k8s.io/kind@${KIND_VERSION})"

# kubectl and helm: on PATH, else the pinned builds of hack/install-tools.sh.
if ! command -v kubectl >/dev/null || ! command -v helm >/dev/null; then
  PATH="$(bash hack/install-tools.sh | tail -n 1):$PATH"
fi

cluster=${KIND_CLUSTER:-sso-e2e}
namespace=${E2E_NAMESPACE:-sso-system}
release=sso
image="session-summary-operator:e2e"
chart=charts/session-summary-operator
session=e2e-sample-session
ctx="kind-$cluster"
k() { kubectl --context "$ctx" "$@"; }
say() { printf '\n==> %s\n' "$*"; }

diagnose() {
  say "diagnostics"
  k get pods,sessionsummaries,sessionsummarizers -A -o wide || true
  k -n "$namespace" describe sessionsummary "$session" || true
  k -n "$namespace" logs -l app.kubernetes.io/component=operator --all-containers --tail=80 || true
  k -n "$namespace" logs -l app.kubernetes.io/component=chroma --tail=40 || true
  k -n "$namespace" get events --sort-by=.lastTimestamp | tail -30 || true
}
cleanup() {
  local rc=$?
  ((rc == 0)) || diagnose
  if [[ ${KEEP_CLUSTER:-0} == 1 ]]; then
    say "keeping cluster $cluster (kind delete cluster --name $cluster)"
  else
    say "deleting cluster $cluster"
    kind delete cluster --name "$cluster" || true
  fi
  exit "$rc"
}

say "creating kind cluster $cluster (kind-config.yaml)"
trap cleanup EXIT
kind create cluster --name "$cluster" --config kind-config.yaml --wait 180s

say "building $image"
docker build -t "$image" .
say "loading $image into kind"
kind load docker-image "$image" --name "$cluster"

say "installing the chart (values-kind.yaml) into $namespace, Pod Security 'restricted' enforced"
k create namespace "$namespace"
k label namespace "$namespace" pod-security.kubernetes.io/enforce=restricted \
  pod-security.kubernetes.io/enforce-version=latest
helm --kube-context "$ctx" install "$release" "$chart" -n "$namespace" \
  -f "$chart/values-kind.yaml" --set image.tag=e2e --wait --timeout 5m
k -n "$namespace" rollout status statefulset/"$release"-session-summary-operator-chroma --timeout=180s
k -n "$namespace" get pods -o wide

say "loading one sample agent session into the bundled Chroma"
chroma_url="http://$release-session-summary-operator-chroma.$namespace.svc:8000"
k -n "$namespace" exec -i deploy/"$release"-session-summary-operator -- python - "$chroma_url" "$session" <<'PY'
import sys, time
from controller.core.memories import render_interaction_document
from controller.store.memory_store import MemoryStore, StoreLocation, connect
url, session_id = sys.argv[1], sys.argv[2]
turns = [
    ("Add retries with backoff to the exporter.", "The exporter fails on timeouts.",
     "Added retries with exponential backoff; tests pass."),
    ("Use httpx instead of requests.", "One client, pooled.",
     "Switched to httpx with one pooled client."),
]
start = int(time.time() * 1000) - 3_600_000
rows = [
    (f"{session_id}-{i:04d}", render_interaction_document(p, t, r),
     {"sessionId": session_id, "timestamp": start + i * 60_000, "type": "agent-interaction",
      "prompt": p, "thought": t, "response": r, "agent": "e2e-agent"})
    for i, (p, t, r) in enumerate(turns)
]
loc = StoreLocation(url=url)
MemoryStore(connect(loc), loc).add_memories(
    [r[0] for r in rows], [r[1] for r in rows], [r[2] for r in rows]
)
print(f"{len(rows)} memories of session {session_id} in neo-agent-memory")
PY

say "kubectl apply a SessionSummary (the sunset step)"
k apply -f - <<YAML
apiVersion: memorycore.io/v1alpha1
kind: SessionSummary
metadata:
  name: $session
  namespace: $namespace
spec:
  sessionId: $session
  trigger: sunset
YAML
k -n "$namespace" wait sessionsummary/"$session" --for=jsonpath='{.status.phase}'=Summarized \
  --timeout=180s

say "kubectl get sessionsummaries"
k -n "$namespace" get sessionsummaries -o wide
k -n "$namespace" get sessionsummarizers
say "the summary the next agent reads"
k -n "$namespace" exec deploy/"$release"-session-summary-operator -- \
  summaryctl summaries --limit 1 --chroma-url "$chroma_url"
say "metrics of one replica"
k -n "$namespace" exec deploy/"$release"-session-summary-operator -- python -c '
import urllib.request
text = urllib.request.urlopen("http://127.0.0.1:9090/metrics").read().decode()
wanted = ("session_summary_summaries_total", "session_summary_active_replica")
print("\n".join(line for line in text.splitlines() if line.startswith(wanted)))'
say "e2e on kind: PASSED"
