"""Synthetic clusters shaped like ``kubectl get -o json`` output.

Deterministic for a seed. Used by the demo's bundled example, the benchmarks and the tests, so
every path goes through the same parser a real dump does.
"""

import random
from collections import Counter
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
    zone_shares: tuple[float, ...] | None = None,
    node_sizes: tuple[tuple[str, str], ...] = NODE_SIZES,
    redis_sizes: tuple[tuple[str, str], ...] = REDIS_SIZES,
    rack_sizes: tuple[int, int] | None = None,
) -> dict[str, Any]:
    """A cluster as a Kubernetes List: mixed node sizes, some unrelated load, running and pending shards.

    Running shards are placed the way a careless scheduler would (anywhere with room), so audits
    and rebalancing have something to find. ``zone_shares`` skews the nodes over the zones (e.g.
    0.5, 0.3, 0.2); by default they are dealt round-robin. ``rack_sizes`` (smallest, largest)
    makes the racks uneven: each zone's nodes fill its racks one after another, in sizes drawn
    between the two and scaled to the zone's nodes, as racks of consecutive names often are; by
    default a zone's nodes are dealt to its racks round-robin.
    """
    rng = random.Random(seed)
    items: list[dict[str, Any]] = []
    names: list[tuple[str, str, str]] = []
    free_mem: dict[str, int] = {}
    zone_of = _zone_assignment(nodes, zones, zone_shares)
    seen_in_zone: dict[int, int] = {}
    rack_of = (
        _uneven_racks(Counter(zone_of), racks_per_zone, rack_sizes, rng)
        if rack_sizes is not None
        else None
    )
    for i in range(nodes):
        z = zone_of[i]
        zone = f"zone-{chr(ord('a') + z)}"
        k = seen_in_zone.get(z, 0)
        seen_in_zone[z] = k + 1
        rack = f"{zone}-rack-{rack_of[z][k] if rack_of else k % racks_per_zone}"
        cpu, mem = node_sizes[rng.randrange(len(node_sizes))]
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
        cpu, mem = redis_sizes[(s % clusters) % len(redis_sizes)]
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


def _zone_assignment(nodes: int, zones: int, shares: tuple[float, ...] | None) -> list[int]:
    """Zone index of each node: round-robin, or in proportion to ``shares`` (interleaved)."""
    if shares is None:
        return [i % zones for i in range(nodes)]
    total = sum(shares)
    counts = [int(nodes * share / total) for share in shares]
    for i in range(nodes - sum(counts)):
        counts[i % len(counts)] += 1
    out: list[int] = []
    left = list(counts)
    while len(out) < nodes:
        for z, n in enumerate(left):
            if n:
                out.append(z)
                left[z] -= 1
    return out


def _uneven_racks(
    per_zone: Counter[int], racks: int, sizes: tuple[int, int], rng: random.Random
) -> dict[int, list[int]]:
    """Per zone, the rack index of its k-th node: racks filled in turn, sizes drawn in ``sizes``."""
    out: dict[int, list[int]] = {}
    for z in sorted(per_zone):
        n = per_zone[z]
        weights = [rng.uniform(*sizes) for _ in range(racks)]
        total = sum(weights)
        counts = [int(n * w / total) for w in weights]
        for i in range(n - sum(counts)):
            counts[i % racks] += 1
        out[z] = [r for r, c in enumerate(counts) for _ in range(c)]
    return out


AWKWARD_POOLS = {"small": ("4", "16Gi"), "medium": ("8", "32Gi"), "large": ("16", "64Gi")}


def awkward_cluster(seed: int, nodes: int, shards: int) -> dict[str, Any]:
    """Node pools, a tainted pool, NotReady and cordoned nodes; shards fully pending, partly
    running (master running, replicas pending) or fully running, some pinned to pools by a
    required node affinity, some tolerating the taint."""
    rng = random.Random(seed)
    items: list[dict[str, Any]] = []
    names: list[str] = []
    for i in range(nodes):
        zone = f"zone-{'abc'[i % 3]}"
        pool = list(AWKWARD_POOLS)[rng.randrange(3)]
        cpu, memory = AWKWARD_POOLS[pool]
        spec: dict[str, Any] = {}
        if pool == "large" and rng.random() < 0.5:
            spec["taints"] = [{"key": "dedicated", "value": "redis", "effect": "NoSchedule"}]
        if rng.random() < 0.08:
            spec["unschedulable"] = True
        name = f"node-{i:03d}"
        item = node(
            name, zone, f"{zone}-rack-{i % 2}", cpu, memory, labels={"pool": pool}, spec=spec
        )
        if rng.random() < 0.05:
            item["status"]["conditions"] = [{"type": "Ready", "status": "False"}]
        items.append(item)
        names.append(name)
    first_zone = set(names[::3])
    for s in range(shards):
        kind = rng.choice(["pending", "partly", "running"])
        used: list[str] = []
        for r in range(3):
            running = kind == "running" or (kind == "partly" and r == 0)
            # Carelessly placed: most running pods in the first zone, as a cluster that grew
            # without survive in mind (so greedy must give up shards to keep majorities).
            free = [n for n in names if n not in used]
            skewed = [n for n in free if n in first_zone] if rng.random() < 0.7 else []
            where = rng.choice(skewed or free) if running else None
            if where:
                used.append(where)
            pod = redis_pod(
                f"redis-{s}-{r}",
                "redis",
                str(s),
                "master" if r == 0 else "replica",
                "1",
                "4Gi",
                where,
            )
            spec = pod["spec"]
            if s % 3 == 0:
                spec["tolerations"] = [{"key": "dedicated", "operator": "Exists"}]
            if s % 4 == 1:
                spec["affinity"] = {
                    "nodeAffinity": {
                        "requiredDuringSchedulingIgnoredDuringExecution": {
                            "nodeSelectorTerms": [
                                {
                                    "matchExpressions": [
                                        {
                                            "key": "pool",
                                            "operator": "In",
                                            "values": ["small", "medium"],
                                        }
                                    ]
                                }
                            ]
                        }
                    }
                }
            items.append(pod)
    return {"apiVersion": "v1", "kind": "List", "items": items}
