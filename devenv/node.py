"""A real single-node Kubernetes cluster as local processes: the control plane of
devenv/controlplane.py plus containerd (Debian's, with runc), kubelet, kube-controller-manager,
kube-scheduler, kube-proxy (iptables), CoreDNS, a CNI bridge and kube-router's network
policy controller (NetworkPolicy enforced with iptables and ipset), so the operator's own
image runs in real Pods (tests/e2e, `make node-up`).

Everything lives in one work directory (containerd's root and state, kubelet's root, CNI
config and IPAM, logs). What cannot live there is recorded before it is touched and undone
at teardown, even after a failure: processes (by PID), mounts, iptables rules, ipsets,
network interfaces and kernel settings (sysctls).

    python -m devenv.node up [--image ARCHIVE]   # prints the KUBECONFIG to export
    python -m devenv.node load-image ARCHIVE     # an OCI archive (hack/build-image.sh)
    python -m devenv.node status
    python -m devenv.node down

Needs root, hack/install-node.sh (Debian packages and the node's binaries) and
hack/install-tools.sh (kube-apiserver, etcd, kubectl, helm).
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import io
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tarfile
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from devenv.controlplane import (
    ControlPlane,
    _alive,
    _die_with_parent,
    _reap,
    free_port,
    installed_bin_dir,
    tools_bin_dir,
)
from devenv.processes import down_command

REPO_ROOT = Path(__file__).resolve().parents[1]
DEFAULT_STATE_DIR = REPO_ROOT / ".node"
NODE_NAME = "sso-node"
POD_CIDR = "10.244.0.0/24"
SERVICE_CIDR = "10.96.0.0/16"
KUBERNETES_SERVICE_IP = "10.96.0.1"
DNS_SERVICE_IP = "10.96.0.10"
BRIDGE = "sso0"
PAUSE_IMAGE = "localhost/sso-pause:1"
CNI_BIN_DIRS = ("/usr/lib/cni", "/opt/cni/bin")
NETNS_DIR = Path("/var/run/netns")
# Kernel settings the node's components write (kubelet: overcommit/panic/keys; CNI bridge:
# forwarding; kube-proxy: route_localnet, conntrack), read before and written back after.
SYSCTL_DIRS = ("vm", "kernel", "net/ipv4", "net/ipv6/conf/all", "net/ipv6/conf/default",
               "net/bridge", "net/netfilter", "net/core")  # fmt: skip
# Counters and per-boot values that change by themselves; never written back.
_VOLATILE = re.compile(
    r"(^kernel/(random|ns_last_pid|pty/nr|tainted|sched_domain|perf_event|keys/(?!root_max))"
    r"|_count$|^net/netfilter/nf_conntrack_(count|buckets)|^vm/(stat_refresh|drop_caches"
    r"|compact_memory|nr_)|^kernel/(usermodehelper|seccomp)|^net/ipv4/route/flush"
    r"|^net/ipv6/conf/(all|default)/stable_secret|^kernel/cad_pid|^net/core/bpf_jit_harden"
    r"|^net/ipv4/tcp_fastopen_key)"
)
IPTABLES = (("iptables-save", "iptables-restore"), ("ip6tables-save", "ip6tables-restore"))
NETPOL_BINARY = "kube-router-netpol"  # hack/install-node.sh builds it


class NodeError(RuntimeError):
    """The node could not be started; the message includes the failing component's log."""


def node_bin_dir() -> Path:
    """kubelet and the node's other binaries (hack/install-node.sh, or SSO_NODE_BIN)."""
    return installed_bin_dir("install-node.sh", "SSO_NODE_BIN")


def detect_node_ip() -> str:
    """The IPv4 address of the interface of the default route (else the first global one)."""
    routes = json.loads(_run(["ip", "-j", "-4", "route", "show", "default"]) or "[]")
    devs = [r["dev"] for r in routes if "dev" in r]
    addrs = json.loads(_run(["ip", "-j", "-4", "addr", "show"]) or "[]")
    candidates: list[tuple[int, str]] = []
    for link in addrs:
        for a in link.get("addr_info", []):
            if a.get("scope") == "global" and link.get("ifname") != BRIDGE:
                candidates.append((0 if link.get("ifname") in devs else 1, a["local"]))
    if not candidates:
        raise NodeError("no global IPv4 address on this host for the node")
    return sorted(candidates)[0][1]


def _run(argv: list[str], check: bool = True, timeout: float = 120) -> str:
    res = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False)
    if check and res.returncode != 0:
        raise NodeError(f"{' '.join(argv)} exited {res.returncode}: {res.stderr.strip()}")
    return res.stdout


def cni_bin_dir() -> str:
    for d in CNI_BIN_DIRS:
        if Path(d, "bridge").exists():
            return d
    raise NodeError("the CNI plugins are missing (hack/install-node.sh installs them)")


# --- host state: recorded before, restored after -------------------------------------


def read_sysctls() -> dict[str, str]:
    values: dict[str, str] = {}
    for d in SYSCTL_DIRS:
        root = Path("/proc/sys", d)
        if not root.exists():
            continue
        for p in root.rglob("*"):
            key = str(p.relative_to("/proc/sys"))
            if _VOLATILE.search(key) or not p.is_file() or not os.access(p, os.W_OK):
                continue
            with contextlib.suppress(OSError):
                values[key] = p.read_text()
    return values


def restore_sysctls(before: dict[str, str]) -> list[str]:
    """Writes back every recorded setting that changed; returns the keys it restored."""
    restored = []
    for key, value in read_sysctls().items():
        old = before.get(key)
        if old is None or old == value:
            continue
        try:
            Path("/proc/sys", key).write_text(old)
            restored.append(key)
        except OSError:
            pass
    return restored


def _links() -> set[str]:
    return {link["ifname"] for link in json.loads(_run(["ip", "-j", "link", "show"]) or "[]")}


def _ipsets() -> list[str]:
    if not shutil.which("ipset"):
        return []
    return sorted(_run(["ipset", "list", "-n"], check=False).split())


def _mounts_under(prefixes: tuple[str, ...]) -> list[str]:
    found = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        target = line.split()[4].replace("\\040", " ")
        if any(target == p or target.startswith(p.rstrip("/") + "/") for p in prefixes):
            found.append(target)
    return found


def _node_cgroups() -> list[Path]:
    """The cgroup parents of containerd's CRI containers, per hierarchy (cgroup v1 and v2)."""
    return [p for p in Path("/sys/fs/cgroup").glob("*/k8s.io") if p.is_dir()] + [
        p for p in [Path("/sys/fs/cgroup/k8s.io")] if p.is_dir()
    ]


def _pids_referencing(needle: str) -> list[int]:
    """PIDs whose command line contains needle (containerd shims name our socket)."""
    pids = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit() or int(proc.name) == os.getpid():
            continue
        with contextlib.suppress(OSError):
            if needle in (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(
                errors="replace"
            ):
                pids.append(int(proc.name))
    return pids


@dataclass
class HostSnapshot:
    """What the node may change outside its work directory, as it was before."""

    sysctls: dict[str, str] = field(default_factory=dict)
    iptables: dict[str, str] = field(default_factory=dict)  # save command -> its output
    links: list[str] = field(default_factory=list)
    netns: list[str] = field(default_factory=list)
    created_paths: list[str] = field(default_factory=list)  # made by the node, removed after
    cgroups: list[str] = field(default_factory=list)  # the node's cgroup parents that existed
    ipsets: list[str] = field(default_factory=list)  # the network policy controller's sets

    @classmethod
    def take(cls) -> HostSnapshot:
        snap = cls(sysctls=read_sysctls(), links=sorted(_links()))
        for save, _ in IPTABLES:
            if shutil.which(save):
                snap.iptables[save] = _run([save])
        snap.cgroups = sorted(str(p) for p in _node_cgroups())
        snap.ipsets = _ipsets()
        snap.netns = sorted(p.name for p in NETNS_DIR.glob("*")) if NETNS_DIR.exists() else []
        for path in ("/var/log/containers", "/var/run/netns", "/run/containerd"):
            if not Path(path).exists():
                snap.created_paths.append(path)
        return snap

    def restore(self) -> list[str]:
        """Undoes the node's changes; returns what it did (for the log)."""
        done: list[str] = []
        # Network namespaces of Pods whose sandboxes were not torn down by CNI.
        if NETNS_DIR.exists():
            for ns in NETNS_DIR.glob("*"):
                if ns.name not in self.netns:
                    subprocess.run(["umount", str(ns)], capture_output=True, check=False)
                    with contextlib.suppress(OSError):
                        ns.unlink()
                    done.append(f"netns {ns.name}")
        # Interfaces: the bridge and any veth left behind.
        for name in sorted(_links() - set(self.links)):
            if name == BRIDGE or name.startswith("veth"):
                subprocess.run(["ip", "link", "delete", name], capture_output=True, check=False)
                done.append(f"link {name}")
        # iptables: every table back to its recorded content; tables that appeared, emptied.
        for save, restore in IPTABLES:
            before = self.iptables.get(save)
            if before is None:
                continue
            now = _run([save], check=False)
            if now == before:
                continue
            tables_before = set(re.findall(r"^\*(\w+)$", before, re.M))
            family = "ip6" if save.startswith("ip6") else "ip"
            for table in set(re.findall(r"^\*(\w+)$", now, re.M)) - tables_before:
                # A table that did not exist goes (nft backend); else it is emptied.
                if shutil.which("nft") and "nf_tables" in _run([save, "--version"], check=False):
                    subprocess.run(["nft", "delete", "table", family, table], capture_output=True)
                    continue
                cmd = save.replace("-save", "")
                subprocess.run([cmd, "-t", table, "-F"], capture_output=True, check=False)
                subprocess.run([cmd, "-t", table, "-X"], capture_output=True, check=False)
            subprocess.run([restore], input=before, text=True, capture_output=True, check=False)
            done.append(f"{save.replace('-save', '')} rules")
        # ipsets the rules referenced (gone with the rules above, so they can be destroyed).
        for name in sorted(set(_ipsets()) - set(self.ipsets)):
            subprocess.run(["ipset", "destroy", name], capture_output=True, check=False)
            done.append(f"ipset {name}")
        done += [f"sysctl {k}" for k in restore_sysctls(self.sysctls)]
        # cgroups containerd made for the Pods (empty once their tasks are gone).
        for parent in _node_cgroups():
            if str(parent) in self.cgroups:
                continue
            for d in sorted(
                (p for p in parent.rglob("*") if p.is_dir()), key=lambda p: -len(p.parts)
            ):
                with contextlib.suppress(OSError):
                    d.rmdir()
            with contextlib.suppress(OSError):
                parent.rmdir()
                done.append(f"cgroup {parent}")
        for path in self.created_paths:
            p = Path(path)
            if p.exists():
                shutil.rmtree(p, ignore_errors=True)
                done.append(f"removed {path}")
        return done

    def to_json(self) -> dict[str, object]:
        return self.__dict__.copy()

    @classmethod
    def from_json(cls, data: dict[str, object]) -> HostSnapshot:
        return cls(**data)  # type: ignore[arg-type]


# --- the pause image -------------------------------------------------------------------


def pause_oci_archive(pause_binary: Path, out: Path, name: str = PAUSE_IMAGE) -> Path:
    """An OCI image archive holding only /pause, named for containerd's import."""

    def blob(data: bytes) -> tuple[str, int]:
        return "sha256:" + hashlib.sha256(data).hexdigest(), len(data)

    layer_buf = io.BytesIO()
    with tarfile.open(fileobj=layer_buf, mode="w", format=tarfile.PAX_FORMAT) as t:
        info = tarfile.TarInfo("pause")
        data = pause_binary.read_bytes()
        info.size, info.mode, info.mtime = len(data), 0o755, 0
        t.addfile(info, io.BytesIO(data))
    layer = layer_buf.getvalue()
    layer_digest, layer_size = blob(layer)
    config = json.dumps(
        {
            "architecture": "amd64",
            "os": "linux",
            "config": {"Entrypoint": ["/pause"], "User": "65535:65535"},
            "rootfs": {"type": "layers", "diff_ids": [layer_digest]},
        }
    ).encode()
    config_digest, config_size = blob(config)
    manifest = json.dumps(
        {
            "schemaVersion": 2,
            "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "config": {
                "mediaType": "application/vnd.oci.image.config.v1+json",
                "digest": config_digest,
                "size": config_size,
            },
            "layers": [
                {
                    "mediaType": "application/vnd.oci.image.layer.v1.tar",
                    "digest": layer_digest,
                    "size": layer_size,
                }
            ],
        }
    ).encode()
    manifest_digest, manifest_size = blob(manifest)
    index = json.dumps(
        {
            "schemaVersion": 2,
            "manifests": [
                {
                    "mediaType": "application/vnd.oci.image.manifest.v1+json",
                    "digest": manifest_digest,
                    "size": manifest_size,
                    "annotations": {
                        "io.containerd.image.name": name,
                        "org.opencontainers.image.ref.name": name.rsplit(":", 1)[1],
                    },
                }
            ],
        }
    ).encode()
    with tarfile.open(out, "w") as t:
        for path, data in (
            ("oci-layout", b'{"imageLayoutVersion":"1.0.0"}'),
            ("index.json", index),
            (f"blobs/sha256/{layer_digest[7:]}", layer),
            (f"blobs/sha256/{config_digest[7:]}", config),
            (f"blobs/sha256/{manifest_digest[7:]}", manifest),
        ):
            info = tarfile.TarInfo(path)
            info.size = len(data)
            t.addfile(info, io.BytesIO(data))
    return out


# --- the node --------------------------------------------------------------------------


@dataclass
class LocalNode:
    """The control plane plus a kubelet and what a node needs, on this host."""

    workdir: Path
    node_bin: Path
    tools_bin: Path
    die_with_parent: bool = True
    node_ip: str = ""
    pids: dict[str, int] = field(default_factory=dict)
    ports: dict[str, int] = field(default_factory=dict)
    host: HostSnapshot | None = None
    cp: ControlPlane | None = None

    # paths
    @property
    def kubeconfig(self) -> Path:
        return self.workdir / "cp" / "kubeconfig"

    @property
    def containerd_sock(self) -> Path:
        return self.workdir / "containerd" / "containerd.sock"

    @property
    def kubectl(self) -> Path:
        return self.tools_bin / "kubectl"

    @property
    def helm(self) -> Path:
        return self.tools_bin / "helm"

    @property
    def pv_root(self) -> Path:
        return self.workdir / "volumes"

    def log_path(self, name: str) -> Path:
        return self.workdir / "logs" / f"{name}.log"

    def log_tail(self, name: str, lines: int = 30) -> str:
        path = self.log_path(name)
        if not path.exists():
            return f"({path} does not exist)"
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])

    def env(self) -> dict[str, str]:
        env = dict(os.environ)
        env["KUBECONFIG"] = str(self.kubeconfig)
        env["PATH"] = f"{self.tools_bin}{os.pathsep}{env.get('PATH', '')}"
        return env

    def kubectl_run(
        self, *args: str, input: str | None = None, check: bool = True, timeout: float = 120
    ) -> subprocess.CompletedProcess[str]:
        res = subprocess.run(
            [str(self.kubectl), *args],
            input=input,
            env=self.env(),
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
        if check and res.returncode != 0:
            raise NodeError(f"kubectl {' '.join(args)} exited {res.returncode}: {res.stderr}")
        return res

    def ctr(self, *args: str, timeout: float = 600) -> str:
        return _run(
            ["ctr", "--address", str(self.containerd_sock), "-n", "k8s.io", *args],
            timeout=timeout,
        )

    # --- start ------------------------------------------------------------------------
    def _spawn(self, name: str, argv: list[str]) -> None:
        self.log_path(name).parent.mkdir(parents=True, exist_ok=True)
        with self.log_path(name).open("ab") as log:
            proc = subprocess.Popen(
                argv,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
                preexec_fn=_die_with_parent if self.die_with_parent else None,
            )
        self.pids[name] = proc.pid
        self.save_state()

    def _check_alive(self) -> None:
        for name, pid in self.pids.items():
            if not _alive(pid):
                _reap(pid)
                raise NodeError(f"{name} exited during start-up; log tail:\n{self.log_tail(name)}")

    def _wait(self, what: str, predicate: object, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            self._check_alive()
            with contextlib.suppress(Exception):
                if predicate():  # type: ignore[operator]
                    return
            time.sleep(0.2)
        raise NodeError(f"{what} not ready after {timeout}s")

    def start(self, timeout: float = 120) -> LocalNode:
        if os.geteuid() != 0:
            raise NodeError("the local node needs root (containers, mounts, iptables)")
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.node_ip = self.node_ip or detect_node_ip()
        self.host = HostSnapshot.take()
        self.save_state()
        try:
            self._start_control_plane(timeout)
            self._start_containerd(timeout)
            self.import_image(
                pause_oci_archive(self.node_bin / "pause", self.workdir / "pause.tar")
            )
            self._start_kubelet(timeout)
            self._start_controllers()
            self._start_kube_proxy()
            self._start_coredns(timeout)
            self._wait("node Ready", self._node_ready, timeout)
            self._start_network_policy(timeout)
            self._wait("default ServiceAccount", self._default_sa, timeout)
        except BaseException:
            self.stop()
            raise
        return self

    def _start_control_plane(self, timeout: float) -> None:
        pki = self.workdir / "cp" / "pki"
        self.cp = ControlPlane(
            workdir=self.workdir / "cp",
            bin_dir=self.tools_bin,
            die_with_parent=self.die_with_parent,
            extra_sans=(f"IP:{KUBERNETES_SERVICE_IP}", f"IP:{self.node_ip}"),
            extra_apiserver_args=(
                "--bind-address=0.0.0.0",
                f"--advertise-address={self.node_ip}",
                "--endpoint-reconciler-type=lease",
                f"--kubelet-client-certificate={pki / 'admin.crt'}",
                f"--kubelet-client-key={pki / 'admin.key'}",
                "--kubelet-preferred-address-types=InternalIP",
                f"--service-cluster-ip-range={SERVICE_CIDR}",
            ),
        )
        try:
            self.cp.start(timeout)
            self.ports["apiserver"] = self.cp.api_port
        finally:
            for name, pid in self.cp.pids.items():
                self.pids[f"cp-{name}"] = pid
            self.save_state()

    def _start_containerd(self, timeout: float) -> None:
        cd = self.workdir / "containerd"
        net_d = self.workdir / "cni" / "net.d"
        net_d.mkdir(parents=True, exist_ok=True)
        (net_d / "10-sso.conflist").write_text(
            json.dumps(
                {
                    "cniVersion": "0.4.0",
                    "name": "sso",
                    "plugins": [
                        {
                            "type": "bridge",
                            "bridge": BRIDGE,
                            "isGateway": True,
                            "ipMasq": True,
                            "hairpinMode": True,
                            "ipam": {
                                "type": "host-local",
                                "ranges": [[{"subnet": POD_CIDR}]],
                                "routes": [{"dst": "0.0.0.0/0"}],
                                "dataDir": str(self.workdir / "cni" / "ipam"),
                            },
                        },
                        {"type": "portmap", "capabilities": {"portMappings": True}},
                    ],
                },
                indent=2,
            )
        )
        config = f"""\
version = 2
root = "{cd / "root"}"
state = "{cd / "state"}"
disabled_plugins = ["io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.btrfs",
  "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.devmapper",
  "io.containerd.tracing.processor.v1.otlp", "io.containerd.internal.v1.tracing"]
[grpc]
  address = "{self.containerd_sock}"
[plugins."io.containerd.internal.v1.opt"]
  path = "{cd / "opt"}"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "{PAUSE_IMAGE}"
  # This VM lacks CAP_SYS_RESOURCE: runc cannot lower oom_score_adj below its own.
  restrict_oom_score_adj = true
  enable_selinux = false
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "{cni_bin_dir()}"
    conf_dir = "{net_d}"
"""
        cd.mkdir(parents=True, exist_ok=True)
        (cd / "config.toml").write_text(config)
        self._spawn("containerd", ["containerd", "--config", str(cd / "config.toml")])
        self._wait("containerd", lambda: self.ctr("version", timeout=5) != "", timeout)

    def import_image(self, archive: Path, name: str | None = None) -> None:
        """Imports (and unpacks) an OCI archive into containerd's k8s.io namespace, where the
        kubelet finds its images; name: tag the imported image so if its archive did not."""
        before = set(self.ctr("images", "ls", "-q").split())
        self.ctr("images", "import", "--snapshotter", "overlayfs", str(archive))
        after = set(self.ctr("images", "ls", "-q").split())
        if name and name not in after:
            named = sorted(n for n in after - before if not n.startswith("sha256:"))
            if not named:
                raise NodeError(f"importing {archive} added no named image")
            self.ctr("images", "tag", "--force", named[0], name)

    def images(self) -> list[str]:
        return sorted(self.ctr("images", "ls", "-q").split())

    def _write_kubelet_config(self) -> Path:
        kubelet_root = self.workdir / "kubelet"
        kubelet_root.mkdir(parents=True, exist_ok=True)
        resolv = self.workdir / "resolv.conf"
        resolv.write_text("")  # Pods get only the cluster DNS and its search path
        pki = self.workdir / "cp" / "pki"
        self.ports["kubelet"] = free_port()
        self.ports["kubelet-healthz"] = free_port()
        cfg = {
            "apiVersion": "kubelet.config.k8s.io/v1beta1",
            "kind": "KubeletConfiguration",
            "address": self.node_ip,
            "port": self.ports["kubelet"],
            "readOnlyPort": 0,
            "healthzBindAddress": "127.0.0.1",
            "healthzPort": self.ports["kubelet-healthz"],
            "authentication": {
                "anonymous": {"enabled": False},
                "webhook": {"enabled": False},
                "x509": {"clientCAFile": str(pki / "ca.crt")},
            },
            "authorization": {"mode": "AlwaysAllow"},
            "cgroupDriver": "cgroupfs",
            "cgroupsPerQOS": False,
            "enforceNodeAllocatable": [],
            "failSwapOn": False,
            "clusterDNS": [DNS_SERVICE_IP],
            "clusterDomain": "cluster.local",
            "resolvConf": str(resolv),
            "containerRuntimeEndpoint": f"unix://{self.containerd_sock}",
            "podLogsDir": str(self.workdir / "pod-logs"),
            # A developer's disk is not a production node's: no image GC, no disk eviction.
            "imageGCHighThresholdPercent": 100,
            "imageGCLowThresholdPercent": 99,
            "evictionHard": {
                "memory.available": "100Mi",
                "nodefs.available": "0%",
                "nodefs.inodesFree": "0%",
                "imagefs.available": "0%",
            },
            "serializeImagePulls": False,
            "registerNode": True,
            "nodeStatusUpdateFrequency": "4s",
            "syncFrequency": "5s",
            "fileCheckFrequency": "5s",
        }
        path = self.workdir / "kubelet-config.json"
        path.write_text(json.dumps(cfg, indent=2))
        return path

    def _start_kubelet(self, timeout: float) -> None:
        cfg = self._write_kubelet_config()
        self._spawn(
            "kubelet",
            [
                str(self.node_bin / "kubelet"),
                f"--config={cfg}",
                f"--kubeconfig={self.kubeconfig}",
                f"--root-dir={self.workdir / 'kubelet'}",
                f"--cert-dir={self.workdir / 'kubelet' / 'pki'}",
                f"--hostname-override={NODE_NAME}",
                f"--node-ip={self.node_ip}",
                "--v=1",
            ],
        )

    def _start_controllers(self) -> None:
        pki = self.workdir / "cp" / "pki"
        self._spawn(
            "kube-controller-manager",
            [
                str(self.node_bin / "kube-controller-manager"),
                f"--kubeconfig={self.kubeconfig}",
                "--leader-elect=false",
                "--bind-address=127.0.0.1",
                f"--secure-port={free_port()}",
                f"--service-account-private-key-file={pki / 'sa.key'}",
                f"--root-ca-file={pki / 'ca.crt'}",
                "--use-service-account-credentials=false",
                f"--service-cluster-ip-range={SERVICE_CIDR}",
                "--controllers=*",
                "--node-monitor-grace-period=40s",
                "--v=1",
            ],
        )
        self._spawn(
            "kube-scheduler",
            [
                str(self.node_bin / "kube-scheduler"),
                f"--kubeconfig={self.kubeconfig}",
                "--leader-elect=false",
                "--bind-address=127.0.0.1",
                f"--secure-port={free_port()}",
                "--v=1",
            ],
        )

    def _start_kube_proxy(self) -> None:
        cfg = {
            "apiVersion": "kubeproxy.config.k8s.io/v1alpha1",
            "kind": "KubeProxyConfiguration",
            "clientConnection": {"kubeconfig": str(self.kubeconfig)},
            "hostnameOverride": NODE_NAME,
            "mode": "iptables",
            "clusterCIDR": POD_CIDR,
            "bindAddress": self.node_ip,
            "healthzBindAddress": f"127.0.0.1:{free_port()}",
            "metricsBindAddress": f"127.0.0.1:{free_port()}",
            # Leave the host's conntrack table settings alone.
            "conntrack": {
                "maxPerCore": 0,
                "min": 0,
                "tcpEstablishedTimeout": "0s",
                "tcpCloseWaitTimeout": "0s",
            },
            "iptables": {"localhostNodePorts": False, "syncPeriod": "10s"},
        }
        path = self.workdir / "kube-proxy-config.json"
        path.write_text(json.dumps(cfg, indent=2))
        self._spawn("kube-proxy", [str(self.node_bin / "kube-proxy"), f"--config={path}", "--v=1"])

    def _start_network_policy(self, timeout: float) -> None:
        """kube-router's network policy controller (built alone by hack/install-node.sh): it
        reads the Node object, so it starts once the node is registered."""
        binary = self.node_bin / NETPOL_BINARY
        if not binary.exists():
            raise NodeError(f"{binary} is missing (hack/install-node.sh builds it)")
        self._spawn(
            "netpol",
            [
                str(binary),
                f"--kubeconfig={self.kubeconfig}",
                f"--hostname-override={NODE_NAME}",
                f"--service-cluster-ip-range={SERVICE_CIDR}",
                "--v=1",
            ],
        )
        # Its top-level chains exist once it has synced (Pods' chains follow their events).
        self._wait(
            "network policy controller",
            lambda: "KUBE-ROUTER-FORWARD" in _run(["iptables-save", "-t", "filter"]),
            timeout,
        )

    def _start_coredns(self, timeout: float) -> None:
        port, health, ready = free_port(), free_port(), free_port()
        self.ports["coredns"] = port
        corefile = self.workdir / "Corefile"
        corefile.write_text(
            f""".:{port} {{
    bind {self.node_ip}
    errors
    health 127.0.0.1:{health}
    ready 127.0.0.1:{ready}
    kubernetes cluster.local in-addr.arpa ip6.arpa {{
        kubeconfig {self.kubeconfig} sso-admin
        pods insecure
        fallthrough in-addr.arpa ip6.arpa
    }}
    cache 5
}}
"""
        )
        self._spawn("coredns", [str(self.node_bin / "coredns"), "-conf", str(corefile)])
        # CoreDNS runs on the host; the kube-dns Service points at it by a manual EndpointSlice.
        manifest = {
            "apiVersion": "v1",
            "kind": "List",
            "items": [
                {
                    "apiVersion": "v1",
                    "kind": "Service",
                    "metadata": {"name": "kube-dns", "namespace": "kube-system"},
                    "spec": {
                        "clusterIP": DNS_SERVICE_IP,
                        "ports": [
                            {"name": "dns", "port": 53, "protocol": "UDP", "targetPort": port},
                            {"name": "dns-tcp", "port": 53, "protocol": "TCP", "targetPort": port},
                        ],
                    },
                },
                {
                    "apiVersion": "discovery.k8s.io/v1",
                    "kind": "EndpointSlice",
                    "metadata": {
                        "name": "kube-dns-host",
                        "namespace": "kube-system",
                        "labels": {
                            "kubernetes.io/service-name": "kube-dns",
                            "endpointslice.kubernetes.io/managed-by": "sso-local-node",
                        },
                    },
                    "addressType": "IPv4",
                    "endpoints": [{"addresses": [self.node_ip], "conditions": {"ready": True}}],
                    "ports": [
                        {"name": "dns", "port": port, "protocol": "UDP"},
                        {"name": "dns-tcp", "port": port, "protocol": "TCP"},
                    ],
                },
            ],
        }
        self._wait(
            "kube-dns Service",
            lambda: self.kubectl_run("apply", "-f", "-", input=json.dumps(manifest)),
            timeout,
        )

    def _node_ready(self) -> bool:
        out = self.kubectl_run(
            "get",
            "node",
            NODE_NAME,
            "-o",
            "jsonpath={.status.conditions[?(@.type=='Ready')].status}",
            check=False,
        ).stdout
        return out.strip() == "True"

    def _default_sa(self) -> bool:
        return (
            self.kubectl_run("-n", "default", "get", "sa", "default", check=False).returncode == 0
        )

    def make_host_path_pv(self, name: str, size: str = "1Gi", uid: int = 10001) -> None:
        """A hostPath PersistentVolume (no class) in the work dir: the node has no provisioner."""
        path = self.pv_root / name
        path.mkdir(parents=True, exist_ok=True)
        os.chown(path, uid, uid)
        pv = {
            "apiVersion": "v1",
            "kind": "PersistentVolume",
            "metadata": {"name": name},
            "spec": {
                "capacity": {"storage": size},
                "accessModes": ["ReadWriteOnce"],
                "persistentVolumeReclaimPolicy": "Retain",
                "hostPath": {"path": str(path), "type": "Directory"},
            },
        }
        self.kubectl_run("apply", "-f", "-", input=json.dumps(pv))

    # --- stop -------------------------------------------------------------------------
    def _kill(self, name: str, grace: float = 10) -> None:
        pid = self.pids.get(name)
        if pid is None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pid, signal.SIGTERM)
        deadline = time.monotonic() + grace
        while _alive(pid) and time.monotonic() < deadline:
            _reap(pid)
            time.sleep(0.05)
        if _alive(pid):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pid, signal.SIGKILL)
            time.sleep(0.1)
        _reap(pid)

    def _remove_containers(self) -> None:
        """Every container and sandbox of containerd's k8s.io namespace, killed and deleted."""
        with contextlib.suppress(Exception):
            for task in self.ctr("tasks", "ls", "-q", timeout=20).split():
                with contextlib.suppress(Exception):
                    self.ctr("tasks", "kill", "-s", "SIGKILL", task, timeout=20)
            deadline = time.monotonic() + 15
            for task in self.ctr("tasks", "ls", "-q", timeout=20).split():
                while time.monotonic() < deadline:
                    try:
                        self.ctr("tasks", "delete", "-f", task, timeout=20)
                        break
                    except Exception:
                        time.sleep(0.3)
            for c in self.ctr("containers", "ls", "-q", timeout=20).split():
                with contextlib.suppress(Exception):
                    self.ctr("containers", "delete", c, timeout=20)

    def _container_pids(self) -> list[int]:
        tasks = self.workdir / "containerd" / "state" / "io.containerd.runtime.v2.task" / "k8s.io"
        ids = [p.name for p in tasks.glob("*")] if tasks.exists() else []
        pids: set[int] = set()
        for parent in _node_cgroups():
            for cid in ids:
                with contextlib.suppress(OSError):
                    text = (parent / cid / "cgroup.procs").read_text()
                    pids.update(int(x) for x in text.split())
        return sorted(pids)

    def stop(self) -> list[str]:
        """Stops everything by PID and undoes the host changes; returns what was undone."""
        done: list[str] = []
        daemons = ("netpol", "coredns", "kube-proxy", "kube-scheduler", "kube-controller-manager")
        for name in daemons:
            self._kill(name)
        # The controller's own clean-up (its chains and ipsets); the host snapshot below
        # restores whatever is left.
        netpol = self.node_bin / NETPOL_BINARY
        if netpol.exists() and self.host is not None:
            subprocess.run([str(netpol), "--cleanup-config"], capture_output=True, check=False)
        self._kill("kubelet")
        if "containerd" in self.pids and _alive(self.pids["containerd"]):
            self._remove_containers()
        self._kill("containerd")
        # Shims outlive containerd by design; they name our socket on their command line.
        for pid in _pids_referencing(str(self.containerd_sock)):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
            done.append(f"shim {pid}")
        # Containers whose shim died first (this process was killed) run on, re-parented:
        # every process in the cgroup of a container this containerd ran, by PID.
        for pid in self._container_pids():
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
            done.append(f"container process {pid}")
        deadline = time.monotonic() + 10
        while any(_alive(p) for p in self._container_pids()) and time.monotonic() < deadline:
            time.sleep(0.1)
        for name in [n for n in self.pids if n.startswith("cp-")][::-1]:
            self._kill(name)
        # Mounts under the work dir (overlay snapshots, shm, Pod volumes), deepest first.
        for target in sorted(_mounts_under((str(self.workdir),)), key=len, reverse=True):
            r = subprocess.run(["umount", target], capture_output=True, check=False)
            if r.returncode != 0:
                subprocess.run(["umount", "-l", target], capture_output=True, check=False)
            done.append(f"umount {target}")
        if self.host is not None:
            done += self.host.restore()
        self.pids.clear()
        self.save_state()
        return done

    # --- state ------------------------------------------------------------------------
    def save_state(self) -> None:
        if not self.workdir.exists():
            return
        state = {
            "pids": self.pids,
            "ports": self.ports,
            "node_ip": self.node_ip,
            "node_bin": str(self.node_bin),
            "tools_bin": str(self.tools_bin),
            "host": self.host.to_json() if self.host else None,
        }
        (self.workdir / "state.json").write_text(json.dumps(state))

    @classmethod
    def from_state(cls, workdir: Path) -> LocalNode:
        state = json.loads((workdir / "state.json").read_text())
        node = cls(
            workdir=workdir,
            node_bin=Path(state["node_bin"]),
            tools_bin=Path(state["tools_bin"]),
            die_with_parent=False,
            node_ip=state["node_ip"],
        )
        node.pids = {k: int(v) for k, v in state["pids"].items()}
        node.ports = state.get("ports", {})
        node.host = HostSnapshot.from_json(state["host"]) if state.get("host") else None
        return node


@contextlib.contextmanager
def running_node(workdir: Path | None = None) -> Iterator[LocalNode]:
    """A local node for the duration of the block; always stopped and the host restored."""
    own = workdir is None
    path = Path(tempfile.mkdtemp(prefix="sso-node-")) if workdir is None else workdir
    node = LocalNode(workdir=path, node_bin=node_bin_dir(), tools_bin=tools_bin_dir())
    try:
        yield node.start()
    finally:
        node.stop()
        if own and not os.environ.get("SSO_KEEP_NODE_DIR"):
            shutil.rmtree(path, ignore_errors=True)


# --- CLI -------------------------------------------------------------------------------


def _exports(state_dir: Path, node: LocalNode) -> str:
    venv_bin = Path(sys.prefix) / "bin"
    return (
        f"export KUBECONFIG={node.kubeconfig}\n"
        f'export PATH="{node.tools_bin}:{venv_bin}:$PATH"   # kubectl, helm; summaryctl'
    )


def _cmd_up(state_dir: Path, image: Path | None) -> int:
    if (state_dir / "state.json").exists():
        old = LocalNode.from_state(state_dir)
        if old.pids and all(_alive(p) for p in old.pids.values()):
            print("already running")
            print(_exports(state_dir, old))
            return 0
        old.stop()
    shutil.rmtree(state_dir, ignore_errors=True)
    started = time.monotonic()
    node = LocalNode(
        workdir=state_dir, node_bin=node_bin_dir(), tools_bin=tools_bin_dir(), die_with_parent=False
    )
    node.start()
    if image is not None:
        node.import_image(image)
    print(f"node {NODE_NAME} Ready in {time.monotonic() - started:.1f}s (node IP {node.node_ip})")
    down = down_command(
        state_dir, DEFAULT_STATE_DIR, make="node-down", module="devenv.node", flag="--state-dir"
    )
    print(f"logs: {state_dir}/logs/*.log   stop: {down}")
    print(_exports(state_dir, node))
    return 0


def _cmd_down(state_dir: Path) -> int:
    if not (state_dir / "state.json").exists():
        print("no node recorded in", state_dir)
        return 0
    node = LocalNode.from_state(state_dir)
    done = node.stop()
    shutil.rmtree(state_dir, ignore_errors=True)
    print("stopped; undone:", ", ".join(done) if done else "nothing else")
    return 0


def _cmd_status(state_dir: Path) -> int:
    if not (state_dir / "state.json").exists():
        print("not running")
        return 1
    node = LocalNode.from_state(state_dir)
    for name, pid in node.pids.items():
        print(f"{name:28s} pid {pid:7d} {'running' if _alive(pid) else 'DEAD'}")
    return 0 if node.pids and all(_alive(p) for p in node.pids.values()) else 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m devenv.node", description=__doc__)
    parser.add_argument("command", choices=["up", "down", "status", "load-image"])
    parser.add_argument("archive", nargs="?", type=Path, help="load-image: an OCI archive")
    parser.add_argument("--image", type=Path, help="up: also import this OCI archive")
    parser.add_argument("--state-dir", type=Path, default=DEFAULT_STATE_DIR)
    args = parser.parse_args(argv)
    state_dir = args.state_dir.resolve()
    if args.command == "up":
        return _cmd_up(state_dir, args.image)
    if args.command == "down":
        return _cmd_down(state_dir)
    if args.command == "load-image":
        if args.archive is None:
            parser.error("load-image needs an archive")
        LocalNode.from_state(state_dir).import_image(args.archive)
        return 0
    return _cmd_status(state_dir)


if __name__ == "__main__":
    sys.exit(main())
