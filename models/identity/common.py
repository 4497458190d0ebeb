"""Readings every formation shares: the cluster's name and the role a pod's labels give."""

from collections import defaultdict
from collections.abc import Mapping, Sequence

from models.cluster import Pod, Role
from models.identity.config import DEFAULT_ROLE_VALUES
from models.identity.facts import StatefulSetFacts, ordinal, role_of
from models.identity.result import Identified, Unidentified
from models.policy import Policy
from models.words import plural

SHARD_SIZE_ANNOTATION = "redis-placer.io/shard-size"
ROLE_ANNOTATION = "redis-placer.io/role"
"""The role the binder's plan gave a pod, written in the same request as its node (a Binding's
annotations, or the pin). A pod's role label, when it has one, comes first."""

StatefulSets = Mapping[tuple[str, str], StatefulSetFacts]


class Skip(Exception):
    """The pod cannot be read as a member; the message says what is missing."""


def cluster_name(pod: Pod, policy: Policy) -> str:
    key = policy.labels.cluster
    value = pod.labels.get(key)
    if not value:
        raise Skip(f"label {key!r} is missing: pod skipped")
    for suffix in policy.identity.cluster_suffixes:
        if suffix and value.endswith(suffix) and len(value) > len(suffix):
            return value[: -len(suffix)]
    return value


def labelled_role(pod: Pod, policy: Policy) -> tuple[Role | None, str]:
    """The role the pod's role label (or else the binder's annotation) says, and where from.

    The role label is the truth once the cluster has formed (an operator or the binder
    writes it); a value that means no role is an error, never a guess.
    """
    key = policy.labels.role
    raw = pod.labels.get(key)
    where = f"label {key}"
    values = policy.identity.role_values
    if raw is None and ROLE_ANNOTATION in pod.annotations:
        raw, where, values = (
            pod.annotations[ROLE_ANNOTATION],
            f"annotation {ROLE_ANNOTATION}",
            DEFAULT_ROLE_VALUES,
        )
    if raw is None:
        return None, ""
    role = role_of(raw, values)
    if role is None:
        known = ", ".join(sorted(values))
        raise Skip(f"{where}={raw!r} is not one of {known}: pod skipped")
    return role, where


def owner_set(pod: Pod, sets: StatefulSets) -> StatefulSetFacts | None:
    if pod.owner_kind != "StatefulSet" or not pod.owner_name:
        return None
    return sets.get((pod.namespace, pod.owner_name))


def ordered(pod: Pod, policy: Policy, sets: StatefulSets, always: bool = False) -> bool:
    """Whether the pod's shard gets its later members only after the present ones run."""
    setting = policy.identity.ordered_creation
    if setting != "auto":
        return setting == "always"
    if always:
        return True
    facts = owner_set(pod, sets)
    return bool(facts and facts.ordered and (facts.replicas or 0) > 1)


Ordinal = tuple[Pod, str, int]
"""A pod of a StatefulSet formation, its cluster name and its ordinal."""


def ordinal_or_skip(pod: Pod, policy: Policy) -> tuple[str, int]:
    """The pod's cluster name and StatefulSet ordinal; Skip when either is missing."""
    cluster = cluster_name(pod, policy)
    index = ordinal(pod)
    if index is None:
        raise Skip("has no StatefulSet ordinal (label apps.kubernetes.io/pod-index): pod skipped")
    return cluster, index


def by_statefulset(
    pods: Sequence[Pod], policy: Policy, out: dict[str, Identified | Unidentified]
) -> list[list[Ordinal]]:
    """The pods grouped by their StatefulSet; a pod that cannot be read goes to ``out``."""
    groups: dict[tuple[str, str], list[Ordinal]] = defaultdict(list)
    for pod in pods:
        try:
            cluster, index = ordinal_or_skip(pod, policy)
        except Skip as why:
            out[pod.key] = Unidentified(str(why))
            continue
        groups[(pod.namespace, pod.owner_name or cluster)].append((pod, cluster, index))
    return list(groups.values())


def set_size(group: Sequence[Ordinal], sets: StatefulSets) -> tuple[int, str]:
    """How many pods the group's StatefulSet makes, and where that was read."""
    facts = owner_set(group[0][0], sets)
    if facts is not None and facts.replicas is not None:
        return facts.replicas, f"statefulset {facts.namespace}/{facts.name} spec.replicas"
    return max(i for _, _, i in group) + 1, "the highest ordinal seen plus one"


def replicas_hint(nodes: int, replicas: int, min_shards: int, named: str = "") -> str:
    """What to set where ``nodes`` pods do not split into shards of ``replicas + 1`` as the
    formation expects: the replica counts that would (each giving at least ``min_shards``
    shards), as "; if each master has R replicas, set identity.replicasPerShard: R"; "" when
    none would. ``named``: where the deployment sets that count (e.g. a chart value)."""
    fits = [
        r
        for r in range(1, 65)
        if r != replicas and nodes % (r + 1) == 0 and nodes // (r + 1) >= min_shards
    ]
    if not fits:
        return ""
    where = f" ({named})" if named else ""
    if len(fits) == 1:
        return (
            f"; if each master has {plural(fits[0], 'replica')}{where}, set "
            f"identity.replicasPerShard: {fits[0]}"
        )
    counts = ", ".join(map(str, fits[:-1])) + f" or {fits[-1]}"
    return (
        f"; if each master has {counts} replicas{where}, set identity.replicasPerShard to that "
        "number"
    )


def set_name(group: Sequence[Ordinal]) -> str:
    """The group's StatefulSet as an issue names it."""
    pod, cluster, _ = group[0]
    return f"statefulset {pod.namespace}/{pod.owner_name or cluster}"
