"""A test stand-in for the kubelet: marks bound pods Running and Ready, as a node would.

Without it an OrderedReady StatefulSet never makes its next pod, and an operator that waits
for Ready pods never goes on. It writes only pod status (the ``status`` subresource) and gives
each pod its own loopback "pod IP". With a ``runtime`` (tests.e2e.redis_pods.RedisPods) a real
redis-server runs behind each bound pod on that IP, stopped when the pod goes; without one no
container runs. Pods on a node in ``down_nodes`` are left alone, as a lost node reports nothing.
"""

import json
import threading
import time
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from kubernetes.client import ApiClient, CoreV1Api
from kubernetes.client.exceptions import ApiException

if TYPE_CHECKING:
    from tests.e2e.redis_pods import RedisPods


class KubeletStandIn:
    def __init__(
        self,
        api: ApiClient,
        namespace: str,
        period: float = 0.2,
        runtime: "RedisPods | None" = None,
    ) -> None:
        self.core = CoreV1Api(api)
        self.namespace = namespace
        self.period = period
        self.runtime = runtime
        self.down_nodes: set[str] = set()
        """Nodes lost: their pods get no status and their servers no restart."""
        self._running: set[str] = set()
        self.errors: list[str] = []
        """What went wrong starting servers (the last tick's error is retried)."""
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
            try:
                self._tick()
            except ApiException:
                pass
            except Exception as exc:  # a server that would not start: said, and tried again
                self.errors.append(f"{type(exc).__name__}: {exc}")
            self._stop.wait(self.period)

    def _tick(self) -> None:
        response = self.core.list_namespaced_pod(self.namespace, _preload_content=False)
        seen: set[str] = set()
        for pod in json.loads(response.data).get("items", []):  # type: ignore[attr-defined]
            meta, spec, status = pod["metadata"], pod.get("spec") or {}, pod.get("status") or {}
            node = spec.get("nodeName")
            if not node or meta.get("deletionTimestamp"):
                continue
            key = f"{self.namespace}/{meta['name']}"
            seen.add(key)
            if node in self.down_nodes:
                continue
            ip = status.get("podIP")
            if self.runtime is not None:
                ip = self.runtime.start(key, meta["uid"])
                self._running.add(key)
            if status.get("phase") == "Running" and _ready(status) and status.get("podIP") == ip:
                continue
            if ip is None:
                self._ips += 1
                ip = f"127.1.{self._ips // 250}.{self._ips % 250 + 1}"
            now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
            body: dict[str, Any] = {
                "status": {
                    "phase": "Running",
                    "podIP": ip,
                    "podIPs": [{"ip": ip}],
                    "startTime": status.get("startTime") or now,
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
        if self.runtime is not None:
            for key in self._running - seen:  # deleted (evicted, drained): the container stops
                self.runtime.stop(key)
            self._running &= seen


def _ready(status: dict[str, Any]) -> bool:
    return any(
        c.get("type") == "Ready" and c.get("status") == "True"
        for c in status.get("conditions") or []
    )
