"""One StatefulSet of ``shards * (R + 1)`` pods: shard = ordinal mod shards, and the first
``shards`` ordinals are the masters (the hyperspike valkey-operator's layout)."""

from collections import defaultdict
from collections.abc import Sequence

from models.cluster import Pod, Role
from models.identity.common import (
    Skip,
    StatefulSets,
    cluster_name,
    labelled_role,
    ordered,
    owner_set,
)
from models.identity.facts import ordinal
from models.identity.result import Identified, Unidentified
from models.policy import Policy
from models.snapshot import Issue


def read(
    pods: Sequence[Pod], sets: StatefulSets, policy: Policy, issues: list[Issue]
) -> dict[str, Identified | Unidentified]:
    out: dict[str, Identified | Unidentified] = {}
    by_set: dict[tuple[str, str], list[tuple[Pod, str, int]]] = defaultdict(list)
    for pod in pods:
        try:
            cluster = cluster_name(pod, policy)
            index = ordinal(pod)
            if index is None:
                raise Skip(
                    "has no StatefulSet ordinal (label apps.kubernetes.io/pod-index): pod skipped"
                )
        except Skip as why:
            out[pod.key] = Unidentified(str(why))
            continue
        by_set[(pod.namespace, pod.owner_name or cluster)].append((pod, cluster, index))
    per_shard = policy.identity.replicas_per_shard + 1
    for group in by_set.values():
        facts = owner_set(group[0][0], sets)
        if facts is not None and facts.replicas is not None:
            nodes, source = (
                facts.replicas,
                f"statefulset {facts.namespace}/{facts.name} spec.replicas",
            )
        else:
            nodes, source = max(i for _, _, i in group) + 1, "the highest ordinal seen plus one"
        shards = max(1, nodes // per_shard)
        if nodes % per_shard:
            issues.append(
                Issue(
                    object=f"statefulset {group[0][0].namespace}/{group[0][0].owner_name}",
                    message=f"{nodes} pods ({source}) are not a multiple of "
                    f"{per_shard} (identity.replicasPerShard + 1)",
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
