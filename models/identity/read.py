"""The entry every command reads pods through: one formation per policy (``identity.formation``)."""

from collections.abc import Callable, Collection, Mapping, Sequence
from typing import Any

from models.cluster import Pod
from models.identity.common import ROLE_ANNOTATION, SHARD_SIZE_ANNOTATION, StatefulSets, owner_set
from models.identity.facts import StatefulSetFacts, ordinal, statefulset_facts
from models.identity.formations import create_order, labels, leader_follower, ordinal_modulo
from models.identity.result import Identified, Unidentified
from models.policy import Policy
from models.snapshot import Issue

__all__ = [
    "ROLE_ANNOTATION",
    "SHARD_SIZE_ANNOTATION",
    "Identified",
    "StatefulSetFacts",
    "Unidentified",
    "formation_replicas",
    "identify",
    "ordinal",
    "shard_selector",
    "solver_picks_roles",
    "statefulset_facts",
]

Reader = Callable[
    [Sequence[Pod], StatefulSets, Policy, list[Issue]], dict[str, Identified | Unidentified]
]
_FORMATIONS: Mapping[str, Reader] = {
    "labels": labels.read,
    "leader-follower": leader_follower.read,
    "create-order": create_order.read,
    "ordinal-modulo": ordinal_modulo.read,
}


Known = tuple[Pod, StatefulSetFacts | None, Identified | Unidentified, tuple[Issue, ...]]
"""A pod, its StatefulSet's facts, the identity read from them, and the issues that reading
reported."""


class IdentityMemo:
    """Identities read before, for a caller that reads the same pods again and again (the
    binder, per batch), under one policy.

    Only where a pod's identity is its own alone (the labels formation without member
    numbers): the other formations read a shard from its siblings, and are read whole. An entry
    holds while the pod is the same object and its StatefulSet the same facts.
    """

    def __init__(self) -> None:
        self._known: dict[str, Known] = {}

    def read(
        self, pods: Sequence[Pod], sets: StatefulSets, policy: Policy, issues: list[Issue]
    ) -> dict[str, Identified | Unidentified]:
        out: dict[str, Identified | Unidentified] = {}
        known: dict[str, Known] = {}
        for pod in pods:
            entry = read_own(pod, sets, policy, self._known.get(pod.key))
            known[pod.key] = entry
            out[pod.key] = entry[2]
            issues.extend(entry[3])
        self._known = known  # pods gone since are forgotten
        return out


def read_own(pod: Pod, sets: StatefulSets, policy: Policy, earlier: Known | None) -> Known:
    """One pod's identity under a per-pod formation, ``earlier``'s when it still holds (the pod
    reads alike and its StatefulSet's facts are the same)."""
    facts = owner_set(pod, sets)
    if earlier is not None and _reads_alike(earlier[0], pod) and earlier[1] == facts:
        return earlier
    own: list[Issue] = []
    found = labels.read([pod], sets, policy, own)[pod.key]
    return (pod, facts, found, tuple(own))


def _reads_alike(before: Pod, now: Pod) -> bool:
    """Whether the labels formation reads the same identity from both: what it reads (labels,
    owner, the role and shard-size annotations) is unchanged. A binding gives a pod a new
    object (its node, status, resourceVersion): re-reading it was most of the binder's
    snapshot after parsing."""
    return before is now or (
        before.labels == now.labels
        and before.owner_kind == now.owner_kind
        and before.owner_name == now.owner_name
        and all(before.annotations.get(k) == now.annotations.get(k) for k in _READ_ANNOTATIONS)
    )


_READ_ANNOTATIONS = (ROLE_ANNOTATION, SHARD_SIZE_ANNOTATION)


def per_pod(policy: Policy) -> bool:
    """Whether each pod's identity is read from the pod alone (its labels and owner)."""
    return policy.identity.formation == "labels" and not policy.identity.member_index_label


def identify(
    pods: Sequence[Pod],
    sets: StatefulSets,
    policy: Policy,
    issues: list[Issue],
    memo: IdentityMemo | None = None,
) -> dict[str, Identified | Unidentified]:
    """Each selected pod's identity by pod key (``namespace/name``); odd findings go to
    ``issues``. With ``memo``, pods read before under a per-pod formation are not read again."""
    if memo is not None and per_pod(policy):
        return memo.read(pods, sets, policy, issues)
    return _FORMATIONS[policy.identity.formation](pods, sets, policy, issues)


def formation_replicas(policy: Policy) -> int | None:
    """identity.replicasPerShard where the formation reads every shard from it (create-order,
    ordinal-modulo): a pairing Redis contradicts names it; None where labels say."""
    if policy.identity.formation in ("create-order", "ordinal-modulo"):
        return policy.identity.replicas_per_shard
    return None


def solver_picks_roles(policy: Policy) -> bool:
    """Whether a pending pod's role is the plan's to choose (and so a label the binder writes):
    only with redis-placer's own labels; a deployment's formation decides roles itself. That is
    when each pod's identity is its own alone: no sibling's number or order gives it a role."""
    return per_pod(policy)


POD_NAME_LABEL = "statefulset.kubernetes.io/pod-name"


def selects_by_labels(policy: Policy) -> bool:
    """Whether a shard's pods share labels no other pod has (redis-placer's own labels)."""
    identity = policy.identity
    return identity.formation == "labels" and not identity.cluster_suffixes


def shard_selector(
    policy: Policy, cluster: str, shard: str, pod_names: Collection[str]
) -> dict[str, Any]:
    """A label selector for exactly one shard's pods (a PodDisruptionBudget's).

    With redis-placer's labels, the cluster and shard labels; a deployment whose pods carry no
    shard label is selected by the StatefulSet pod names of the members.
    """
    if selects_by_labels(policy):
        keys = policy.labels
        return {"matchLabels": {**policy.selector, keys.cluster: cluster, keys.shard: shard}}
    return {
        "matchLabels": dict(policy.selector),
        "matchExpressions": [
            {"key": POD_NAME_LABEL, "operator": "In", "values": sorted(pod_names)}
        ],
    }
