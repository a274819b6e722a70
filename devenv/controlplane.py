"""A real Kubernetes control plane (etcd + kube-apiserver) as local processes.

The envtest approach: no kubelet, scheduler or controller-manager, the operator runs as a
local process against a real apiserver, so schema validation, the status subresource,
RBAC, admission and resourceVersion conflicts are the real ones.

Used by pytest (a session fixture in tests/conftest.py) and by hand:

    python -m devenv.controlplane up      # prints the KUBECONFIG to export
    python -m devenv.controlplane status
    python -m devenv.controlplane down
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import datetime as dt
import json
import os
import random
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from devenv.processes import down_command

REPO_ROOT = Path(__file__).resolve().parents[1]  # a source checkout
DEFAULT_STATE_DIR = REPO_ROOT / ".cluster"
_PR_SET_PDEATHSIG = 1


class KubectlError(subprocess.CalledProcessError):
    def __str__(self) -> str:
        return f"{' '.join(self.cmd)} exited {self.returncode}: {str(self.stderr).strip()}"


class ControlPlaneError(RuntimeError):
    """The control plane could not be started; the message includes the server log tail."""


def installed_bin_dir(script: str, override_var: str) -> Path:
    """Runs hack/<script> (a no-op when its cache is warm) and returns the bin dir it prints
    last; the environment variable override_var, when set, names the dir instead."""
    override = os.environ.get(override_var)
    if override:
        return Path(override)
    out = subprocess.run(
        ["bash", str(REPO_ROOT / "hack" / script)],
        check=True,
        stdout=subprocess.PIPE,
        text=True,
    )
    return Path(out.stdout.strip().splitlines()[-1])


def tools_bin_dir() -> Path:
    """kube-apiserver, etcd, kubectl and helm (hack/install-tools.sh, or SSO_TOOLS_BIN)."""
    return installed_bin_dir("install-tools.sh", "SSO_TOOLS_BIN")


AUDIT_POLICY = """\
apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived]
rules:
  - level: Metadata
    resources:
      - group: memorycore.io
      - group: kopf.dev
      - group: ""
        resources: [secrets, events]
  - level: None
"""


def free_port() -> int:
    """A loopback port free now, drawn from below the kernel's ephemeral range.

    A port from `bind(0)` is an ephemeral one, which any outgoing connection
    may take as its local port before our server binds it (a CI run lost its
    API server that way); ports below the range are never handed out so.
    """
    try:
        low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        low = 32768
    # Each pytest-xdist worker (and what it starts) draws from its own share of the range, so
    # two workers' servers never draw one port before either binds it.
    count = max(1, int(os.environ.get("PYTEST_XDIST_WORKER_COUNT") or 1))
    worker = os.environ.get("PYTEST_XDIST_WORKER", "gw0").removeprefix("gw")
    share = (max(low, 10000 + count) - 10000) // count
    first = 10000 + share * (int(worker) % count if worker.isdigit() else 0)
    for _ in range(50):
        port = random.randrange(first, first + share)
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _die_with_parent() -> None:
    """Child-side hook: the kernel SIGKILLs the server if the launching process dies."""
    libc = ctypes.CDLL("libc.so.6", use_errno=True)
    libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)


def _openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True)


# Certificates are valid from a day before they were made: a process whose clock runs
# behind (the clock-skew tests run one under libfaketime) still accepts them, as kubeadm
# backdates its certificates for skewed nodes.
CERT_BACKDATE = dt.timedelta(days=1)
CERT_LIFETIME = dt.timedelta(days=3650)
_CA_CONFIG = """\
[ ca ]
default_ca = sso_ca
[ sso_ca ]
dir = .
database = index.txt
new_certs_dir = .
serial = serial
default_md = sha256
policy = any_name
unique_subject = no
copy_extensions = none
[ any_name ]
commonName = supplied
organizationName = optional
"""
_CA_EXT = """\
basicConstraints = critical,CA:true
keyUsage = critical,keyCertSign,cRLSign,digitalSignature
subjectKeyIdentifier = hash
authorityKeyIdentifier = keyid:always
"""
_LEAF_EXT = """\
basicConstraints = CA:false
keyUsage = critical,digitalSignature,keyEncipherment
subjectKeyIdentifier = hash
authorityKeyIdentifier = keyid
"""


def make_pki(pki: Path, extra_sans: tuple[str, ...] = ()) -> None:
    """A CA, the apiserver's serving cert, an admin client cert and the SA signing key, all
    valid from CERT_BACKDATE before now (`openssl ca`: `openssl x509 -req` cannot backdate).

    extra_sans: more subjectAltNames of the serving cert ("IP:10.96.0.1", "DNS:..."), for
    clients that reach the apiserver other than on loopback (Pods of the local node)."""
    pki.mkdir(parents=True, exist_ok=True)
    now = dt.datetime.now(dt.UTC)
    dates = (
        "-startdate",
        (now - CERT_BACKDATE).strftime("%Y%m%d%H%M%SZ"),
        "-enddate",
        (now + CERT_LIFETIME).strftime("%Y%m%d%H%M%SZ"),
    )
    (pki / "ca.cnf").write_text(_CA_CONFIG)
    (pki / "index.txt").write_text("")
    (pki / "serial").write_text("1000\n")
    (pki / "ca.ext").write_text(_CA_EXT)
    _openssl("genrsa", "-out", "ca.key", "2048", cwd=pki)
    _openssl("req", "-new", "-key", "ca.key", "-subj", "/CN=sso-test-ca", "-out", "ca.csr", cwd=pki)
    ca = ("ca", "-batch", "-config", "ca.cnf", "-notext", *dates)
    _openssl(*ca, "-selfsign", "-keyfile", "ca.key", "-in", "ca.csr", "-out", "ca.crt",
             "-extfile", "ca.ext", cwd=pki)  # fmt: skip
    (pki / "serving.ext").write_text(
        _LEAF_EXT
        + "subjectAltName="
        + ",".join(("IP:127.0.0.1", "DNS:localhost", "DNS:kubernetes.default.svc", *extra_sans))
        + "\n"
        "extendedKeyUsage=serverAuth\n"
    )
    (pki / "client.ext").write_text(_LEAF_EXT + "extendedKeyUsage=clientAuth\n")
    for name, subj, ext in (
        ("serving", "/CN=kube-apiserver", "serving.ext"),
        ("admin", "/O=system:masters/CN=sso-admin", "client.ext"),
    ):
        _openssl("genrsa", "-out", f"{name}.key", "2048", cwd=pki)
        _openssl(
            "req", "-new", "-key", f"{name}.key", "-subj", subj, "-out", f"{name}.csr", cwd=pki
        )
        _openssl(*ca, "-cert", "ca.crt", "-keyfile", "ca.key", "-in", f"{name}.csr",
                 "-out", f"{name}.crt", "-extfile", ext, cwd=pki)  # fmt: skip
    _openssl("genrsa", "-out", "sa.key", "2048", cwd=pki)
    _openssl("rsa", "-in", "sa.key", "-pubout", "-out", "sa.pub", cwd=pki)


def write_kubeconfig(
    path: Path,
    server: str,
    ca: Path,
    user: str,
    *,
    cert: Path | None = None,
    key: Path | None = None,
    token: str | None = None,
    namespace: str = "default",
) -> Path:
    user_entry: dict[str, str] = {}
    if cert and key:
        user_entry = {"client-certificate": str(cert), "client-key": str(key)}
    if token:
        user_entry = {"token": token}
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {"name": "sso-local", "cluster": {"server": server, "certificate-authority": str(ca)}}
        ],
        "users": [{"name": user, "user": user_entry}],
        "contexts": [
            {
                "name": user,
                "context": {"cluster": "sso-local", "user": user, "namespace": namespace},
            }
        ],
        "current-context": user,
    }
    path.write_text(json.dumps(config, indent=2))
    path.chmod(0o600)
    return path


@dataclass
class ControlPlane:
    """etcd + kube-apiserver on loopback with free ports and a private data dir."""

    workdir: Path
    bin_dir: Path
    die_with_parent: bool = True
    etcd_port: int = 0
    api_port: int = 0
    pids: dict[str, int] = field(default_factory=dict)
    # For the local node (devenv/node.py): serving-cert SANs and apiserver flags appended
    # last (a repeated flag's last value wins), e.g. a non-loopback bind/advertise address.
    extra_sans: tuple[str, ...] = ()
    extra_apiserver_args: tuple[str, ...] = ()
    _procs: list[subprocess.Popen[bytes]] = field(default_factory=list)

    @property
    def pki(self) -> Path:
        return self.workdir / "pki"

    @property
    def server(self) -> str:
        return f"https://127.0.0.1:{self.api_port}"

    @property
    def kubeconfig(self) -> Path:
        return self.workdir / "kubeconfig"

    @property
    def kubectl(self) -> Path:
        return self.bin_dir / "kubectl"

    @property
    def helm(self) -> Path:
        return self.bin_dir / "helm"

    @property
    def audit_log(self) -> Path:
        """One JSON line per API request to our resources, Secrets and Events (Metadata)."""
        return self.workdir / "audit.jsonl"

    def _audit_policy(self) -> Path:
        path = self.workdir / "audit-policy.yaml"
        path.write_text(AUDIT_POLICY)
        return path

    def log_path(self, name: str) -> Path:
        return self.workdir / f"{name}.log"

    def log_tail(self, name: str = "kube-apiserver", lines: int = 40) -> str:
        path = self.log_path(name)
        if not path.exists():
            return f"({path} does not exist)"
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])

    def env(self) -> dict[str, str]:
        """An environment for subprocesses (kubectl, helm, the operator) aimed at this cluster."""
        env = dict(os.environ)
        env["KUBECONFIG"] = str(self.kubeconfig)
        env["PATH"] = f"{self.bin_dir}{os.pathsep}{env.get('PATH', '')}"
        return env

    def _spawn(self, name: str, argv: list[str]) -> None:
        log = self.log_path(name).open("ab")
        proc = subprocess.Popen(
            argv,
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
            preexec_fn=_die_with_parent if self.die_with_parent else None,
        )
        log.close()
        self._procs.append(proc)
        self.pids[name] = proc.pid

    def start(self, timeout: float = 90.0) -> ControlPlane:
        self.workdir.mkdir(parents=True, exist_ok=True)
        make_pki(self.pki, self.extra_sans)
        for attempt in range(3):
            try:
                return self._start_once(timeout)
            except ControlPlaneError as e:
                # Another process took a port between free_port() and the bind: new ports.
                if "address already in use" not in str(e) or attempt == 2:
                    raise
        raise AssertionError("unreachable")

    def _start_once(self, timeout: float) -> ControlPlane:
        self.etcd_port, etcd_peer, self.api_port = free_port(), free_port(), free_port()
        try:
            self._spawn(
                "etcd",
                [
                    str(self.bin_dir / "etcd"),
                    "--data-dir",
                    str(self.workdir / "etcd-data"),
                    "--listen-client-urls",
                    f"http://127.0.0.1:{self.etcd_port}",
                    "--advertise-client-urls",
                    f"http://127.0.0.1:{self.etcd_port}",
                    "--listen-peer-urls",
                    f"http://127.0.0.1:{etcd_peer}",
                    "--initial-advertise-peer-urls",
                    f"http://127.0.0.1:{etcd_peer}",
                    "--initial-cluster",
                    f"default=http://127.0.0.1:{etcd_peer}",
                    "--unsafe-no-fsync",  # a throwaway test store; durability is not under test
                    "--log-level",
                    "warn",
                ],
            )
            self._wait_for_etcd(timeout)
            self._spawn(
                "kube-apiserver",
                [
                    str(self.bin_dir / "kube-apiserver"),
                    "--etcd-servers",
                    f"http://127.0.0.1:{self.etcd_port}",
                    "--bind-address",
                    "127.0.0.1",
                    "--advertise-address",
                    "127.0.0.1",
                    "--secure-port",
                    str(self.api_port),
                    "--tls-cert-file",
                    str(self.pki / "serving.crt"),
                    "--tls-private-key-file",
                    str(self.pki / "serving.key"),
                    "--client-ca-file",
                    str(self.pki / "ca.crt"),
                    "--authorization-mode",
                    "RBAC",
                    "--enable-admission-plugins",
                    "NamespaceLifecycle,ServiceAccount,PodSecurity",
                    "--service-account-issuer",
                    "https://kubernetes.default.svc.cluster.local",
                    "--service-account-key-file",
                    str(self.pki / "sa.pub"),
                    "--service-account-signing-key-file",
                    str(self.pki / "sa.key"),
                    "--service-cluster-ip-range",
                    "10.96.0.0/16",
                    "--allow-privileged=true",
                    "--endpoint-reconciler-type=none",  # no routable address on loopback
                    "--cert-dir",
                    str(self.workdir / "apiserver-certs"),
                    # What the operator asks of the API, countable (bench/api_calls.py).
                    "--audit-policy-file",
                    str(self._audit_policy()),
                    "--audit-log-path",
                    str(self.audit_log),
                    "--audit-log-maxsize=64",
                    "--audit-log-maxbackup=1",
                    "--audit-log-format=json",
                    *self.extra_apiserver_args,
                ],
            )
            write_kubeconfig(
                self.kubeconfig,
                self.server,
                self.pki / "ca.crt",
                "sso-admin",
                cert=self.pki / "admin.crt",
                key=self.pki / "admin.key",
            )
            self._wait_for_apiserver(timeout)
        except BaseException:
            self.stop()
            raise
        return self

    def _check_alive(self) -> None:
        for name, proc in zip(self.pids, self._procs, strict=False):
            if proc.poll() is not None:
                raise ControlPlaneError(
                    f"{name} exited with {proc.returncode} during start-up; log tail:\n"
                    + self.log_tail(name)
                )

    def _wait_for_etcd(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        url = f"http://127.0.0.1:{self.etcd_port}/health"
        while time.monotonic() < deadline:
            self._check_alive()
            with contextlib.suppress(OSError), urllib.request.urlopen(url, timeout=2) as resp:
                if json.load(resp).get("health") == "true":
                    return
            time.sleep(0.1)
        raise ControlPlaneError(f"etcd not healthy after {timeout}s:\n{self.log_tail('etcd')}")

    def _ssl_context(self) -> ssl.SSLContext:
        ctx = ssl.create_default_context(cafile=str(self.pki / "ca.crt"))
        ctx.load_cert_chain(str(self.pki / "admin.crt"), str(self.pki / "admin.key"))
        return ctx

    def _wait_for_apiserver(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        ctx = self._ssl_context()
        last = ""
        while time.monotonic() < deadline:
            self._check_alive()
            try:
                with urllib.request.urlopen(f"{self.server}/readyz", timeout=2, context=ctx) as r:
                    if r.status == 200:
                        return
            except urllib.error.HTTPError as e:
                last = f"readyz {e.code}"
            except OSError as e:
                last = str(e)
            time.sleep(0.2)
        raise ControlPlaneError(
            f"kube-apiserver not ready after {timeout}s ({last}); log tail:\n{self.log_tail()}"
        )

    def stop(self) -> None:
        """Stops every process this launcher started, by PID (its process group)."""
        for pid in reversed(list(self.pids.values())):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pid, signal.SIGTERM)
        deadline = time.monotonic() + 10
        for pid in reversed(list(self.pids.values())):
            while _alive(pid) and time.monotonic() < deadline:
                _reap(pid)
                time.sleep(0.05)
            if _alive(pid):
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(pid, signal.SIGKILL)
            _reap(pid)
        self.pids.clear()
        self._procs.clear()

    def kubectl_run(
        self,
        *args: str,
        input: str | None = None,
        check: bool = True,
        kubeconfig: Path | None = None,
    ) -> subprocess.CompletedProcess[str]:
        env = self.env()
        if kubeconfig is not None:
            env["KUBECONFIG"] = str(kubeconfig)
        result = subprocess.run(
            [str(self.kubectl), *args],
            input=input,
            env=env,
            check=False,
            capture_output=True,
            text=True,
            timeout=120,
        )
        if check and result.returncode != 0:
            raise KubectlError(result.returncode, ["kubectl", *args], result.stdout, result.stderr)
        return result

    def service_account_kubeconfig(self, namespace: str, name: str, path: Path) -> Path:
        """A kubeconfig that authenticates as a ServiceAccount (a TokenRequest token)."""
        token = self.kubectl_run("-n", namespace, "create", "token", name).stdout.strip()
        return write_kubeconfig(
            path,
            self.server,
            self.pki / "ca.crt",
            f"sa-{namespace}-{name}",
            token=token,
            namespace=namespace,
        )

    def save_state(self) -> None:
        state = {"pids": self.pids, "api_port": self.api_port, "etcd_port": self.etcd_port}
        (self.workdir / "state.json").write_text(json.dumps(state))

    @classmethod
    def from_state(cls, workdir: Path) -> ControlPlane:
        state = json.loads((workdir / "state.json").read_text())
        cp = cls(workdir=workdir, bin_dir=Path(), die_with_parent=False)
        cp.pids = {k: int(v) for k, v in state["pids"].items()}
        cp.api_port, cp.etcd_port = state["api_port"], state["etcd_port"]
        return cp


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return not _is_zombie(pid)


def _is_zombie(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0] == "Z"
    except OSError:
        return False


def _reap(pid: int) -> None:
    with contextlib.suppress(ChildProcessError, OSError):
        os.waitpid(pid, os.WNOHANG)


@contextlib.contextmanager
def running_control_plane(workdir: Path | None = None) -> Iterator[ControlPlane]:
    """Starts a control plane for the duration of the block; always stops it."""
    own_dir = workdir is None
    path = Path(tempfile.mkdtemp(prefix="sso-cp-")) if workdir is None else workdir
    cp = ControlPlane(workdir=path, bin_dir=tools_bin_dir())
    try:
        yield cp.start()
    finally:
        cp.stop()
        if own_dir and not os.environ.get("SSO_KEEP_CLUSTER_DIR"):
            shutil.rmtree(path, ignore_errors=True)


def _exports(state_dir: Path) -> str:
    """The shell lines that put kubectl/helm (matching the server) and summaryctl (the
    venv this runs in) on PATH and aim them at the cluster."""
    venv_bin = Path(sys.prefix) / "bin"
    state_dir = state_dir.resolve()
    return (
        f"export KUBECONFIG={state_dir / 'kubeconfig'}\n"
        f'export PATH="{state_dir / "bin"}:{venv_bin}:$PATH"'
        "   # kubectl and helm matching the server; summaryctl"
    )


def _cmd_up(state_dir: Path) -> int:
    if (state_dir / "state.json").exists():
        existing = ControlPlane.from_state(state_dir)
        if all(_alive(p) for p in existing.pids.values()):
            print("already running")
            print(_exports(state_dir))
            return 0
        existing.stop()
    shutil.rmtree(state_dir, ignore_errors=True)
    started = time.monotonic()
    cp = ControlPlane(workdir=state_dir, bin_dir=tools_bin_dir(), die_with_parent=False)
    cp.start()
    cp.save_state()
    (state_dir / "bin").symlink_to(cp.bin_dir)
    print(f"control plane ready in {time.monotonic() - started:.1f}s at {cp.server}")
    down = down_command(
        state_dir,
        DEFAULT_STATE_DIR,
        make="cluster-down",
        module="devenv.controlplane",
        flag="--dir",
    )
    print(f"logs: {state_dir}/*.log   stop: {down}")
    print(_exports(state_dir))
    return 0


def _cmd_down(state_dir: Path) -> int:
    if not (state_dir / "state.json").exists():
        print("no control plane recorded in", state_dir)
        return 0
    cp = ControlPlane.from_state(state_dir)
    cp.stop()
    shutil.rmtree(state_dir, ignore_errors=True)
    print("control plane stopped")
    return 0


def _cmd_status(state_dir: Path) -> int:
    if not (state_dir / "state.json").exists():
        print("down")
        return 1
    cp = ControlPlane.from_state(state_dir)
    for name, pid in cp.pids.items():
        print(f"{name}: pid {pid} {'running' if _alive(pid) else 'NOT running'}")
    print(f"KUBECONFIG={state_dir / 'kubeconfig'}")
    return 0 if all(_alive(p) for p in cp.pids.values()) else 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("command", choices=["up", "down", "status"])
    parser.add_argument("--dir", type=Path, default=DEFAULT_STATE_DIR)
    args = parser.parse_args(argv)
    commands = {"up": _cmd_up, "down": _cmd_down, "status": _cmd_status}
    return commands[args.command](args.dir)


if __name__ == "__main__":
    sys.exit(main())
