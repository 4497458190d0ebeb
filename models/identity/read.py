"""The entry every command reads pods through: one formation per policy (``identity.formation``)."""

from collections.abc import Callable, Mapping, Sequence

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
