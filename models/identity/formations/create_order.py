"""One StatefulSet formed by ``redis-cli --cluster create <every pod in ordinal order>
--cluster-replicas R``, as the bitnami redis-cluster chart does from its pod 0.

redis-cli, with every node on its own address, takes the first ``M = N / (R + 1)`` nodes as
masters, rotates the others left by one, and deals them ``R`` at a time to the masters in order;
nodes left over go one each to the masters in order ("Adding extra replicas...").
``tests/test_create_order_redis.py`` checks this against the real redis-cli.
"""

from collections import defaultdict
from collections.abc import Sequence

from models.cluster import Pod, Role
from models.identity.common import (
    Skip,
    StatefulSets,
    by_statefulset,
    labelled_role,
    ordered,
    set_size,
)
from models.identity.result import Identified, Unidentified
from models.policy import Policy
from models.snapshot import Issue


def masters_of(nodes: int, replicas: int) -> list[int]:
    """For each ordinal ``0..nodes-1``, the ordinal of the master it is created under (itself
    for a master, and for a node left over once every master has one extra replica)."""
    count = nodes // (replicas + 1)
    master_of = list(range(nodes))
    if count == 0:
        return master_of
    rest = list(range(count, nodes))
    rest = rest[1:] + rest[:1]
    for master in range(count):
        dealt, rest = rest[:replicas], rest[replicas:]
        for node in dealt:
            master_of[node] = master
    for master in range(count):  # "Adding extra replicas...": one more each, in order
        if not rest:
            break
        master_of[rest.pop(0)] = master
    return master_of


def read(
    pods: Sequence[Pod], sets: StatefulSets, policy: Policy, issues: list[Issue]
) -> dict[str, Identified | Unidentified]:
    out: dict[str, Identified | Unidentified] = {}
    groups = by_statefulset(pods, policy, out)
    replicas = policy.identity.replicas_per_shard
    for group in groups:
        nodes, source = set_size(group, sets)
        master_of = masters_of(nodes, replicas)
        sizes: dict[int, int] = defaultdict(int)
        for master in master_of:
            sizes[master] += 1
        for pod, cluster, index in group:
            if index >= nodes:
                out[pod.key] = Unidentified(
                    f"ordinal {index} is beyond the {nodes} nodes ({source}): pod skipped"
                )
                continue
            try:
                role, role_source = labelled_role(pod, policy)
            except Skip as why:
                out[pod.key] = Unidentified(str(why))
                continue
            master = master_of[index]
            out[pod.key] = Identified(
                cluster=cluster,
                shard=str(master),
                role=role or (Role.MASTER if master == index else Role.REPLICA),
                role_source=role_source or "formation (redis-cli --cluster create order)",
                size=sizes[master],
                size_source=f"redis-cli --cluster create over {nodes} nodes ({source}) with "
                f"--cluster-replicas {replicas} (identity.replicasPerShard)",
                ordered=ordered(pod, policy, sets),
            )
    return out
