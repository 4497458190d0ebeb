"""Synthetic clusters shaped like ``kubectl get nodes,pods -A -o json`` output.

Deterministic for a seed. Used by the demo's bundled example, the benchmarks and the tests, so
every path goes through the same parser a real dump does.
"""

import random
from typing import Any

NODE_SIZES: tuple[tuple[str, str], ...] = (("8", "32Gi"), ("16", "64Gi"), ("32", "128Gi"))
REDIS_SIZES: tuple[tuple[str, str], ...] = (("500m", "2Gi"), ("1", "4Gi"), ("2", "8Gi"))


def node(
    name: str, zone: str, rack: str, cpu: str, memory: str, pods: int = 110, **extra: Any
) -> dict[str, Any]:
    labels = {"kubernetes.io/hostname": name, "topology.kubernetes.io/zone": zone, "rack": rack}
    labels.update(extra.pop("labels", {}))
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": labels},
        "spec": extra.pop("spec", {}),
        "status": {
            "allocatable": {"cpu": cpu, "memory": memory, "pods": str(pods)},
            "conditions": [{"type": "Ready", "status": "True"}],
        },
    }


def redis_pod(
    name: str,
    cluster: str,
    shard: str,
    role: str | None,
    cpu: str,
    memory: str,
    node_name: str | None = None,
    namespace: str = "redis",
) -> dict[str, Any]:
    labels = {"app": "redis", "redis-cluster": cluster, "redis-shard": shard}
    if role is not None:
        labels["redis-role"] = role
    spec: dict[str, Any] = {
        "schedulerName": "redis-placer",
        "containers": [
            {"name": "redis", "resources": {"requests": {"cpu": cpu, "memory": memory}}}
        ],
    }
    if node_name:
        spec["nodeName"] = node_name
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": labels,
            "uid": f"uid-{namespace}-{name}",
        },
        "spec": spec,
        "status": {"phase": "Running" if node_name else "Pending"},
    }


def other_pod(
    name: str, node_name: str, cpu: str, memory: str, namespace: str = "apps"
) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "labels": {"app": "web"}},
        "spec": {
            "nodeName": node_name,
            "containers": [
                {"name": "app", "resources": {"requests": {"cpu": cpu, "memory": memory}}}
            ],
        },
        "status": {"phase": "Running"},
    }


def generate_cluster(
    nodes: int,
    pending_shards: int,
    *,
    replicas: int = 2,
    running_shards: int = 0,
    zones: int = 3,
    racks_per_zone: int = 4,
    clusters: int = 1,
    busy_fraction: float = 0.2,
    seed: int = 0,
) -> dict[str, Any]:
    """A cluster as a Kubernetes List: mixed node sizes, some unrelated load, running and pending shards.

    Running shards are placed the way a careless scheduler would (anywhere with room), so audits
    and rebalancing have something to find.
    """
    rng = random.Random(seed)
    items: list[dict[str, Any]] = []
    names: list[tuple[str, str, str]] = []
    free_mem: dict[str, int] = {}
    for i in range(nodes):
        zone = f"zone-{chr(ord('a') + i % zones)}"
        rack = f"{zone}-rack-{(i // zones) % racks_per_zone}"
        cpu, mem = NODE_SIZES[rng.randrange(len(NODE_SIZES))]
        name = f"node-{i:05d}"
        items.append(node(name, zone, rack, cpu, mem))
        names.append((name, zone, rack))
        free_mem[name] = int(mem[:-2])
        if rng.random() < busy_fraction:
            items.append(other_pod(f"web-{i:05d}", name, "1", "4Gi"))
            free_mem[name] -= 4
    shard_total = running_shards + pending_shards
    for s in range(shard_total):
        cluster = f"redis-{s % clusters}"
        cpu, mem = REDIS_SIZES[(s % clusters) % len(REDIS_SIZES)]
        running = s < running_shards
        used: set[str] = set()
        for r in range(replicas + 1):
            role = "master" if r == 0 else "replica"
            pod_name = f"{cluster}-{s // clusters}-{r}"
            node_name = None
            if running:
                need = int(mem[:-2])
                for _ in range(50):
                    cand = names[rng.randrange(len(names))][0]
                    if cand not in used and free_mem[cand] >= need:
                        node_name = cand
                        break
                if node_name is None:
                    continue
                used.add(node_name)
                free_mem[node_name] -= need
            items.append(
                redis_pod(pod_name, cluster, str(s // clusters), role, cpu, mem, node_name)
            )
    return {"apiVersion": "v1", "kind": "List", "items": items}
