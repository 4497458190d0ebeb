"""The shard is a label; the role a label, the binder's annotation, or member number 0."""

from collections import defaultdict
from collections.abc import Sequence

from models.cluster import Pod, Role
from models.identity.common import (
    SHARD_SIZE_ANNOTATION,
    Skip,
    StatefulSets,
    cluster_name,
    labelled_role,
    ordered,
    owner_set,
)
from models.identity.facts import number, positive
from models.identity.result import Identified, Unidentified
from models.policy import Policy
from models.snapshot import Issue


def read(
    pods: Sequence[Pod], sets: StatefulSets, policy: Policy, issues: list[Issue]
) -> dict[str, Identified | Unidentified]:
    out: dict[str, Identified | Unidentified] = {}
    index_key = policy.identity.member_index_label
    highest: dict[tuple[str, str], int] = defaultdict(lambda: -1)
    numbered: dict[str, int] = {}
    if index_key:
        for pod in pods:
            index = number(pod.labels.get(index_key))
            cluster = pod.labels.get(policy.labels.cluster)
            if index is not None and cluster:
                numbered[pod.key] = index
                key = (pod.namespace, cluster)
                highest[key] = max(highest[key], index)
    for pod in pods:
        try:
            out[pod.key] = _one(pod, sets, policy, issues, numbered, highest)
        except Skip as why:
            out[pod.key] = Unidentified(str(why))
    return out


def _one(
    pod: Pod,
    sets: StatefulSets,
    policy: Policy,
    issues: list[Issue],
    numbered: dict[str, int],
    highest: dict[tuple[str, str], int],
) -> Identified:
    cluster = cluster_name(pod, policy)
    shard = pod.labels.get(policy.labels.shard)
    if not shard:
        raise Skip(f"label {policy.labels.shard!r} is missing: pod skipped")
    index_key = policy.identity.member_index_label
    if index_key and pod.key not in numbered:
        raise Skip(f"label {index_key!r} is missing or not a number: pod skipped")
    role, role_source = labelled_role(pod, policy)
    if role is None and index_key:
        role = Role.MASTER if numbered[pod.key] == 0 else Role.REPLICA
        role_source = f"label {index_key} (0 is created master)"
    size, size_source = None, ""
    raw_size = pod.annotations.get(SHARD_SIZE_ANNOTATION)
    facts = owner_set(pod, sets)
    if raw_size is not None:
        size = positive(raw_size)
        if size is not None:
            size_source = f"annotation {SHARD_SIZE_ANNOTATION}"
        else:
            issues.append(
                Issue(
                    object=f"pod {pod.key}",
                    message=f"annotation {SHARD_SIZE_ANNOTATION}={raw_size!r} is not a positive integer",
                )
            )
    elif index_key:
        top = highest[(pod.namespace, pod.labels[policy.labels.cluster])]
        size = top + 1
        size_source = f"the highest {index_key} in its cluster ({top}) plus one"
    elif facts is not None and facts.replicas is not None:
        size = facts.replicas
        size_source = f"statefulset {facts.namespace}/{facts.name} spec.replicas"
    elif pod.owner_kind == "StatefulSet" and pod.owner_name:
        size_source = f"statefulset {pod.namespace}/{pod.owner_name} spec.replicas"
    return Identified(
        cluster=cluster,
        shard=shard,
        role=role,
        role_source=role_source,
        size=size,
        size_source=size_source,
        ordered=ordered(pod, policy, sets),
    )
