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


# -- how each deployment hands its pods the Redis password and TLS material -------------------
# From each deployment's own templates (docs/profiles/NAME.md, "Password and TLS").


def _container(sts: Mapping[str, Any]) -> dict[str, Any]:
    container: dict[str, Any] = sts["spec"]["template"]["spec"]["containers"][0]
    return container


def _secret_volume(
    sts: Mapping[str, Any], name: str, secret: str, mount: str, items: Mapping[str, str] | None
) -> None:
    spec = sts["spec"]["template"]["spec"]
    source: dict[str, Any] = {"secretName": secret}
    if items:
        source["items"] = [{"key": k, "path": p} for k, p in items.items()]
    spec.setdefault("volumes", []).append({"name": name, "secret": source})
    _container(sts).setdefault("volumeMounts", []).append(
        {"name": name, "mountPath": mount, "readOnly": True}
    )


def _env(sts: Mapping[str, Any], variable: str, value: str | None = None, **ref: str) -> None:
    entry: dict[str, Any] = {"name": variable}
    if ref:
        entry["valueFrom"] = {"secretKeyRef": dict(ref)}
    else:
        entry["value"] = value
    _container(sts).setdefault("env", []).append(entry)


def with_password(sts: Mapping[str, Any], deployment: str, secret: str, key: str) -> None:
    """The password as the deployment's pod template reads it from ``secret`` / ``key``."""
    if deployment == "bitnami":  # usePasswordFiles: true (the chart's default)
        folder = "/opt/bitnami/redis/secrets"
        _secret_volume(sts, "redis-password", secret, f"{folder}/", {key: "redis-password"})
        _env(sts, "REDIS_PASSWORD_FILE", f"{folder}/redis-password")
    elif deployment == "ot-operator":
        _env(sts, "REDIS_PASSWORD", name=secret, key=key)
        _env(sts, "REDISCLI_AUTH", name=secret, key=key)
    elif deployment == "hyperspike":
        _env(sts, "VALKEY_PASSWORD", name=secret, key=key)
        _env(sts, "REDISCLI_AUTH", name=secret, key=key)
    elif deployment == "valkey-io":  # the operator's own ACL user, from its system Secret
        _env(sts, "PRIMARY_AUTH", name=secret, key="_replication")
        _env(sts, "VALKEY_USER", "_operator")
        _env(sts, "VALKEYCLI_AUTH", name=secret, key=key)
    else:
        raise ValueError(deployment)


def with_tls(sts: Mapping[str, Any], deployment: str, secret: str) -> None:
    """Server TLS material mounted from ``secret`` (ca.crt, tls.crt, tls.key) as the deployment
    mounts it."""
    if deployment == "bitnami":
        folder = "/opt/bitnami/redis/certs"
        _secret_volume(sts, "redis-certificates", secret, folder, None)
        _env(sts, "REDIS_TLS_ENABLED", "yes")
        for var, file in (("CERT", "tls.crt"), ("KEY", "tls.key"), ("CA", "ca.crt")):
            _env(sts, f"REDIS_TLS_{var}_FILE", f"{folder}/{file}")
    elif deployment == "ot-operator":  # spec.TLS without an explicit ca: no CA variable
        _secret_volume(sts, "tls-certs", secret, "/tls", None)
        _env(sts, "TLS_MODE", "true")
        _env(sts, "REDIS_TLS_CERT", "/tls/tls.crt")
        _env(sts, "REDIS_TLS_CERT_KEY", "/tls/tls.key")
    elif deployment == "valkey-io":
        _secret_volume(sts, "tls-certs", secret, "/tls", None)
        _env(sts, "VALKEY_TLS_ENABLED", "true")
        for var, file in (("CA", "ca.crt"), ("CERT", "tls.crt"), ("KEY", "tls.key")):
            _env(sts, f"VALKEY_TLS_{var}_FILE", f"/tls/{file}")
    elif deployment == "hyperspike":
        _secret_volume(sts, "valkey-tls", secret, "/etc/valkey/certs", None)
    else:
        raise ValueError(deployment)
