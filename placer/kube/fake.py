"""An in-memory ``KubeAdapter`` with the API server's rules that matter to the binder.

It refuses a second bind (409 naming the node), binds no gated pod, checks uid preconditions,
bumps resourceVersions so stale pins conflict, applies the very merge patch the real adapter
sends, and records events and evictions, so decision logic is tested without a cluster.
"""

import base64
import bisect
import copy
import itertools
import threading
import uuid
from collections.abc import Callable, Iterator, Mapping
from typing import Any, Literal

from placer.kube.adapter import (
    DEFAULT_COMPONENT,
    BindOutcome,
    BindResult,
    EventType,
    EvictOutcome,
    EvictResult,
    PatchOutcome,
    PatchResult,
    WatchEvent,
    ca_bundle_patch,
)
from placer.kube.objects import (
    apply_merge_patch,
    build_event,
    build_pin_patch,
    build_ungate_patch,
    gate_names,
)

Key = tuple[str, str]


def _first(entry: tuple[int, WatchEvent]) -> int:
    return entry[0]


def _selector_matches(labels: Mapping[str, str], selector: str | None) -> bool:
    """Equality-based selectors only (``a=b,c!=d,e``): what the binder uses."""
    if not selector:
        return True
    for part in selector.split(","):
        part = part.strip()
        if "!=" in part:
            key, value = part.split("!=", 1)
            if labels.get(key.strip()) == value.strip():
                return False
        elif "=" in part:
            key, value = part.replace("==", "=").split("=", 1)
            if labels.get(key.strip()) != value.strip():
                return False
        elif part.startswith("!"):
            if part[1:] in labels:
                return False
        elif part not in labels:
            return False
    return True


class FakeKubeAdapter:
    """Thread-safe in-memory cluster; ``evict_blocked`` decides which evictions a PDB refuses."""

    def __init__(
        self,
        nodes: list[dict[str, Any]] | None = None,
        pods: list[dict[str, Any]] | None = None,
        evict_blocked: Callable[[dict[str, Any]], str | None] | None = None,
        statefulsets: list[dict[str, Any]] | None = None,
        volume_objects: list[dict[str, Any]] | None = None,
    ) -> None:
        self._lock = threading.RLock()
        self._version = itertools.count(1)
        self.nodes: dict[str, dict[str, Any]] = {}
        self.pods: dict[Key, dict[str, Any]] = {}
        self.configmaps: dict[Key, dict[str, str]] = {}
        self.secrets: dict[Key, dict[str, bytes]] = {}
        self.secret_reads: list[Key] = []
        self.secret_meta: dict[Key, dict[str, Any]] = {}
        """resourceVersion, type and labels of the Secrets in ``secrets`` (set when missing)."""
        self.secret_writes: list[tuple[str, Key]] = []
        """("create" or "update", key) of every Secret written through the adapter."""
        self.webhook_configurations: dict[str, dict[str, Any]] = {}
        self.webhook_patches: list[str] = []
        """The name of the ValidatingWebhookConfiguration, for each patch sent."""
        self.pdbs: dict[Key, dict[str, Any]] = {}
        self.statefulsets: list[dict[str, Any]] = list(statefulsets or [])
        self.volume_objects: list[dict[str, Any]] = list(volume_objects or [])
        """PersistentVolumes, PersistentVolumeClaims and StorageClasses, each with its kind."""
        self.events: list[dict[str, Any]] = []
        self.evicted: list[Key] = []
        self.deleted: list[Key] = []
        self.binds: list[tuple[Key, str]] = []
        self.admission_policies: list[dict[str, Any]] = []
        self.log: list[tuple[int, WatchEvent]] = []
        self.node_log: list[tuple[int, WatchEvent]] = []
        self.evict_blocked = evict_blocked
        for node in nodes or []:
            self.add_node(node)
        for pod in pods or []:
            self.add_pod(pod)

    # -- test set-up ---------------------------------------------------------------------

    def _stamp(self, obj: dict[str, Any], kind: str) -> dict[str, Any]:
        obj.setdefault("kind", kind)
        obj.setdefault("apiVersion", "v1")
        meta = obj.setdefault("metadata", {})
        meta["resourceVersion"] = str(next(self._version))
        return obj

    def _since(
        self, log: list[tuple[int, WatchEvent]], resource_version: str | None
    ) -> list[WatchEvent]:
        """The recorded events after ``resource_version``, in order (logs are kept sorted)."""
        with self._lock:
            start = bisect.bisect_right(log, int(resource_version or 0), key=_first)
            return [event for _, event in log[start:]]

    def _record(self, type_: str, pod: dict[str, Any]) -> None:
        version = int(pod["metadata"]["resourceVersion"])
        self.log.append((version, WatchEvent(type_, copy.deepcopy(pod))))

    def add_node(self, node: dict[str, Any]) -> dict[str, Any]:
        with self._lock:
            node = self._stamp(copy.deepcopy(node), "Node")
            self.nodes[node["metadata"]["name"]] = node
            self._record_node("ADDED", node)
            return copy.deepcopy(node)

    def update_node(self, name: str, change: Callable[[dict[str, Any]], None]) -> None:
        """Change a node in place (cordon it, relabel it) as the API server would record it."""
        with self._lock:
            node = self.nodes[name]
            change(node)
            self._stamp(node, "Node")
            self._record_node("MODIFIED", node)

    def delete_node(self, name: str) -> None:
        with self._lock:
            node = self.nodes.pop(name, None)
            if node is not None:
                self._stamp(node, "Node")
                self._record_node("DELETED", node)

    def _record_node(self, type_: str, node: dict[str, Any]) -> None:
        version = int(node["metadata"]["resourceVersion"])
        self.node_log.append((version, WatchEvent(type_, copy.deepcopy(node))))

    def add_pod(self, pod: dict[str, Any]) -> dict[str, Any]:
        with self._lock:
            pod = self._stamp(copy.deepcopy(pod), "Pod")
            meta = pod["metadata"]
            meta.setdefault("namespace", "default")
            meta.setdefault("uid", str(uuid.uuid4()))
            self.pods[(meta["namespace"], meta["name"])] = pod
            self._record("ADDED", pod)
            return copy.deepcopy(pod)

    def delete_pod(
        self,
        namespace: str,
        name: str,
        uid: str | None = None,
        resource_version: str | None = None,
    ) -> bool:
        """Delete the pod (only as it was, given ``uid`` or ``resource_version``)."""
        with self._lock:
            pod = self.pods.get((namespace, name))
            if pod is None:
                return False
            meta = pod["metadata"]
            if (uid and meta.get("uid") != uid) or (
                resource_version and meta.get("resourceVersion") != resource_version
            ):
                return False
            del self.pods[(namespace, name)]
            self.deleted.append((namespace, name))
            self._stamp(pod, "Pod")
            self._record("DELETED", pod)
            return True

    def _update(self, key: Key, pod: dict[str, Any]) -> dict[str, Any]:
        self._stamp(pod, "Pod")
        self.pods[key] = pod
        self._record("MODIFIED", pod)
        return copy.deepcopy(pod)

    # -- KubeAdapter ---------------------------------------------------------------------

    def list_nodes(self, label_selector: str | None = None) -> list[dict[str, Any]]:
        with self._lock:
            return [
                copy.deepcopy(n)
                for n in self.nodes.values()
                if _selector_matches((n["metadata"].get("labels") or {}), label_selector)
            ]

    def list_nodes_with_version(self) -> tuple[list[dict[str, Any]], str]:
        with self._lock:
            return self.list_nodes(), str(self._current_version())

    def _current_version(self) -> int:
        return max([v for v, _ in self.log[-1:] + self.node_log[-1:]], default=0)

    def watch_nodes(
        self,
        label_selector: str | None = None,
        resource_version: str | None = None,
        timeout_seconds: int = 300,
    ) -> Iterator[WatchEvent]:
        """Replays recorded node changes after ``resource_version``, then ends."""
        for event in self._since(self.node_log, resource_version):
            if _selector_matches(event.object["metadata"].get("labels") or {}, label_selector):
                yield event

    def list_pods(
        self,
        namespace: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
    ) -> list[dict[str, Any]]:
        return self.list_pods_with_version(namespace, label_selector, field_selector)[0]

    def list_pods_with_version(
        self,
        namespace: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
    ) -> tuple[list[dict[str, Any]], str]:
        if field_selector:
            raise NotImplementedError("the fake supports label selectors only")
        with self._lock:
            pods = [
                copy.deepcopy(p)
                for (ns, _), p in sorted(self.pods.items())
                if (namespace is None or ns == namespace)
                and _selector_matches(p["metadata"].get("labels") or {}, label_selector)
            ]
            return pods, str(self._current_version())

    def watch_pods(
        self,
        namespace: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
        resource_version: str | None = None,
        timeout_seconds: int = 300,
    ) -> Iterator[WatchEvent]:
        """Replays recorded changes after ``resource_version``, then ends (a watch timeout)."""
        for event in self._since(self.log, resource_version):
            meta = event.object["metadata"]
            if namespace and meta.get("namespace") != namespace:
                continue
            if _selector_matches(meta.get("labels") or {}, label_selector):
                yield event

    def list_volume_objects(self) -> list[dict[str, Any]]:
        with self._lock:
            return copy.deepcopy(self.volume_objects)

    def list_statefulsets(
        self, namespace: str | None = None, label_selector: str | None = None
    ) -> list[dict[str, Any]]:
        with self._lock:
            return [
                copy.deepcopy(s)
                for s in self.statefulsets
                if (namespace is None or s["metadata"].get("namespace") == namespace)
                and _selector_matches(s["metadata"].get("labels") or {}, label_selector)
            ]

    def get_pod(self, namespace: str, name: str) -> dict[str, Any] | None:
        with self._lock:
            pod = self.pods.get((namespace, name))
            return copy.deepcopy(pod) if pod else None

    def bind_pod(
        self,
        namespace: str,
        name: str,
        uid: str | None,
        node: str,
        annotations: Mapping[str, str] | None = None,
    ) -> BindResult:
        with self._lock:
            pod = self.pods.get((namespace, name))
            if pod is None:
                return BindResult(BindOutcome.GONE, 404, f'pods "{name}" not found')
            if uid and pod["metadata"].get("uid") != uid:
                return BindResult(BindOutcome.CONFLICT, 409, "Precondition failed: UID mismatch")
            current = (pod.get("spec") or {}).get("nodeName")
            if current:
                return BindResult(
                    BindOutcome.CONFLICT,
                    409,
                    f'pod {name} is already assigned to node "{current}"',
                    current,
                )
            if gate_names(pod):
                return BindResult(
                    BindOutcome.CONFLICT, 409, f"pod {name} has non-empty .spec.schedulingGates"
                )
            pod = copy.deepcopy(pod)
            pod.setdefault("spec", {})["nodeName"] = node
            if annotations:  # the server copies a Binding's annotations onto the pod
                meta = pod["metadata"]
                meta["annotations"] = {**(meta.get("annotations") or {}), **annotations}
            self._update((namespace, name), pod)
            self.binds.append(((namespace, name), node))
            return BindResult(BindOutcome.BOUND, 201, f"bound to {node}", node)

    def pin_and_ungate(
        self,
        namespace: str,
        name: str,
        node: str,
        gate: str,
        resource_version: str,
        pod: Mapping[str, Any] | None = None,
        labels: Mapping[str, str] | None = None,
        annotations: Mapping[str, str] | None = None,
    ) -> PatchResult:
        with self._lock:
            stored = self.pods.get((namespace, name))
            if stored is None:
                return PatchResult(PatchOutcome.GONE, 404, f"pod {namespace}/{name} not found")
            if stored["metadata"]["resourceVersion"] != resource_version:
                return PatchResult(PatchOutcome.CONFLICT, 409, "the object has been modified")
            if gate not in gate_names(stored):
                return PatchResult(PatchOutcome.NOT_GATED, 0, f"no scheduling gate {gate!r}")
            patch = build_pin_patch(stored, node, gate, resource_version, labels, annotations)
            return self._patched((namespace, name), patch, f"pinned to {node}")

    def remove_gate(
        self, namespace: str, name: str, gate: str, pod: Mapping[str, Any]
    ) -> PatchResult:
        with self._lock:
            stored = self.pods.get((namespace, name))
            if stored is None:
                return PatchResult(PatchOutcome.GONE, 404, f"pod {namespace}/{name} not found")
            if gate not in gate_names(pod):
                return PatchResult(PatchOutcome.NOT_GATED, 0, f"no scheduling gate {gate!r}")
            version = str(pod["metadata"].get("resourceVersion", ""))
            if stored["metadata"]["resourceVersion"] != version:
                return PatchResult(PatchOutcome.CONFLICT, 409, "the object has been modified")
            patch = build_ungate_patch(stored, gate, version)
            return self._patched((namespace, name), patch, f"gate {gate} removed")

    def _patch_metadata(
        self,
        namespace: str,
        name: str,
        field: str,
        values: Mapping[str, str | None],
        resource_version: str | None,
    ) -> PatchResult:
        """A merge patch of the pod's labels or annotations, as the API server takes it: 404 for
        a pod gone, 409 when ``resource_version`` is not the pod's any more."""
        with self._lock:
            pod = self.pods.get((namespace, name))
            if pod is None:
                return PatchResult(PatchOutcome.GONE, 404, f"pod {namespace}/{name} not found")
            if resource_version and pod["metadata"]["resourceVersion"] != resource_version:
                return PatchResult(PatchOutcome.CONFLICT, 409, "the object has been modified")
            patch = {"metadata": {field: dict(values)}}
            return self._patched((namespace, name), patch, f"{field} patched")

    def _patched(self, key: Key, patch: Mapping[str, Any], done: str) -> PatchResult:
        """Apply a merge patch to the stored pod (the caller holds the lock)."""
        patched = apply_merge_patch(copy.deepcopy(self.pods[key]), dict(patch))
        return PatchResult(PatchOutcome.PATCHED, 200, done, self._update(key, patched))

    def list_admission_policies(self) -> list[dict[str, Any]]:
        with self._lock:
            return copy.deepcopy(self.admission_policies)

    def record_event(
        self,
        pod: Mapping[str, Any],
        reason: str,
        message: str,
        type: EventType = "Normal",
        component: str = DEFAULT_COMPONENT,
        count: int = 1,
    ) -> bool:
        with self._lock:
            self.events.append(
                build_event(pod, reason, message, type, component, "fake", count=count)
            )
        return True

    def evict_pod(self, namespace: str, name: str, uid: str | None = None) -> EvictResult:
        with self._lock:
            pod = self.pods.get((namespace, name))
            if pod is None or (uid and pod["metadata"].get("uid") != uid):
                return EvictResult(EvictOutcome.GONE, 404, f'pods "{name}" not found')
            reason = self.evict_blocked(copy.deepcopy(pod)) if self.evict_blocked else None
            if reason:
                return EvictResult(EvictOutcome.BLOCKED, 429, reason)
            self.evicted.append((namespace, name))
            self.delete_pod(namespace, name)
            return EvictResult(EvictOutcome.EVICTED, 201, "evicted")

    def patch_pod_labels(
        self,
        namespace: str,
        name: str,
        labels: Mapping[str, str | None],
        resource_version: str | None = None,
    ) -> PatchResult:
        return self._patch_metadata(namespace, name, "labels", labels, resource_version)

    server_up = True
    """What ``server_ready`` answers: a test turns the API server's readiness off."""

    def server_ready(self, namespace: str, lease: str) -> bool:
        return self.server_up

    def cordon_node(self, name: str) -> bool:
        """``spec.unschedulable``, as a node watch then sees it."""
        with self._lock:
            if name not in self.nodes:
                return False
            self.update_node(name, lambda n: n.setdefault("spec", {}).update(unschedulable=True))
            return True

    def write_configmap(
        self,
        namespace: str,
        name: str,
        data: Mapping[str, str],
        labels: Mapping[str, str] | None = None,
    ) -> Literal["created", "replaced"]:
        with self._lock:
            existed = (namespace, name) in self.configmaps
            self.configmaps[(namespace, name)] = dict(data)
            return "replaced" if existed else "created"

    def read_configmap(self, namespace: str, name: str) -> dict[str, str] | None:
        with self._lock:
            data = self.configmaps.get((namespace, name))
            return dict(data) if data is not None else None

    def get_secret(self, namespace: str, name: str) -> dict[str, bytes] | None:
        with self._lock:
            self.secret_reads.append((namespace, name))
            data = self.secrets.get((namespace, name))
            return dict(data) if data is not None else None

    def _secret_meta(self, key: Key) -> dict[str, Any]:
        meta = self.secret_meta.setdefault(key, {"type": "Opaque", "labels": {}})
        meta.setdefault("resourceVersion", str(next(self._version)))
        return meta

    def get_secret_object(self, namespace: str, name: str) -> dict[str, Any] | None:
        with self._lock:
            key = (namespace, name)
            data = self.secrets.get(key)
            if data is None:
                return None
            meta = self._secret_meta(key)
            return {
                "apiVersion": "v1",
                "kind": "Secret",
                "metadata": {
                    "name": name,
                    "namespace": namespace,
                    "resourceVersion": meta["resourceVersion"],
                    "labels": dict(meta["labels"]),
                },
                "type": meta["type"],
                "data": {k: base64.b64encode(v).decode("ascii") for k, v in data.items()},
            }

    def create_secret(
        self,
        namespace: str,
        name: str,
        data: Mapping[str, bytes],
        type_: str,
        labels: Mapping[str, str] | None = None,
    ) -> Literal["created", "exists"]:
        with self._lock:
            key = (namespace, name)
            if key in self.secrets:
                return "exists"
            self.secrets[key] = dict(data)
            self.secret_meta[key] = {
                "type": type_,
                "labels": dict(labels or {}),
                "resourceVersion": str(next(self._version)),
            }
            self.secret_writes.append(("create", key))
            return "created"

    def update_secret(
        self,
        namespace: str,
        name: str,
        data: Mapping[str, bytes],
        resource_version: str,
        type_: str = "Opaque",
        labels: Mapping[str, str] | None = None,
    ) -> bool:
        with self._lock:
            key = (namespace, name)
            if key not in self.secrets:
                return False
            meta = self._secret_meta(key)
            if meta["resourceVersion"] != resource_version:
                return False
            if meta["type"] != type_:
                raise ValueError(f"secret {namespace}/{name}: its type cannot change")
            self.secrets[key] = dict(data)
            meta["resourceVersion"] = str(next(self._version))
            meta["labels"] = dict(labels or {})
            self.secret_writes.append(("update", key))
            return True

    def get_webhook_configuration(self, name: str) -> dict[str, Any] | None:
        with self._lock:
            found = self.webhook_configurations.get(name)
            return copy.deepcopy(found) if found is not None else None

    def patch_webhook_ca_bundle(self, name: str, ca_pem: bytes) -> bool:
        with self._lock:
            found = self.webhook_configurations.get(name)
            if found is None:
                return False
            if ca_bundle_patch(found, ca_pem):
                bundle = base64.b64encode(ca_pem).decode("ascii")
                for webhook in found.get("webhooks") or []:
                    webhook.setdefault("clientConfig", {})["caBundle"] = bundle
                self.webhook_patches.append(name)
            return True

    def annotate_pod(
        self,
        namespace: str,
        name: str,
        annotations: Mapping[str, str | None],
        resource_version: str | None = None,
    ) -> PatchResult:
        return self._patch_metadata(namespace, name, "annotations", annotations, resource_version)

    def list_pdbs(self, namespace: str | None = None) -> list[dict[str, Any]]:
        with self._lock:
            return [
                copy.deepcopy(p)
                for (ns, _), p in sorted(self.pdbs.items())
                if namespace is None or ns == namespace
            ]

    def create_pdb(self, namespace: str, body: Mapping[str, Any]) -> Literal["created", "exists"]:
        with self._lock:
            key = (namespace, str(body["metadata"]["name"]))
            if key in self.pdbs:
                return "exists"
            pdb = self._stamp(copy.deepcopy(dict(body)), "PodDisruptionBudget")
            pdb["apiVersion"] = "policy/v1"
            pdb["metadata"]["namespace"] = namespace
            pdb["metadata"].setdefault("uid", str(uuid.uuid4()))
            self.pdbs[key] = pdb
            return "created"

    def delete_pdb(self, namespace: str, name: str, uid: str | None = None) -> bool:
        with self._lock:
            pdb = self.pdbs.get((namespace, name))
            if pdb is None or (uid and pdb["metadata"].get("uid") != uid):
                return False
            del self.pdbs[(namespace, name)]
            return True
