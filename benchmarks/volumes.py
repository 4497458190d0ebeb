"""Benchmark: placing shards whose pods claim local PVs, against the same cluster without claims.

    python -m benchmarks.volumes [--nodes N] [--shards S] [--time-limit T]

Three zones of N nodes, a free local PV (WaitForFirstConsumer, no provisioner) on three of every
four nodes, S pending shards of two pods, each pod with its own claim. Prints, with and without
the claims: the snapshot's build time, the solve's wall time, status and engine, unplaced pods and
hard violations (from the independent checker).
"""

import argparse
import time
from typing import Any

from models.kube_objects import build_snapshot
from models.policy import Policy
from solver.check import check_plan
from solver.solve import SolveOptions, solve

HOST = "kubernetes.io/hostname"
ZONE = "topology.kubernetes.io/zone"


def _node(i: int) -> dict[str, Any]:
    labels = {HOST: f"n{i}", ZONE: "abc"[i % 3], "rack": f"r{i % 30}"}
    return {
        "kind": "Node",
        "metadata": {"name": f"n{i}", "labels": labels},
        "status": {
            "allocatable": {"cpu": "16", "memory": "64Gi", "pods": "110"},
            "conditions": [{"type": "Ready", "status": "True"}],
        },
    }


def _pv(i: int) -> dict[str, Any]:
    term = {"matchExpressions": [{"key": HOST, "operator": "In", "values": [f"n{i}"]}]}
    return {
        "kind": "PersistentVolume",
        "metadata": {"name": f"pv-{i}"},
        "spec": {
            "storageClassName": "local-nvme",
            "capacity": {"storage": "100Gi"},
            "accessModes": ["ReadWriteOnce"],
            "nodeAffinity": {"required": {"nodeSelectorTerms": [term]}},
        },
        "status": {"phase": "Available"},
    }


def _pod(name: str, shard: int, claim: bool) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "containers": [{"name": "r", "resources": {"requests": {"cpu": "1", "memory": "4Gi"}}}]
    }
    if claim:
        spec["volumes"] = [{"name": "data", "persistentVolumeClaim": {"claimName": f"d-{name}"}}]
    labels = {"app": "redis", "redis-cluster": "c", "redis-shard": str(shard)}
    return {
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "r", "labels": labels},
        "spec": spec,
    }


def _claim(name: str) -> dict[str, Any]:
    return {
        "kind": "PersistentVolumeClaim",
        "metadata": {"name": f"d-{name}", "namespace": "r"},
        "spec": {
            "storageClassName": "local-nvme",
            "accessModes": ["ReadWriteOnce"],
            "resources": {"requests": {"storage": "50Gi"}},
        },
    }


def objects(nodes: int, shards: int, claims: bool) -> list[dict[str, Any]]:
    out = [_node(i) for i in range(nodes)]
    if claims:
        out.append(
            {
                "kind": "StorageClass",
                "metadata": {"name": "local-nvme"},
                "provisioner": "kubernetes.io/no-provisioner",
                "volumeBindingMode": "WaitForFirstConsumer",
            }
        )
        out += [_pv(i) for i in range(nodes) if i % 4]
    for s in range(shards):
        for r in range(2):
            name = f"redis-{s}-{r}"
            out.append(_pod(name, s, claims))
            if claims:
                out.append(_claim(name))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--shards", type=int, default=300)
    parser.add_argument("--time-limit", type=float, default=20.0)
    args = parser.parse_args()
    policy = Policy()
    print("claims  nodes  pods  snapshot_s  solve_s  status    engine   unplaced  hard")
    for claims in (False, True):
        objs = objects(args.nodes, args.shards, claims)
        started = time.monotonic()
        snapshot = build_snapshot(objs, policy)
        built = time.monotonic()
        plan = solve(snapshot, policy, options=SolveOptions(time_limit=args.time_limit))
        solved = time.monotonic()
        hard = sum(v.severity == "hard" for v in check_plan(snapshot, policy, plan))
        print(
            f"{'yes' if claims else 'no':<7} {args.nodes:>5} {2 * args.shards:>5} "
            f"{built - started:>10.2f} {solved - built:>8.2f}  {plan.status:<9} "
            f"{plan.engine:<8} {len(plan.unplaced):>8} {hard:>5}"
        )


if __name__ == "__main__":
    main()
