"""Two StatefulSets: leader ``i`` masters shard ``i``; follower ``j`` replicates leader ``j mod L``.

The followers' StatefulSet is made only once every leader is Ready, so a leader's shard is
always placed member by member: its follower cannot appear until the leader runs.
"""

from collections import defaultdict
from collections.abc import Sequence

from models.cluster import Pod, Role
from models.identity.common import (
    Skip,
    StatefulSets,
    labelled_role,
    ordered,
    ordinal_or_skip,
)
from models.identity.facts import ordinal, role_of
from models.identity.result import Identified, Unidentified
from models.policy import Policy
from models.snapshot import Issue


def read(
    pods: Sequence[Pod], sets: StatefulSets, policy: Policy, issues: list[Issue]
) -> dict[str, Identified | Unidentified]:
    out: dict[str, Identified | Unidentified] = {}
    made: dict[str, tuple[str, Role, int]] = {}
    groups: dict[tuple[str, str, Role], list[Pod]] = defaultdict(list)
    for pod in pods:
        try:
            created = _created_as(pod, policy)
            cluster, index = ordinal_or_skip(pod, policy)
        except Skip as why:
            out[pod.key] = Unidentified(str(why))
            continue
        made[pod.key] = (cluster, created, index)
        groups[(pod.namespace, cluster, created)].append(pod)
    leaders = {
        key[:2]: _count(group, sets) for key, group in groups.items() if key[2] is Role.MASTER
    }
    followers = {
        key[:2]: _count(group, sets) for key, group in groups.items() if key[2] is Role.REPLICA
    }
    for pod in pods:
        if pod.key not in made:
            continue
        cluster, created, index = made[pod.key]
        where = (pod.namespace, cluster)
        leader_count = leaders.get(where)
        if leader_count is None or leader_count[0] <= 0:
            out[pod.key] = Unidentified(
                f"follower of cluster {cluster!r} with no leader StatefulSet or pod: pod skipped"
            )
            continue
        count, count_source = leader_count
        follower_count, follower_source = (
            followers.get(where)
            or _follower_set(where, groups[(*where, Role.MASTER)], sets, policy)
            or (policy.identity.replicas_per_shard * count, "identity.replicasPerShard")
        )
        shard = index if created is Role.MASTER else index % count
        if created is Role.MASTER and index >= count:
            issues.append(
                Issue(
                    object=f"pod {pod.key}",
                    message=f"leader ordinal {index} is beyond the {count} leaders ({count_source})",
                    severity="warning",
                )
            )
        replicas = len(range(shard, follower_count, count)) if shard < count else 0
        try:
            role, role_source = labelled_role(pod, policy)
        except Skip as why:
            out[pod.key] = Unidentified(str(why))
            continue
        out[pod.key] = Identified(
            cluster=cluster,
            shard=str(shard),
            role=role or created,
            role_source=role_source or "formation (leaders are masters)",
            size=1 + replicas,
            size_source=f"1 leader and {replicas} of the {follower_count} followers "
            f"({follower_source}) that replicate leader {shard} of {count} ({count_source})",
            ordered=ordered(pod, policy, sets, always=True),
        )
    return out


def _created_as(pod: Pod, policy: Policy) -> Role:
    source = policy.identity.formation_role
    if source is None:
        raise Skip("identity.formationRole is not set: leaders cannot be told from followers")
    raw = pod.labels.get(source.label)
    role = role_of(raw, source.values)
    if role is None:
        raise Skip(f"label {source.label}={raw!r} is not a leader or follower value: pod skipped")
    return role


def _count(group: Sequence[Pod], sets: StatefulSets) -> tuple[int, str]:
    """Members of one StatefulSet: its spec.replicas when it is known, else the pods seen."""
    for pod in group:
        facts = sets.get((pod.namespace, pod.owner_name or ""))
        if pod.owner_kind == "StatefulSet" and facts is not None and facts.replicas is not None:
            return facts.replicas, f"statefulset {facts.namespace}/{facts.name} spec.replicas"
    indexes = [i for i in (ordinal(p) for p in group) if i is not None]
    return max(indexes) + 1, "its highest ordinal seen plus one"


def _follower_set(
    where: tuple[str, str], leader_pods: Sequence[Pod], sets: StatefulSets, policy: Policy
) -> tuple[int, str] | None:
    """The followers' StatefulSet before any of its pods exists: named like the leaders' one,
    with another of ``identity.clusterSuffixes``."""
    namespace, cluster = where
    leader_sets = {p.owner_name for p in leader_pods}
    for suffix in policy.identity.cluster_suffixes:
        facts = sets.get((namespace, cluster + suffix))
        if facts is not None and facts.name not in leader_sets and facts.replicas is not None:
            return facts.replicas, f"statefulset {namespace}/{facts.name} spec.replicas"
    return None
