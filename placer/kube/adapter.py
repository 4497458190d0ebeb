"""The one place that talks to the Kubernetes API.

Everything that decides (the binder's batching, the rebalance plan) takes a ``KubeAdapter`` and
can be tested with ``placer.kube.fake.FakeKubeAdapter``; only this module and ``leader.py``
issue requests. Objects cross this boundary as plain dicts in the exact shape
``kubectl get -o json`` prints (camelCase keys, ``kind``/``apiVersion`` set), the same shape the
snapshot parser reads from files, so a live cluster and a file go through one parser.

Responses are read raw (``_preload_content=False``) and decoded with orjson
(``models.json_text``): the generated client's pydantic models are slow for thousands of pods,
reject fields newer than the client, and ``create_namespaced_pod_binding`` fails decoding the
``Status`` the server returns for a successful bind.
"""

import base64
import binascii
import functools
import logging
import os
import socket
import uuid
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Literal, NamedTuple, Protocol, cast, runtime_checkable

from kubernetes.client import ApiClient, AppsV1Api, CoreV1Api, PolicyV1Api, StorageV1Api
from kubernetes.client.exceptions import ApiException
from kubernetes.client.rest import RESTResponse
from urllib3 import HTTPResponse

from models import json_text
from placer.kube.objects import (
    already_bound_node,
    build_binding,
    build_event,
    build_eviction,
    build_pin_patch,
    build_ungate_patch,
    gate_names,
    status_message,
)

log = logging.getLogger(__name__)

EventType = Literal["Normal", "Warning"]
JSON = "application/json"
MERGE_PATCH = "application/merge-patch+json"
JSON_PATCH = "application/json-patch+json"
ADMISSION_POLICIES = "/apis/admissionregistration.k8s.io/v1/mutatingadmissionpolicies"
SECRETS = "/api/v1/namespaces/{namespace}/secrets"
WEBHOOK_API_VERSION = "admissionregistration.k8s.io/v1"
WEBHOOK_CONFIGURATION = (
    "/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations/{name}"
)
DEFAULT_COMPONENT = "redis-placer"
API_VERSIONS = {
    "Node": "v1",
    "Pod": "v1",
    "StatefulSet": "apps/v1",
    "PodDisruptionBudget": "policy/v1",
    "PersistentVolume": "v1",
    "PersistentVolumeClaim": "v1",
    "StorageClass": "storage.k8s.io/v1",
}


class Permission(NamedTuple):
    """One RBAC grant: API group ("" is core), resource (with subresource), verb."""

    group: str
    resource: str
    verb: str


# Every API call the adapter (and the leader elector) makes, by method. deploy/ RBAC is
# checked against this table by tests/test_deploy.py in both directions: every needed grant
# is there and nothing more is granted. Change the code, change the table, change the Role.
REQUIRED_PERMISSIONS: dict[str, tuple[Permission, ...]] = {
    "list_nodes": (Permission("", "nodes", "list"),),
    "watch_nodes": (Permission("", "nodes", "watch"),),
    "list_pods": (Permission("", "pods", "list"),),
    "list_nodes_with_version": (Permission("", "nodes", "list"),),
    "list_pods_with_version": (Permission("", "pods", "list"),),
    "watch_pods": (Permission("", "pods", "watch"),),
    "list_statefulsets": (Permission("apps", "statefulsets", "list"),),
    "list_volume_objects": (
        Permission("", "persistentvolumes", "list"),
        Permission("", "persistentvolumeclaims", "list"),
        Permission("storage.k8s.io", "storageclasses", "list"),
    ),
    "get_pod": (Permission("", "pods", "get"),),
    "bind_pod": (Permission("", "pods/binding", "create"),),
    "pin_and_ungate": (Permission("", "pods", "get"), Permission("", "pods", "patch")),
    "remove_gate": (Permission("", "pods", "patch"),),
    "list_admission_policies": (
        Permission("admissionregistration.k8s.io", "mutatingadmissionpolicies", "list"),
    ),
    "record_event": (Permission("", "events", "create"),),
    "evict_pod": (Permission("", "pods/eviction", "create"),),
    "patch_pod_labels": (Permission("", "pods", "patch"),),
    "cordon_node": (Permission("", "nodes", "patch"),),
    "write_configmap": (
        Permission("", "configmaps", "create"),
        Permission("", "configmaps", "update"),
    ),
    "read_configmap": (Permission("", "configmaps", "get"),),
    "get_secret": (Permission("", "secrets", "get"),),
    # The guard's serving certificate, a Secret in its own namespace (placer.maintenance.certs).
    "get_secret_object": (Permission("", "secrets", "get"),),
    "create_secret": (Permission("", "secrets", "create"),),
    "update_secret": (Permission("", "secrets", "update"),),
    "get_webhook_configuration": (
        Permission("admissionregistration.k8s.io", "validatingwebhookconfigurations", "get"),
    ),
    "patch_webhook_ca_bundle": (
        Permission("admissionregistration.k8s.io", "validatingwebhookconfigurations", "get"),
        Permission("admissionregistration.k8s.io", "validatingwebhookconfigurations", "patch"),
    ),
    "annotate_pod": (Permission("", "pods", "patch"),),
    # record_event again, on the run's own pod (rebalance's summary), so in its own namespace.
    "record_run_event": (Permission("", "events", "create"),),
    "list_pdbs": (Permission("policy", "poddisruptionbudgets", "list"),),
    "create_pdb": (Permission("policy", "poddisruptionbudgets", "create"),),
    "delete_pdb": (Permission("policy", "poddisruptionbudgets", "delete"),),
    "delete_pod": (Permission("", "pods", "delete"),),
    "leader_election": (
        Permission("coordination.k8s.io", "leases", "get"),
        Permission("coordination.k8s.io", "leases", "create"),
        Permission("coordination.k8s.io", "leases", "update"),
    ),
}

Scope = Literal["cluster", "namespace", "redis"]
"""Where a workload needs a grant: ``cluster`` everywhere (a ClusterRoleBinding), ``namespace``
only in its own namespace (a Role), ``redis`` only in the namespaces that hold Redis (a
ClusterRole that deploy/components/redis-namespaces binds by a RoleBinding in each of them)."""

# Which calls each in-cluster workload makes, and where. Reads are cluster-wide (every pod on a
# node counts against its room), and so is the binder's pods/binding, as a scheduler's; what
# either writes to pods, and the Events on them, only where Redis runs.
COMPONENT_CALLS: dict[str, dict[str, Scope]] = {
    "binder": {
        "list_nodes": "cluster",
        "list_nodes_with_version": "cluster",
        "watch_nodes": "cluster",
        "list_pods": "cluster",
        "list_pods_with_version": "cluster",
        "watch_pods": "cluster",
        "list_statefulsets": "cluster",  # shard size when pods lack the annotation
        "list_volume_objects": "cluster",  # where a pod's persistent volumes let it run
        "bind_pod": "redis",  # only Redis pods: a Binding elsewhere is refused
        "get_pod": "redis",
        "pin_and_ungate": "redis",
        "patch_pod_labels": "redis",  # the role the plan chose, before a Binding
        "record_event": "redis",
        "leader_election": "namespace",
    },
    "rebalance": {
        "list_nodes": "cluster",
        "list_pods": "cluster",
        "list_statefulsets": "cluster",
        "list_volume_objects": "cluster",
        "get_pod": "redis",
        "evict_pod": "redis",
        "patch_pod_labels": "redis",  # the redis-role label follows a CLUSTER FAILOVER
        "annotate_pod": "redis",  # Redis's election timers after a CLUSTER FAILOVER
        "record_event": "redis",
        "get_secret": "redis",  # the Redis password and TLS material the pods read
        "record_run_event": "namespace",  # the run's own Event, on its own pod
        "write_configmap": "namespace",  # the rebalance report
        "read_configmap": "namespace",
    },
}


# Calls a component makes only when a flag turns them on; their grants ship apart, in the
# kustomize component of the same name (deploy/components/<flag without -->/).
FLAG_CALLS: dict[tuple[str, str], dict[str, Scope]] = {
    ("binder", "--manage-pdbs"): {
        "list_pdbs": "cluster",  # a shard another budget covers is left alone
        "create_pdb": "redis",
        "delete_pdb": "redis",
    },
    ("binder", "--recreate-refused"): {
        "delete_pod": "redis",  # a never-started pod whose pin kube-scheduler refused
    },
    ("binder", "--guard"): {
        # the webhook's serving certificate: its Secret, made and renewed by the binder itself
        "get_secret_object": "namespace",
        "create_secret": "namespace",
        "update_secret": "namespace",
        "patch_webhook_ca_bundle": "cluster",  # the CA in the guard's webhook configuration
        "get_secret": "redis",  # the Redis password and TLS material the pods read
        "annotate_pod": "redis",  # handover-requested, stop-asked, Redis's election timers
    },
}


def permissions_for(component: str, flags: tuple[str, ...] = ()) -> dict[Scope, set[Permission]]:
    """The grants the component needs (with ``flags``), by scope: cluster, namespace, redis."""
    scopes: dict[Scope, set[Permission]] = {"cluster": set(), "namespace": set(), "redis": set()}
    calls = dict(COMPONENT_CALLS[component])
    for flag in flags:
        calls.update(FLAG_CALLS[(component, flag)])
    for call, scope in calls.items():
        scopes[scope].update(REQUIRED_PERMISSIONS[call])
    return scopes


class BindOutcome(StrEnum):
    BOUND = "bound"
    CONFLICT = "conflict"  # already bound (maybe by us, earlier), still gated, or uid changed
    GONE = "gone"
    ERROR = "error"


class PatchOutcome(StrEnum):
    PATCHED = "patched"
    CONFLICT = "conflict"  # resourceVersion moved on: re-read and decide again
    GONE = "gone"
    NOT_GATED = "not_gated"  # the gate is not (or no longer) on the pod
    ERROR = "error"


class EvictOutcome(StrEnum):
    EVICTED = "evicted"
    BLOCKED = "blocked"  # 429: a PodDisruptionBudget says no, for now
    GONE = "gone"
    ERROR = "error"


@dataclass(frozen=True)
class BindResult:
    outcome: BindOutcome
    status: int = 0  # HTTP status; 0 when no response arrived
    message: str = ""
    bound_node: str | None = None  # on conflict: where the server says the pod already is

    @property
    def ok(self) -> bool:
        return self.outcome is BindOutcome.BOUND


@dataclass(frozen=True)
class PatchResult:
    outcome: PatchOutcome
    status: int = 0
    message: str = ""
    pod: dict[str, Any] | None = None  # the pod as the server returned it after the patch

    @property
    def ok(self) -> bool:
        return self.outcome is PatchOutcome.PATCHED


@dataclass(frozen=True)
class EvictResult:
    outcome: EvictOutcome
    status: int = 0
    message: str = ""

    @property
    def ok(self) -> bool:
        return self.outcome is EvictOutcome.EVICTED


@dataclass(frozen=True)
class WatchEvent:
    """One line of a watch stream: ADDED, MODIFIED, DELETED or BOOKMARK, and the object."""

    type: str
    object: dict[str, Any]

    @property
    def resource_version(self) -> str:
        return str((self.object.get("metadata") or {}).get("resourceVersion", ""))


class KubeApiError(RuntimeError):
    """A request that had no expected outcome failed; carries the HTTP status (0: no response)."""

    def __init__(self, action: str, status: int, message: str) -> None:
        super().__init__(
            f"{action}: HTTP {status}: {message}" if status else f"{action}: {message}"
        )
        self.action = action
        self.status = status
        self.message = message


class WatchExpired(KubeApiError):
    """The watch's resourceVersion is too old (410 Gone): list again, then watch from there."""


@runtime_checkable
class KubeAdapter(Protocol):
    """What the binder and rebalance need from Kubernetes; objects are plain kubectl-shaped dicts."""

    def list_nodes(self, label_selector: str | None = None) -> list[dict[str, Any]]: ...

    def list_pods(
        self,
        namespace: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
    ) -> list[dict[str, Any]]: ...

    def list_pods_with_version(
        self,
        namespace: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
    ) -> tuple[list[dict[str, Any]], str]: ...

    def watch_pods(
        self,
        namespace: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
        resource_version: str | None = None,
        timeout_seconds: int = 300,
    ) -> Iterator[WatchEvent]: ...

    def list_nodes_with_version(self) -> tuple[list[dict[str, Any]], str]: ...

    def watch_nodes(
        self,
        label_selector: str | None = None,
        resource_version: str | None = None,
        timeout_seconds: int = 300,
    ) -> Iterator[WatchEvent]: ...

    def list_statefulsets(
        self, namespace: str | None = None, label_selector: str | None = None
    ) -> list[dict[str, Any]]: ...

    def list_volume_objects(self) -> list[dict[str, Any]]: ...

    def get_pod(self, namespace: str, name: str) -> dict[str, Any] | None: ...

    def bind_pod(
        self,
        namespace: str,
        name: str,
        uid: str | None,
        node: str,
        annotations: Mapping[str, str] | None = None,
    ) -> BindResult: ...

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
    ) -> PatchResult: ...

    def remove_gate(
        self, namespace: str, name: str, gate: str, pod: Mapping[str, Any]
    ) -> PatchResult: ...

    def list_admission_policies(self) -> list[dict[str, Any]]: ...

    def record_event(
        self,
        pod: Mapping[str, Any],
        reason: str,
        message: str,
        type: EventType = "Normal",
        component: str = DEFAULT_COMPONENT,
        count: int = 1,
    ) -> bool: ...

    def evict_pod(self, namespace: str, name: str, uid: str | None = None) -> EvictResult: ...

    def patch_pod_labels(
        self,
        namespace: str,
        name: str,
        labels: Mapping[str, str | None],
        resource_version: str | None = None,
    ) -> PatchResult: ...

    def cordon_node(self, name: str) -> bool: ...

    def server_ready(self, namespace: str, lease: str) -> bool: ...

    def write_configmap(
        self,
        namespace: str,
        name: str,
        data: Mapping[str, str],
        labels: Mapping[str, str] | None = None,
    ) -> Literal["created", "replaced"]: ...

    def read_configmap(self, namespace: str, name: str) -> dict[str, str] | None: ...

    def get_secret(self, namespace: str, name: str) -> dict[str, bytes] | None: ...

    def get_secret_object(self, namespace: str, name: str) -> dict[str, Any] | None: ...

    def create_secret(
        self,
        namespace: str,
        name: str,
        data: Mapping[str, bytes],
        type_: str,
        labels: Mapping[str, str] | None = None,
    ) -> Literal["created", "exists"]: ...

    def update_secret(
        self,
        namespace: str,
        name: str,
        data: Mapping[str, bytes],
        resource_version: str,
        type_: str = "Opaque",
        labels: Mapping[str, str] | None = None,
    ) -> bool: ...

    def get_webhook_configuration(self, name: str) -> dict[str, Any] | None: ...

    def patch_webhook_ca_bundle(self, name: str, ca_pem: bytes) -> bool: ...

    def annotate_pod(
        self,
        namespace: str,
        name: str,
        annotations: Mapping[str, str | None],
        resource_version: str | None = None,
    ) -> PatchResult: ...

    def list_pdbs(self, namespace: str | None = None) -> list[dict[str, Any]]: ...

    def create_pdb(
        self, namespace: str, body: Mapping[str, Any]
    ) -> Literal["created", "exists"]: ...

    def delete_pdb(self, namespace: str, name: str, uid: str | None = None) -> bool: ...

    def delete_pod(
        self,
        namespace: str,
        name: str,
        uid: str | None = None,
        resource_version: str | None = None,
    ) -> bool: ...


def _secret_body(
    namespace: str,
    name: str,
    data: Mapping[str, bytes],
    type_: str,
    labels: Mapping[str, str] | None,
) -> dict[str, Any]:
    metadata: dict[str, Any] = {"name": name, "namespace": namespace}
    if labels:
        metadata["labels"] = dict(labels)
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": metadata,
        "type": type_,
        "data": {key: base64.b64encode(value).decode("ascii") for key, value in data.items()},
    }


def ca_bundle_patch(configuration: Mapping[str, Any], ca_pem: bytes) -> list[dict[str, Any]]:
    """The JSON patch (RFC 6902) that makes each webhook of ``configuration`` carry ``ca_pem``
    as its ``clientConfig.caBundle``: a test of the webhook's name and the value set, for each
    webhook that differs; empty when every one carries it already."""
    bundle = base64.b64encode(ca_pem).decode("ascii")
    ops: list[dict[str, Any]] = []
    for index, webhook in enumerate(configuration.get("webhooks") or []):
        if (webhook.get("clientConfig") or {}).get("caBundle") == bundle:
            continue
        ops.append({"op": "test", "path": f"/webhooks/{index}/name", "value": webhook.get("name")})
        ops.append(
            {"op": "add", "path": f"/webhooks/{index}/clientConfig/caBundle", "value": bundle}
        )
    return ops


def _with_kind(item: dict[str, Any], kind: str, api_version: str = "v1") -> dict[str, Any]:
    # List items come without kind/apiVersion; kubectl adds them, and so do we.
    item.setdefault("kind", kind)
    item.setdefault("apiVersion", api_version)
    return item


def _raw(value: object) -> HTTPResponse:
    """With ``_preload_content=False`` the client returns urllib3's response, whatever it is typed."""
    return cast(HTTPResponse, value)


def _read(value: object) -> HTTPResponse:
    """The response, its body read: only then does its connection go back to the pool. An
    unread response takes its connection with it, and the next request opens (and TLS-shakes
    hands on) a new one, which costs more than the request itself."""
    resp = _raw(value)
    resp.data  # noqa: B018  # reads (and keeps) the body, releasing the connection
    return resp


def _failure(exc: Exception) -> tuple[int, str]:
    """(status, message) of a failed request; status 0 when the server never answered."""
    if isinstance(exc, ApiException):
        status = int(exc.status or 0)
        return status, status_message(exc.body, str(exc.reason or ""))
    return 0, f"{type(exc).__name__}: {exc}"


def default_instance() -> str:
    """Who is reporting: the pod name in a cluster (downward API), else the host name."""
    return os.environ.get("POD_NAME") or socket.gethostname()


_PROCESS_SUFFIX = uuid.uuid4().hex[:8]


def process_identity() -> str:
    """Who holds a Lease: the pod name in a cluster (a restarted container keeps it, and so
    its Lease), else the host name and a per-process suffix, as client-go does, so two
    processes on one machine are never taken for one holder."""
    return os.environ.get("POD_NAME") or f"{socket.gethostname()}_{_PROCESS_SUFFIX}"


class KubernetesAdapter:
    """``KubeAdapter`` over the official client; one instance per ``ApiClient`` (thread-safe)."""

    def __init__(
        self,
        api_client: ApiClient,
        *,
        instance: str | None = None,
        request_timeout: float = 30.0,
        list_timeout: float = 300.0,
        page_size: int = 500,
    ) -> None:
        self.api_client = api_client
        self.core = CoreV1Api(api_client)
        self.apps = AppsV1Api(api_client)
        self.policy = PolicyV1Api(api_client)
        self.storage = StorageV1Api(api_client)
        self.instance = instance or default_instance()
        self.request_timeout = request_timeout
        self.list_timeout = list_timeout
        self.page_size = page_size

    # -- reading -------------------------------------------------------------------------

    def _list(
        self,
        action: str,
        kind: str,
        namespace: str | None,
        label_selector: str | None,
        field_selector: str | None,
    ) -> tuple[list[dict[str, Any]], str]:
        """Paged list (``limit``/``continue``, as kubectl does) so huge clusters stream in chunks.

        The resourceVersion of the first page is the list's: the pages are one consistent
        snapshot. A continue token that expired mid-list (410: etcd compacted past the list's
        version meanwhile) restarts the list once, whole, in one page, as client-go's pager
        does: pages again could expire again for as long as compactions outpace them.
        """
        for attempt in (1, 2):
            items: list[dict[str, Any]] = []
            version = ""
            token: str | None = None
            try:
                while True:
                    raw = self._list_page(
                        kind, namespace, label_selector, field_selector, token, attempt == 1
                    )
                    page = json_text.loads(raw)
                    items.extend(
                        _with_kind(item, kind, API_VERSIONS[kind])
                        for item in page.get("items") or []
                    )
                    meta = page.get("metadata") or {}
                    version = version or str(meta.get("resourceVersion", ""))
                    token = meta.get("continue") or None
                    if not token:
                        return items, version
            except ApiException as exc:
                if exc.status == 410 and attempt == 1:
                    log.info("list %s: continue token expired, listing again", kind)
                    continue
                raise KubeApiError(action, *_failure(exc)) from exc
            except Exception as exc:  # connection errors (urllib3), undecodable bodies
                raise KubeApiError(action, *_failure(exc)) from exc
        raise KubeApiError(action, 410, "continue token expired twice")  # pragma: no cover

    def _list_page(
        self,
        kind: str,
        namespace: str | None,
        label_selector: str | None,
        field_selector: str | None,
        token: str | None,
        paged: bool = True,
    ) -> bytes:
        common: dict[str, Any] = {
            "label_selector": label_selector,
            "field_selector": field_selector,
            "limit": self.page_size if paged else None,
            "_continue": token,
            "_preload_content": False,
            "_request_timeout": self.list_timeout,
        }
        if kind == "Node":
            resp = _raw(self.core.list_node(**common))
        elif kind == "StatefulSet" and namespace:
            resp = _raw(self.apps.list_namespaced_stateful_set(namespace, **common))
        elif kind == "StatefulSet":
            resp = _raw(self.apps.list_stateful_set_for_all_namespaces(**common))
        elif kind == "PersistentVolume":
            resp = _raw(self.core.list_persistent_volume(**common))
        elif kind == "PersistentVolumeClaim":
            resp = _raw(self.core.list_persistent_volume_claim_for_all_namespaces(**common))
        elif kind == "StorageClass":
            resp = _raw(self.storage.list_storage_class(**common))
        elif kind == "PodDisruptionBudget" and namespace:
            resp = _raw(self.policy.list_namespaced_pod_disruption_budget(namespace, **common))
        elif kind == "PodDisruptionBudget":
            resp = _raw(self.policy.list_pod_disruption_budget_for_all_namespaces(**common))
        elif namespace:
            resp = _raw(self.core.list_namespaced_pod(namespace, **common))
        else:
            resp = _raw(self.core.list_pod_for_all_namespaces(**common))
        data: bytes = resp.data
        return data

    def list_nodes(self, label_selector: str | None = None) -> list[dict[str, Any]]:
        return self._list("list nodes", "Node", None, label_selector, None)[0]

    def list_nodes_with_version(self) -> tuple[list[dict[str, Any]], str]:
        """Nodes and the list's resourceVersion, the point a node watch starts from."""
        return self._list("list nodes", "Node", None, None, None)

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
        """Pods and the list's resourceVersion, the point a following watch starts from."""
        return self._list("list pods", "Pod", namespace, label_selector, field_selector)

    def list_statefulsets(
        self, namespace: str | None = None, label_selector: str | None = None
    ) -> list[dict[str, Any]]:
        """StatefulSets: their replicas give a shard's size when pods lack the annotation."""
        return self._list("list statefulsets", "StatefulSet", namespace, label_selector, None)[0]

    def list_volume_objects(self) -> list[dict[str, Any]]:
        """PersistentVolumes, PersistentVolumeClaims and StorageClasses: where pods' volumes
        let them run (models/volumes.py)."""
        return [
            item
            for kind in ("PersistentVolume", "PersistentVolumeClaim", "StorageClass")
            for item in self._list(f"list {kind.lower()}s", kind, None, None, None)[0]
        ]

    def _watch(
        self,
        kind: str,
        namespace: str | None,
        label_selector: str | None,
        field_selector: str | None,
        resource_version: str | None,
        timeout_seconds: int,
    ) -> Iterator[WatchEvent]:
        action = f"watch {kind.lower()}s"
        common: dict[str, Any] = {
            "label_selector": label_selector,
            "field_selector": field_selector,
            "resource_version": resource_version,
            "allow_watch_bookmarks": True,
            "timeout_seconds": timeout_seconds,
            "watch": True,
            "_preload_content": False,
            # the server ends the watch after timeout_seconds; the read timeout is a backstop
            "_request_timeout": (self.request_timeout, timeout_seconds + 30),
        }
        try:
            if kind == "Node":
                resp = _raw(self.core.list_node(**common))
            elif namespace:
                resp = _raw(self.core.list_namespaced_pod(namespace, **common))
            else:
                resp = _raw(self.core.list_pod_for_all_namespaces(**common))
        except Exception as exc:
            status, message = _failure(exc)
            # 410 as the response itself, not an event in the stream: the same "list again"
            raise (WatchExpired if status == 410 else KubeApiError)(
                action, status, message
            ) from exc
        try:
            buffer = b""
            for chunk in resp.stream(64 * 1024, decode_content=True):
                buffer += chunk
                *lines, buffer = buffer.split(b"\n")
                for line in lines:
                    if line.strip():
                        yield self._watch_event(action, kind, line)
            if buffer.strip():
                yield self._watch_event(action, kind, buffer)
        except KubeApiError:
            raise
        except Exception as exc:
            raise KubeApiError(action, *_failure(exc)) from exc
        finally:
            # closed, not just released: a half-read stream must not go back to the pool
            resp.close()
            resp.release_conn()

    @staticmethod
    def _watch_event(action: str, kind: str, line: bytes) -> WatchEvent:
        event = json_text.loads(line)
        obj = event.get("object") or {}
        if event.get("type") == "ERROR":
            code = int(obj.get("code") or 0)
            error = WatchExpired if code == 410 else KubeApiError
            raise error(action, code, str(obj.get("message", "")))
        return WatchEvent(str(event.get("type")), _with_kind(obj, kind))

    def watch_pods(
        self,
        namespace: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
        resource_version: str | None = None,
        timeout_seconds: int = 300,
    ) -> Iterator[WatchEvent]:
        """Pod changes after ``resource_version``; ends when the server closes the watch.

        Raises ``WatchExpired`` when the version is too old: list again and resume.
        """
        return self._watch(
            "Pod", namespace, label_selector, field_selector, resource_version, timeout_seconds
        )

    def watch_nodes(
        self,
        label_selector: str | None = None,
        resource_version: str | None = None,
        timeout_seconds: int = 300,
    ) -> Iterator[WatchEvent]:
        return self._watch("Node", None, label_selector, None, resource_version, timeout_seconds)

    def _read_one(self, action: str, read: Callable[..., object]) -> dict[str, Any] | None:
        """One object read by ``read`` (a generated ``read_namespaced_*``), decoded, or None
        when it does not exist; any other failure is a ``KubeApiError`` naming ``action``."""
        try:
            resp = _raw(read(_preload_content=False, _request_timeout=self.request_timeout))
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise KubeApiError(action, *_failure(exc)) from None
        except Exception as exc:
            raise KubeApiError(action, *_failure(exc)) from None
        found: dict[str, Any] = json_text.loads(resp.data)
        return found

    def get_pod(self, namespace: str, name: str) -> dict[str, Any] | None:
        """The pod, or None when it does not exist."""
        read = functools.partial(self.core.read_namespaced_pod, name, namespace)
        found = self._read_one(f"get pod {namespace}/{name}", read)
        return _with_kind(found, "Pod") if found is not None else None

    # -- enforcing -----------------------------------------------------------------------

    def bind_pod(
        self,
        namespace: str,
        name: str,
        uid: str | None,
        node: str,
        annotations: Mapping[str, str] | None = None,
    ) -> BindResult:
        """Bind through ``pods/binding``; the server does it atomically, at most once.

        ``annotations`` are copied onto the pod by the server in the same write. 201 is bound.
        409 means the pod already has a node (``bound_node`` says which, so a retry after a lost
        response can tell its own earlier success), is still gated, or is a newer pod with the
        same name (uid precondition). 404 means it is gone.
        """
        try:
            status = self._post(
                "/api/v1/namespaces/{namespace}/pods/{name}/binding",
                {"namespace": namespace, "name": name},
                build_binding(name, uid, node, annotations),
            )
        except Exception as exc:
            status, message = _failure(exc)
            if status == 409:
                return BindResult(
                    BindOutcome.CONFLICT, status, message, already_bound_node(message)
                )
            if status == 404:
                return BindResult(BindOutcome.GONE, status, message)
            return BindResult(BindOutcome.ERROR, status, message)
        return BindResult(BindOutcome.BOUND, status, f"bound to {node}", node)

    def _post(self, path: str, path_params: Mapping[str, str], body: Mapping[str, Any]) -> int:
        """POST ``body`` as JSON (``_send``); the status on 2xx."""
        return int(self._send("POST", path, path_params, body).status)

    def _send(
        self,
        method: str,
        path: str,
        path_params: Mapping[str, str],
        body: Mapping[str, Any] | list[dict[str, Any]] | None,
        content_type: str = JSON,
    ) -> RESTResponse:
        """Send ``body`` as JSON through the client's own request path (its auth and token
        refresh, TLS, proxy and connection pool), without the generated method's validation
        of every argument and of the body into its model: on the binder's hot path that was a
        quarter of a Binding's CPU, and building the validator on a method's first use costs
        a few milliseconds more. The response, its body read (which returns the connection to
        the pool), on 2xx; otherwise ``ApiException``, as the generated methods raise it."""
        request = self.api_client.param_serialize(
            method=method,
            resource_path=path,
            path_params=dict(path_params),
            header_params={"Accept": JSON, "Content-Type": content_type},
            body=body,
            auth_settings=["BearerToken"],
        )
        response = self.api_client.call_api(*request, _request_timeout=self.request_timeout)
        response.read()
        if not 200 <= response.status <= 299:
            raise ApiException.from_response(http_resp=response, body=None, data=None)
        return response

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
        """Pin a gated pod to ``node`` (required node affinity) and lift ``gate``, in one patch.

        ``pod`` is the object at ``resource_version`` if the caller has it (saves a GET).
        The patch carries ``resource_version``, so a pod changed since then gives CONFLICT
        rather than a pin computed from stale terms. The default scheduler then binds it,
        still checking resources and taints.
        """
        where = f"{namespace}/{name}"
        if pod is None:
            try:
                pod = self.get_pod(namespace, name)
            except KubeApiError as exc:
                return PatchResult(PatchOutcome.ERROR, exc.status, exc.message)
            if pod is None:
                return PatchResult(PatchOutcome.GONE, 404, f"pod {where} not found")
        current = str((pod.get("metadata") or {}).get("resourceVersion", ""))
        if current != resource_version:
            return PatchResult(
                PatchOutcome.CONFLICT,
                409,
                f"pod {where} is at resourceVersion {current}, not {resource_version}",
            )
        if gate not in gate_names(pod):
            return PatchResult(
                PatchOutcome.NOT_GATED, 0, f"pod {where} has no scheduling gate {gate!r}", dict(pod)
            )
        body = build_pin_patch(pod, node, gate, resource_version, labels, annotations)
        return self._merge_patch(namespace, name, body, f"pinned to {node}")

    def remove_gate(
        self, namespace: str, name: str, gate: str, pod: Mapping[str, Any]
    ) -> PatchResult:
        """Lift ``gate`` alone from ``pod`` (as read), leaving its other gates and its spec as they
        are: CONFLICT if the pod changed since, NOT_GATED if it no longer carries the gate."""
        if gate not in gate_names(pod):
            where = f"{namespace}/{name}"
            return PatchResult(PatchOutcome.NOT_GATED, 0, f"pod {where} has no gate {gate!r}")
        version = str((pod.get("metadata") or {}).get("resourceVersion", ""))
        body = build_ungate_patch(pod, gate, version)
        return self._merge_patch(namespace, name, body, f"gate {gate} removed")

    def list_admission_policies(self) -> list[dict[str, Any]]:
        """The MutatingAdmissionPolicies (admissionregistration.k8s.io/v1); none where the API
        server does not serve that version (before Kubernetes 1.36)."""
        action = "list mutatingadmissionpolicies"
        try:
            resp = self._send("GET", ADMISSION_POLICIES, {}, None)
        except ApiException as exc:
            if exc.status == 404:
                return []
            raise KubeApiError(action, *_failure(exc)) from exc
        except Exception as exc:
            raise KubeApiError(action, *_failure(exc)) from exc
        items = json_text.loads(resp.read()).get("items") or []
        api_version = ADMISSION_POLICIES.split("/apis/")[1].rsplit("/", 1)[0]
        return [_with_kind(item, "MutatingAdmissionPolicy", api_version) for item in items]

    def _merge_patch(
        self, namespace: str, name: str, body: dict[str, Any], done: str
    ) -> PatchResult:
        try:
            resp = self._send(
                "PATCH",
                "/api/v1/namespaces/{namespace}/pods/{name}",
                {"namespace": namespace, "name": name},
                body,
                MERGE_PATCH,
            )
        except Exception as exc:
            status, message = _failure(exc)
            outcome = {409: PatchOutcome.CONFLICT, 404: PatchOutcome.GONE}.get(
                status, PatchOutcome.ERROR
            )
            return PatchResult(outcome, status, message)
        return PatchResult(
            PatchOutcome.PATCHED,
            int(resp.status),
            done,
            _with_kind(json_text.loads(resp.read()), "Pod"),
        )

    def patch_pod_labels(
        self,
        namespace: str,
        name: str,
        labels: Mapping[str, str | None],
        resource_version: str | None = None,
    ) -> PatchResult:
        """Set labels (a None value removes the label) with a merge patch.

        With ``resource_version`` the patch applies only to the pod as it was then (409
        otherwise): a label computed from an older view never overwrites a newer one.
        """
        metadata: dict[str, Any] = {"labels": dict(labels)}
        if resource_version:
            metadata["resourceVersion"] = resource_version
        return self._merge_patch(namespace, name, {"metadata": metadata}, "labels patched")

    def annotate_pod(
        self,
        namespace: str,
        name: str,
        annotations: Mapping[str, str | None],
        resource_version: str | None = None,
    ) -> PatchResult:
        """Set annotations (a None value removes the annotation) with a merge patch; with
        ``resource_version``, only on the pod as it was then (409 otherwise)."""
        metadata: dict[str, Any] = {"annotations": dict(annotations)}
        if resource_version:
            metadata["resourceVersion"] = resource_version
        return self._merge_patch(namespace, name, {"metadata": metadata}, "annotations patched")

    def server_ready(self, namespace: str, lease: str) -> bool:
        """Whether the API server answers a read that reaches etcd: the binder's own Lease
        (a grant it has), read consistently, within 2 s; a 404 answers too. The API server's
        ``/readyz`` says nothing of etcd (1.36), and with etcd away requests wait, not fail."""
        request = self.api_client.param_serialize(
            method="GET",
            resource_path="/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases/{name}",
            path_params={"namespace": namespace, "name": lease},
            header_params={"Accept": JSON},
            auth_settings=["BearerToken"],
        )
        try:
            response = self.api_client.call_api(*request, _request_timeout=2.0)
            response.read()
        except Exception:
            return False
        return response.status in (200, 404)

    def cordon_node(self, name: str) -> bool:
        """``kubectl cordon``: spec.unschedulable true (a merge patch); False if no such node."""
        try:
            self._send(
                "PATCH",
                "/api/v1/nodes/{name}",
                {"name": name},
                {"spec": {"unschedulable": True}},
                MERGE_PATCH,
            )
        except Exception as exc:
            status, message = _failure(exc)
            if status == 404:
                return False
            raise KubeApiError("cordon_node", status, message) from None
        return True

    def record_event(
        self,
        pod: Mapping[str, Any],
        reason: str,
        message: str,
        type: EventType = "Normal",
        component: str = DEFAULT_COMPONENT,
        count: int = 1,
    ) -> bool:
        """Best effort: an Event that cannot be written is logged, never raised."""
        body = build_event(pod, reason, message, type, component, self.instance, count=count)
        namespace = body["metadata"]["namespace"]
        try:
            self._post("/api/v1/namespaces/{namespace}/events", {"namespace": namespace}, body)
        except Exception as exc:
            status, text = _failure(exc)
            log.warning("event %s on pod %s/%s not recorded: %s %s", reason, namespace,
                        body["involvedObject"]["name"], status, text)  # fmt: skip
            return False
        return True

    def evict_pod(self, namespace: str, name: str, uid: str | None = None) -> EvictResult:
        """Ask the Eviction API, which honours PodDisruptionBudgets (429 = blocked, retry later)."""
        try:
            resp = _read(
                self.core.create_namespaced_pod_eviction(
                    name,
                    namespace,
                    build_eviction(namespace, name, uid),  # type: ignore[arg-type]
                    _headers={"Content-Type": JSON},
                    _preload_content=False,
                    _request_timeout=self.request_timeout,
                )
            )
        except Exception as exc:
            status, message = _failure(exc)
            # 409: the uid precondition failed, so the pod meant is gone (replaced by a namesake)
            outcome = {
                429: EvictOutcome.BLOCKED,
                404: EvictOutcome.GONE,
                409: EvictOutcome.GONE,
            }.get(status, EvictOutcome.ERROR)
            return EvictResult(outcome, status, message)
        return EvictResult(EvictOutcome.EVICTED, int(resp.status), "evicted")

    def write_configmap(
        self,
        namespace: str,
        name: str,
        data: Mapping[str, str],
        labels: Mapping[str, str] | None = None,
    ) -> Literal["created", "replaced"]:
        """Create the ConfigMap, or replace it whole if it exists (last writer wins: a report)."""
        metadata: dict[str, Any] = {"name": name, "namespace": namespace}
        if labels:
            metadata["labels"] = dict(labels)
        body = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": metadata, "data": dict(data)}
        action = f"write configmap {namespace}/{name}"
        try:
            _read(
                self.core.create_namespaced_config_map(
                    namespace,
                    body,  # type: ignore[arg-type]
                    _headers={"Content-Type": JSON},
                    _preload_content=False,
                    _request_timeout=self.request_timeout,
                )
            )
            return "created"
        except ApiException as exc:
            if exc.status != 409:
                raise KubeApiError(action, *_failure(exc)) from exc
        except Exception as exc:
            raise KubeApiError(action, *_failure(exc)) from exc
        try:
            _read(
                self.core.replace_namespaced_config_map(
                    name,
                    namespace,
                    body,  # type: ignore[arg-type]
                    _headers={"Content-Type": JSON},
                    _preload_content=False,
                    _request_timeout=self.request_timeout,
                )
            )
        except Exception as exc:
            raise KubeApiError(action, *_failure(exc)) from exc
        return "replaced"

    def read_configmap(self, namespace: str, name: str) -> dict[str, str] | None:
        """The ConfigMap's data, or None when it does not exist."""
        read = functools.partial(self.core.read_namespaced_config_map, name, namespace)
        found = self._read_one(f"read configmap {namespace}/{name}", read)
        if found is None:
            return None
        return {str(k): str(v) for k, v in (found.get("data") or {}).items()}

    def get_secret(self, namespace: str, name: str) -> dict[str, bytes] | None:
        """The Secret's data, decoded, or None when it does not exist. Only the keys a
        caller asks for leave this process's memory, and nothing of it is logged."""
        action = f"get secret {namespace}/{name}"
        read = functools.partial(self.core.read_namespaced_secret, name, namespace)
        found = self._read_one(action, read)
        if found is None:
            return None
        try:
            return {str(k): base64.b64decode(v) for k, v in (found.get("data") or {}).items()}
        except (binascii.Error, TypeError):
            raise KubeApiError(action, 0, "its data is not base64") from None

    def get_secret_object(self, namespace: str, name: str) -> dict[str, Any] | None:
        """The Secret as the server holds it (``data`` still base64, ``metadata.resourceVersion``
        for an update), or None when it does not exist."""
        read = functools.partial(self.core.read_namespaced_secret, name, namespace)
        found = self._read_one(f"get secret {namespace}/{name}", read)
        return _with_kind(found, "Secret") if found is not None else None

    def create_secret(
        self,
        namespace: str,
        name: str,
        data: Mapping[str, bytes],
        type_: str,
        labels: Mapping[str, str] | None = None,
    ) -> Literal["created", "exists"]:
        """Create the Secret; ``exists`` when one of that name is there already (409)."""
        action = f"create secret {namespace}/{name}"
        body = _secret_body(namespace, name, data, type_, labels)
        try:
            self._send("POST", SECRETS, {"namespace": namespace}, body)
        except ApiException as exc:
            if exc.status == 409:
                return "exists"
            raise KubeApiError(action, *_failure(exc)) from exc
        except Exception as exc:
            raise KubeApiError(action, *_failure(exc)) from exc
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
        """Replace the Secret's data, only as it was at ``resource_version``; False when it
        changed since (409) or is gone (404): read it again and decide again."""
        action = f"update secret {namespace}/{name}"
        body = _secret_body(namespace, name, data, type_, labels)
        body["metadata"]["resourceVersion"] = resource_version
        try:
            self._send(
                "PUT",
                SECRETS + "/{name}",
                {"namespace": namespace, "name": name},
                body,
            )
        except ApiException as exc:
            if exc.status in (404, 409):
                return False
            raise KubeApiError(action, *_failure(exc)) from exc
        except Exception as exc:
            raise KubeApiError(action, *_failure(exc)) from exc
        return True

    # -- admission webhooks ------------------------------------------------------------------

    def get_webhook_configuration(self, name: str) -> dict[str, Any] | None:
        """The ValidatingWebhookConfiguration, or None when it does not exist."""
        action = f"get validatingwebhookconfiguration {name}"
        try:
            resp = self._send("GET", WEBHOOK_CONFIGURATION, {"name": name}, None)
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise KubeApiError(action, *_failure(exc)) from exc
        except Exception as exc:
            raise KubeApiError(action, *_failure(exc)) from exc
        found: dict[str, Any] = json_text.loads(resp.read())
        return _with_kind(found, "ValidatingWebhookConfiguration", WEBHOOK_API_VERSION)

    def patch_webhook_ca_bundle(self, name: str, ca_pem: bytes) -> bool:
        """Make every webhook of the ValidatingWebhookConfiguration ``name`` trust ``ca_pem``
        (its ``clientConfig.caBundle``); a patch is sent only where it differs. False when the
        configuration does not exist. Each change is guarded by a test of the webhook's name
        at that index, so a configuration edited meanwhile is read again, not mispatched."""
        action = f"patch validatingwebhookconfiguration {name}"
        for _ in range(3):
            found = self.get_webhook_configuration(name)
            if found is None:
                return False
            ops = ca_bundle_patch(found, ca_pem)
            if not ops:
                return True
            try:
                self._send("PATCH", WEBHOOK_CONFIGURATION, {"name": name}, ops, JSON_PATCH)
            except ApiException as exc:
                if exc.status == 404:
                    return False
                if exc.status in (409, 422):
                    continue  # the configuration changed under us: read it again
                raise KubeApiError(action, *_failure(exc)) from exc
            except Exception as exc:
                raise KubeApiError(action, *_failure(exc)) from exc
            return True
        raise KubeApiError(action, 409, "it kept changing (3 tries)")

    # -- disruption budgets ----------------------------------------------------------------

    def list_pdbs(self, namespace: str | None = None) -> list[dict[str, Any]]:
        """PodDisruptionBudgets of one namespace, or of all."""
        return self._list(
            "list poddisruptionbudgets", "PodDisruptionBudget", namespace, None, None
        )[0]

    def create_pdb(self, namespace: str, body: Mapping[str, Any]) -> Literal["created", "exists"]:
        """Create the PDB; ``exists`` when one of that name is there already (409)."""
        action = f"create poddisruptionbudget {namespace}/{body['metadata']['name']}"
        try:
            self.policy.create_namespaced_pod_disruption_budget(
                namespace,
                dict(body),  # type: ignore[arg-type]  # validated into V1PodDisruptionBudget
                _headers={"Content-Type": JSON},
                _preload_content=False,
                _request_timeout=self.request_timeout,
            )
        except ApiException as exc:
            if exc.status == 409:
                return "exists"
            raise KubeApiError(action, *_failure(exc)) from exc
        except Exception as exc:
            raise KubeApiError(action, *_failure(exc)) from exc
        return "created"

    def delete_pdb(self, namespace: str, name: str, uid: str | None = None) -> bool:
        """Delete the PDB (only the one with ``uid``, when given); False when it was gone."""
        return self._delete_as_it_was(
            f"delete poddisruptionbudget {namespace}/{name}",
            self.policy.delete_namespaced_pod_disruption_budget,
            namespace,
            name,
            uid=uid,
        )

    def delete_pod(
        self,
        namespace: str,
        name: str,
        uid: str | None = None,
        resource_version: str | None = None,
    ) -> bool:
        """Delete the pod only as it was (uid, resourceVersion): a pending pod whose pin
        kube-scheduler refused, for its controller to recreate. False when it changed or went."""
        return self._delete_as_it_was(
            f"delete pod {namespace}/{name}",
            self.core.delete_namespaced_pod,
            namespace,
            name,
            uid=uid,
            resourceVersion=resource_version,
        )

    def _delete_as_it_was(
        self,
        action: str,
        delete: Callable[..., Any],
        namespace: str,
        name: str,
        **preconditions: str | None,
    ) -> bool:
        """One delete with the preconditions given; False when the object was gone, or no
        longer the one they name (404, 409). The answer is read, so its connection goes back to
        the pool."""
        body: dict[str, Any] = {"apiVersion": "v1", "kind": "DeleteOptions"}
        given = {k: v for k, v in preconditions.items() if v}
        if given:
            body["preconditions"] = given
        try:
            _read(
                delete(
                    name,
                    namespace,
                    body=body,
                    _preload_content=False,
                    _request_timeout=self.request_timeout,
                )
            )
        except ApiException as exc:
            if exc.status in (404, 409):
                return False
            raise KubeApiError(action, *_failure(exc)) from exc
        except Exception as exc:
            raise KubeApiError(action, *_failure(exc)) from exc
        return True
