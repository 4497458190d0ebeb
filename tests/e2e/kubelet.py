"""A test stand-in for the kubelet: marks bound pods Running and Ready, as a node would.

Without it an OrderedReady StatefulSet never makes its next pod, and an operator that waits
for Ready pods never goes on. It writes only pod status (the ``status`` subresource) and gives
each pod its own loopback "pod IP". With a ``runtime`` (tests.e2e.redis_pods.RedisPods) a real
redis-server runs behind each bound pod on that IP, stopped when the pod goes; without one no
container runs. Pods on a node in ``down_nodes`` are left alone, as a lost node reports nothing.

With a ``lifecycle`` (and a runtime) it acts as a kubelet does where planned disruptions depend
on it:

- a container starts ``start_delay_s`` after its pod is bound, plus ``attach_delay_s`` when the
  pod's volume (kept per pod name, as a PersistentVolumeClaim is) was attached to another node
  before;
- the pod turns Ready only when its readiness probe passes, first ``initial_delay_s`` after the
  container started and then every ``period_s``; ``failure_threshold`` failures in a row turn it
  NotReady again;
- a deleted pod (a deletionTimestamp: an eviction, a rolling update, a delete) runs its
  ``pre_stop`` hook, then its redis-server gets SIGTERM and what is left of the grace period
  (``deletionGracePeriodSeconds``), then SIGKILL; then the pod object is deleted for good, as
  the kubelet does once the containers are gone. A new pod of the same name starts only then.
"""

import contextlib
import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from kubernetes.client import ApiClient, CoreV1Api
from kubernetes.client.exceptions import ApiException

if TYPE_CHECKING:
    from tests.e2e.redis_pods import RedisPods


Hook = Callable[["RedisPods", str], Any]
"""What runs against a pod's own server (the runtime and its ``namespace/name``)."""


@dataclass(frozen=True)
class Probe:
    """A container's readiness probe: ``check`` passes or not, on the probe's schedule."""

    check: Callable[["RedisPods", str], bool]
    initial_delay_s: float = 0.0
    period_s: float = 10.0
    failure_threshold: int = 3


@dataclass(frozen=True)
class Lifecycle:
    """How long a container takes to start, its readiness probe and its preStop hook."""

    start_delay_s: float = 0.0
    attach_delay_s: float = 0.0
    readiness: Probe | None = None
    pre_stop: Hook | None = None
    probe_scale: float = 1.0
    """The probe's delays and period multiplied by this (short CI runs; 1.0 as the chart says)."""

    def scaled(self) -> Probe | None:
        if self.readiness is None:
            return None
        r = self.readiness
        return replace(
            r,
            initial_delay_s=r.initial_delay_s * self.probe_scale,
            period_s=r.period_s * self.probe_scale,
        )


@dataclass
class _Container:
    uid: str
    started: float
    next_probe: float
    ready: bool = False
    failures: int = 0


class KubeletStandIn:
    def __init__(
        self,
        api: ApiClient,
        namespace: str,
        period: float = 0.2,
        runtime: "RedisPods | None" = None,
        lifecycle: Lifecycle | None = None,
    ) -> None:
        self.core = CoreV1Api(api)
        self.namespace = namespace
        self.period = period
        self.runtime = runtime
        self.lifecycle = lifecycle
        self._bound_at: dict[str, tuple[str, float]] = {}
        self._containers: dict[str, _Container] = {}
        self._volume_node: dict[str, str] = {}
        """Pod name -> the node its volume was last attached to."""
        self._terminating: set[str] = set()
        """Pod keys whose old incarnation is still stopping."""
        self._terminated_uids: set[str] = set()
        self.terminations: list[dict[str, Any]] = []
        """Each deleted pod's stop: its name, the preStop outcome, how the server ended, seconds."""
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
        if self.lifecycle is not None and self.runtime is not None:
            self._tick_lifecycle(self.runtime, self.lifecycle)
            return
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

    # -- with a lifecycle: start delays, readiness probes, preStop and grace periods ------------

    def _tick_lifecycle(self, runtime: "RedisPods", life: Lifecycle) -> None:
        response = self.core.list_namespaced_pod(self.namespace, _preload_content=False)
        now = time.monotonic()
        seen: set[str] = set()
        probe = life.scaled()
        for pod in json.loads(response.data).get("items", []):  # type: ignore[attr-defined]
            meta, spec, status = pod["metadata"], pod.get("spec") or {}, pod.get("status") or {}
            node = spec.get("nodeName")
            key = f"{self.namespace}/{meta['name']}"
            uid = meta["uid"]
            if not node:
                continue
            seen.add(key)
            if node in self.down_nodes:
                continue
            if meta.get("deletionTimestamp"):
                if uid not in self._terminated_uids:
                    self._terminated_uids.add(uid)
                    self._terminating.add(key)
                    grace = float(meta.get("deletionGracePeriodSeconds") or 0)
                    threading.Thread(
                        target=self._terminate,
                        args=(runtime, life, key, uid, grace),
                        name=f"stop-{meta['name']}",
                        daemon=True,
                    ).start()
                continue
            container = self._containers.get(key)
            if container is None or container.uid != uid:
                if key in self._terminating:
                    continue  # the old incarnation still stops: its volume is not free yet
                bound = self._bound_at.get(key)
                if bound is None or bound[0] != uid:
                    bound = (uid, now)
                    self._bound_at[key] = bound
                attached = self._volume_node.get(meta["name"])
                delay = life.start_delay_s
                if attached is not None and attached != node:
                    delay += life.attach_delay_s
                if now < bound[1] + delay:
                    continue
                ip = runtime.start(key, uid)
                self._volume_node[meta["name"]] = node
                started = time.monotonic()
                container = _Container(
                    uid, started, started + (probe.initial_delay_s if probe else 0.0)
                )
                self._containers[key] = container
                self._patch(meta, status, ip, ready=probe is None)
                if probe is None:
                    container.ready = True
                    self.ready_at.setdefault(meta["name"], time.time())
                continue
            if not runtime.alive(key):
                if key in runtime.pods:  # its node came back: the container restarts
                    runtime.start(key, uid)
                continue
            ip = runtime.ip(key)
            if status.get("podIP") != ip:
                self._patch(meta, status, ip, ready=container.ready)
            if probe is None or now < container.next_probe:
                continue
            container.next_probe = now + probe.period_s
            try:
                passed = bool(probe.check(runtime, key))
            except Exception:
                passed = False
            if passed:
                container.failures = 0
                if not container.ready:
                    container.ready = True
                    self._patch(meta, status, ip, ready=True)
                    self.ready_at[meta["name"]] = time.time()
            else:
                container.failures += 1
                if container.ready and container.failures >= probe.failure_threshold:
                    container.ready = False
                    self._patch(meta, status, ip, ready=False)
        for key in list(self._containers):
            if key not in seen and key not in self._terminating:
                # deleted at once (grace 0, or force): the container goes with it
                runtime.stop(key)
                self._containers.pop(key, None)

    def _terminate(
        self, runtime: "RedisPods", life: Lifecycle, key: str, uid: str, grace: float
    ) -> None:
        began = time.monotonic()
        record: dict[str, Any] = {"pod": key, "grace_s": grace, "at": time.time()}
        try:
            container = self._containers.get(key)
            if container is not None and container.uid == uid and runtime.alive(key):
                if life.pre_stop is not None:
                    try:
                        record["pre_stop"] = life.pre_stop(runtime, key)
                    except Exception as exc:  # a failing hook does not stop the shutdown
                        record["pre_stop"] = f"failed: {type(exc).__name__}: {exc}"
                left = grace - (time.monotonic() - began)
                record["server"] = runtime.terminate(key, uid, left)
            else:
                record["server"] = runtime.terminate(key, uid, 0.0)
            record["delete"] = self._delete_for_good(key.split("/", 1)[1], uid)
        finally:
            if self._containers.get(key) is not None and self._containers[key].uid == uid:
                self._containers.pop(key, None)
            self._terminating.discard(key)
            record["seconds"] = round(time.monotonic() - began, 2)
            self.terminations.append(record)

    def _delete_for_good(self, name: str, uid: str, within_s: float = 120.0) -> str:
        """The pod object deleted with grace 0 once its containers are gone, retried as the
        kubelet's status manager retries it; what happened."""
        refused: list[str] = []
        deadline = time.monotonic() + within_s
        while not self._stop.is_set():
            try:
                # with a body, the API server reads the options from it, not the query
                self.core.delete_namespaced_pod(
                    name,
                    self.namespace,
                    body={"gracePeriodSeconds": 0, "preconditions": {"uid": uid}},  # type: ignore[arg-type]
                )
            except ApiException as exc:
                if exc.status in (404, 409):  # gone, or a new pod of the name
                    break
                refused.append(f"{exc.status}: {(exc.body or '')[:200]}")
                if time.monotonic() > deadline:
                    return f"not deleted: {refused[-1]}"
                self._stop.wait(1.0)
                continue
            break
        return f"deleted after {len(refused)} refusals" + (f" ({refused[0]})" if refused else "")

    def _patch(self, meta: dict[str, Any], status: dict[str, Any], ip: str, ready: bool) -> None:
        now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        flag = "True" if ready else "False"
        body: dict[str, Any] = {
            "status": {
                "phase": "Running",
                "podIP": ip,
                "podIPs": [{"ip": ip}],
                "startTime": status.get("startTime") or now,
                "conditions": [
                    {"type": "PodScheduled", "status": "True", "lastTransitionTime": now},
                    {"type": "Initialized", "status": "True", "lastTransitionTime": now},
                    {"type": "ContainersReady", "status": flag, "lastTransitionTime": now},
                    {"type": "Ready", "status": flag, "lastTransitionTime": now},
                ],
            }
        }
        with contextlib.suppress(ApiException):  # the pod went meanwhile
            self.core.patch_namespaced_pod_status(meta["name"], self.namespace, body)


def _ready(status: dict[str, Any]) -> bool:
    return any(
        c.get("type") == "Ready" and c.get("status") == "True"
        for c in status.get("conditions") or []
    )
