#!/usr/bin/env bash
# Obtain the real binaries this project tests against: kube-apiserver, kubectl, etcd, helm
# and Prometheus's promtool (the chart's alert rules), built from their Go modules (checked
# against the Go checksum database by the go command) and cached under ~/.cache keyed by
# version, each with its sha256 recorded.
#
# Usage: hack/install-tools.sh [--print-bin-dir]
# Prints the directory holding the binaries on its last line.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=versions.env
source "$here/versions.env"

cache_root=${SSO_TOOLS_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/session-summary-operator/tools}
bin_dir="$cache_root/bin-k8s-${KUBE_VERSION}-etcd-${ETCD_VERSION}-helm-${HELM_VERSION}"
gobuild_root="$cache_root/gobuild"
mkdir -p "$bin_dir" "$gobuild_root"

log() { printf '[install-tools] %s\n' "$*" >&2; }

need_go() {
  command -v go >/dev/null || { log "Go is required to build the Kubernetes binaries (https://go.dev/doc/install)"; exit 1; }
}

# shellcheck source=lib-cache.sh
source "$(dirname "$0")/lib-cache.sh"

# Builds main packages of one module into bin_dir from a scratch module that requires it.
# Args: workdir-name, go.mod body, module version, then pairs of "output=package".
go_build_into_bin() {
  local work="$gobuild_root/$1" gomod=$2 version=$3
  shift 3
  mkdir -p "$work"
  printf '%s\n' "$gomod" >"$work/go.mod"
  printf 'package tools\n' >"$work/tools.go"
  local pkgs=()
  for pair in "$@"; do pkgs+=("${pair#*=}@$version"); done
  # Resolve exactly the pinned version of each package's module (a bare `go get pkg`
  # would move to the newest release).
  (cd "$work" && GOFLAGS=-mod=mod go get "${pkgs[@]}" >&2)
  for pair in "$@"; do
    local out=${pair%%=*} pkg=${pair#*=}
    log "building $out from $pkg"
    (cd "$work" && CGO_ENABLED=0 GOFLAGS=-mod=mod go build -trimpath -ldflags "-s -w $LDFLAGS_EXTRA" -o "$bin_dir/$out.tmp" "$pkg" >&2)
    mv "$bin_dir/$out.tmp" "$bin_dir/$out"
    record_sum "$out" "$version"
  done
}

build_kubernetes() {
  cached_ok kube-apiserver "$KUBE_VERSION" && cached_ok kubectl "$KUBE_VERSION" && return 0
  need_go
  local staging_version="v0.${KUBE_VERSION#v1.}"
  local modfile
  modfile=$(cd "$gobuild_root" && GOFLAGS=-mod=mod go mod download -json "k8s.io/kubernetes@$KUBE_VERSION" | python3 -c 'import json,sys; print(json.load(sys.stdin)["GoMod"])')
  # k8s.io/kubernetes points its staging modules at ./staging; a consumer must pin each
  # one to the published v0.x.y that matches the release.
  local replaces
  replaces=$(sed -n 's#^[[:space:]]*\(k8s.io/[a-z0-9-]*\) => ./staging/src/.*#\1#p' "$modfile" |
    while read -r m; do printf 'replace %s => %s %s\n' "$m" "$m" "$staging_version"; done)
  local gomod
  gomod=$(printf 'module sso/k8stools\n\ngo 1.24.0\n\nrequire k8s.io/kubernetes %s\n\n%s\n' "$KUBE_VERSION" "$replaces")
  local pkg=k8s.io/component-base/version
  LDFLAGS_EXTRA="-X $pkg.gitVersion=$KUBE_VERSION -X $pkg.gitMajor=1 -X $pkg.gitMinor=$(echo "$KUBE_VERSION" | cut -d. -f2) -X $pkg.gitTreeState=clean -X $pkg.buildDate=1970-01-01T00:00:00Z" \
    go_build_into_bin "k8s-$KUBE_VERSION" "$gomod" "$KUBE_VERSION" \
    kube-apiserver=k8s.io/kubernetes/cmd/kube-apiserver \
    kubectl=k8s.io/kubernetes/cmd/kubectl
}

build_etcd() {
  cached_ok etcd "$ETCD_VERSION" && return 0
  need_go
  local gomod
  gomod=$(printf 'module sso/etcdtools\n\ngo 1.24.0\n\nrequire go.etcd.io/etcd/server/v3 %s\n' "$ETCD_VERSION")
  LDFLAGS_EXTRA="" go_build_into_bin "etcd-$ETCD_VERSION" "$gomod" "$ETCD_VERSION" etcd=go.etcd.io/etcd/server/v3
}

build_helm() {
  cached_ok helm "$HELM_VERSION" && return 0
  need_go
  local gomod
  gomod=$(printf 'module sso/helmtools\n\ngo 1.24.0\n\nrequire helm.sh/helm/v3 %s\n' "$HELM_VERSION")
  LDFLAGS_EXTRA="-X helm.sh/helm/v3/internal/version.version=$HELM_VERSION" \
    go_build_into_bin "helm-$HELM_VERSION" "$gomod" "$HELM_VERSION" helm=helm.sh/helm/v3/cmd/helm
}

# promtool (`promtool check rules`, `promtool test rules`: tests/integration/test_alerts.py).
# Prometheus publishes its Go module as v0.<major*100+minor>.<patch>: v0.305.0 is 3.5.0.
build_promtool() {
  cached_ok promtool "$PROMETHEUS_VERSION" && return 0
  need_go
  local gomod
  gomod=$(printf 'module sso/promtools\n\ngo 1.24.0\n\nrequire github.com/prometheus/prometheus %s\n' "$PROMETHEUS_VERSION")
  LDFLAGS_EXTRA="-X github.com/prometheus/common/version.Version=$PROMETHEUS_VERSION" \
    go_build_into_bin "prometheus-$PROMETHEUS_VERSION" "$gomod" "$PROMETHEUS_VERSION" \
    promtool=github.com/prometheus/prometheus/cmd/promtool
}

start=$(date +%s)
build_etcd
build_helm
build_kubernetes
build_promtool
log "tools ready in $(( $(date +%s) - start ))s: $bin_dir"
echo "$bin_dir"
