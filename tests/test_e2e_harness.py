"""The e2e control-plane harness itself, without real Kubernetes binaries.

The PKI is checked with real TLS handshakes, and the start-up wiring (ports, flags, token file,
readiness polling, kubeconfig, client configuration, shutdown) with stand-in ``etcd`` and
``kube-apiserver`` scripts, so a broken harness shows up here and not only where envtest
binaries happen to exist.
"""

import shutil
import socket
import ssl
import sys
import threading
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import serialization

from placer.kube.adapter import KubernetesAdapter
from placer.kube.config import load_api_client
from tests.e2e.control_plane import (
    ASSETS_ENV,
    ControlPlane,
    find_assets,
    generate_pki,
)

FAKE_ETCD = """
import http.server, sys
args = dict(a.lstrip("-").split("=", 1) for a in sys.argv[1:] if "=" in a)
for flag in ("data-dir", "listen-client-urls", "listen-peer-urls", "initial-cluster"):
    assert flag in args, flag
port = int(args["listen-client-urls"].rsplit(":", 1)[1])
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        body = b'{"health":"true"}' if self.path == "/health" else b"{}"
        self.send_response(200 if self.path == "/health" else 404)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def log_message(self, *a):
        pass
http.server.HTTPServer(("127.0.0.1", port), H).serve_forever()
"""

FAKE_APISERVER = """
import csv, http.server, json, ssl, sys, urllib.request
args = dict(a.lstrip("-").split("=", 1) for a in sys.argv[1:] if "=" in a)
required = ("etcd-servers", "secure-port", "tls-cert-file", "tls-private-key-file",
            "token-auth-file", "service-account-issuer", "service-account-key-file",
            "service-account-signing-key-file", "service-cluster-ip-range")
missing = [f for f in required if f not in args]
assert not missing, missing
assert args["authorization-mode"] == "RBAC"
assert args["bind-address"] == "127.0.0.1"
urllib.request.urlopen(args["etcd-servers"] + "/health", timeout=5).read()
(row,) = list(csv.reader(open(args["token-auth-file"])))
token, user, uid, groups = row
assert "system:masters" in groups.split(",")
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        if self.headers.get("Authorization") != "Bearer " + token:
            code, body = 401, {"kind": "Status", "code": 401}
        elif self.path == "/readyz":
            code, body = 200, "ok"
        elif self.path.startswith("/api/v1/nodes"):
            code, body = 200, {"kind": "NodeList", "metadata": {"resourceVersion": "1"},
                               "items": [{"metadata": {"name": "fake-node"}}]}
        else:
            code, body = 404, {"kind": "Status", "code": 404}
        data = (body if isinstance(body, str) else json.dumps(body)).encode()
        self.send_response(code)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)
    def log_message(self, *a):
        pass
server = http.server.ThreadingHTTPServer(("127.0.0.1", int(args["secure-port"])), H)
context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
context.load_cert_chain(args["tls-cert-file"], args["tls-private-key-file"])
server.socket = context.wrap_socket(server.socket, server_side=True)
server.serve_forever()
"""


def _script(folder: Path, name: str, body: str) -> Path:
    path = folder / name
    path.write_text(f"#!{sys.executable}\n{body}")
    path.chmod(0o755)
    return path


def test_find_assets(tmp_path: Path) -> None:
    assert find_assets({}) is None
    assert find_assets({ASSETS_ENV: str(tmp_path / "absent")}) is None
    _script(tmp_path, "etcd", "")
    assert find_assets({ASSETS_ENV: str(tmp_path)}) is None  # kube-apiserver missing
    _script(tmp_path, "kube-apiserver", "")
    assert find_assets({ASSETS_ENV: str(tmp_path)}) == tmp_path


def _tls_handshake(pki_dir: Path, server_name: str) -> str:
    """Serve the generated cert on 127.0.0.1 and connect trusting only the generated CA."""
    server_context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server_context.load_cert_chain(pki_dir / "serving.crt", pki_dir / "serving.key")
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]

    def serve() -> None:
        conn, _ = listener.accept()
        with server_context.wrap_socket(conn, server_side=True) as tls:
            tls.sendall(b"hello")

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    client_context = ssl.create_default_context(cafile=str(pki_dir / "ca.crt"))
    client_context.verify_flags |= ssl.VERIFY_X509_STRICT
    with (
        socket.create_connection(("127.0.0.1", port), timeout=5) as raw,
        client_context.wrap_socket(raw, server_hostname=server_name) as tls,
    ):
        data = tls.recv(5)
    thread.join(timeout=5)
    listener.close()
    return data.decode()


@pytest.mark.parametrize("use_openssl", [False, True], ids=["cryptography", "openssl"])
def test_generated_pki_serves_verified_tls(tmp_path: Path, use_openssl: bool) -> None:
    if use_openssl and shutil.which("openssl") is None:
        pytest.skip("openssl command not installed")
    pki = generate_pki(tmp_path, use_openssl=use_openssl)
    assert _tls_handshake(tmp_path, "127.0.0.1") == "hello"
    assert _tls_handshake(tmp_path, "localhost") == "hello"
    cert = x509.load_pem_x509_certificate(pki.serving_cert.read_bytes())
    assert not cert.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
    private = serialization.load_pem_private_key(pki.sa_key.read_bytes(), password=None)
    public = serialization.load_pem_public_key(pki.sa_pub.read_bytes())
    assert private.public_key().public_numbers() == public.public_numbers()  # type: ignore[union-attr]
    assert oct(pki.sa_key.stat().st_mode & 0o777) == "0o600"


@pytest.mark.parametrize("etcd", ["stand-in", "real"])
def test_control_plane_wiring_with_stand_in_binaries(tmp_path: Path, etcd: str) -> None:
    """With "real", a real etcd from PATH (Debian's etcd-server) checks the etcd flags too."""
    assets = tmp_path / "bin"
    assets.mkdir()
    if etcd == "real":
        real = shutil.which("etcd")
        if real is None:
            pytest.skip("no etcd on PATH (apt-get install etcd-server)")
        (assets / "etcd").symlink_to(real)
    else:
        _script(assets, "etcd", FAKE_ETCD)
    _script(assets, "kube-apiserver", FAKE_APISERVER)
    plane = ControlPlane(assets, tmp_path / "work", startup_timeout=30)
    with plane:
        assert not plane.scheduler_running  # no kube-scheduler binary: not started
        client = plane.api_client()
        nodes = KubernetesAdapter(client).list_nodes()
        assert [n["metadata"]["name"] for n in nodes] == ["fake-node"]
        from_file = load_api_client(str(plane.kubeconfig))
        assert KubernetesAdapter(from_file).list_nodes()[0]["kind"] == "Node"
        popens = [p.popen for p in plane.processes]
    assert all(p is not None and p.poll() is not None for p in popens)  # all stopped


def test_a_crashing_binary_fails_with_its_log(tmp_path: Path) -> None:
    assets = tmp_path / "bin"
    assets.mkdir()
    _script(assets, "etcd", FAKE_ETCD)
    _script(assets, "kube-apiserver", "import sys\nprint('bad flag --nope')\nsys.exit(1)\n")
    plane = ControlPlane(assets, tmp_path / "work", startup_timeout=30)
    with pytest.raises(RuntimeError, match=r"kube-apiserver exited(.|\n)*bad flag --nope"):
        plane.start()
    assert all(p.popen is not None and p.popen.poll() is not None for p in plane.processes)
