"""A test stand-in for the kubelet: marks bound pods Running and Ready, as a node would.

Without it an OrderedReady StatefulSet never makes its next pod, and an operator that waits
for Ready pods never goes on. It writes only pod status (the ``status`` subresource), gives
each pod its own loopback "pod IP", and nothing else: no containers run.
"""

import contextlib
import json
import threading
import time
from datetime import UTC, datetime
from typing import Any

from kubernetes.client import ApiClient, CoreV1Api
from kubernetes.client.exceptions import ApiException


class KubeletStandIn:
    def __init__(self, api: ApiClient, namespace: str, period: float = 0.2) -> None:
        self.core = CoreV1Api(api)
        self.namespace = namespace
        self.period = period
        self.ready_at: dict[str, float] = {}
        """When each pod was marked Ready (time.time()), by name."""
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="kubelet-stand-in", daemon=True)
        self._ips = 0

    def __enter__(self) -> "KubeletStandIn":
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=10)

    def _run(self) -> None:
        while not self._stop.is_set():
            # a conflict or a pod gone: the next tick sees it as it is
            with contextlib.suppress(ApiException):
                self._tick()
            self._stop.wait(self.period)

    def _tick(self) -> None:
        response = self.core.list_namespaced_pod(self.namespace, _preload_content=False)
        for pod in json.loads(response.data).get("items", []):  # type: ignore[attr-defined]
            meta, spec, status = pod["metadata"], pod.get("spec") or {}, pod.get("status") or {}
            if not spec.get("nodeName") or meta.get("deletionTimestamp"):
                continue
            if status.get("phase") == "Running" and _ready(status):
                continue
            self._ips += 1
            now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
            body: dict[str, Any] = {
                "status": {
                    "phase": "Running",
                    "podIP": f"127.1.{self._ips // 250}.{self._ips % 250 + 1}",
                    "startTime": now,
                    "conditions": [
                        {"type": "PodScheduled", "status": "True", "lastTransitionTime": now},
                        {"type": "Initialized", "status": "True", "lastTransitionTime": now},
                        {"type": "ContainersReady", "status": "True", "lastTransitionTime": now},
                        {"type": "Ready", "status": "True", "lastTransitionTime": now},
                    ],
                }
            }
            self.core.patch_namespaced_pod_status(meta["name"], self.namespace, body)
            self.ready_at.setdefault(meta["name"], time.time())


def _ready(status: dict[str, Any]) -> bool:
    return any(
        c.get("type") == "Ready" and c.get("status") == "True"
        for c in status.get("conditions") or []
    )
