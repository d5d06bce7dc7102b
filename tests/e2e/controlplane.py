"""The real control plane on loopback: etcd, kube-apiserver, kube-scheduler and the ResourceClaim controller.

All four come from one Go binary (``tests/e2e/kubebin``) built from the Kubernetes release its go.mod pins,
once, into a cache directory keyed by the module's files, so later runs start in seconds. There are no
kubelets: tests create Node objects and play pod lives out through the status subresource.

PKI: one test CA signs the API server's serving certificate and every client certificate. A client
certificate's CN is the user name and its O the groups, so ``serve`` runs as the webhook's service account
(``system:serviceaccount:imex-system:imex-webhook``) under the RBAC rules of ``manifests/`` and
kube-scheduler as ``system:kube-scheduler`` under the API server's own bootstrap roles.
"""

from __future__ import annotations

import datetime
import hashlib
import os
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

import requests
import yaml
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from certs import issue

MODULE = Path(__file__).resolve().parent / "kubebin"
RELEASE = "v1.37.2"
# The Workload / PodGroup gang-scheduling API of this release (beta, off by default), and topology-aware
# workload scheduling (KEP-5732: PodGroup spec.schedulingConstraints, kube-scheduler's placements; alpha in
# this release, off by default): the API server drops the field without it, the scheduler ignores it.
FEATURE_GATES = "GenericWorkload=true,TopologyAwareWorkloadScheduling=true"
RUNTIME_CONFIG = "scheduling.k8s.io/v1beta1=true"


class ControlPlaneError(RuntimeError):
    """The control plane could not be built or started; the message says which step and why."""


def cache_dir() -> Path:
    base = os.environ.get("IMEX_KUBEBIN_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache"), "imex-webhook", "kubebin")
    return Path(base)


def module_digest() -> str:
    digest = hashlib.sha256()
    for name in ("go.mod", "go.sum", "main.go"):
        digest.update((MODULE / name).read_bytes())
    return digest.hexdigest()[:16]


def binary_path() -> Path:
    return cache_dir() / f"kubebin-{RELEASE}-{module_digest()}"


def build(log: IO[str] | None = None) -> tuple[Path, float]:
    """The binary, built if the cache lacks it; returns its path and the seconds the build took (0 if cached)."""
    target = binary_path()
    if target.exists():
        return target, 0.0
    if shutil.which("go") is None:
        raise ControlPlaneError("the Go toolchain is not on PATH: the real-cluster suite builds kube-apiserver "
                                "and kube-scheduler from their Go modules")
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.parent / f"{target.name}.partial"
    started = time.monotonic()
    proc = subprocess.run(
        ["go", "build", "-trimpath", "-buildvcs=false", "-ldflags=-s -w", "-o", str(partial), "."],
        cwd=MODULE, capture_output=True, text=True, env={**os.environ, "CGO_ENABLED": "0"}, check=False)
    if proc.returncode != 0:
        raise ControlPlaneError(f"go build in {MODULE} failed ({proc.returncode}):\n{proc.stderr[-4000:]}")
    partial.rename(target)
    seconds = time.monotonic() - started
    if log is not None:
        log.write(f"built {target.name} in {seconds:.0f} s\n")
    return target, seconds


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _client_cert(ca: issue.CertKey, user: str, groups: Sequence[str]) -> issue.CertKey:
    key = ec.generate_private_key(ec.SECP256R1())
    ca_cert, ca_key = ca.certificate(), ca.private_key()
    subject = [x509.NameAttribute(NameOID.COMMON_NAME, user)]
    subject += [x509.NameAttribute(NameOID.ORGANIZATION_NAME, g) for g in groups]
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name(subject))
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    key_pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                serialization.NoEncryption())
    return issue.CertKey(cert.public_bytes(serialization.Encoding.PEM), key_pem)


@dataclass
class Identity:
    """A client of the API server: its certificate files and a kubeconfig naming them."""

    user: str
    cert: Path
    key: Path
    kubeconfig: Path


@dataclass
class ControlPlane:
    workdir: Path
    binary: Path
    ca_file: Path = field(init=False)
    api_port: int = 0
    procs: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)
    _log_start: dict[str, int] = field(default_factory=dict)  # where this run of a program begins in its log
    identities: dict[str, Identity] = field(default_factory=dict)
    _ca: issue.CertKey | None = None

    @property
    def server(self) -> str:
        return f"https://127.0.0.1:{self.api_port}"

    def log_path(self, name: str) -> Path:
        return self.workdir / f"{name}.log"

    def log_tail(self, name: str, lines: int = 40) -> str:
        path = self.log_path(name)
        if not path.exists():
            return ""
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])

    # -- PKI --------------------------------------------------------------------------------------------

    def _pki(self) -> None:
        pki = self.workdir / "pki"
        pki.mkdir(parents=True, exist_ok=True)
        self._ca = issue.new_ca("imex-webhook e2e cluster CA")
        self.ca_file = pki / "ca.crt"
        self.ca_file.write_bytes(self._ca.cert_pem)
        serving = issue.new_serving(self._ca, ["localhost", "kubernetes.default.svc"], ["127.0.0.1"])
        (pki / "apiserver.crt").write_bytes(serving.cert_pem)
        (pki / "apiserver.key").write_bytes(serving.key_pem)
        sa_key = ec.generate_private_key(ec.SECP256R1())
        (pki / "sa.key").write_bytes(sa_key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()))
        (pki / "sa.pub").write_bytes(sa_key.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo))

    def identity(self, name: str, user: str, groups: Sequence[str] = ()) -> Identity:
        """A kubeconfig for ``user`` (client certificate signed by the cluster CA)."""
        if name in self.identities:
            return self.identities[name]
        assert self._ca is not None
        pair = _client_cert(self._ca, user, groups)
        pki = self.workdir / "pki"
        cert, key = pki / f"{name}.crt", pki / f"{name}.key"
        cert.write_bytes(pair.cert_pem)
        key.write_bytes(pair.key_pem)
        kubeconfig = self.workdir / f"{name}.kubeconfig"
        kubeconfig.write_text(yaml.safe_dump({
            "apiVersion": "v1", "kind": "Config", "current-context": "e2e",
            "clusters": [{"name": "e2e", "cluster": {"server": self.server,
                                                     "certificate-authority": str(self.ca_file)}}],
            "users": [{"name": name, "user": {"client-certificate": str(cert), "client-key": str(key)}}],
            "contexts": [{"name": "e2e", "context": {"cluster": "e2e", "user": name}}],
        }))
        self.identities[name] = Identity(user, cert, key, kubeconfig)
        return self.identities[name]

    # -- processes --------------------------------------------------------------------------------------

    def spawn(self, name: str, args: Sequence[str], *, env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
        log = self.log_path(name).open("ab")
        self._log_start[name] = log.tell()
        proc = subprocess.Popen(list(args), stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                env={**os.environ, **(env or {})}, start_new_session=True)
        log.close()
        self.procs[name] = proc
        return proc

    def _wait_for(self, name: str, ready: str, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        proc = self.procs[name]
        while time.monotonic() < deadline:
            with self.log_path(name).open("rb") as log:
                log.seek(self._log_start.get(name, 0))
                text = log.read().decode(errors="replace")
            if ready in text:
                return
            if proc.poll() is not None:
                raise ControlPlaneError(f"{name} exited with {proc.returncode}:\n{self.log_tail(name)}")
            time.sleep(0.1)
        raise ControlPlaneError(f"{name} did not report {ready!r} within {timeout:.0f} s:\n{self.log_tail(name)}")

    def start(self) -> None:
        self._pki()
        pki = self.workdir / "pki"
        etcd_port, peer_port = free_port(), free_port()
        self.spawn("etcd", [str(self.binary), "etcd", str(self.workdir / "etcd"),
                            f"http://127.0.0.1:{etcd_port}", f"http://127.0.0.1:{peer_port}"])
        self._wait_for("etcd", "etcd ready", 60)
        self.api_port = free_port()
        self.spawn("kube-apiserver", [
            str(self.binary), "kube-apiserver",
            f"--etcd-servers=http://127.0.0.1:{etcd_port}",
            "--bind-address=127.0.0.1", "--advertise-address=127.0.0.1", f"--secure-port={self.api_port}",
            f"--tls-cert-file={pki / 'apiserver.crt'}", f"--tls-private-key-file={pki / 'apiserver.key'}",
            f"--client-ca-file={self.ca_file}",
            "--service-account-issuer=https://kubernetes.default.svc",
            f"--service-account-key-file={pki / 'sa.pub'}",
            f"--service-account-signing-key-file={pki / 'sa.key'}",
            "--service-cluster-ip-range=10.96.0.0/16",
            "--authorization-mode=RBAC",
            # No controller-manager creates the default ServiceAccount, and no kubelet would mount its token.
            "--disable-admission-plugins=ServiceAccount",
            f"--runtime-config={RUNTIME_CONFIG}", f"--feature-gates={FEATURE_GATES}",
            # The "kubernetes" Service endpoints may not point at loopback, and nothing here uses them.
            "--endpoint-reconciler-type=none",
            "--enable-priority-and-fairness=false", "--profiling=false",
            f"--cert-dir={pki}",
        ])
        admin = self.identity("admin", "e2e-admin", ["system:masters"])
        deadline = time.monotonic() + 120
        while True:
            try:
                reply = requests.get(f"{self.server}/readyz", cert=(str(admin.cert), str(admin.key)),
                                     verify=str(self.ca_file), timeout=2)
                if reply.status_code == 200:
                    break
            except requests.RequestException:
                pass
            if self.procs["kube-apiserver"].poll() is not None or time.monotonic() > deadline:
                raise ControlPlaneError(f"kube-apiserver did not become ready:\n{self.log_tail('kube-apiserver')}")
            time.sleep(0.25)
        self.spawn("resourceclaim-controller",
                   [str(self.binary), "resourceclaim-controller", str(admin.kubeconfig), FEATURE_GATES])
        self._wait_for("resourceclaim-controller", "resourceclaim-controller running", 30)

    def start_scheduler(self, config: dict[str, object], name: str = "kube-scheduler",
                        extra_args: Sequence[str] = ()) -> None:
        """``extra_args`` come after the defaults, so a later flag wins (``--secure-port=N`` to serve /metrics)."""
        identity = self.identity("scheduler", "system:kube-scheduler")
        config = {**config, "clientConnection": {"kubeconfig": str(identity.kubeconfig)},
                  "leaderElection": {"leaderElect": False}}
        path = self.workdir / f"{name}.yaml"
        path.write_text(yaml.safe_dump(config, sort_keys=False))
        self.spawn(name, [str(self.binary), "kube-scheduler", f"--config={path}", "--secure-port=0",
                          f"--feature-gates={FEATURE_GATES}", "--v=2", *extra_args])
        self._wait_for(name, "Starting Kubernetes Scheduler", 60)

    def stop(self, name: str) -> None:
        proc = self.procs.pop(name, None)
        if proc is None or proc.poll() is not None:
            return
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(5)

    def stop_all(self) -> None:
        for name in reversed(list(self.procs)):
            self.stop(name)
