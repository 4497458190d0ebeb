"""StatefulSets and pods shaped exactly as the deployments people run make them.

From each deployment's own sources (docs/profiles): the labels on the pod template, the
StatefulSet names, podManagementPolicy and how many there are. ``statefulset`` bodies are valid
for a real API server (the e2e tests create them and let the StatefulSet controller make the
pods); ``pods_of`` makes the pods that controller would make, for tests without one.
"""

from collections.abc import Iterable, Mapping
from typing import Any

POD_INDEX = "apps.kubernetes.io/pod-index"
POD_NAME = "statefulset.kubernetes.io/pod-name"


def statefulset(
    name: str,
    replicas: int,
    labels: Mapping[str, str],
    *,
    namespace: str = "default",
    parallel: bool,
    cpu: str = "100m",
    memory: str = "256Mi",
    gate: str | None = None,
    node_selector: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """A StatefulSet whose pod template carries ``labels`` (its selector is all of them)."""
    template_spec: dict[str, Any] = {
        "containers": [
            {
                "name": "redis",
                "image": "redis:7",
                "resources": {"requests": {"cpu": cpu, "memory": memory}},
            }
        ],
        "terminationGracePeriodSeconds": 0,
    }
    if gate:
        template_spec["schedulingGates"] = [{"name": gate}]
    if node_selector:
        template_spec["nodeSelector"] = dict(node_selector)
    spec: dict[str, Any] = {
        "replicas": replicas,
        "serviceName": name,
        "selector": {"matchLabels": dict(labels)},
        "template": {"metadata": {"labels": dict(labels)}, "spec": template_spec},
    }
    if parallel:
        spec["podManagementPolicy"] = "Parallel"
    return {
        "apiVersion": "apps/v1",
        "kind": "StatefulSet",
        "metadata": {"name": name, "namespace": namespace, "uid": f"uid-{namespace}-{name}"},
        "spec": spec,
    }


def pods_of(
    sets: Iterable[Mapping[str, Any]], nodes: Mapping[str, str] | None = None
) -> list[dict[str, Any]]:
    """Every pod the StatefulSet controller makes for ``sets``; ``nodes`` binds some by name."""
    out = []
    for sts in sets:
        meta, spec = sts["metadata"], sts["spec"]
        template = spec["template"]
        for index in range(spec["replicas"]):
            name = f"{meta['name']}-{index}"
            labels = {**template["metadata"]["labels"], POD_INDEX: str(index), POD_NAME: name}
            pod_spec = {k: v for k, v in template["spec"].items() if k != "schedulingGates"}
            node = (nodes or {}).get(name)
            if node:
                pod_spec["nodeName"] = node
            out.append(
                {
                    "apiVersion": "v1",
                    "kind": "Pod",
                    "metadata": {
                        "name": name,
                        "namespace": meta["namespace"],
                        "uid": f"uid-{meta['namespace']}-{name}",
                        "labels": labels,
                        "ownerReferences": [
                            {
                                "apiVersion": "apps/v1",
                                "kind": "StatefulSet",
                                "name": meta["name"],
                                "uid": meta["uid"],
                                "controller": True,
                            }
                        ],
                    },
                    "spec": pod_spec,
                    "status": {"phase": "Running" if node else "Pending"},
                }
            )
    return out


def ot_operator(
    cr: str, leaders: int, followers: int | None = None, **kw: Any
) -> list[dict[str, Any]]:
    """RedisCluster ``cr``: ``<cr>-leader`` and ``<cr>-follower``, OrderedReady (the default);
    the followers' StatefulSet exists only once every leader is Ready (``followers`` None)."""

    def labels(kind: str) -> dict[str, str]:
        return {"app": f"{cr}-{kind}", "redis_setup_type": "cluster", "role": kind, "cluster": cr}

    sets = [statefulset(f"{cr}-leader", leaders, labels("leader"), parallel=False, **kw)]
    if followers is not None:
        sets.append(
            statefulset(f"{cr}-follower", followers, labels("follower"), parallel=False, **kw)
        )
    return sets


def bitnami(release: str, nodes: int = 6, **kw: Any) -> list[dict[str, Any]]:
    """The redis-cluster chart: one Parallel StatefulSet ``<release>-redis-cluster``."""
    labels = {
        "app.kubernetes.io/name": "redis-cluster",
        "app.kubernetes.io/instance": release,
        "app.kubernetes.io/managed-by": "Helm",
        "helm.sh/chart": "redis-cluster-13.0.5",
    }
    return [statefulset(f"{release}-redis-cluster", nodes, labels, parallel=True, **kw)]


def valkey_io(cluster: str, shards: int, replicas: int, **kw: Any) -> list[dict[str, Any]]:
    """ValkeyCluster ``cluster``: one single-pod StatefulSet per member, OrderedReady."""
    sets = []
    for shard in range(shards):
        for node in range(replicas + 1):
            labels = {
                "app.kubernetes.io/name": "valkey",
                "app.kubernetes.io/instance": f"{cluster}-{shard}-{node}",
                "app.kubernetes.io/component": "valkey-node",
                "app.kubernetes.io/part-of": "valkey",
                "app.kubernetes.io/managed-by": "valkey-operator",
                "valkey.io/cluster": cluster,
                "valkey.io/shard-index": str(shard),
                "valkey.io/node-index": str(node),
            }
            name = f"valkey-{cluster}-{shard}-{node}"
            sets.append(statefulset(name, 1, labels, parallel=False, **kw))
    return sets


def hyperspike(name: str, shards: int, replicas: int, **kw: Any) -> list[dict[str, Any]]:
    """Valkey ``name``: one Parallel StatefulSet of shards * (replicas + 1) pods."""
    labels = {
        "app.kubernetes.io/name": "valkey",
        "app.kubernetes.io/instance": name,
        "app.kubernetes.io/component": "valkey",
    }
    return [statefulset(name, shards * (replicas + 1), labels, parallel=True, **kw)]
