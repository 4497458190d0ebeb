"""Tiny builders of Kubernetes objects shaped like ``kubectl get -o json`` output.

Tests build their snapshots through the real parser (``build_snapshot``) so they exercise the
same path as a user's file; these helpers keep each test's cluster a few readable lines.
"""

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from models.kube_objects import build_snapshot
from models.policy import Policy
from models.snapshot import Snapshot

ZONE_LABEL = "topology.kubernetes.io/zone"
RACK_LABEL = "rack"
HOST_LABEL = "kubernetes.io/hostname"

TaintSpec = str | Mapping[str, str]
"""``"key=value:Effect"`` / ``"key:Effect"`` (kubectl taint syntax) or a taint dict."""


def _taint(spec: TaintSpec) -> dict[str, str]:
    """Accept kubectl's compact taint syntax so tests read like the command line."""
    if not isinstance(spec, str):
        return dict(spec)
    key_value, _, effect = spec.rpartition(":")
    key, sep, value = key_value.partition("=")
    taint = {"key": key, "effect": effect}
    if sep:
        taint["value"] = value
    return taint


def node(
    name: str,
    zone: str | None,
    rack: str | None,
    cpu: str = "4",
    memory: str = "16Gi",
    pods: int = 110,
    taints: Sequence[TaintSpec] = (),
    ready: bool = True,
    unschedulable: bool = False,
    labels: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """A Node; ``zone``/``rack`` None leaves that label off. ``labels`` override the defaults."""
    all_labels = {HOST_LABEL: name}
    if zone is not None:
        all_labels[ZONE_LABEL] = zone
    if rack is not None:
        all_labels[RACK_LABEL] = rack
    all_labels.update(labels or {})
    spec: dict[str, Any] = {}
    if taints:
        spec["taints"] = [_taint(t) for t in taints]
    if unschedulable:
        spec["unschedulable"] = True
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": all_labels},
        "spec": spec,
        "status": {
            "allocatable": {"cpu": cpu, "memory": memory, "pods": str(pods)},
            "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
        },
    }


def _pod(
    name: str,
    namespace: str,
    labels: Mapping[str, str],
    node: str | None,
    cpu: str,
    memory: str,
) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "containers": [
            {
                "name": "main",
                "image": "redis:7",
                "resources": {"requests": {"cpu": cpu, "memory": memory}},
            }
        ]
    }
    if node is not None:
        spec["nodeName"] = node
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "labels": dict(labels)},
        "spec": spec,
        "status": {"phase": "Running" if node is not None else "Pending"},
    }


def redis_pod(
    name: str,
    cluster: str,
    shard: str | int,
    role: str | None,
    node: str | None = None,
    cpu: str = "500m",
    memory: str = "1Gi",
    namespace: str = "default",
    **extra: Any,
) -> dict[str, Any]:
    """A managed Redis pod (default policy labels); ``role`` None leaves the role label off.

    ``extra`` keys go into ``spec`` as camelCase Kubernetes fields (``tolerations``,
    ``nodeSelector``, ``affinity``...), except ``labels`` and ``annotations`` which are merged
    into ``metadata``.
    """
    labels = {"app": "redis", "redis-cluster": cluster, "redis-shard": str(shard)}
    if role is not None:
        labels["redis-role"] = role
    labels.update(extra.pop("labels", None) or {})
    pod = _pod(name, namespace, labels, node, cpu, memory)
    annotations = extra.pop("annotations", None)
    if annotations:
        pod["metadata"]["annotations"] = dict(annotations)
    pod["spec"].update(extra)
    return pod


def other_pod(name: str, node: str, cpu: str, memory: str) -> dict[str, Any]:
    """A bound, unmanaged pod: it only takes room on its node."""
    return _pod(name, "other", {"app": "other"}, node, cpu, memory)


def snapshot(
    nodes: Iterable[Mapping[str, Any]],
    pods: Iterable[Mapping[str, Any]],
    policy: Policy | None = None,
) -> Snapshot:
    """Parse the objects exactly as a user's ``kubectl`` file would be parsed."""
    return build_snapshot([*nodes, *pods], policy or Policy())
