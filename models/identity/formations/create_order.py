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
    Ordinal,
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
from models.words import plural


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


MIN_MASTERS = 3
"""redis-cli --cluster create refuses to make a cluster of fewer masters."""
CHART_SETTING = "bitnami: the chart's cluster.replicas"


def _labelled_masters(group: Sequence[Ordinal], nodes: int, policy: Policy) -> int | None:
    """How many masters the role labels name, where every pod of the StatefulSet is here and
    labelled (as rebalance --relabel leaves them); None otherwise."""
    if len(group) != nodes:
        return None
    masters = 0
    for pod, _, _ in group:
        try:
            role, _ = labelled_role(pod, policy)
        except Skip:
            return None
        if role is None:
            return None
        masters += role is Role.MASTER
    return masters or None


def _check_replicas(
    group: Sequence[Ordinal], nodes: int, source: str, policy: Policy, issues: list[Issue]
) -> None:
    """A StatefulSet that ``identity.replicasPerShard`` does not split the way redis-cli was
    asked to: the role labels name another number of masters, or the count leaves too few
    masters or an odd remainder another count would not. The setting is then likely not the
    deployment's and every shard read from it may be wrong: say which value would fit. Extra
    replicas alone are a layout redis-cli makes on purpose: they are said only where another
    count would split the pods evenly."""
    replicas = policy.identity.replicas_per_shard
    per_shard = replicas + 1
    masters = nodes // per_shard
    setting = f"identity.replicasPerShard {replicas}"
    labelled = _labelled_masters(group, nodes, policy)
    if labelled is not None and labelled != masters:
        fits = nodes // labelled - 1
        message = (
            f"the role labels name {labelled} masters among the {nodes} pods, but {setting} "
            f"reads {masters}, so the shards are read wrong"
        )
        if fits >= 1:
            message += (
                f"; if each master has {plural(fits, 'replica')} ({CHART_SETTING}), set "
                f"identity.replicasPerShard: {fits}"
            )
        issues.append(Issue(object=set_name(group), message=message, severity="warning"))
        return
    if masters < MIN_MASTERS:
        message = (
            f"{nodes} pods ({source}) in shards of {per_shard} ({setting}) make "
            f"{masters} masters, and redis-cli --cluster create makes no cluster of fewer than "
            f"{MIN_MASTERS}"
        )
    elif nodes % per_shard:
        extra = nodes % per_shard
        message = (
            f"{nodes} pods ({source}) are not a multiple of {per_shard} ({setting} + 1): "
            f"the shards are read with {extra} of the {masters} masters given an extra replica"
        )
    else:
        return
    hint = replicas_hint(nodes, replicas, MIN_MASTERS, CHART_SETTING)
    if not hint and masters >= MIN_MASTERS:
        return
    issues.append(Issue(object=set_name(group), message=message + hint, severity="warning"))


def read(
    pods: Sequence[Pod], sets: StatefulSets, policy: Policy, issues: list[Issue]
) -> dict[str, Identified | Unidentified]:
    out: dict[str, Identified | Unidentified] = {}
    groups = by_statefulset(pods, policy, out)
    replicas = policy.identity.replicas_per_shard
    for group in groups:
        nodes, source = set_size(group, sets)
        _check_replicas(group, nodes, source, policy, issues)
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
