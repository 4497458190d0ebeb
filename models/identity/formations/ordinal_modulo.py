"""One StatefulSet of ``shards * (R + 1)`` pods: shard = ordinal mod shards, and the first
``shards`` ordinals are the masters (the hyperspike valkey-operator's layout)."""

from collections.abc import Sequence

from models.cluster import Pod, Role
from models.identity.common import (
    Skip,
    StatefulSets,
    by_statefulset,
    labelled_role,
    ordered,
    replicas_hint,
    set_name,
    set_size,
)
from models.identity.result import Identified, Unidentified
from models.policy import Policy
from models.snapshot import Issue


def read(
    pods: Sequence[Pod], sets: StatefulSets, policy: Policy, issues: list[Issue]
) -> dict[str, Identified | Unidentified]:
    out: dict[str, Identified | Unidentified] = {}
    groups = by_statefulset(pods, policy, out)
    per_shard = policy.identity.replicas_per_shard + 1
    for group in groups:
        nodes, source = set_size(group, sets)
        shards = max(1, nodes // per_shard)
        if nodes % per_shard:
            issues.append(
                Issue(
                    object=set_name(group),
                    message=f"{nodes} pods ({source}) are not a multiple of "
                    f"{per_shard} (identity.replicasPerShard + 1)"
                    + replicas_hint(nodes, per_shard - 1, 3),
                    severity="warning",
                )
            )
        for pod, cluster, index in group:
            try:
                role, role_source = labelled_role(pod, policy)
            except Skip as why:
                out[pod.key] = Unidentified(str(why))
                continue
            shard = index % shards
            out[pod.key] = Identified(
                cluster=cluster,
                shard=str(shard),
                role=role or (Role.MASTER if index < shards else Role.REPLICA),
                role_source=role_source or "formation (the first ordinals are masters)",
                size=len(range(shard, nodes, shards)),
                size_source=f"{nodes} pods ({source}) in {shards} shards "
                f"(identity.replicasPerShard {per_shard - 1})",
                ordered=ordered(pod, policy, sets),
            )
    return out
