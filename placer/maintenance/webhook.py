"""The guard's validating admission webhook: evictions (``pods/eviction`` CREATE) and deletes of
pods, answered from ``Guard.admit``.

Installed with ``failurePolicy: Ignore`` and a 5 s timeout (deploy/components/guard): while the
guard is down, evictions and deletes go ahead as they would without it. An answer the guard cannot
make (an error of its own) lets the request through as well, with a warning: the guard may hold
a disruption, never block one for good.
"""

from __future__ import annotations

import json
import logging
import ssl
import threading
from collections.abc import Callable, Mapping
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from placer.maintenance.guard import Admission

log = logging.getLogger(__name__)

Admit = Callable[..., Admission]
MAX_BODY = 4 << 20


def _target(request: Mapping[str, Any]) -> tuple[str, str] | None:
    """(namespace, pod name) for an eviction or a pod delete; None for anything else, and for
    the delete of a pod already being deleted: holding it cannot keep the pod (its containers
    are stopping or stopped), it only leaves its object behind and its StatefulSet waiting."""
    resource = (request.get("resource") or {}).get("resource")
    sub = request.get("subResource") or ""
    operation = request.get("operation")
    if resource != "pods":
        return None
    if not ((sub == "eviction" and operation == "CREATE") or (sub == "" and operation == "DELETE")):
        return None
    if operation == "DELETE" and ((request.get("oldObject") or {}).get("metadata") or {}).get(
        "deletionTimestamp"
    ):
        return None  # already stopping: the kubelet's last delete, once its containers are gone
    namespace = request.get("namespace") or ""
    name = request.get("name") or ""
    if not name and sub == "eviction":
        name = ((request.get("object") or {}).get("metadata") or {}).get("name") or ""
    return (namespace, name) if namespace and name else None


def review(body: Mapping[str, Any], admit: Admit) -> dict[str, Any]:
    """The AdmissionReview answer to ``body``."""
    request = body.get("request") or {}
    response: dict[str, Any] = {"uid": request.get("uid", ""), "allowed": True}
    target = _target(request)
    if target is not None:
        try:
            answer = admit(target[0], target[1], dry_run=bool(request.get("dryRun")))
        except Exception as exc:  # fail open: the guard's own fault never holds a pod
            log.exception("guard: admission of %s/%s", *target)
            answer = Admission(True, warnings=(f"redis-placer guard error, let through: {exc}",))
        response["allowed"] = answer.allowed
        if not answer.allowed:
            response["status"] = {
                "code": answer.code,
                "reason": "TooManyRequests" if answer.code == 429 else "Forbidden",
                "message": answer.message,
            }
        if answer.warnings:
            response["warnings"] = list(answer.warnings)
    return {
        "apiVersion": body.get("apiVersion", "admission.k8s.io/v1"),
        "kind": "AdmissionReview",
        "response": response,
    }


def _handler(admit: Admit) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def _send(self, code: int, payload: bytes, kind: str = "application/json") -> None:
            self.send_response(code)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

        def do_GET(self) -> None:
            if self.path == "/healthz":
                self._send(200, b"ok", "text/plain")
            else:
                self._send(404, b"not found", "text/plain")

        def do_POST(self) -> None:
            if self.path.split("?", 1)[0] != "/validate":
                self._send(404, b"not found", "text/plain")
                return
            length = int(self.headers.get("Content-Length") or 0)
            if length <= 0 or length > MAX_BODY:
                self._send(400, b"an AdmissionReview body is expected", "text/plain")
                return
            try:
                body = json.loads(self.rfile.read(length))
            except ValueError:
                self._send(400, b"not JSON", "text/plain")
                return
            if not isinstance(body, dict):
                self._send(400, b"an AdmissionReview object is expected", "text/plain")
                return
            self._send(200, json.dumps(review(body, admit)).encode())

        def log_message(self, format: str, *args: Any) -> None:
            log.debug("webhook: " + format, *args)

    return Handler


class WebhookServer:
    """HTTPS on ``port`` (0: any free one) with the serving certificate and key files."""

    def __init__(
        self, admit: Admit, *, cert_file: str, key_file: str, port: int, host: str = ""
    ) -> None:
        self._server = ThreadingHTTPServer((host, port), _handler(admit))
        self._server.daemon_threads = True
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        context.load_cert_chain(cert_file, key_file)
        self._context = context
        self._server.socket = context.wrap_socket(self._server.socket, server_side=True)
        self._thread = threading.Thread(
            target=self._server.serve_forever, name="guard-webhook", daemon=True
        )

    def reload(self, cert_file: str, key_file: str) -> None:
        """Serve a renewed certificate from the next connection on."""
        self._context.load_cert_chain(cert_file, key_file)

    @property
    def port(self) -> int:
        return int(self._server.server_address[1])

    def __enter__(self) -> WebhookServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()


__all__ = ["WebhookServer", "review"]
