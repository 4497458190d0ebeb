"""Benchmark: the plan command on clusters that ``models/synthetic.py`` does not make.

    python -m benchmarks.unseen [--cases unseen:11,unseen:12,unseen:13,huge,broken:1]
                                [--nodes 15000] [--shards 15000] [--redis-clusters 1]
                                [--survive none|host|rack|zone] [--time-limit S] [--keep DIR]

The solver's own generator deals nodes to zones and racks in a pattern the solver's authors
know. This one draws its clusters another way, so that a result on it says something about
clusters nobody tuned for:

* racks of very uneven sizes (log-normal: many small racks of a few dozen nodes beside a few
  of several hundred), each rack in a zone drawn at random, so zones differ in size too;
* node names, sizes and allocatable quantities as a cloud provider reports them (``Ki`` memory,
  ``m`` CPU, reserved system share taken off, pod limits 58 or 110);
* an unrelated pod of a random size (100m-2 CPU, 256Mi-6Gi) on a tenth of the nodes, in
  namespaces of its own, with the default tolerations the API server adds;
* pending Redis pods with uids, creation times and an image, in a namespace of their own,
  in one Redis cluster or dealt round to many (``--redis-clusters``: every cluster's masters
  and members counted on their own, so the level models grow with the clusters).

``broken_cluster`` is the other shape: a heterogeneous 300-node cluster whose running masters
already break ``survive: zone`` for one Redis cluster, where a plan may leave that break as it
is and never make it worse.

Each case writes its dump, runs ``python -m placer.cli plan -f DUMP -o json --time-limit L``
under ``/usr/bin/time -v`` (wall time, CPU time and peak resident memory of the whole
command), then checks the printed plan with the independent checker (``solver/check.py``)
against the dump read again: pods placed, hard violations, the plan's own status, engine and
gap, and under ``survive`` each Redis cluster's master shortfall before and after.
"""

import argparse
import json
import os
import random
import re
import subprocess
import sys
import tempfile
import time
from typing import Any

from models.kube_objects import build_snapshot, parse_documents
from models.plan import Plan
from placer.inputs.files import read_policy
from solver.check import check_plan, keep_plan, majority_shortfall

INSTANCE_TYPES: tuple[tuple[str, int, int, int], ...] = (
    # (type, vCPUs, GiB, max pods)
    ("m6i.xlarge", 4, 16, 58),
    ("m6i.2xlarge", 8, 32, 58),
    ("r6i.2xlarge", 8, 64, 58),
    ("m6i.4xlarge", 16, 64, 110),
    ("r6i.4xlarge", 16, 128, 110),
)
DEFAULT_TOLERATIONS = [
    {
        "key": "node.kubernetes.io/not-ready",
        "operator": "Exists",
        "effect": "NoExecute",
        "tolerationSeconds": 300,
    },
    {
        "key": "node.kubernetes.io/unreachable",
        "operator": "Exists",
        "effect": "NoExecute",
        "tolerationSeconds": 300,
    },
]


def rack_sizes(rng: random.Random, nodes: int, racks: int) -> list[int]:
    """Log-normal rack sizes summing to ``nodes``, none under 4: most racks small, a few large."""
    weights = [rng.lognormvariate(0.0, 0.8) for _ in range(racks)]
    total = sum(weights)
    sizes = [max(4, int(nodes * w / total)) for w in weights]
    while sum(sizes) > nodes:
        sizes[sizes.index(max(sizes))] -= 1
    for _ in range(nodes - sum(sizes)):
        sizes[rng.randrange(racks)] += 1
    return sizes


def _allocatable(cpus: int, gib: int) -> tuple[str, str]:
    """What a kubelet reports after its system reservation: millicores and Ki."""
    cpu = cpus * 1000 - 80 - 10 * cpus
    memory = gib * 1024 * 1024 - 255 * 1024 - 11 * gib * 1024
    return f"{cpu}m", f"{memory}Ki"


def _stamp(rng: random.Random) -> str:
    return f"2026-11-{rng.randint(1, 28):02d}T{rng.randint(0, 23):02d}:{rng.randint(0, 59):02d}:00Z"


def _node(rng: random.Random, name: str, zone: str, rack: str) -> dict[str, Any]:
    kind, cpus, gib, pods = INSTANCE_TYPES[rng.randrange(len(INSTANCE_TYPES))]
    cpu, memory = _allocatable(cpus, gib)
    labels = {
        "kubernetes.io/arch": "amd64",
        "kubernetes.io/hostname": name,
        "kubernetes.io/os": "linux",
        "node.kubernetes.io/instance-type": kind,
        "topology.kubernetes.io/region": "eu-west-1",
        "topology.kubernetes.io/zone": zone,
        "rack": rack,
    }
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "uid": f"{rng.getrandbits(128):032x}",
            "resourceVersion": str(rng.randint(10**6, 10**8)),
            "creationTimestamp": _stamp(rng),
            "labels": labels,
        },
        "spec": {"providerID": f"aws:///{zone}/i-{rng.getrandbits(64):016x}"},
        "status": {
            "allocatable": {"cpu": cpu, "memory": memory, "pods": str(pods)},
            "conditions": [
                {"type": "Ready", "status": "True", "reason": "KubeletReady"},
            ],
        },
    }


def _background(rng: random.Random, node_name: str, index: int) -> dict[str, Any]:
    namespace = rng.choice(("payments", "search", "ingest", "monitoring", "batch"))
    cpu = f"{rng.choice((100, 250, 500, 1000, 2000))}m"
    memory = f"{rng.choice((256, 512, 1024, 2048, 4096, 6144))}Mi"
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": f"{namespace}-worker-{index:06d}",
            "namespace": namespace,
            "uid": f"{rng.getrandbits(128):032x}",
            "labels": {"app.kubernetes.io/name": namespace, "tier": "backend"},
        },
        "spec": {
            "nodeName": node_name,
            "containers": [
                {"name": "main", "resources": {"requests": {"cpu": cpu, "memory": memory}}}
            ],
            "tolerations": DEFAULT_TOLERATIONS,
        },
        "status": {"phase": "Running"},
    }


def _redis(rng: random.Random, cluster: str, shard: int, ordinal: int, role: str) -> dict[str, Any]:
    name = f"{cluster}-s{shard:05d}-{ordinal}"
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": "cache",
            "uid": f"{rng.getrandbits(128):032x}",
            "creationTimestamp": _stamp(rng),
            "labels": {
                "app": "redis",
                "redis-cluster": cluster,
                "redis-shard": str(shard),
                "redis-role": role,
            },
        },
        "spec": {
            "schedulerName": "redis-placer",
            "containers": [
                {
                    "name": "redis",
                    "image": "redis:7.2",
                    "resources": {"requests": {"cpu": "500m", "memory": "2Gi"}},
                }
            ],
        },
        "status": {"phase": "Pending"},
    }


def unseen_cluster(
    seed: int,
    nodes: int = 15_000,
    zones: int = 3,
    racks: int = 150,
    busy: float = 0.1,
    shards: int = 15_000,
    replicas: int = 2,
    redis_clusters: int = 1,
) -> dict[str, Any]:
    """A cluster as ``kubectl get nodes,pods -A -o json`` prints it, deterministic for a seed;
    the shards dealt round to ``redis_clusters`` Redis clusters."""
    rng = random.Random(seed)
    sizes = rack_sizes(rng, nodes, racks)
    zone_names = [f"eu-west-1{chr(ord('a') + z)}" for z in range(zones)]
    rack_zone = [zone_names[r % zones] for r in range(racks)]
    rng.shuffle(rack_zone)
    slots = [r for r, size in enumerate(sizes) for _ in range(size)]
    rng.shuffle(slots)  # nodes of a rack are not consecutive in the dump
    items: list[dict[str, Any]] = []
    for i, r in enumerate(slots):
        ip = f"10.{(i >> 16) & 255}.{(i >> 8) & 255}.{i & 255}"
        name = f"ip-{ip.replace('.', '-')}.eu-west-1.compute.internal"
        zone = rack_zone[r]
        items.append(_node(rng, name, zone, f"{zone}-r{r:03d}"))
        if rng.random() < busy:
            items.append(_background(rng, name, i))
    for s in range(shards):
        cluster = "orders" if redis_clusters == 1 else f"orders-{s % redis_clusters:03d}"
        for ordinal in range(replicas + 1):
            items.append(_redis(rng, cluster, s, ordinal, "master" if ordinal == 0 else "replica"))
    return {"apiVersion": "v1", "kind": "List", "metadata": {"resourceVersion": ""}, "items": items}


POOLS = {"small": ("4", "16Gi"), "medium": ("8", "32Gi"), "large": ("16", "64Gi")}


def _pool_affinity(key: str, values: list[str]) -> dict[str, Any]:
    term = {"key": key, "operator": "In", "values": values}
    return {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [{"matchExpressions": [term]}]
            }
        }
    }


def broken_cluster(
    seed: int, nodes: int = 300, clusters: int = 8, pending_shards: int = 305
) -> dict[str, Any]:
    """A heterogeneous cluster that already breaks ``survive: zone``: four zones of unequal
    size, three node pools, a quarter of the nodes tainted, Redis clusters partly running, the
    first of them with its running masters piled so that one zone's loss leaves it one master
    short of a majority; pending shards (master and 2 replicas, 2 CPU / 16Gi) more than fit,
    half of them held by node affinity to two pools or to two zones."""
    rng = random.Random(seed)
    zones = ["zone-a", "zone-b", "zone-c", "zone-d"]
    items: list[dict[str, Any]] = []
    by_zone: dict[str, list[str]] = {z: [] for z in zones}
    for i in range(nodes):
        zone = rng.choices(zones, weights=(4, 3, 2, 1))[0]
        pool = rng.choice(list(POOLS))
        cpu, memory = POOLS[pool]
        name = f"node-{i:03d}"
        taints = [{"key": "dedicated", "value": "batch", "effect": "NoSchedule"}]
        items.append(
            {
                "apiVersion": "v1",
                "kind": "Node",
                "metadata": {
                    "name": name,
                    "labels": {
                        "kubernetes.io/hostname": name,
                        "topology.kubernetes.io/zone": zone,
                        "rack": f"{zone}-r{i % 5}",
                        "pool": pool,
                    },
                },
                "spec": {"taints": taints} if rng.random() < 0.25 else {},
                "status": {
                    "allocatable": {"cpu": cpu, "memory": memory, "pods": "110"},
                    "conditions": [{"type": "Ready", "status": "True"}],
                },
            }
        )
        by_zone[zone].append(name)

    def pod(cluster: str, shard: int, ordinal: int, where: str | None) -> dict[str, Any]:
        doc = _redis(rng, cluster, shard, ordinal, "master" if ordinal == 0 else "replica")
        doc["spec"]["containers"][0]["resources"]["requests"] = {"cpu": "2", "memory": "16Gi"}
        if where is not None:
            doc["spec"]["nodeName"] = where
            doc["status"] = {"phase": "Running"}
        return doc

    shard_no = 0
    for c in range(clusters):
        name = f"rc-{c}"
        running = 5 if c == 0 else rng.randint(3, 7)
        for k in range(running):
            # rc-0: 3 of its 5 masters in zone-a, whose loss leaves 2 of 5 (3 needed).
            zone = ("zone-a" if k < 3 else zones[k - 2]) if c == 0 else zones[k % 4]
            members = rng.sample(by_zone[zone], 1) + rng.sample(
                [n for z in zones if z != zone for n in by_zone[z]], 2
            )
            for ordinal, where in enumerate(members):
                items.append(pod(name, shard_no, ordinal, where))
            shard_no += 1
    for s in range(pending_shards):
        name = f"rc-{s % clusters}"
        affinity = None
        if s % 4 == 1:
            affinity = _pool_affinity("pool", ["small", "medium"])
        elif s % 4 == 3:
            affinity = _pool_affinity("topology.kubernetes.io/zone", rng.sample(zones, 2))
        for ordinal in range(3):
            doc = pod(name, shard_no, ordinal, None)
            if affinity is not None:
                doc["spec"]["affinity"] = affinity
            if s % 3 == 0:
                doc["spec"]["tolerations"] = [{"key": "dedicated", "operator": "Exists"}]
            items.append(doc)
        shard_no += 1
    return {"apiVersion": "v1", "kind": "List", "items": items}


def _load() -> str:
    return " / ".join(f"{x:.1f}" for x in os.getloadavg())


def run_case(
    dump: str, time_limit: float, policy_file: str | None = None, code: str | None = None
) -> dict[str, Any]:
    """The plan command on ``dump`` under /usr/bin/time -v, its plan judged by the checker;
    ``code``: a checkout whose command runs (another commit's, for a before and after)."""
    load_before = _load()
    command = [
        sys.executable, "-m", "placer.cli", "plan", "-f", dump, "-o", "json",
        "--time-limit", str(time_limit), *(["-p", policy_file] if policy_file else []),
    ]  # fmt: skip
    started = time.monotonic()
    env = dict(os.environ, PYTHONPATH=code) if code else None
    done = subprocess.run(
        ["/usr/bin/time", "-v", *command],
        capture_output=True,
        text=True,
        check=False,
        cwd=code,
        env=env,
    )
    wall = time.monotonic() - started
    stats = dict(re.findall(r"^\s*(.+?): (.+)$", done.stderr, re.MULTILINE))
    plan = Plan.model_validate_json(done.stdout)
    policy = read_policy(policy_file)
    with open(dump) as f:
        snapshot = build_snapshot(parse_documents(f.read(), dump), policy)
    hard = sum(1 for v in check_plan(snapshot, policy, plan) if v.severity == "hard")
    result: dict[str, Any] = {
        "pods": len(snapshot.pending),
        "wall": wall,
        "cpu": float(stats["User time (seconds)"]) + float(stats["System time (seconds)"]),
        "exit": done.returncode,
        "status": plan.status,
        "engine": plan.engine,
        "gap": plan.gap,
        "unplaced": len(plan.unplaced),
        "hard": hard,
        "rss_mib": int(stats["Maximum resident set size (kbytes)"]) / 1024,
        "load": f"{load_before} -> {_load()}",
    }
    level = policy.rules.survive
    if level != "none":
        before = majority_shortfall(snapshot, keep_plan(snapshot), level)
        after = majority_shortfall(snapshot, plan, level)
        result["shortfall"] = ", ".join(
            f"{k.split('/')[-1]} {before.get(k, 0)} -> {n}"
            for k, n in sorted(after.items())
            if n or before.get(k, 0)
        )
    return result


def _document(
    case: str, nodes: int, racks: int, shards: int, redis_clusters: int = 1
) -> tuple[dict[str, Any], str]:
    """The dump of a case named ``unseen:SEED``, ``broken:SEED`` or a benchmarks.run size."""
    name, _, seed = case.partition(":")
    if name == "unseen":
        document = unseen_cluster(
            int(seed), nodes, racks=racks, shards=shards, redis_clusters=redis_clusters
        )
        return document, "none"
    if name == "broken":
        return broken_cluster(int(seed)), "zone"
    from benchmarks.run import CASES, case_document

    return case_document(CASES[name]), "none"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument(
        "--cases",
        default="unseen:11,unseen:12,unseen:13",
        help="unseen:SEED (15,000 nodes), broken:SEED (300 nodes, survive: zone, 10 s), or a "
        "benchmarks.run size (huge, huge-uneven)",
    )
    parser.add_argument("--nodes", type=int, default=15_000)
    parser.add_argument("--racks", type=int, default=150)
    parser.add_argument("--shards", type=int, default=15_000)
    parser.add_argument(
        "--redis-clusters",
        type=int,
        default=1,
        help="unseen cases: deal the shards round to this many Redis clusters",
    )
    parser.add_argument("--time-limit", type=float, default=None, help="20 s (10 s for broken)")
    parser.add_argument(
        "--survive",
        choices=("none", "host", "rack", "zone"),
        default=None,
        help="rules.survive for the unseen cases (default none; broken cases: zone)",
    )
    parser.add_argument("--keep", help="write the dumps here and keep them")
    parser.add_argument(
        "--code",
        action="append",
        default=[],
        help="run the command of this checkout instead (repeat: each case on each, in turn)",
    )
    args = parser.parse_args()
    folder = args.keep or tempfile.mkdtemp(prefix="unseen-")
    os.makedirs(folder, exist_ok=True)
    print(
        "case | code | pending | dump MB | command s | CPU s | exit | status | engine | gap | unplaced "
        "| hard | peak MiB | load (before -> after) | shortfall before -> after"
    )
    print(" | ".join(["---"] * 15))
    for case in args.cases.split(","):
        many = f"-c{args.redis_clusters}" if args.redis_clusters > 1 else ""
        dump = os.path.join(folder, f"{case.replace(':', '-')}{many}.json")
        document, survive = _document(
            case, args.nodes, args.racks, args.shards, args.redis_clusters
        )
        if args.survive is not None and case.startswith("unseen"):
            survive = args.survive
        if not os.path.exists(dump):
            with open(dump, "w") as f:
                json.dump(document, f)
        del document
        policy_file = None
        if survive != "none":
            policy_file = os.path.join(folder, f"survive-{survive}.yaml")
            with open(policy_file, "w") as f:
                f.write(f"rules:\n  survive: {survive}\n")
        limit = args.time_limit or (10.0 if case.startswith("broken") else 20.0)
        for code in args.code or [None]:
            r = run_case(dump, limit, policy_file, code)
            size = os.path.getsize(dump) / 1e6
            print(
                f"{case} | {code or '.'} | {r['pods']:,} | {size:.0f} | {r['wall']:.2f} "
                f"| {r['cpu']:.2f} | {r['exit']} | {r['status']} | {r['engine']} | {r['gap']:.4%} "
                f"| {r['unplaced']} | {r['hard']} | {r['rss_mib']:.0f} | {r['load']} "
                f"| {r.get('shortfall', '-')}",
                flush=True,
            )
        if not args.keep:
            os.remove(dump)
            if policy_file:
                os.remove(policy_file)
    if not args.keep:
        os.rmdir(folder)


if __name__ == "__main__":
    main()
