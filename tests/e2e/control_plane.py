"""A throw-away Kubernetes control plane: etcd + kube-apiserver, and kube-scheduler and
kube-controller-manager (StatefulSets and volume binding only) when their binaries are there.

Follows controller-runtime's envtest convention: ``KUBEBUILDER_ASSETS`` names a folder holding
the ``etcd`` and ``kube-apiserver`` binaries (``setup-envtest use -p path`` prints one). Every
process listens on a free 127.0.0.1 port, keeps its state in a temporary folder, and is
stopped by its own pid. No kubelet runs: Nodes are plain API objects that the helpers make
Ready, and pods stay Pending once bound unless a test runs ``tests.e2e.kubelet.KubeletStandIn``.
"""

import contextlib
import datetime as dt
import json
import os
import secrets
import shutil
import socket
import ssl
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

from kubernetes.client import ApiClient, Configuration, CoreV1Api
from urllib3 import HTTPResponse

ASSETS_ENV = "KUBEBUILDER_ASSETS"
SKIP_REASON = "set KUBEBUILDER_ASSETS to a folder with etcd and kube-apiserver (envtest) to run"
REQUIRED_BINARIES = ("etcd", "kube-apiserver")
CONTROLLERS = (
    "statefulset-controller",
    "persistentvolume-binder-controller",
    "disruption-controller",
)
"""What kube-controller-manager runs: StatefulSets make their pods and claims for real, claims
bind to volumes, and PodDisruptionBudgets get the status evictions are judged by. Not the node
lifecycle controller: with no kubelet heartbeats it would taint every node unreachable and
evict the pods."""
NOT_READY_TAINT = "node.kubernetes.io/not-ready"
ADMIN_USER = "envtest-admin"
SERVICE_CIDR = "10.0.0.0/24"  # a flag the API server requires; no traffic goes there


def find_assets(env: Mapping[str, str] | None = None) -> Path | None:
    """The envtest binaries folder, or None when it is unset or incomplete."""
    folder = (env if env is not None else os.environ).get(ASSETS_ENV)
    if not folder:
        return None
    path = Path(folder)
    for name in REQUIRED_BINARIES:
        binary = path / name
        if not (binary.is_file() and os.access(binary, os.X_OK)):
            return None
    return path


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


# -- certificates and keys -------------------------------------------------------------------


@dataclass(frozen=True)
class Pki:
    """A CA, a serving certificate for 127.0.0.1 signed by it, and the service-account key pair."""

    ca_cert: Path
    ca_key: Path
    serving_cert: Path
    serving_key: Path
    sa_key: Path
    sa_pub: Path


SERVING_DNS = ("localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc")
SERVING_IPS = ("127.0.0.1", "10.0.0.1")


def generate_pki(folder: Path, use_openssl: bool | None = None) -> Pki:
    """Make the PKI with ``cryptography`` when importable, else the ``openssl`` command."""
    folder.mkdir(parents=True, exist_ok=True)
    pki = Pki(
        ca_cert=folder / "ca.crt",
        ca_key=folder / "ca.key",
        serving_cert=folder / "serving.crt",
        serving_key=folder / "serving.key",
        sa_key=folder / "sa.key",
        sa_pub=folder / "sa.pub",
    )
    if use_openssl is None:
        try:
            import cryptography  # noqa: F401
        except ImportError:
            use_openssl = True
        else:
            use_openssl = False
    if use_openssl:
        _pki_with_openssl(pki)
    else:
        _pki_with_cryptography(pki)
    for key in (pki.ca_key, pki.serving_key, pki.sa_key):
        key.chmod(0o600)
    return pki


def _pki_with_cryptography(pki: Pki) -> None:
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import rsa

    from tests.tls_material import issue_leaf, make_authority, pem_cert, pem_key

    ca = make_authority("envtest-ca")
    serving, serving_key = issue_leaf(
        ca, "kube-apiserver", dns=SERVING_DNS, ips=SERVING_IPS, client=False
    )
    sa_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    pki.ca_cert.write_bytes(pem_cert(ca.cert))
    pki.ca_key.write_bytes(pem_key(ca.key))
    pki.serving_cert.write_bytes(pem_cert(serving))
    pki.serving_key.write_bytes(pem_key(serving_key))
    pki.sa_key.write_bytes(pem_key(sa_key))
    pki.sa_pub.write_bytes(
        sa_key.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )
    )


def _openssl(*args: str) -> None:
    openssl = shutil.which("openssl")
    if openssl is None:
        raise RuntimeError("neither the cryptography package nor the openssl command is available")
    subprocess.run([openssl, *args], check=True, capture_output=True, timeout=60)


def _pki_with_openssl(pki: Pki) -> None:
    folder = pki.ca_cert.parent
    _openssl(
        "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-sha256", "-days", "1",
        "-keyout", str(pki.ca_key), "-out", str(pki.ca_cert), "-subj", "/CN=envtest-ca",
        "-addext", "basicConstraints=critical,CA:TRUE,pathlen:0",
        "-addext", "keyUsage=critical,digitalSignature,keyCertSign,cRLSign",
    )  # fmt: skip
    csr = folder / "serving.csr"
    _openssl(
        "req", "-newkey", "rsa:2048", "-nodes", "-sha256",
        "-keyout", str(pki.serving_key), "-out", str(csr), "-subj", "/CN=kube-apiserver",
    )  # fmt: skip
    sans = ",".join([f"DNS:{n}" for n in SERVING_DNS] + [f"IP:{ip}" for ip in SERVING_IPS])
    ext = folder / "serving.ext"
    ext.write_text(
        "basicConstraints=critical,CA:FALSE\n"
        "keyUsage=critical,digitalSignature,keyEncipherment\n"
        "extendedKeyUsage=serverAuth\n"
        f"subjectAltName={sans}\n"
    )
    _openssl(
        "x509", "-req", "-sha256", "-days", "1", "-in", str(csr),
        "-CA", str(pki.ca_cert), "-CAkey", str(pki.ca_key), "-CAcreateserial",
        "-out", str(pki.serving_cert), "-extfile", str(ext),
    )  # fmt: skip
    _openssl("genrsa", "-out", str(pki.sa_key), "2048")
    _openssl("rsa", "-in", str(pki.sa_key), "-pubout", "-out", str(pki.sa_pub))


# -- processes -------------------------------------------------------------------------------


@dataclass
class Process:
    """One child process, its log file, and how to tell it is up."""

    name: str
    args: list[str]
    log_path: Path
    popen: subprocess.Popen[bytes] | None = None

    def start(self, env: Mapping[str, str] | None = None) -> None:
        log = self.log_path.open("ab")  # a restart adds to the same log
        try:
            self.popen = subprocess.Popen(
                self.args,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=dict(env) if env is not None else None,
            )
        finally:
            log.close()

    def alive(self) -> bool:
        return self.popen is not None and self.popen.poll() is None

    def log_tail(self, lines: int = 30) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])

    def stop(self, timeout: float = 10.0) -> None:
        if self.popen is not None:
            stop_child(self.popen, timeout)


def stop_child(popen: subprocess.Popen[bytes], timeout: float = 10.0) -> None:
    """SIGTERM, then SIGKILL after ``timeout``: only this child, by its pid. Nothing if it has
    exited already."""
    if popen.poll() is not None:
        return
    popen.terminate()
    try:
        popen.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        popen.kill()
        popen.wait(timeout=timeout)


def wait_until(
    check: Any, what: str, timeout: float, processes: Sequence[Process] = (), interval: float = 0.2
) -> None:
    """Poll ``check()`` until true; fail early (with its log) if a process died meanwhile."""
    deadline = time.monotonic() + timeout
    last_error = ""
    while time.monotonic() < deadline:
        for process in processes:
            if not process.alive():
                raise RuntimeError(
                    f"{process.name} exited while waiting for {what}:\n{process.log_tail()}"
                )
        try:
            if check():
                return
        except Exception as exc:  # not up yet: connection refused, TLS not ready, 5xx
            last_error = f"{type(exc).__name__}: {exc}"
        time.sleep(interval)
    logs = "\n".join(f"--- {p.name} ---\n{p.log_tail()}" for p in processes)
    raise TimeoutError(f"{what} not ready after {timeout:.0f}s ({last_error})\n{logs}")


def _http_ok(url: str, context: ssl.SSLContext | None = None, token: str | None = None) -> bool:
    request = urllib.request.Request(url)
    if token:
        request.add_header("Authorization", f"Bearer {token}")
    # the control plane is on loopback: never go through a proxy from the environment
    opener = urllib.request.build_opener(
        urllib.request.ProxyHandler({}), urllib.request.HTTPSHandler(context=context)
    )
    try:
        with opener.open(request, timeout=5) as resp:
            return int(resp.status) == 200
    except urllib.error.HTTPError:
        return False


def _etcd_post(url: str, path: str, body: Mapping[str, Any]) -> dict[str, Any]:
    """One call to etcd's JSON gateway on loopback (never through a proxy)."""
    request = urllib.request.Request(
        url + path, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}
    )
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    with opener.open(request, timeout=10) as resp:
        answer: dict[str, Any] = json.loads(resp.read())
    return answer


def _etcd_supports(binary: Path, flag: str) -> bool:
    try:
        out = subprocess.run(
            [str(binary), "--help"], capture_output=True, text=True, timeout=30, check=False
        )
    except OSError:
        return False
    return flag in out.stdout + out.stderr


@dataclass
class ControlPlane:
    """etcd + kube-apiserver (+ kube-scheduler if its binary is in the assets folder)."""

    assets: Path
    workdir: Path
    with_scheduler: bool | None = None  # None: start it when the binary is there
    with_controller_manager: bool = False
    """Off by default: with it, the StatefulSet controller owns every StatefulSet's pods, and
    tests that make pods by hand beside a StatefulSet (for its size) would see them replaced;
    the tests that want it start it themselves (``start_controller_manager``)."""
    controllers: tuple[str, ...] = CONTROLLERS
    startup_timeout: float = 120.0
    token: str = field(default_factory=lambda: secrets.token_hex(16))
    api_port: int = 0
    etcd_port: int = 0
    processes: list[Process] = field(default_factory=list)
    pki: Pki | None = None
    apiserver_extra: tuple[str, ...] = ()
    """Flags added to kube-apiserver's own (``start_apiserver`` can change them)."""
    _apiserver_args: list[str] = field(default_factory=list, repr=False)

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.api_port}"

    @property
    def kubeconfig(self) -> Path:
        return self.workdir / "kubeconfig"

    @property
    def scheduler_running(self) -> bool:
        return any(p.name == "kube-scheduler" and p.alive() for p in self.processes)

    @property
    def controller_manager_running(self) -> bool:
        return any(p.name == "kube-controller-manager" and p.alive() for p in self.processes)

    def _env(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.lower().endswith("_proxy")}
        env["NO_PROXY"] = env["no_proxy"] = "127.0.0.1,localhost"
        return env

    def start(self) -> "ControlPlane":
        try:
            self._start()
        except BaseException:
            self.stop()
            raise
        return self

    def _start(self) -> None:
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.pki = pki = generate_pki(self.workdir / "pki")
        env = self._env()

        # etcd
        self.etcd_port, peer_port = free_port(), free_port()
        etcd_bin = self.assets / "etcd"
        client_url = f"http://127.0.0.1:{self.etcd_port}"
        peer_url = f"http://127.0.0.1:{peer_port}"
        etcd_args = [
            str(etcd_bin),
            "--name=envtest",
            f"--data-dir={self.workdir / 'etcd'}",
            f"--listen-client-urls={client_url}",
            f"--advertise-client-urls={client_url}",
            f"--listen-peer-urls={peer_url}",
            f"--initial-advertise-peer-urls={peer_url}",
            f"--initial-cluster=envtest={peer_url}",
            "--initial-cluster-state=new",
        ]
        if _etcd_supports(etcd_bin, "--unsafe-no-fsync"):
            etcd_args.append("--unsafe-no-fsync")  # test data: durability is not the point
        etcd = Process("etcd", etcd_args, self.workdir / "etcd.log")
        self.processes.append(etcd)
        etcd.start(env)
        wait_until(lambda: _http_ok(f"{client_url}/health"), "etcd", self.startup_timeout, [etcd])

        # kube-apiserver: static token in system:masters; RBAC so the placer's Roles matter
        tokens = self.workdir / "tokens.csv"
        tokens.write_text(f'{self.token},{ADMIN_USER},{ADMIN_USER},"system:masters"\n')
        tokens.chmod(0o600)
        self.api_port = free_port()
        self._apiserver_args = [
            str(self.assets / "kube-apiserver"),
            f"--etcd-servers={client_url}",
            "--bind-address=127.0.0.1",
            "--advertise-address=127.0.0.1",
            f"--secure-port={self.api_port}",
            f"--cert-dir={self.workdir / 'apiserver'}",
            f"--tls-cert-file={pki.serving_cert}",
            f"--tls-private-key-file={pki.serving_key}",
            f"--client-ca-file={pki.ca_cert}",
            f"--token-auth-file={tokens}",
            "--authorization-mode=RBAC",
            "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
            f"--service-account-key-file={pki.sa_pub}",
            f"--service-account-signing-key-file={pki.sa_key}",
            f"--service-cluster-ip-range={SERVICE_CIDR}",
            "--disable-admission-plugins=ServiceAccount",
            "--allow-privileged=true",
            "--endpoint-reconciler-type=none",
        ]
        apiserver = Process(
            "kube-apiserver",
            [*self._apiserver_args, *self.apiserver_extra],
            self.workdir / "kube-apiserver.log",
        )
        self.processes.append(apiserver)
        apiserver.start(env)
        self._wait_apiserver_ready()
        self._write_kubeconfig()

        scheduler_bin = self.assets / "kube-scheduler"
        want_scheduler = self.with_scheduler
        if want_scheduler is None:
            want_scheduler = scheduler_bin.is_file() and os.access(scheduler_bin, os.X_OK)
        if want_scheduler:
            self._start_scheduler(scheduler_bin, env)
        if self.with_controller_manager:
            self.start_controller_manager()

    # -- stopping and starting etcd and the API server in place (fault drills) --------------

    @property
    def etcd_url(self) -> str:
        return f"http://127.0.0.1:{self.etcd_port}"

    def _process(self, name: str) -> Process:
        found = [p for p in self.processes if p.name == name]
        assert found, f"{name} was never started"
        return found[-1]

    def apiserver_ready(self) -> bool:
        """Whether kube-apiserver's /readyz answers 200 now (False when it does not answer)."""
        assert self.pki is not None
        context = ssl.create_default_context(cafile=str(self.pki.ca_cert))
        try:
            return _http_ok(f"{self.url}/readyz", context, self.token)
        except (OSError, ssl.SSLError):
            return False

    def _wait_apiserver_ready(self) -> None:
        wait_until(
            self.apiserver_ready,
            "kube-apiserver /readyz",
            self.startup_timeout,
            [self._process("etcd"), self._process("kube-apiserver")],
            interval=0.1,
        )

    def stop_apiserver(self, grace: float = 30.0) -> None:
        """Stop kube-apiserver by its pid: SIGTERM, as an upgrade does (it stops listening at
        once, then waits for requests in flight), and SIGKILL after ``grace`` seconds."""
        self._process("kube-apiserver").stop(timeout=grace)

    def start_apiserver(self, extra: Sequence[str] | None = None) -> float:
        """Start kube-apiserver again on the same port, etcd and certificates (with ``extra``
        flags instead of ``apiserver_extra`` when given); returns when /readyz first answered
        200 (``time.time()``)."""
        process = self._process("kube-apiserver")
        assert not process.alive(), "kube-apiserver is running"
        if extra is not None:
            self.apiserver_extra = tuple(extra)
        process.args = [*self._apiserver_args, *self.apiserver_extra]
        process.start(self._env())
        self._wait_apiserver_ready()
        return time.time()

    def etcd_ready(self) -> bool:
        try:
            return _http_ok(f"{self.etcd_url}/health")
        except OSError:
            return False

    def stop_etcd(self) -> None:
        """Stop etcd (SIGTERM), keeping its data folder."""
        self._process("etcd").stop(timeout=30)

    def start_etcd(self) -> float:
        """Start etcd again on the same ports and data folder; returns when /health answered
        200 (``time.time()``)."""
        process = self._process("etcd")
        assert not process.alive(), "etcd is running"
        process.start(self._env())
        wait_until(self.etcd_ready, "etcd", self.startup_timeout, [process], interval=0.1)
        return time.time()

    def etcd_revision(self) -> int:
        """etcd's current revision (its JSON gateway: a range read of one key)."""
        answer = _etcd_post(self.etcd_url, "/v3/kv/range", {"key": "AA==", "limit": 1})
        return int(answer["header"]["revision"])

    def etcd_compact(self, revision: int | None = None) -> int:
        """Compact etcd's history up to ``revision`` (default: the current one): a watch from
        a version before it then ends with 410 Gone where the API server watches etcd itself.
        Returns the revision compacted to."""
        target = revision if revision is not None else self.etcd_revision()
        _etcd_post(self.etcd_url, "/v3/kv/compaction", {"revision": str(target)})
        return target

    @property
    def controller_manager_binary(self) -> Path | None:
        binary = self.assets / "kube-controller-manager"
        return binary if binary.is_file() and os.access(binary, os.X_OK) else None

    def start_controller_manager(self) -> None:
        binary = self.controller_manager_binary
        assert binary is not None, "no kube-controller-manager in the assets folder"
        self._start_component(
            "kube-controller-manager",
            binary,
            self._env(),
            [
                f"--controllers={','.join(self.controllers)}",
                "--use-service-account-credentials=false",
            ],
        )

    def stop_controller_manager(self) -> None:
        for process in [p for p in self.processes if p.name == "kube-controller-manager"]:
            process.stop()
            self.processes.remove(process)

    def _write_kubeconfig(self) -> None:
        self.write_kubeconfig(self.kubeconfig, ADMIN_USER, self.token)

    def write_kubeconfig(self, path: Path, user: str, token: str) -> Path:
        """A kubeconfig for this API server as ``user``, authenticated by ``token`` (0600)."""
        assert self.pki is not None
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [
                {
                    "name": "envtest",
                    "cluster": {"server": self.url, "certificate-authority": str(self.pki.ca_cert)},
                }
            ],
            "users": [{"name": user, "user": {"token": token}}],
            "contexts": [{"name": "envtest", "context": {"cluster": "envtest", "user": user}}],
            "current-context": "envtest",
        }
        path.write_text(json.dumps(config, indent=2))
        path.chmod(0o600)
        return path

    def _start_scheduler(self, binary: Path, env: Mapping[str, str]) -> None:
        self._start_component("kube-scheduler", binary, env, [])

    def _start_component(
        self, name: str, binary: Path, env: Mapping[str, str], extra: list[str]
    ) -> None:
        """kube-scheduler or kube-controller-manager, as the admin, serving health on loopback."""
        port = free_port()
        component = Process(
            name,
            [
                str(binary),
                f"--kubeconfig={self.kubeconfig}",
                f"--authentication-kubeconfig={self.kubeconfig}",
                f"--authorization-kubeconfig={self.kubeconfig}",
                "--authorization-always-allow-paths=/healthz,/readyz,/livez",
                "--bind-address=127.0.0.1",
                f"--secure-port={port}",
                f"--cert-dir={self.workdir / name}",
                "--leader-elect=false",
                *extra,
            ],
            self.workdir / f"{name}.log",
        )
        self.processes.append(component)
        component.start(env)
        insecure = ssl.create_default_context()
        insecure.check_hostname = False
        insecure.verify_mode = ssl.CERT_NONE  # its self-signed loopback cert; health only
        wait_until(
            lambda: _http_ok(f"https://127.0.0.1:{port}/healthz", insecure),
            f"{name} /healthz",
            self.startup_timeout,
            self.processes,
        )

    def configuration(self) -> Configuration:
        assert self.pki is not None, "start() first"
        # loopback never goes through a proxy that the environment may name
        configuration = Configuration(host=self.url, no_proxy="127.0.0.0/8,localhost")
        configuration.ssl_ca_cert = str(self.pki.ca_cert)
        configuration.api_key = {"BearerToken": f"Bearer {self.token}"}
        return configuration

    def api_client(self) -> ApiClient:
        return ApiClient(self.configuration())

    def stop(self) -> None:
        """Stop the processes we started, newest first (scheduler, API server, etcd)."""
        for process in reversed(self.processes):
            with contextlib.suppress(Exception):
                process.stop()

    def __enter__(self) -> "ControlPlane":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


@contextlib.contextmanager
def running_control_plane(workdir: Path, assets: Path | None = None) -> Iterator[ControlPlane]:
    """Start a control plane from ``$KUBEBUILDER_ASSETS`` (or ``assets``) for a with-block."""
    found = assets or find_assets()
    if found is None:
        raise RuntimeError(SKIP_REASON)
    with ControlPlane(found, workdir) as plane:
        yield plane


# -- objects a kubelet-less cluster needs help with ------------------------------------------


def json_of(response: object) -> dict[str, Any]:
    """The decoded body of a ``_preload_content=False`` call (a urllib3 response, whatever
    the client's annotations say). Reading it gives its connection back to the pool."""
    data: dict[str, Any] = json.loads(cast(HTTPResponse, response).data)
    return data


def _now() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def create_node(
    api: ApiClient,
    name: str,
    labels: Mapping[str, str] | None = None,
    *,
    cpu: str = "8",
    memory: str = "32Gi",
    pods: str = "110",
    taints: Sequence[Mapping[str, str]] = (),
    kubelet_version: str = "v1.36.1",
) -> dict[str, Any]:
    """A Ready, schedulable Node: allocatable, the Ready condition and the kubelet's version
    set through the status subresource, and the not-ready taint (added by admission to every
    new node) removed."""
    core = CoreV1Api(api)
    all_labels = {"kubernetes.io/hostname": name, "kubernetes.io/os": "linux", **(labels or {})}
    body = {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": all_labels},
        "spec": {"taints": [dict(t) for t in taints]} if taints else {},
    }
    json_of(core.create_node(body, _preload_content=False))  # type: ignore[arg-type]
    resources = {"cpu": cpu, "memory": memory, "pods": pods}
    now = _now()
    status = {
        "status": {
            "capacity": resources,
            "allocatable": resources,
            "nodeInfo": {"kubeletVersion": kubelet_version},
            "conditions": [
                {
                    "type": "Ready",
                    "status": "True",
                    "reason": "KubeletReady",
                    "message": "envtest: no kubelet, marked Ready by the test",
                    "lastHeartbeatTime": now,
                    "lastTransitionTime": now,
                }
            ],
        }
    }
    json_of(
        core.patch_node_status(
            name, status, _content_type="application/merge-patch+json", _preload_content=False
        )
    )
    current = json_of(core.read_node(name, _preload_content=False))
    kept = [
        t for t in (current.get("spec") or {}).get("taints") or [] if t["key"] != NOT_READY_TAINT
    ]
    resp = core.patch_node(
        name,
        {"spec": {"taints": kept or None}},
        _content_type="application/merge-patch+json",
        _preload_content=False,
    )
    return json_of(resp)


def create_namespace(api: ApiClient, name: str) -> None:
    json_of(
        CoreV1Api(api).create_namespace(
            {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}},  # type: ignore[arg-type]
            _preload_content=False,
        )
    )


def pod_body(
    namespace: str,
    name: str,
    labels: Mapping[str, str] | None = None,
    *,
    scheduler_name: str | None = None,
    gates: Sequence[str] = (),
    node_name: str | None = None,
    node_selector: Mapping[str, str] | None = None,
    cpu: str = "100m",
    memory: str = "128Mi",
    annotations: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """A one-container pod (it never runs: there is no kubelet)."""
    spec: dict[str, Any] = {
        "containers": [
            {
                "name": "redis",
                "image": "redis:7.2",
                "resources": {"requests": {"cpu": cpu, "memory": memory}},
            }
        ],
        "terminationGracePeriodSeconds": 0,
    }
    if scheduler_name:
        spec["schedulerName"] = scheduler_name
    if gates:
        spec["schedulingGates"] = [{"name": g} for g in gates]
    if node_name:
        spec["nodeName"] = node_name
    if node_selector:
        spec["nodeSelector"] = dict(node_selector)
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": dict(labels or {}),
            "annotations": dict(annotations or {}),
        },
        "spec": spec,
    }


def create_pod(
    api: ApiClient,
    namespace: str,
    name: str,
    labels: Mapping[str, str] | None = None,
    *,
    dry_run: bool = False,
    **spec: Any,
) -> dict[str, Any]:
    """``pod_body`` made on the server; ``dry_run`` only asks what admission makes of it."""
    body: Any = pod_body(namespace, name, labels, **spec)
    core = CoreV1Api(api)
    if dry_run:
        return json_of(
            core.create_namespaced_pod(namespace, body, dry_run="All", _preload_content=False)
        )
    return json_of(core.create_namespaced_pod(namespace, body, _preload_content=False))


def set_pod_phase(api: ApiClient, namespace: str, name: str, phase: str = "Running") -> None:
    """What a kubelet would report; e.g. Running, so evictions consult PodDisruptionBudgets."""
    json_of(
        CoreV1Api(api).patch_namespaced_pod_status(
            name,
            namespace,
            {"status": {"phase": phase}},
            _content_type="application/merge-patch+json",
            _preload_content=False,
        )
    )
