"""The entry every command reads pods through: one formation per policy (``identity.formation``)."""

from collections.abc import Callable, Collection, Mapping, Sequence
from typing import Any

from models.cluster import Pod
from models.identity.common import ROLE_ANNOTATION, SHARD_SIZE_ANNOTATION, StatefulSets
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


def identify(
    pods: Sequence[Pod], sets: StatefulSets, policy: Policy, issues: list[Issue]
) -> dict[str, Identified | Unidentified]:
    """Each selected pod's identity by pod key (``namespace/name``); odd findings go to
    ``issues``."""
    return _FORMATIONS[policy.identity.formation](pods, sets, policy, issues)


def solver_picks_roles(policy: Policy) -> bool:
    """Whether a pending pod's role is the plan's to choose (and so a label the binder writes):
    only with redis-placer's own labels; a deployment's formation decides roles itself."""
    return policy.identity.formation == "labels" and not policy.identity.member_index_label


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
