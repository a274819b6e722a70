#!/usr/bin/env bash
# What the local node (devenv/node.py, `make node-up`) needs, installed and verified:
#   - Debian packages by name, via apt: containerd, runc, the CNI plugins (bridge, host-local,
#     loopback, portmap), iptables, ipset, conntrack, nftables; buildah and debootstrap for
#     hack/build-image.sh;
#   - kubelet, kube-controller-manager, kube-scheduler and kube-proxy at KUBE_VERSION, CoreDNS
#     at COREDNS_VERSION (a main with only the plugins the node uses), kube-router's network
#     policy controller at KUBE_ROUTER_VERSION (a main with only that controller) and a static `pause`,
#     built from their Go modules (checked against the Go checksum database by the go
#     command) and cached under ~/.cache keyed by version, each with its sha256 recorded.
#
# Usage: hack/install-node.sh      (root; prints the directory of the binaries on its last line)
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=versions.env
source "$here/versions.env"
export PATH="/usr/local/go/bin:$PATH"

cache_root=${SSO_TOOLS_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/session-summary-operator/tools}
bin_dir="$cache_root/node-k8s-${KUBE_VERSION}-coredns-${COREDNS_VERSION}"
gobuild_root="$cache_root/gobuild"
mkdir -p "$bin_dir" "$gobuild_root"

log() { printf '[install-node] %s\n' "$*" >&2; }

# --- Debian packages -------------------------------------------------------------------
# command -> package; a command already on PATH (or the CNI plugin directory) is enough.
packages_missing() {
  local missing=()
  command -v containerd >/dev/null || missing+=(containerd)
  command -v runc >/dev/null || missing+=(runc)
  [[ -x /usr/lib/cni/bridge || -x /opt/cni/bin/bridge ]] || missing+=(containernetworking-plugins)
  command -v iptables >/dev/null || missing+=(iptables)
  command -v ipset >/dev/null || missing+=(ipset) # the network policy controller's sets
  command -v conntrack >/dev/null || missing+=(conntrack)
  command -v nft >/dev/null || missing+=(nftables) # teardown removes the tables the node made
  command -v buildah >/dev/null || missing+=(buildah)
  command -v debootstrap >/dev/null || missing+=(debootstrap)
  printf '%s\n' "${missing[@]}"
}

install_packages() {
  local missing
  mapfile -t missing < <(packages_missing | sed '/^$/d')
  ((${#missing[@]})) || return 0
  if [[ $(id -u) -ne 0 ]]; then
    log "missing Debian packages: ${missing[*]} (the local node runs as root)"
    exit 1
  fi
  log "apt-get install ${missing[*]}"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  # A package may start its service where an init system runs; the node runs its own.
  if command -v systemctl >/dev/null && [[ -d /run/systemd/system ]]; then
    systemctl disable --now containerd >/dev/null 2>&1 || true
  fi
}

# --- Go builds -------------------------------------------------------------------------
# shellcheck source=lib-cache.sh
source "$(dirname "$0")/lib-cache.sh"

need_go() {
  command -v go >/dev/null || { log "Go is required to build the node's binaries (https://go.dev/doc/install)"; exit 1; }
}

build_kubernetes_node() {
  local all_ok=1 b
  for b in kubelet kube-controller-manager kube-scheduler kube-proxy; do
    cached_ok "$b" "$KUBE_VERSION" || all_ok=0
  done
  ((all_ok)) && return 0
  need_go
  local work="$gobuild_root/k8s-node-$KUBE_VERSION" staging_version="v0.${KUBE_VERSION#v1.}" modfile
  mkdir -p "$work"
  modfile=$(cd "$gobuild_root" && GOFLAGS=-mod=mod go mod download -json "k8s.io/kubernetes@$KUBE_VERSION" |
    python3 -c 'import json,sys; print(json.load(sys.stdin)["GoMod"])')
  # k8s.io/kubernetes points its staging modules at ./staging; pin each to its published v0.x.y.
  sed -n 's#^[[:space:]]*\(k8s.io/[a-z0-9-]*\) => ./staging/src/.*#\1#p' "$modfile" |
    while read -r m; do printf 'replace %s => %s %s\n' "$m" "$m" "$staging_version"; done >"$work/replaces"
  printf 'module sso/k8snode\n\ngo 1.24.0\n\nrequire k8s.io/kubernetes %s\n\n%s\n' \
    "$KUBE_VERSION" "$(cat "$work/replaces")" >"$work/go.mod"
  printf 'package tools\n' >"$work/tools.go"
  local pkgs=(k8s.io/kubernetes/cmd/kubelet k8s.io/kubernetes/cmd/kube-controller-manager
    k8s.io/kubernetes/cmd/kube-scheduler k8s.io/kubernetes/cmd/kube-proxy)
  (cd "$work" && GOFLAGS=-mod=mod go get "${pkgs[@]/%/@$KUBE_VERSION}" >&2)
  local v=k8s.io/component-base/version
  local ld="-s -w -X $v.gitVersion=$KUBE_VERSION -X $v.gitMajor=1 -X $v.gitMinor=$(echo "$KUBE_VERSION" | cut -d. -f2) -X $v.gitTreeState=clean -X $v.buildDate=1970-01-01T00:00:00Z"
  for pkg in "${pkgs[@]}"; do
    b=${pkg##*/}
    cached_ok "$b" "$KUBE_VERSION" && continue
    log "building $b from $pkg@$KUBE_VERSION"
    (cd "$work" && CGO_ENABLED=0 GOFLAGS=-mod=mod go build -trimpath -ldflags "$ld" -o "$bin_dir/$b.tmp" "$pkg" >&2)
    mv "$bin_dir/$b.tmp" "$bin_dir/$b"
    record_sum "$b" "$KUBE_VERSION"
  done
}

# CoreDNS with only the plugins the node's Corefile uses (devenv/node.py): its full plugin
# set pulls in every cloud SDK and takes several times as long to build.
COREDNS_PLUGINS="bind ready health errors log cache kubernetes"
build_coredns() {
  local key="$COREDNS_VERSION+${COREDNS_PLUGINS// /,}"
  cached_ok coredns "$key" && return 0
  need_go
  local work="$gobuild_root/coredns-$COREDNS_VERSION"
  mkdir -p "$work"
  printf 'module sso/coredns\n\ngo 1.24.0\n\nrequire github.com/coredns/coredns %s\n' "$COREDNS_VERSION" >"$work/go.mod"
  cat >"$work/main.go" <<'GO'
// CoreDNS with the plugins the local node's Corefile uses, in CoreDNS's directive order.
package main

import (
	"github.com/coredns/coredns/core/dnsserver"
	"github.com/coredns/coredns/coremain"

	_ "github.com/coredns/coredns/plugin/bind"
	_ "github.com/coredns/coredns/plugin/cache"
	_ "github.com/coredns/coredns/plugin/errors"
	_ "github.com/coredns/coredns/plugin/health"
	_ "github.com/coredns/coredns/plugin/kubernetes"
	_ "github.com/coredns/coredns/plugin/log"
	_ "github.com/coredns/coredns/plugin/ready"
)

func init() {
	dnsserver.Directives = []string{"bind", "ready", "health", "errors", "log", "cache", "kubernetes"}
}

func main() { coremain.Run() }
GO
  (cd "$work" && GOFLAGS=-mod=mod go mod tidy >&2)
  log "building coredns $COREDNS_VERSION (plugins: $COREDNS_PLUGINS)"
  (cd "$work" && CGO_ENABLED=0 GOFLAGS=-mod=mod go build -trimpath -ldflags "-s -w" -o "$bin_dir/coredns.tmp" . >&2)
  mv "$bin_dir/coredns.tmp" "$bin_dir/coredns"
  record_sum coredns "$key"
}

# NetworkPolicy enforcement: kube-router's network policy controller (iptables and ipset) with
# a main of its own, without kube-router's BGP routing and service proxy (not needed: the node
# has a bridge and kube-proxy). devenv/node.py runs it as `kube-router-netpol`.
build_netpol() {
  local key="$KUBE_ROUTER_VERSION+netpol-only"
  cached_ok kube-router-netpol "$key" && return 0
  need_go
  local work="$gobuild_root/kube-router-$KUBE_ROUTER_VERSION"
  mkdir -p "$work"
  rm -f "$work/tools.go"
  printf 'module sso/kuberouter\n\ngo 1.24.0\n\nrequire github.com/cloudnativelabs/kube-router %s\n' "$KUBE_ROUTER_VERSION" >"$work/go.mod"
  cat >"$work/main.go" <<'GO'
// kube-router's network policy controller alone (no BGP routing, no service proxy): it
// enforces NetworkPolicy on the local node with iptables and ipset.
package main

import (
	"flag"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"

	"github.com/cloudnativelabs/kube-router/pkg/controllers/netpol"
	"github.com/cloudnativelabs/kube-router/pkg/healthcheck"
	"github.com/cloudnativelabs/kube-router/pkg/options"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"
)

func main() {
	kubeconfig := flag.String("kubeconfig", "", "kubeconfig of the cluster")
	hostname := flag.String("hostname-override", "", "this node's name")
	serviceRange := flag.String("service-cluster-ip-range", "10.96.0.0/12", "Service CIDR")
	syncPeriod := flag.Duration("iptables-sync-period", 5*time.Minute, "full resync period")
	cleanup := flag.Bool("cleanup-config", false, "remove the controller's rules and ipsets, then exit")
	klog.InitFlags(nil)
	flag.Parse()
	if *cleanup {
		npc := netpol.NetworkPolicyController{}
		npc.Cleanup()
		return
	}
	config := options.NewKubeRouterConfig()
	config.RunFirewall = true
	config.HostnameOverride = *hostname
	config.ClusterIPCIDR = *serviceRange
	config.IPTablesSyncPeriod = *syncPeriod
	rest, err := clientcmd.BuildConfigFromFlags("", *kubeconfig)
	if err != nil {
		klog.Fatalf("kubeconfig: %v", err)
	}
	client := kubernetes.NewForConfigOrDie(rest)
	factory := informers.NewSharedInformerFactory(client, 0)
	pods := factory.Core().V1().Pods().Informer()
	namespaces := factory.Core().V1().Namespaces().Informer()
	policies := factory.Networking().V1().NetworkPolicies().Informer()
	var ipsetMutex sync.Mutex
	npc, err := netpol.NewNetworkPolicyController(client, config, pods, policies, namespaces, &ipsetMutex)
	if err != nil {
		klog.Fatalf("network policy controller: %v", err)
	}
	pods.AddEventHandler(npc.PodEventHandler)
	namespaces.AddEventHandler(npc.NamespaceEventHandler)
	policies.AddEventHandler(npc.NetworkPolicyEventHandler)
	stop := make(chan struct{})
	factory.Start(stop)
	factory.WaitForCacheSync(stop)
	health := make(chan *healthcheck.ControllerHeartbeat, 16)
	go func() {
		for range health {
		}
	}()
	var wg sync.WaitGroup
	wg.Add(1)
	go npc.Run(health, stop, &wg)
	signals := make(chan os.Signal, 1)
	signal.Notify(signals, syscall.SIGINT, syscall.SIGTERM)
	<-signals
	close(stop)
	wg.Wait()
}
GO
  # No `go mod tidy`: the build resolves exactly the versions kube-router's go.mod requires.
  log "building kube-router-netpol $KUBE_ROUTER_VERSION"
  (cd "$work" && CGO_ENABLED=0 GOFLAGS=-mod=mod go build -trimpath -ldflags "-s -w" -o "$bin_dir/kube-router-netpol.tmp" . >&2)
  mv "$bin_dir/kube-router-netpol.tmp" "$bin_dir/kube-router-netpol"
  record_sum kube-router-netpol "$key"
}

# The Pod sandbox's process: no pause image can be pulled here, so devenv/node.py packs this
# static binary as a local image and sets it as containerd's sandbox_image.
PAUSE_VERSION=sso-pause-1
build_pause() {
  cached_ok pause "$PAUSE_VERSION" && return 0
  need_go
  local work="$gobuild_root/$PAUSE_VERSION"
  mkdir -p "$work"
  printf 'module sso/pause\n\ngo 1.24.0\n' >"$work/go.mod"
  cat >"$work/main.go" <<'GO'
// pause: holds a Pod's namespaces; exits on SIGINT/SIGTERM and reaps orphans.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	sig := make(chan os.Signal, 8)
	signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM, syscall.SIGCHLD)
	for s := range sig {
		if s == syscall.SIGCHLD {
			for {
				var ws syscall.WaitStatus
				pid, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil)
				if pid <= 0 || err != nil {
					break
				}
			}
			continue
		}
		os.Exit(0)
	}
}
GO
  log "building pause"
  (cd "$work" && CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o "$bin_dir/pause.tmp" . >&2)
  mv "$bin_dir/pause.tmp" "$bin_dir/pause"
  record_sum pause "$PAUSE_VERSION"
}

start=$(date +%s)
install_packages
build_pause
build_coredns
build_netpol
build_kubernetes_node
log "node binaries ready in $(($(date +%s) - start))s: $bin_dir"
echo "$bin_dir"
